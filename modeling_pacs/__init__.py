"""pacs-pp: PAC-S++, CLIP-S and PAC-S captioning metrics (and Polos, Pearl, DENEB, FLEUR) on transformers + PEFT.

The public API, imported lazily: `import modeling_pacs` is light, and reading a model's name (or calling
`load_model`) registers every model of the package with the Auto classes (`auto_classes.py`). The models themselves
are the remote code of `models/`; `registry.METRICS` holds one `MetricSpec` per metric (its classes, loader,
converters, releases, capabilities and output fields); `loading.load_model` loads any model metric by alias, Hub id
or directory; the folders beside (`pacs/`, `polos/`, `pearl/`, `deneb/`, `captioning/`, `evaluation/`, `cli/`, ...)
are the application, one job each (see the README's Layout section).
"""

import importlib
from typing import TYPE_CHECKING

from .version import __version__

# Public name -> the module that defines it. Imported on first use (PEP 562), so that `import modeling_pacs` and every
# command's `--help` stay fast: torch, transformers and the models load only when a name that needs them is read.
_PUBLIC_NAMES = {
    "InputError": ".errors",
    "JobStateError": ".errors",
    "MissingExtraError": ".errors",
    "PacsError": ".errors",
    "MetricSpec": ".metric_spec",
    "OutputField": ".metric_spec",
    "ScoringModel": ".metric_spec",
    "CorruptArtifactError": ".models.artifacts",
    "DenebConfig": ".models.configuration_deneb",
    "DenebModel": ".models.modeling_deneb",
    "DenebScoreOutput": ".models.modeling_deneb",
    "PACSCaptionerConfig": ".models.configuration_captioner",
    "FleurConfig": ".models.configuration_fleur",
    "PACSConfig": ".models.configuration_pacs",
    "PearlConfig": ".models.configuration_pearl",
    "PolosConfig": ".models.configuration_polos",
    "PACSCaptionerForConditionalGeneration": ".models.modeling_captioner",
    "FleurModel": ".models.modeling_fleur",
    "FleurOutput": ".models.modeling_fleur",
    "PACSModel": ".models.modeling_pacs",
    "PACSScoreOutput": ".models.modeling_pacs",
    "PACSTextFeatures": ".models.modeling_pacs",
    "PearlModel": ".models.modeling_pearl",
    "PearlOutput": ".models.modeling_pearl",
    "PolosModel": ".models.modeling_polos",
    "PolosScoreOutput": ".models.modeling_polos",
    "PACSVideoScoreOutput": ".models.video_scoring",
    "METRICS": ".registry",
    "ResultColumn": ".results",
    # pycocoevalcap-compatible scorers and torchmetrics Metrics of the model metrics
    "ModelScorer": ".evaluation.coco_scorers",
    "CLIPScorer": ".pacs.coco_scorers",
    "PACSScorer": ".pacs.coco_scorers",
    "PACSppScorer": ".pacs.coco_scorers",
    "PearlCOCOScorer": ".pearl.coco_scorers",
    "PolosScorer": ".polos.coco_scorers",
    "ModelMetric": ".evaluation.torch_metrics",
    "CLIPSMetric": ".pacs.torch_metrics",
    "PACSMetric": ".pacs.torch_metrics",
    "PACSppMetric": ".pacs.torch_metrics",
    "PearlMetric": ".pearl.torch_metrics",
    "PolosMetric": ".polos.torch_metrics",
    "result_columns": ".results",
}
# Names whose modules need transformers: reading one registers the package's models with the Auto classes, so that
# `AutoModel.from_pretrained(directory)` works without trust_remote_code (`auto_classes.py`).
_LIGHT_MODULES = (".errors", ".metric_spec", ".models.artifacts", ".registry", ".results")


def __getattr__(name: str):
    module_name = _PUBLIC_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module_name not in _LIGHT_MODULES:
        from .auto_classes import register_auto_classes

        register_auto_classes()
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC_NAMES])


if TYPE_CHECKING:
    from .errors import InputError, JobStateError, MissingExtraError, PacsError
    from .evaluation.coco_scorers import ModelScorer
    from .evaluation.torch_metrics import ModelMetric
    from .metric_spec import MetricSpec, OutputField, ScoringModel
    from .models.artifacts import CorruptArtifactError
    from .models.configuration_captioner import PACSCaptionerConfig
    from .models.configuration_deneb import DenebConfig
    from .models.configuration_fleur import FleurConfig
    from .models.configuration_pacs import PACSConfig
    from .models.configuration_pearl import PearlConfig
    from .models.configuration_polos import PolosConfig
    from .models.modeling_captioner import PACSCaptionerForConditionalGeneration
    from .models.modeling_deneb import DenebModel, DenebScoreOutput
    from .models.modeling_fleur import FleurModel, FleurOutput
    from .models.modeling_pacs import PACSModel, PACSScoreOutput, PACSTextFeatures
    from .models.modeling_pearl import PearlModel, PearlOutput
    from .models.modeling_polos import PolosModel, PolosScoreOutput
    from .models.video_scoring import PACSVideoScoreOutput
    from .pacs.coco_scorers import CLIPScorer, PACSppScorer, PACSScorer
    from .pacs.torch_metrics import CLIPSMetric, PACSMetric, PACSppMetric
    from .pearl.coco_scorers import PearlCOCOScorer
    from .pearl.torch_metrics import PearlMetric
    from .polos.coco_scorers import PolosScorer
    from .polos.torch_metrics import PolosMetric
    from .registry import METRICS
    from .results import ResultColumn, result_columns

__all__ = [
    "METRICS",
    "CLIPSMetric",
    "CLIPScorer",
    "ModelMetric",
    "ModelScorer",
    "PACSMetric",
    "PACSScorer",
    "PACSppMetric",
    "PACSppScorer",
    "PearlCOCOScorer",
    "PearlMetric",
    "PolosMetric",
    "PolosScorer",
    "CorruptArtifactError",
    "DenebConfig",
    "DenebModel",
    "DenebScoreOutput",
    "FleurConfig",
    "FleurModel",
    "FleurOutput",
    "MetricSpec",
    "OutputField",
    "ResultColumn",
    "ScoringModel",
    "InputError",
    "JobStateError",
    "MissingExtraError",
    "PACSCaptionerConfig",
    "PACSCaptionerForConditionalGeneration",
    "PACSConfig",
    "PACSModel",
    "PACSScoreOutput",
    "PACSTextFeatures",
    "PACSVideoScoreOutput",
    "PacsError",
    "PearlConfig",
    "PearlModel",
    "PearlOutput",
    "PolosConfig",
    "PolosModel",
    "PolosScoreOutput",
    "__version__",
    "result_columns",
]
