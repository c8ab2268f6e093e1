"""The metric registry: every metric of the package, keyed as transformers keys its Auto mappings.

Model metrics are keyed by their config's `model_type` (`pac_s_pp`, `polos`, `pearl`); metrics without a model by
their name (`bleu`, `meteor`, `rouge_l`, `cider`, `spice`). Each entry is the `MetricSpec` of the metric family's
own folder (`pacs/spec.py`, ...): adding a metric is a folder with a `spec.py` and one line in `METRICS` below.
Everything here is derived from the specs: the aliases of `--model`, the Hub ids, the papers' names and numbers, the
tiny models and the Space's selector. Reading it imports no model (the specs name classes by dotted paths).

Example:

```python
>>> from modeling_pacs.registry import METRICS, spec_for_model_type
>>> spec_for_model_type("polos").capabilities.needs_references
True
>>> sorted(name for name, spec in METRICS.items() if not spec.capabilities.needs_model)
['bleu', 'cider', 'meteor', 'rouge_l', 'spice']
```
"""

import difflib
from typing import Any

from .deneb.spec import DENEB
from .errors import UnknownModelError
from .fleur.spec import FLEUR
from .metric_spec import MetricSpec, ReleasedVariant
from .ngram.spec import NGRAM_METRICS
from .pacs.spec import PACS
from .pearl.spec import PEARL
from .polos.spec import POLOS

# model_type (or name, for metrics without a model) -> spec; the first entry is the default family.
METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in (PACS, POLOS, PEARL, DENEB, FLEUR, *NGRAM_METRICS)}
MODEL_METRICS = {name: spec for name, spec in METRICS.items() if spec.capabilities.needs_model}
# Model types of the package that are not metrics (they load through the Auto classes, not `load_model`).
OTHER_MODEL_TYPES = ("pacs_captioner",)
DEFAULT_MODEL = "pac_s_pp_vit_b32"

# ---------------------------------------------------------------------------------------------------- releases
RELEASES: dict[str, tuple[MetricSpec, ReleasedVariant]] = {
    variant.alias: (spec, variant) for spec in MODEL_METRICS.values() for variant in spec.variants
}
# alias -> Hub id of the released metrics (the converters produce the repositories from the official checkpoints)
PRETRAINED_MODELS = {alias: variant.hub_id for alias, (_, variant) in RELEASES.items()}
# alias -> the metric it computes (`PACSConfig.variant`, or the family's own metric)
ALIAS_VARIANTS = {alias: variant.metric for alias, (_, variant) in RELEASES.items()}
# short names (the `evaluate` module's config names): the first release of each metric
SHORT_NAMES: dict[str, str] = {}
for _alias, (_, _variant) in RELEASES.items():
    SHORT_NAMES.setdefault(_variant.metric, _alias)
# the papers' names of the released models (evaluation report rows), by alias and by Hub id
PAPER_NAMES = {alias: variant.paper_name for alias, (_, variant) in RELEASES.items() if variant.paper_name}
PAPER_NAMES.update({PRETRAINED_MODELS[alias]: name for alias, name in list(PAPER_NAMES.items())})


def _space_choices() -> dict[str, tuple[str, str]]:
    """The Space's selector: label -> (the CLIP-S model of that backbone, the metric's model)."""
    clip_s = {variant.backbone: alias for alias, (_, variant) in RELEASES.items() if variant.metric == "clip_s"}
    choices = {}
    for alias, (spec, variant) in RELEASES.items():
        if variant.in_space:
            label = variant.backbone if spec is PACS else f"{spec.display_name} ({variant.backbone})"
            choices[label] = (clip_s[variant.backbone], alias)
    return choices


SPACE_CHOICES = _space_choices()

# papers' reported numbers, x100: benchmark -> paper name of the metric -> statistic -> value
REPORTED_NUMBERS: dict[str, dict[str, dict[str, float]]] = {}
for _spec in METRICS.values():
    for _benchmark, _rows in _spec.reported_numbers.items():
        REPORTED_NUMBERS.setdefault(_benchmark, {}).update(_rows)

# ---------------------------------------------------------------------------------------------------- tiny models
TINY_MODEL_PREFIX = "tiny"
TINY_BACKBONES = {TINY_MODEL_PREFIX: "clip", "tiny-siglip": "siglip", "tiny-siglip2": "siglip2"}
TINY_SPECS = {metric: spec for spec in MODEL_METRICS.values() if spec.tiny for metric in spec.metrics}
TINY_VARIANTS = tuple(TINY_SPECS)
# Seed of the tiny models: with it, random cosines on the examples are positive, so demos show non-zero scores.
TINY_SEED = 1


