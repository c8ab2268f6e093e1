"""`load_fleur_model`: the registry's loader of FLEUR judges: a FLEUR directory (`pacs-pp convert-fleur`), or a
LLaVA-1.5 in transformers' layout (`llava-hf/llava-1.5-13b-hf`, a directory or Hub id) taken as is."""

import json
import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)
DTYPES = {None: torch.float32, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def config_model_type(name_or_path: str) -> str | None:
    path = Path(name_or_path) / "config.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8")).get("model_type")
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(name_or_path), "model_type", None)


def load_fleur_model(name_or_path: str, device: str | None = None, dtype: str | None = None):
    """A [`FleurModel`][modeling_pacs.models.modeling_fleur.FleurModel] on `device` (`"auto"` spreads a large judge
    over the GPUs with `device_map="auto"`) in `dtype` (`fp32` for reference numbers, `fp16`/`bf16` on GPUs)."""
    from ..models.artifacts import warn_if_random_weights
    from ..models.modeling_fleur import FleurModel
    from .convert import fleur_model, layout_of, load_transformers_llava

    torch_dtype = DTYPES[dtype]
    placement = {"device_map": "auto"} if device == "auto" else {}
    if config_model_type(name_or_path) == "llava":
        if Path(name_or_path).is_dir():
            layout_of(json.loads((Path(name_or_path) / "config.json").read_text(encoding="utf-8")), name_or_path)
        model = fleur_model(*load_transformers_llava(name_or_path, dtype=torch_dtype, **placement), source=name_or_path)
    else:
        model = FleurModel.from_pretrained(name_or_path, dtype=torch_dtype, **placement)
        warn_if_random_weights(model.config, name_or_path, logger)
    if device not in (None, "auto"):
        model = model.to(device)
    return model.eval()


__all__ = ["load_fleur_model"]
