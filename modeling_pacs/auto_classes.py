"""Registration of the package's configs and models with transformers' Auto classes.

After it, `AutoConfig.from_pretrained(directory)` and `AutoModel.from_pretrained(directory)` load our directories
without `trust_remote_code`: every model metric of the registry, and the captioner. It runs once, when the public
names of `modeling_pacs` (or `modeling_pacs.captioning`) are first read, and when a model is loaded by `load_model` or
its model type read by `plain_model_type`; a plain `import modeling_pacs` (every command's `--help`) imports no model.
"""

import functools

from .metric_spec import resolve
from .registry import MODEL_METRICS


@functools.cache
def register_auto_classes() -> None:
    """Register every model metric's config and model, and the captioner's, with `AutoConfig` and `AutoModel`."""
    from transformers import AutoConfig, AutoModel

    from .models.configuration_captioner import PACSCaptionerConfig
    from .models.modeling_captioner import PACSCaptionerForConditionalGeneration

    for spec in MODEL_METRICS.values():
        config_class = resolve(spec.config_class)
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, resolve(spec.model_class), exist_ok=True)
    AutoConfig.register(PACSCaptionerConfig.model_type, PACSCaptionerConfig, exist_ok=True)
    AutoModel.register(PACSCaptionerConfig, PACSCaptionerForConditionalGeneration, exist_ok=True)


__all__ = ["register_auto_classes"]
