"""The contract every metric follows: what a registry entry holds (`MetricSpec`), what a scoring model offers
(`ScoringModel`), and how its declared score options are checked.

A metric family is one folder (`pacs/`, `polos/`, `pearl/`, ...) with a `spec.py` holding one `MetricSpec`, and one
line in `registry.py`. Everything that serves a metric to a user reads the spec, never the metric's name:

- the loader (`loading.load_model`) finds the spec by the directory's `model_type` and calls `spec.loader`;
- the command line lists `spec.variants` and the tiny aliases, and generates `pacs-pp convert-*` from
  `spec.converters`;
- `results.result_columns` turns any score output into columns by `spec.outputs`;
- the doors (`pacs-score`, corpus scoring, the `evaluate` module, the harness, the Space) ask `spec.capabilities`
  what a model can do instead of guessing from its attributes.

Classes, loaders and builders are named by dotted paths (`"package.module:attribute"`), as transformers' Auto
mappings name theirs: reading the registry imports neither torch nor any model, and the remote code (`models/`)
never imports the registry.
"""

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .errors import UnsupportedOptionError


def resolve(dotted_path: str) -> Any:
    """`"modeling_pacs.pacs.loading:load_pacs_model"` -> that function (the module is imported on first use)."""
    module, _, attribute = dotted_path.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class OutputField:
    """One per-item result of a metric: where the score output holds it, and how a table names and reads it.

    `key` is the stable column key (`score`, `ref_score`, `truncated_tokens`): the harness, the `evaluate` module and
    JSON outputs use it. `label` is the heading people read; `label_from_config` takes it from the model's
    `config.score_names` instead (`0`: the reference-free name, `1`: the reference-based one), so one family serves
    several metrics (PAC-S++, PAC-S and CLIP-S share `PACSModel`).
    """

    key: str
    attribute: str
    description: str
    label: str = ""
    label_from_config: int | None = None
    mean_attribute: str | None = None  # the corpus score's attribute, for scores that have one
    needs_references: bool = False
    minimum: float | None = None
    maximum: float | None = None  # None: unbounded, or bounded by a config value (`maximum_from`)
    maximum_from: str | None = None  # a config attribute that bounds the score (`w` for Eq. 4)
    higher_is_better: bool = True
    kind: str = "score"  # "score": a float per item; "count": an integer per item (diagnostics)
    summary: str = ""  # a count whose total the summary lines report, under these words ("unparsable answers")

    @classmethod
    def truncation(cls, description: str) -> "OutputField":
        """The per-item count of caption tokens a text encoder did not read (`truncated_tokens`), a diagnostic."""
        return cls("truncated_tokens", "truncated_tokens", description, label="truncated_tokens", minimum=0,
                   higher_is_better=False, kind="count")  # fmt: skip

    def label_for(self, config: Any) -> str:
        """The heading of this field for a model with `config` (`"RefPAC-S++"` for a PAC-S++ model's `ref_score`)."""
        if self.label_from_config is not None and hasattr(config, "score_names"):
            return config.score_names[self.label_from_config]
        return self.label or self.key


@dataclass(frozen=True)
class Capabilities:
    """What a metric can do; the doors read these instead of probing a model's attributes."""

    media: tuple[str, ...] = ("image",)  # "image", "video"
    reference_free: bool = True
    reference_based: bool = True
    per_reference_scores: bool = False
    long_caption_modes: tuple[str, ...] = ("truncate",)
    # values of the `mode` score option (how `score` batches items: DENEB's and Polos' "per_item", "official"); empty:
    # the metric has no such option, and a door refuses `--mode` for it
    scoring_modes: tuple[str, ...] = ()
    max_references: int | None = None  # None: any number
    dtypes: tuple[str, ...] = ("fp32",)
    # keyword options `score` accepts beyond `images, candidates, references`; any other is refused
    score_options: tuple[str, ...] = ()
    # keyword options the loader accepts beyond `name_or_path, device, dtype` (`merge_adapter`: a LoRA adapter kept
    # unmerged); `MetricSpec.load` passes only these: an option a family does not declare does not apply to it
    load_options: tuple[str, ...] = ()
    needs_model: bool = True  # False for the n-gram metrics (pycocoevalcap scorers)
    external: tuple[str, ...] = ()  # programs it runs besides Python ("java" for METEOR, SPICE, PTB tokenisation)
    # why the Space refuses this metric's models, the operator's `--model` too (empty: it serves them)
    not_in_space: str = ""

    @property
    def needs_references(self) -> bool:
        return self.reference_based and not self.reference_free


@dataclass(frozen=True)
class ReleasedVariant:
    """A released model of a metric family: its alias (`--model`), its Hub id, and the name papers give it."""

    alias: str
    hub_id: str
    metric: str  # the metric it computes (`PACSConfig.variant`: `pac_s_pp`, `pac_s`, `clip_s`; or the family's)
    paper_name: str | None  # the row name in the papers' tables (`PAC-S++`, `PAC-S++ L/14`, ...), if they have one
    description: str
    w: float | None = None
    backbone: str = ""  # "ViT-B/32", "ViT-L/14": the Space pairs a model with the CLIP-S of the same backbone
    in_space: bool = False  # offered by the Space's model selector


@dataclass(frozen=True)
class TinyModels:
    """The `tiny*` aliases of a family (`tiny[-BACKBONE][:METRIC]`, one per metric of the family and backbone):
    random models for offline smoke runs and tests.

    `builder` is a dotted path to `make_tiny(directory, variant, backbone, seed)` in `modeling_pacs.testing`.
    """

    builder: str
    backbones: tuple[str, ...] = ("clip",)


