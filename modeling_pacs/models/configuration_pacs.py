"""PAC-S++ configuration."""

import math

from transformers import AutoConfig, CLIPConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .backbones import CLIP_DEFAULT_W, backbone_spec, default_max_text_length, default_w

# Metric variants and their default w (docs/spec/pacs.md#metric: PAC-S++ paper Sec. 5.7, CLIPScore Sec. 3, official
# PAC-S code).
VARIANT_DEFAULT_W = CLIP_DEFAULT_W
# Display names of the reference-free and reference-based scores of each variant.
VARIANT_SCORE_NAMES = {
    "clip_s": ("CLIP-S", "RefCLIP-S"),
    "pac_s": ("PAC-S", "RefPAC-S"),
    "pac_s_pp": ("PAC-S++", "RefPAC-S++"),
}
# Official PAC-S++ adapter placement (docs/spec/pacs.md#training): every attention projection and both MLP linears of
# both towers. The patch-embedding delta is merged into the base weights, because PEFT cannot express its factorisation.
DEFAULT_LORA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"]


class PACSConfig(PreTrainedConfig):
    r"""
    Configuration of a [`PACSModel`][modeling_pacs.PACSModel]: a CLIP-style dual encoder, optional LoRA adapters, and
    the scoring constants.

    Args:
        backbone_config (`dict` or `CLIPConfig`, *optional*):
            Configuration of the dual encoder, resolved through `AutoConfig`: CLIP (`model_type` `clip`) or SigLIP
            (`siglip`, which includes the fixed-resolution SigLIP 2 checkpoints; see `backbones.py`). Defaults to
            CLIP ViT-B/32.
        variant (`str`, *optional*, defaults to `"pac_s_pp"`):
            `"clip_s"`, `"pac_s"` or `"pac_s_pp"`. Chooses the default `w` and the names of the scores.
        w (`float`, *optional*):
            Rescaling weight of Eq. 4. Defaults to 2.5 for CLIP-S and PAC-S++, 2.0 for PAC-S, on every backbone
            (`backbones.BACKBONE_DEFAULT_W`).
        prompt_prefix (`str`, *optional*):
            Prepended to every candidate and reference before tokenisation (may be empty). Defaults to
            `"A photo depicts "` for CLIP and to no prompt for SigLIP.
        max_text_length (`int`, *optional*):
            Context length; longer texts are truncated keeping the end-of-text token in the last position. Defaults
            to the text tower's `max_position_embeddings`: 77 for CLIP, 248 for Long-CLIP, 64 for SigLIP.
        adapter_path (`str`, *optional*):
            Where the PEFT LoRA adapter lives: a sub-folder of the model directory, an absolute path, or a Hub id.
            `None` means the weights already contain everything (CLIP-S, PAC-S, or a merged PAC-S++).
        merge_adapter (`bool`, *optional*, defaults to `True`):
            Merge the adapter into the base weights after loading (faster inference, identical scores).
        lora_rank (`int`, *optional*, defaults to 4):
            LoRA rank of the official PAC-S++ recipe.
        lora_alpha (`float`, *optional*, defaults to 1.0):
            LoRA alpha of the official recipe (alpha=1 with r=4, i.e. scaling 0.25).
        lora_target_modules (`list[str]`, *optional*):
            The adapted modules; defaults to the official placement (`DEFAULT_LORA_TARGET_MODULES`).
        base_model_id (`str`, *optional*, defaults to `"openai/clip-vit-base-patch32"`):
            Hub id of the backbone the adapter was trained on; written into `adapter_config.json`.

    Example:

    ```python
    >>> from transformers import CLIPConfig
    >>> from modeling_pacs import PACSConfig, PACSModel
    >>> config = PACSConfig(variant="clip_s", adapter_path=None)
    >>> config.w
    2.5
    >>> model = PACSModel(config)
    ```
    """

    model_type = "pac_s_pp"
    sub_configs_defaults = {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type="clip")}

    backbone_config: dict | PreTrainedConfig | None = None
    variant: str = "pac_s_pp"
    w: float | None = None
    prompt_prefix: str | None = None
    max_text_length: int | None = None
    adapter_path: str | None = "adapter"
    merge_adapter: bool = True
    lora_rank: int = 4
    lora_alpha: float = 1.0
    lora_target_modules: list[str] | None = None
    base_model_id: str = "openai/clip-vit-base-patch32"

    def __post_init__(self, **kwargs):
        if self.variant not in VARIANT_DEFAULT_W:
            raise ValueError(f"variant must be one of {sorted(VARIANT_DEFAULT_W)}, got {self.variant!r}")
        if self.lora_target_modules is None:
            self.lora_target_modules = list(DEFAULT_LORA_TARGET_MODULES)
        if self.backbone_config is None:
            self.backbone_config = CLIPConfig()
        elif isinstance(self.backbone_config, dict):
            backbone = dict(self.backbone_config)
            self.backbone_config = AutoConfig.for_model(backbone.pop("model_type", "clip"), **backbone)
        spec = backbone_spec(self.backbone_config)
        if self.w is None:
            self.w = default_w(self.backbone_config, self.variant)
        if self.prompt_prefix is None:
            self.prompt_prefix = spec.default_prompt_prefix
        if self.max_text_length is None:
            self.max_text_length = default_max_text_length(self.backbone_config)
        for name in ("w", "lora_alpha"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("max_text_length", "lora_rank"):
            value = getattr(self, name)
            minimum = 2 if name == "max_text_length" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        super().__post_init__(**kwargs)

    @property
    def score_names(self) -> tuple[str, str]:
        """Names of the reference-free and reference-based scores, e.g. `("PAC-S++", "RefPAC-S++")`."""
        return VARIANT_SCORE_NAMES[self.variant]


__all__ = ["PACSConfig"]
