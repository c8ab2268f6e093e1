"""pacs-pp: PAC-S++, CLIP-S and PAC-S captioning metrics (and Polos, Pearl) on transformers + PEFT.

The public API and the Auto registration of every model of the package, in one place. The models themselves are the
remote code of `models/`; `registry.METRICS` holds one `MetricSpec` per metric (its classes, loader, converters,
releases, capabilities and output fields); `loading.load_model` loads any model metric by alias, Hub id or directory;
the folders beside (`pacs/`, `polos/`, `pearl/`, `captioning/`, `evaluation/`, `cli/`, ...) are the application, one
job each (see the README's Layout section).
"""

from transformers import AutoConfig, AutoModel

from .errors import InputError, JobStateError, MissingExtraError, PacsError
from .metric_spec import MetricSpec, OutputField, ScoringModel, resolve
from .models.artifacts import CorruptArtifactError
from .models.configuration_captioner import PACSCaptionerConfig
from .models.configuration_pacs import PACSConfig
from .models.configuration_pearl import PearlConfig
from .models.configuration_polos import PolosConfig
from .models.modeling_captioner import PACSCaptionerForConditionalGeneration
from .models.modeling_pacs import PACSModel, PACSScoreOutput, PACSTextFeatures
from .models.modeling_pearl import PearlModel, PearlOutput
from .models.modeling_polos import PolosModel, PolosScoreOutput
from .models.video_scoring import PACSVideoScoreOutput
from .registry import METRICS, MODEL_METRICS
from .results import ResultColumn, result_columns

# Without trust_remote_code, an installed `pacs-pp` still lets the Auto classes load our directories: every model
# metric of the registry, and the captioner.
for _spec in MODEL_METRICS.values():
    _config_class = resolve(_spec.config_class)
    AutoConfig.register(_config_class.model_type, _config_class, exist_ok=True)
    AutoModel.register(_config_class, resolve(_spec.model_class), exist_ok=True)
AutoConfig.register(PACSCaptionerConfig.model_type, PACSCaptionerConfig, exist_ok=True)
AutoModel.register(PACSCaptionerConfig, PACSCaptionerForConditionalGeneration, exist_ok=True)

__version__ = "0.1.0"
__all__ = [
    "METRICS",
    "CorruptArtifactError",
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
