"""Load a scoring model by alias, Hub id or local path, on the chosen device and precision.

`load_model` is the one door to every model metric (the CLI, the `evaluate` module, the Space, corpus scoring, the
harness and the benchmarks call it): an alias of the registry, a tiny alias, a Hub id or a directory -> the
directory's `model_type` -> its `MetricSpec` (`registry.py`) -> the spec's loader. No metric is named here.
"""

import logging

from .errors import InputError, UnsupportedOptionError
from .logs import quiet_library_loading
from .metric_spec import door_options
from .model_sources import check_model_source
from .models.artifacts import CorruptArtifactError, check_model_directory
from .pacs.loading import DTYPES, check_dtype, plain_model_type, resolve_device
from .registry import (
    DEFAULT_MODEL,
    METRICS,
    MODEL_METRICS,
    OTHER_MODEL_TYPES,
    PRETRAINED_MODELS,
    parse_tiny_alias,
    spec_for_model_type,
    spec_of,
)

logger = logging.getLogger(__name__)

# `dtype` spellings -> the names `Capabilities.dtypes` uses
CANONICAL_DTYPES = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16", "bf16": "bf16",
                    "bfloat16": "bf16"}  # fmt: skip


def load_model(
    model: str = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None, *, merge_adapter: bool = True
):
    """Load a scoring model from an alias (`pac_s_pp_vit_b32`, `clip_s_vit_b32`, ...), a Hub id or a local directory,
    by the `MetricSpec` of its config's `model_type` (`registry.METRICS`): a `PACSModel` (PAC-S++, PAC-S, CLIP-S), a
    `PolosModel`, a `PearlScorer`, ...

    `model="tiny"` (or `"tiny:clip_s"`, `"tiny:pac_s"`, `"tiny:polos"`, `"tiny:pearl"`; `"tiny-siglip"`,
    `"tiny-siglip2"` for SigLIP backbones) builds a random model for offline smoke runs: its scores are meaningless,
    and a warning says so. Plain CLIP checkpoints (model_type `clip`) give CLIP-S, and so do plain SigLIP ones
    (`google/siglip-base-patch16-224`, `google/siglip2-base-patch16-224`) with SigLIP's own pipelines; SigLIP 2 NaFlex
    checkpoints are refused with an explanation.
    `dtype` is `None`/`"fp32"` (reference numbers), or the opt-in speed modes `"fp16"`/`"bf16"` where the metric's
    capabilities allow them.

    A name that is no alias, directory or Hub id raises `UnknownModelError` at once (with the closest alias); a Hub id
    that is not cached and cannot be reached raises `ModelUnavailableError` after one short request, saying the ways
    out (`model_sources.py`). The libraries' loading chatter is hidden; our own warnings show.

    `merge_adapter=False` keeps a LoRA adapter unmerged on the backbone's weights (`model.merge_adapter()` merges it;
    `model.merge_deferred` says it is pending), for this load only; True: as the model's config says. Families without
    adapters ignore it.
    """
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be an alias, a Hub id or a model directory, got {model!r}")
    check_dtype(dtype)
    check_model_source(model)  # a typo, or a Hub id that cannot be had, is refused before anything loads
    with quiet_library_loading():  # the libraries' loading bars, load reports and FutureWarnings (`logs.py`)
        return _load_model(model, device, dtype, merge_adapter)


def _load_model(model: str, device: str | None, dtype: str | None, merge_adapter: bool = True):
    tiny = parse_tiny_alias(model)
    if tiny is not None:
        from .testing.directories import tiny_model_directory

        backbone, variant = tiny  # the directory is marked as random weights: loading it warns
        model = str(tiny_model_directory(variant, backbone))
    name_or_path = PRETRAINED_MODELS.get(model, model)
    try:
        check_model_directory(name_or_path)  # a damaged file of a local directory is named before anything reads it
    except CorruptArtifactError:
        refuse_unsupported_model_type(name_or_path)  # what the config says is refused first, weights or not
        raise
    model_type = plain_model_type(name_or_path)
    if model_type in OTHER_MODEL_TYPES:
        raise ValueError(
            f"{name_or_path!r} is a {model_type} model, not a metric: load it with transformers' AutoModel; "
            f"--model takes a metric ({', '.join(MODEL_METRICS)})"
        )
    # An unreadable config (a missing path, an unreachable Hub id) goes to the default family's loader, which explains.
    spec = spec_for_model_type(model_type) or next(iter(MODEL_METRICS.values()))
    if dtype is not None and CANONICAL_DTYPES[dtype] not in spec.capabilities.dtypes:
        raise ValueError(
            f"{spec.display_name} models run in {' or '.join(spec.capabilities.dtypes)} only, got dtype {dtype!r}"
        )
    if dtype is not None and CANONICAL_DTYPES[dtype] != "fp32" and resolve_device(device).type == "cpu":
        logger.warning(
            f"dtype {dtype!r} on a CPU is emulated: it runs slower than fp32 and its scores are about 1e-3 away from "
            "the reference numbers; use fp32 (the default) on a CPU, and fp16/bf16 on a GPU"
        )
    return spec.load(name_or_path, device=device, dtype=dtype, merge_adapter=merge_adapter)