@dataclass(frozen=True)
class ConverterCommand:
    """A `pacs-pp convert-*` command: its help line, description, example, and the module (in the family's folder)
    that holds its arguments (`add_arguments(parser)`), its call (`convert(args)`) and its epilog text (a table of
    the files it reads, examples). The command line builds the subcommand from these fields alone.
    """

    command: str
    help: str
    description: str
    example: str  # one command line, the last line of --help
    module: str
    add_arguments: str = "add_convert_arguments"
    convert: str = "convert"
    epilog: str | None = "CONVERT_EPILOG"

    def resolve(self, part: str) -> Any:
        """`"add_arguments"`, `"convert"` or `"epilog"`: that attribute of the command's module (None: no epilog)."""
        name = getattr(self, part)
        return None if name is None else resolve(f"{self.module}:{name}")


@dataclass(frozen=True)
class MetricSpec:
    """One metric family in the registry (`registry.METRICS`), keyed by `name` (a model metric's `model_type`).

    Model metrics (`capabilities.needs_model`) name their config and model classes, the loader of a directory or Hub
    id (`loader(name_or_path, device, dtype, **load_options) -> model`), their converters, released variants and tiny
    models. Metrics without a model (BLEU, CIDEr, ...) name a `scorer` with pycocoevalcap's `compute_score(gts, res)`
    interface.
    """

    name: str
    display_name: str
    description: str
    capabilities: Capabilities
    outputs: tuple[OutputField, ...]
    citation: str
    metrics: tuple[str, ...]  # the metrics a model of the family computes (`config.variant`: pac_s_pp, pac_s, ...)
    docs_page: str  # the page of the docs site that defines the metric (`spec/pacs.md`)
    config_class: str | None = None
    model_class: str | None = None
    loader: str | None = None
    converters: tuple[ConverterCommand, ...] = ()
    variants: tuple[ReleasedVariant, ...] = ()
    tiny: TinyModels | None = None
    # papers' reported numbers for the evaluation report: benchmark -> paper name -> statistic -> value (x100)
    reported_numbers: dict = field(default_factory=dict)
    scorer: str | None = None  # metrics without a model: a pycocoevalcap-style scorer class
    scorer_columns: tuple[str, ...] = ()  # their corpus columns, as pycocoevalcap names them (`Bleu_1`, ...)
    # model types of other libraries' checkpoints this family loads too (plain CLIP / SigLIP give CLIP-S)
    wraps_model_types: tuple[str, ...] = ()

    def output(self, key: str) -> OutputField:
        """The output field with this key."""
        for output in self.outputs:
            if output.key == key:
                return output
        raise KeyError(f"{self.display_name} has no output {key!r}; it has {[o.key for o in self.outputs]}")

    def load(self, name_or_path: str, device: str | None = None, dtype: str | None = None, **options: Any):
        """Load a model of this family (the registry's loader: `loading.load_model` calls it). `options` that the
        family declares (`Capabilities.load_options`) go to its loader; the others do not apply to it and are left
        out (`merge_adapter=False` for a family without adapters)."""
        if self.loader is None:
            raise TypeError(f"{self.display_name} has no model to load: score it with its scorer ({self.scorer})")
        declared = {name: value for name, value in options.items() if name in self.capabilities.load_options}
        return resolve(self.loader)(name_or_path, device=device, dtype=dtype, **declared)


@runtime_checkable
class ScoringModel(Protocol):
    """What every loaded metric offers: a config naming its `model_type` and `score`.

    `score(images, candidates, references=None, **options)` takes one image per candidate caption, optional
    references (one list per candidate) and only the options its spec declares (`Capabilities.score_options`); it
    returns an output object whose attributes are the spec's `OutputField.attribute`s.
    """

    config: Any

    def score(self, images: Sequence, candidates: Sequence[str], references: Sequence[Sequence[str]] | None = None,
              **options: Any) -> Any: ...  # fmt: skip


def check_score_options(spec: MetricSpec, options: dict) -> dict:
    """`options` unchanged when `spec` declares every one of them; else an `UnsupportedOptionError` naming the metric
    and the options it does not support (and those it does)."""
    unsupported = sorted(set(options) - set(spec.capabilities.score_options))
    if unsupported:
        supported = ", ".join(spec.capabilities.score_options) or "none"
        raise UnsupportedOptionError(
            f"{spec.display_name} does not support the score option(s) {', '.join(unsupported)} "
            f"(its options: {supported}): leave them out"
        )
    return options


def door_options(spec: MetricSpec, defaults: dict, chosen: dict) -> dict:
    """The score options a door (a command line, the Space) passes to a model of `spec`.

    `defaults` are the door's settings that apply where a metric has them (batch sizes, progress bars): a metric
    that lacks one simply does not get it. `chosen` are options the user asked for explicitly (`--long-captions
    chunks`): a metric that lacks one refuses it with an `UnsupportedOptionError`.
    """
    options = {name: value for name, value in defaults.items() if name in spec.capabilities.score_options}
    return options | check_score_options(spec, chosen)


__all__ = [
    "Capabilities",
    "ConverterCommand",
    "MetricSpec",
    "OutputField",
    "ReleasedVariant",
    "ScoringModel",
    "TinyModels",
    "check_score_options",
    "door_options",
    "resolve",
]
