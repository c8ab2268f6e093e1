"""Captioning with PAC-S++ as a reward: a CLIP-feature captioner, SCST training, reward functions, grammar measures.

Not remote code, except `configuration_captioner.py` and `modeling_captioner.py`, which import only torch and
transformers so that a saved captioner loads with `trust_remote_code=True` as well.
"""

from transformers import AutoConfig, AutoModel

from ..models.configuration_captioner import PACSCaptionerConfig
from ..models.modeling_captioner import PACSCaptionerForConditionalGeneration

# With pacs-pp installed, the Auto classes load captioner directories without trust_remote_code.
AutoConfig.register(PACSCaptionerConfig.model_type, PACSCaptionerConfig, exist_ok=True)
AutoModel.register(PACSCaptionerConfig, PACSCaptionerForConditionalGeneration, exist_ok=True)

__all__ = ["PACSCaptionerConfig", "PACSCaptionerForConditionalGeneration"]
