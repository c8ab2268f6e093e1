"""pacs-pp: PAC-S++, CLIP-S and PAC-S captioning metrics on transformers + PEFT."""

from transformers import AutoConfig, AutoModel

from .configuration_pacs import PACSConfig
from .modeling_pacs import PACSModel, PACSScoreOutput, PACSTextFeatures
from .video_scoring import PACSVideoScoreOutput

# Without trust_remote_code, an installed `pacs-pp` still lets the Auto classes load our directories.
AutoConfig.register(PACSConfig.model_type, PACSConfig, exist_ok=True)
AutoModel.register(PACSConfig, PACSModel, exist_ok=True)

__version__ = "0.1.0"
__all__ = ["PACSConfig", "PACSModel", "PACSScoreOutput", "PACSTextFeatures", "PACSVideoScoreOutput", "__version__"]