def refuse_unsupported_model_type(name_or_path: str) -> None:
    """A readable config naming a model this package cannot score (e.g. SigLIP 2 NaFlex) is refused for that reason,
    before any complaint about the directory's other files: fixing those would not make it load."""
    model_type = plain_model_type(name_or_path)
    if model_type is not None and model_type not in MODEL_METRICS and model_type not in OTHER_MODEL_TYPES:
        from transformers import AutoConfig

        from .models.backbones import backbone_family

        backbone_family(AutoConfig.from_pretrained(name_or_path))  # raises for what PAC-S++ cannot wrap


def long_captions_keyword(model, mode: str) -> dict:
    """`{"long_captions": mode}` for `score` / `score_videos` of a metric whose spec declares the option; a metric
    that only truncates gets nothing, and asking it for another mode is an `UnsupportedOptionError`."""
    spec = spec_of(model)
    if "long_captions" in spec.capabilities.score_options:
        return {"long_captions": mode}
    if mode != "truncate":
        able = [metric for other in METRICS.values() if mode in other.capabilities.long_caption_modes
                for metric in other.metrics]  # fmt: skip
        raise UnsupportedOptionError(
            f"long captions mode {mode!r} applies to the metrics {', '.join(able)}, not to {spec.display_name}, "
            "which only truncates: leave it out"
        )
    return {}


def scoring_mode_keyword(model, mode: str | None) -> dict:
    """`{"mode": mode}` for `score` of a metric whose spec declares scoring modes (`Capabilities.scoring_modes`:
    DENEB's and Polos' `"per_item"` / `"official"`); nothing for None (the model's default); an
    `UnsupportedOptionError` for a metric without scoring modes, or a `ValueError` for a mode it does not have."""
    return {} if mode is None else {"mode": check_scoring_mode(spec_of(model), mode)}


def check_scoring_mode(spec, mode: str) -> str:
    """`mode` when the metric of `spec` has it among its scoring modes; else the error `scoring_mode_keyword` says
    (a door checks it before loading anything)."""
    if not spec.capabilities.scoring_modes:
        able = [other.display_name for other in METRICS.values() if other.capabilities.scoring_modes]
        family = spec.display_name if len(spec.metrics) <= 1 else f"{spec.display_name} ({', '.join(spec.metrics)})"
        raise UnsupportedOptionError(
            f"scoring mode {mode!r} applies to the metrics {', '.join(able)}, not to {family}, which has one way of "
            "batching: leave it out"
        )
    if mode not in spec.capabilities.scoring_modes:
        raise InputError(
            f"{spec.display_name} has no scoring mode {mode!r}: choose one of "
            f"{', '.join(spec.capabilities.scoring_modes)}"
        )
    return mode


def check_media(spec, media: str) -> None:
    """Nothing when the metric of `spec` scores `media` (`Capabilities.media`: `"image"`, `"video"`); else an
    `UnsupportedOptionError` naming the metrics that do (a door checks it before loading when it can)."""
    if media in spec.capabilities.media:
        return
    able = [metric for other in METRICS.values() if media in other.capabilities.media for metric in other.metrics]
    raise UnsupportedOptionError(
        f"{spec.display_name} scores {', '.join(f'{kind}s' for kind in spec.capabilities.media)} only, not "
        f"{media}s: score {media}s with one of the metrics {', '.join(able)}"
    )


def score_options(model, long_captions: str = "truncate", scoring_mode: str | None = None, **settings) -> dict:
    """The keyword options of `model.score` for a door's settings (batch sizes, `progress`): a setting the model's
    spec does not declare is left out, as it does not apply; a `long_captions` mode other than `"truncate"` is passed,
    or refused by a metric that only truncates (`long_captions_keyword`); a `scoring_mode` is passed, or refused by a
    metric that has none (`scoring_mode_keyword`)."""
    return (
        door_options(spec_of(model), settings, {})
        | long_captions_keyword(model, long_captions)
        | scoring_mode_keyword(model, scoring_mode)
    )


__all__ = [
    "DEFAULT_MODEL",
    "DTYPES",
    "check_media",
    "check_scoring_mode",
    "PRETRAINED_MODELS",
    "load_model",
    "long_captions_keyword",
    "resolve_device",
    "score_options",
    "scoring_mode_keyword",
]
