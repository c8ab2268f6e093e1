"""Captioning with PAC-S++ as a reward: SCST training of a CLIP-feature captioner, reward functions (SCST, TRL's
GRPO), grammar measures and the test-split report.

The captioner's configuration and model are remote code (`models/configuration_captioner.py`,
`models/modeling_captioner.py`, registered with the Auto classes by the package); they are re-exported here.
"""

from ..auto_classes import register_auto_classes
from ..models.configuration_captioner import PACSCaptionerConfig
from ..models.modeling_captioner import PACSCaptionerForConditionalGeneration

register_auto_classes()

__all__ = ["PACSCaptionerConfig", "PACSCaptionerForConditionalGeneration"]
