"""pacs-pp: PAC-S++, CLIP-S and PAC-S captioning metrics on transformers + PEFT."""

from transformers import AutoConfig, AutoModel

from .models.configuration_pacs import PACSConfig
from .models.configuration_pearl import PearlConfig
from .models.configuration_polos import PolosConfig
from .models.modeling_pacs import PACSModel, PACSScoreOutput, PACSTextFeatures
from .models.modeling_pearl import PearlModel, PearlOutput
from .models.modeling_polos import PolosModel, PolosScoreOutput
from .models.video_scoring import PACSVideoScoreOutput

# Without trust_remote_code, an installed `pacs-pp` still lets the Auto classes load our directories.
AutoConfig.register(PACSConfig.model_type, PACSConfig, exist_ok=True)
AutoModel.register(PACSConfig, PACSModel, exist_ok=True)
AutoConfig.register(PolosConfig.model_type, PolosConfig, exist_ok=True)
AutoModel.register(PolosConfig, PolosModel, exist_ok=True)
AutoConfig.register(PearlConfig.model_type, PearlConfig, exist_ok=True)
AutoModel.register(PearlConfig, PearlModel, exist_ok=True)

__version__ = "0.1.0"
__all__ = [
    "PACSConfig",
    "PACSModel",
    "PACSScoreOutput",
    "PACSTextFeatures",
    "PACSVideoScoreOutput",
    "PearlConfig",
    "PearlModel",
    "PearlOutput",
    "PolosConfig",
    "PolosModel",
    "PolosScoreOutput",
    "__version__",
]
