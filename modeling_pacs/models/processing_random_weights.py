"""The processor entry of a model directory with random weights (`pacs-pp make-tiny`, the `tiny` aliases).

Such a directory's `processor_config.json` names this class in its `auto_map`, beside its own `processor_class`
(`CLIPProcessor`, `SiglipProcessor`): `AutoProcessor.from_pretrained(directory, trust_remote_code=True)` comes here,
logs the random-weights warning and returns the directory's own processor; without `trust_remote_code`, transformers
loads that processor directly.
"""

import os

from transformers import AutoProcessor
from transformers.utils import logging

from .artifacts import RANDOM_WEIGHTS_WARNING

logger = logging.get_logger(__name__)


class RandomWeightsProcessor:
    """Warns that the directory's model has random weights, then loads the directory's own processor."""

    @classmethod
    def register_for_auto_class(cls, auto_class: str = "AutoProcessor") -> None:
        """Nothing to register: this class is only an entry point, and the processor it returns is transformers'."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        name = os.fspath(pretrained_model_name_or_path)
        logger.warning(RANDOM_WEIGHTS_WARNING.format(name=f"the processor's model '{name}'"))
        kwargs["trust_remote_code"] = False  # the `processor_class` of the directory, not this entry again
        return AutoProcessor.from_pretrained(pretrained_model_name_or_path, **kwargs)


__all__ = ["RandomWeightsProcessor"]