def parse_tiny_alias(name: str) -> tuple[str, str] | None:
    """`"tiny-siglip:pac_s"` -> `("siglip", "pac_s")`, `"tiny"` -> `("clip", "pac_s_pp")`; None for any other name.

    Example:

    ```python
    >>> parse_tiny_alias("tiny:clip_s"), parse_tiny_alias("openai/clip-vit-base-patch32")
    (('clip', 'clip_s'), None)
    ```
    """
    prefix, _, variant = name.partition(":")
    if prefix not in TINY_BACKBONES:
        return None
    variant = variant or TINY_VARIANTS[0]
    if variant not in TINY_SPECS:
        raise UnknownModelError(
            f"unknown tiny model {name!r}: the variant after ':' must be one of {list(TINY_VARIANTS)}"
        )
    backbone = TINY_BACKBONES[prefix]
    if backbone not in TINY_SPECS[variant].tiny.backbones:
        raise UnknownModelError(
            f"unknown tiny model {name!r}: tiny {variant} models have the backbone(s) "
            f"{list(TINY_SPECS[variant].tiny.backbones)}; use {tiny_alias(variant)!r}"
        )
    return backbone, variant


def tiny_alias(variant: str = TINY_VARIANTS[0], backbone: str = "clip") -> str:
    """The alias of a tiny model: `tiny_alias("clip_s")` -> `"tiny:clip_s"`, `tiny_alias()` -> `"tiny"`."""
    prefix = next(alias for alias, family in TINY_BACKBONES.items() if family == backbone)
    return prefix if variant == TINY_VARIANTS[0] else f"{prefix}:{variant}"


TINY_ALIASES = tuple(
    tiny_alias(metric, backbone) for metric, spec in TINY_SPECS.items() for backbone in spec.tiny.backbones
)


# ---------------------------------------------------------------------------------------------------- lookups
def spec_for_model_type(model_type: str | None) -> MetricSpec | None:
    """The spec of a model metric by its config's `model_type`; a checkpoint of another library that a family wraps
    (plain CLIP, SigLIP) gives that family; None for anything else."""
    if model_type in MODEL_METRICS:
        return MODEL_METRICS[model_type]
    return next((spec for spec in MODEL_METRICS.values() if model_type in spec.wraps_model_types), None)


def spec_for_metric(metric: str) -> MetricSpec:
    """The spec of the family that computes `metric` (`"clip_s"` -> PAC-S++'s family, `"bleu"` -> BLEU)."""
    for spec in METRICS.values():
        if metric in spec.metrics:
            return spec
    raise UnknownModelError(f"unknown metric {metric!r}: known metrics are {known_metrics()}")


def spec_of(model: Any) -> MetricSpec:
    """The spec of a loaded scoring model, by its config's `model_type`."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    spec = spec_for_model_type(model_type)
    if spec is None:
        raise TypeError(f"{type(model).__name__} (model_type {model_type!r}) is not a metric of the registry")
    return spec


def known_metrics() -> list[str]:
    return [metric for spec in METRICS.values() for metric in spec.metrics]


def model_choices() -> list[str]:
    """Every name `--model` accepts besides paths and Hub ids: the released aliases, then the tiny aliases."""
    return [*RELEASES, *TINY_ALIASES]


def closest_model_name(name: str) -> str | None:
    """The alias closest to a mistyped one (`pacs_pp_b32` -> `pac_s_pp_vit_b32`), or None."""
    matches = difflib.get_close_matches(name, model_choices(), n=1, cutoff=0.5)
    return matches[0] if matches else None


__all__ = [
    "ALIAS_VARIANTS",
    "DEFAULT_MODEL",
    "METRICS",
    "MODEL_METRICS",
    "OTHER_MODEL_TYPES",
    "PAPER_NAMES",
    "PRETRAINED_MODELS",
    "RELEASES",
    "REPORTED_NUMBERS",
    "SHORT_NAMES",
    "SPACE_CHOICES",
    "TINY_ALIASES",
    "TINY_BACKBONES",
    "TINY_MODEL_PREFIX",
    "TINY_SEED",
    "TINY_SPECS",
    "TINY_VARIANTS",
    "closest_model_name",
    "known_metrics",
    "model_choices",
    "parse_tiny_alias",
    "spec_for_metric",
    "spec_for_model_type",
    "spec_of",
    "tiny_alias",
]
