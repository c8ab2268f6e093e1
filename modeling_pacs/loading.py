"""Load a scoring model by alias, Hub id or local path, on the chosen device and precision."""

import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig

from .models.modeling_pacs import PACSModel
from .models.modeling_polos import PolosModel

logger = logging.getLogger(__name__)

# Hub ids of the released metrics. The PAC-S / PAC-S++ repositories are produced by scripts/convert_pacs_checkpoint.py
# from the official checkpoints; CLIP-S wraps OpenAI's CLIP as published by OpenAI on the Hub.
PRETRAINED_MODELS = {
    "pac_s_pp_vit_b32": "pacs-pp/pac-s-pp-clip-vit-b32",
    "pac_s_pp_vit_l14": "pacs-pp/pac-s-pp-clip-vit-l14",
    "pac_s_vit_b32": "pacs-pp/pac-s-clip-vit-b32",
    "pac_s_openclip_vit_l14": "pacs-pp/pac-s-openclip-vit-l14",
    "clip_s_vit_b32": "openai/clip-vit-base-patch32",
    "clip_s_vit_l14": "openai/clip-vit-large-patch14",
    # Polos: produced by `pacs-pp convert-polos` from the released reprod.ckpt (SPEC-polos §2).
    "polos_vit_b32": "pacs-pp/polos-clip-vit-b32",
}
DEFAULT_MODEL = "pac_s_pp_vit_b32"
TINY_MODEL_PREFIX = "tiny"
# Aliases of the tiny random models (each optionally followed by ":clip_s" / ":pac_s") and their backbones.
TINY_BACKBONES = {TINY_MODEL_PREFIX: "clip", "tiny-siglip": "siglip", "tiny-siglip2": "siglip2"}
DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


def resolve_device(device: str | None = None) -> torch.device:
    """`None`/`"auto"`: CUDA when present, else CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device {device!r} is not a device: use 'auto', 'cpu', 'cuda' or 'cuda:N' ({error})"
        ) from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} was asked for, but CUDA is not available here (torch {torch.__version__}): "
                "use --device cpu (or auto), or install a CUDA build of torch"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} was asked for, but MPS is not available here: use cpu or auto")
    return resolved


# Seed of the "tiny" models: with it, random cosines on the examples are positive, so demos show non-zero scores.
TINY_SEED = 1


def tiny_model_directory(variant: str = "pac_s_pp", backbone: str = "clip") -> Path:
    """A random tiny model saved once per variant and backbone under the user's cache (offline smoke runs, tests)."""
    from .testing.pacs import make_tiny_model
    from .testing.polos import make_tiny_polos_model

    cache = Path(os.environ.get("PACS_PP_CACHE", Path.home() / ".cache" / "pacs_pp"))
    directory = cache / f"tiny-{'' if backbone == 'clip' else backbone + '-'}{variant}-seed{TINY_SEED}"
    if not (directory / "config.json").is_file():
        directory.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=directory.name, dir=directory.parent))
        if variant == "polos":
            make_tiny_polos_model(temporary, seed=TINY_SEED)
        elif variant == "pearl":
            from .testing.pearl import make_tiny_pearl

            make_tiny_pearl(temporary, seed=TINY_SEED)
        else:
            make_tiny_model(temporary, variant=variant, seed=TINY_SEED, backbone=backbone)
        if not (temporary / "config.json").is_file():  # never publish a half-saved model into the cache
            shutil.rmtree(temporary)
            raise RuntimeError(
                f"the tiny model {directory.name} could not be saved on process {os.environ.get('RANK', '?')}: "
                "transformers writes weights only on rank 0 once torch.distributed is initialised; load the tiny "
                "models before creating TrainingArguments / the process group, or on rank 0 first"
            )
        try:
            temporary.rename(directory)  # atomic: concurrent builders never see a half-written directory
        except OSError:
            shutil.rmtree(temporary)  # another process finished first
    return directory


def load_model(model: str = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None) -> PACSModel:
    """Load a PACSModel from an alias (`pac_s_pp_vit_b32`, `clip_s_vit_b32`, ...), a Hub id or a local directory.

    `model="tiny"` (or `"tiny:clip_s"`, `"tiny:pac_s"`; `"tiny-siglip"`, `"tiny-siglip2"` for SigLIP backbones)
    builds a random 32-dim model for offline smoke runs: its scores are meaningless, and a warning says so. Plain
    CLIP checkpoints (model_type `clip`) give CLIP-S, and so do plain SigLIP ones (`google/siglip-base-patch16-224`,
    `google/siglip2-base-patch16-224`) with SigLIP's own pipelines; SigLIP 2 NaFlex checkpoints are refused with an
    explanation. `"tiny:polos"` builds a random Polos; Polos directories (model_type `polos`) load as `PolosModel`.
    `"tiny:pearl"` builds a random Pearl; Pearl directories (model_type `pearl`) give a `PearlScorer` (`scores`:
    Pearl-img, `ref_scores`: Pearl).
    `dtype` is `None`/`"fp32"` (reference numbers), or the opt-in speed modes `"fp16"`/`"bf16"`.
    """
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be an alias, a Hub id or a model directory, got {model!r}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    name, _, variant = model.partition(":")
    if name in TINY_BACKBONES:
        logger.warning(f"model '{name}' has RANDOM weights: its scores are meaningless (smoke tests only)")
        model = str(tiny_model_directory(variant or "pac_s_pp", TINY_BACKBONES[name]))
    name_or_path = PRETRAINED_MODELS.get(model, model)
    model_type = _plain_model_type(name_or_path)
    if model_type == "pearl":
        return _load_pearl(name_or_path, device, dtype)
    if model_type == "clip":
        loaded = PACSModel.from_clip(name_or_path, dtype=torch.float32)
    elif model_type == "polos":
        loaded = PolosModel.from_pretrained(name_or_path, dtype=torch.float32)
    elif model_type in ("siglip", "siglip2"):
        loaded = PACSModel.from_siglip(name_or_path, dtype=torch.float32)
    else:
        loaded = PACSModel.from_pretrained(name_or_path, dtype=torch.float32)
    loaded = loaded.to(resolve_device(device)).eval()
    if dtype is not None:
        loaded = loaded.to(DTYPES[dtype])
    return loaded


def _plain_model_type(name_or_path: str) -> str | None:
    try:
        return AutoConfig.from_pretrained(name_or_path).model_type
    except (OSError, ValueError):
        return None  # PACSModel.from_pretrained then raises the explanatory error


def _load_pearl(name_or_path: str, device: str | None, dtype: str | None):
    """Pearl (model_type `pearl`): the head and its frozen encoders, as a `PearlScorer` with `score()`."""
    if dtype not in (None, "fp32", "float32"):
        raise ValueError(f"Pearl models run in fp32 only, got dtype {dtype!r}")
    from .pearl.scorer import PearlScorer

    return PearlScorer.from_pretrained(name_or_path, device=str(resolve_device(device)))
