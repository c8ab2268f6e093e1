"""Load a scoring model by alias, Hub id or local path, on the chosen device and precision."""

import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig

from .modeling_pacs import PACSModel

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
}
DEFAULT_MODEL = "pac_s_pp_vit_b32"
TINY_MODEL_PREFIX = "tiny"
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
    return torch.device(device)


# Seed of the "tiny" models: with it, random cosines on the examples are positive, so demos show non-zero scores.
TINY_SEED = 1


def tiny_model_directory(variant: str = "pac_s_pp") -> Path:
    """A random tiny model saved once per variant under the user's cache (offline smoke runs, tests)."""
    from .tiny import make_tiny_model

    cache = Path(os.environ.get("PACS_PP_CACHE", Path.home() / ".cache" / "pacs_pp"))
    directory = cache / f"tiny-{variant}-seed{TINY_SEED}"
    if not (directory / "config.json").is_file():
        directory.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=directory.name, dir=directory.parent))
        if variant == "pearl":
            from .pearl.tiny import make_tiny_pearl

            make_tiny_pearl(temporary, seed=TINY_SEED)
        else:
            make_tiny_model(temporary, variant=variant, seed=TINY_SEED)
        try:
            temporary.rename(directory)  # atomic: concurrent builders never see a half-written directory
        except OSError:
            shutil.rmtree(temporary)  # another process finished first
    return directory


def load_model(model: str = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None) -> PACSModel:
    """Load a PACSModel from an alias (`pac_s_pp_vit_b32`, `clip_s_vit_b32`, ...), a Hub id or a local directory.

    `model="tiny"` (or `"tiny:clip_s"`, `"tiny:pac_s"`, `"tiny:pearl"`) builds a random 32-dim model for offline
    smoke runs: its scores are meaningless, and a warning says so. Plain CLIP checkpoints (model_type `clip`) give
    CLIP-S; Pearl directories (model_type `pearl`) give a `PearlScorer` (`scores`: Pearl-img, `ref_scores`: Pearl).
    `dtype` is `None`/`"fp32"` (reference numbers), or the opt-in speed modes `"fp16"`/`"bf16"`.
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if model == TINY_MODEL_PREFIX or model.startswith(TINY_MODEL_PREFIX + ":"):
        variant = model.partition(":")[2] or "pac_s_pp"
        logger.warning("model 'tiny' has RANDOM weights: its scores are meaningless (smoke tests only)")
        model = str(tiny_model_directory(variant))
    name_or_path = PRETRAINED_MODELS.get(model, model)
    if _model_type(name_or_path) == "pearl":
        return _load_pearl(name_or_path, device, dtype)
    if _is_plain_clip(name_or_path):
        loaded = PACSModel.from_clip(name_or_path, dtype=torch.float32)
    else:
        loaded = PACSModel.from_pretrained(name_or_path, dtype=torch.float32)
    loaded = loaded.to(resolve_device(device)).eval()
    if dtype is not None:
        loaded = loaded.to(DTYPES[dtype])
    return loaded


def _is_plain_clip(name_or_path: str) -> bool:
    try:
        return AutoConfig.from_pretrained(name_or_path).model_type == "clip"
    except (OSError, ValueError):
        return False  # PACSModel.from_pretrained then raises the explanatory error


def _model_type(name_or_path: str) -> str | None:
    try:
        return AutoConfig.from_pretrained(name_or_path).model_type
    except (OSError, ValueError):
        return None


def _load_pearl(name_or_path: str, device: str | None, dtype: str | None):
    """Pearl (model_type `pearl`): the head and its frozen encoders, as a `PearlScorer` with `score()`."""
    if dtype not in (None, "fp32", "float32"):
        raise ValueError(f"Pearl models run in fp32 only, got dtype {dtype!r}")
    from .pearl.scorer import PearlScorer

    return PearlScorer.from_pretrained(name_or_path, device=str(resolve_device(device)))
