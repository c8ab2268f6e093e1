"""Load a scoring model by alias, Hub id or local path, on the chosen device and precision.

`load_model` is the alias dispatcher of the package (the CLI, the `evaluate` module, the Space, corpus scoring and the
benchmarks call it): an alias of `variants.py` or a Hub id or directory -> a PAC-S model (`pacs.loading`), a Polos
model or a Pearl scorer, by the directory's `model_type`.
"""

import logging

import torch

from .extras import require
from .models.artifacts import CorruptArtifactError, check_model_directory
from .models.backbones import backbone_family
from .models.modeling_pacs import PACSModel
from .models.modeling_polos import PolosModel
from .pacs.loading import DTYPES, check_dtype, load_pacs_model, place, plain_model_type, resolve_device
from .variants import DEFAULT_MODEL, PRETRAINED_MODELS, parse_tiny_alias

logger = logging.getLogger(__name__)


def load_model(
    model: str = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None
) -> "PACSModel | PolosModel | PearlScorer":  # noqa: F821 (PearlScorer is imported when a Pearl model is loaded)
    """Load a scoring model from an alias (`pac_s_pp_vit_b32`, `clip_s_vit_b32`, ...), a Hub id or a local directory:
    a `PACSModel` (PAC-S++, PAC-S, CLIP-S), a `PolosModel` or a `PearlScorer`, by the directory's `model_type`.

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
    check_dtype(dtype)
    tiny = parse_tiny_alias(model)
    if tiny is not None:
        from .testing.directories import tiny_model_directory

        logger.warning(
            f"model '{model.partition(':')[0]}' has RANDOM weights: its scores are meaningless (smoke tests only)"
        )
        backbone, variant = tiny
        model = str(tiny_model_directory(variant, backbone))
    name_or_path = PRETRAINED_MODELS.get(model, model)
    try:
        check_model_directory(name_or_path)  # a damaged file of a local directory is named before anything reads it
    except CorruptArtifactError:
        refuse_unsupported_model_type(name_or_path)  # what the config says is refused first, weights or not
        raise
    model_type = plain_model_type(name_or_path)
    if model_type == "pearl":
        return _load_pearl(name_or_path, device, dtype)
    if model_type == "polos":
        return place(PolosModel.from_pretrained(name_or_path, dtype=torch.float32), device, dtype)
    return load_pacs_model(name_or_path, device, dtype)


# the package's own model types; any other config is a backbone PAC-S++ wraps (CLIP, SigLIP) or cannot wrap
KNOWN_MODEL_TYPES = {"pac_s_pp", "polos", "pearl", "pacs_captioner"}


def refuse_unsupported_model_type(name_or_path: str) -> None:
    """A readable config naming a model this package cannot score (e.g. SigLIP 2 NaFlex) is refused for that reason,
    before any complaint about the directory's other files: fixing those would not make it load."""
    model_type = plain_model_type(name_or_path)
    if model_type is not None and model_type not in KNOWN_MODEL_TYPES:
        from transformers import AutoConfig

        backbone_family(AutoConfig.from_pretrained(name_or_path))  # raises for what PAC-S++ cannot wrap


def _load_pearl(name_or_path: str, device: str | None, dtype: str | None):
    """Pearl (model_type `pearl`): the head and its frozen encoders, as a `PearlScorer` with `score()`."""
    if dtype not in (None, "fp32", "float32"):
        raise ValueError(f"Pearl models run in fp32 only, got dtype {dtype!r}")
    require("sentencepiece", "pearl", "Pearl")  # the XLM-R tokenizer of BEiT-3
    from .pearl.scorer import PearlScorer

    return PearlScorer.from_pretrained(name_or_path, device=str(resolve_device(device)))


def long_captions_keyword(model, mode: str) -> dict:
    """`{"long_captions": mode}` for `model.score` / `score_videos` of PAC-S-family models (CLIP-S, PAC-S, PAC-S++,
    SigLIP, Long-CLIP); Polos and Pearl only truncate, so asking them for another mode is a `ValueError`."""
    if hasattr(model, "split_long_captions"):
        return {"long_captions": mode}
    if mode != "truncate":
        raise ValueError(
            f"long captions mode {mode!r} applies to CLIP-S, PAC-S, PAC-S++ and SigLIP models, not to "
            f"{type(model).__name__}: leave it out"
        )
    return {}


__all__ = ["DEFAULT_MODEL", "DTYPES", "PRETRAINED_MODELS", "load_model", "long_captions_keyword", "resolve_device"]
