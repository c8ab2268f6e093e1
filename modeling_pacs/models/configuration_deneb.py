"""DENEB configuration (docs/spec/deneb.md: OpenCLIP ViT-L/14 + SimCSE RoBERTa-base, ScalarMix, two Sim-Vec
transformers, MLP head)."""

from transformers import AutoConfig, CLIPConfig, PreTrainedConfig, RobertaConfig
from transformers.configuration_utils import SubConfigSpec

from .sentence_mix import ROBERTA_BASE, SentenceEncoderConfigMixin

DENEB_MODES = ("per_item", "official")
# Blocks of the head's input (docs/spec/deneb.md#head): the image Sim-Vec summary, the text Sim-Vec summary and the
# image-candidate pair vector, each of width 2 x hidden.
HEAD_BLOCKS = 3
# open_clip's `ViT-L-14` / `laion2b_s32b_b82k`, the CLIP the authors build (deneb_estimator.py:118): OpenCLIP's
# geometry (plain GELU) and that tag's preprocessing (INCEPTION mean and std, not OpenAI's).
OPENCLIP_VIT_L14 = {
    "projection_dim": 768,
    "text_config": {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "max_position_embeddings": 77,
        "hidden_act": "gelu",
        "vocab_size": 49408,
        "bos_token_id": 49406,
        "eos_token_id": 49407,
        "pad_token_id": 49407,
    },
    "vision_config": {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "image_size": 224,
        "patch_size": 14,
        "hidden_act": "gelu",
    },
}
LAION_IMAGE_MEAN = [0.5, 0.5, 0.5]
LAION_IMAGE_STD = [0.5, 0.5, 0.5]


class DenebConfig(SentenceEncoderConfigMixin, PreTrainedConfig):
    r"""
    Configuration of a [`DenebModel`][modeling_pacs.DenebModel]: DENEB (Matsuda et al., ACCV 2024), a supervised,
    reference-based caption metric robust to hallucinations.

    Args:
        clip_config (`dict` or `CLIPConfig`, *optional*):
            The CLIP dual encoder (raw projected features). Defaults to OpenCLIP ViT-L/14 (plain GELU). Its
            projection width must equal the sentence encoder's hidden size: the authors' `upsampler` reads both.
        text_config (`dict` or `RobertaConfig`, *optional*):
            The sentence encoder, `princeton-nlp/sup-simcse-roberta-base` in the authors' config.
        text_encoder_id (`str`, *optional*, defaults to `"princeton-nlp/sup-simcse-roberta-base"`):
            Hub id of the sentence encoder (tokenizer and config source of the converter).
        clip_model_id (`str`, *optional*, defaults to `"laion/CLIP-ViT-L-14-laion2B-s32B-b82K"`):
            The OpenCLIP backbone the authors start from (overwritten by PAC-S's OpenCLIP ViT-L/14 weights).
        image_mean, image_std (`list[float]`, *optional*, default to `[0.5, 0.5, 0.5]`):
            Image normalisation: what open_clip gives for `pretrained="laion2b_s32b_b82k"`.
        prompt_prefix (`str`, *optional*, defaults to `"In the image, "`):
            Prepended to candidates and references on the CLIP side only; RoBERTa reads the raw caption.
        max_text_length (`int`, *optional*, defaults to 77):
            CLIP context length (longer texts are cut with end-of-text last, as open_clip's tokenizer does).
        hidden_sizes (`list[int]`, *optional*, defaults to `[1536, 768]`):
            Hidden widths of the Tanh MLP head (`hidden_sizes: "1536, 768"` of the authors' config).
        dropout (`float`, *optional*, defaults to 0.1):
            Dropout of the head's hidden layers (training only).
        scalar_mix_dropout (`float`, *optional*, defaults to 0.1):
            Probability of dropping a layer weight of the ScalarMix (training only).
        num_sequence_layers (`int`, *optional*, defaults to 3):
            Layers of each Sim-Vec transformer.
        num_sequence_heads (`int`, *optional*, defaults to 8):
            Attention heads of each Sim-Vec transformer.
        sequence_intermediate_size (`int`, *optional*, defaults to 2048):
            Feed-forward width of the Sim-Vec transformer layers (PyTorch's default, which the authors keep).
        sequence_dropout (`float`, *optional*, defaults to 0.1):
            Dropout of the Sim-Vec transformers and positional encodings (training only).
        max_references (`int`, *optional*, defaults to 998):
            Most references per item: the authors' positional encodings have 1000 positions (CLS, image, references).
        mode (`str`, *optional*, defaults to `"per_item"`):
            Default scoring mode: `"per_item"` (each item alone: batch-invariant, every reference used) or
            `"official"` (the authors' `predict` chunking; docs/spec/deneb.md#batching).
        official_batch_size (`int`, *optional*, defaults to 32):
            Chunk size of the `"official"` mode when none is given (the authors' validation scripts use 32).

    Example:

    ```python
    >>> from modeling_pacs import DenebConfig
    >>> config = DenebConfig()
    >>> config.feature_size, config.num_mixed_layers
    (4608, 13)
    ```
    """

    model_type = "deneb"
    sub_configs_defaults = {
        "clip_config": SubConfigSpec(config_class=AutoConfig, model_type="clip"),
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="roberta"),
    }

    clip_config: dict | PreTrainedConfig | None = None
    text_config: dict | PreTrainedConfig | None = None
    text_encoder_id: str = "princeton-nlp/sup-simcse-roberta-base"
    clip_model_id: str = "laion/CLIP-ViT-L-14-laion2B-s32B-b82K"
    image_mean: list[float] | None = None
    image_std: list[float] | None = None
    prompt_prefix: str = "In the image, "
    max_text_length: int = 77
    hidden_sizes: list[int] | None = None
    dropout: float = 0.1
    scalar_mix_dropout: float = 0.1
    num_sequence_layers: int = 3
    num_sequence_heads: int = 8
    sequence_intermediate_size: int = 2048
    sequence_dropout: float = 0.1
    max_references: int = 998
    mode: str = "per_item"
    official_batch_size: int = 32

    def __post_init__(self, **kwargs):
        if self.mode not in DENEB_MODES:
            raise ValueError(f"mode must be one of {list(DENEB_MODES)}, got {self.mode!r}")
        if self.hidden_sizes is None:
            self.hidden_sizes = [1536, 768]
        self.image_mean = list(self.image_mean or LAION_IMAGE_MEAN)
        self.image_std = list(self.image_std or LAION_IMAGE_STD)
        if not all(isinstance(size, int) and size > 0 for size in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive integers, got {self.hidden_sizes!r}")
        for name in ("dropout", "scalar_mix_dropout", "sequence_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)!r}")
        for name in ("official_batch_size", "num_sequence_layers", "num_sequence_heads", "max_references"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.clip_config is None:
            self.clip_config = CLIPConfig(**OPENCLIP_VIT_L14)
        elif isinstance(self.clip_config, dict):
            clip = dict(self.clip_config)
            self.clip_config = AutoConfig.for_model(clip.pop("model_type", "clip"), **clip)
        if self.text_config is None:
            self.text_config = RobertaConfig(**ROBERTA_BASE)
        elif isinstance(self.text_config, dict):
            text = dict(self.text_config)
            self.text_config = AutoConfig.for_model(text.pop("model_type", "roberta"), **text)
        if self.clip_config.projection_dim != self.text_config.hidden_size:
            raise ValueError(
                f"the CLIP projection width ({self.clip_config.projection_dim}) must equal the sentence encoder's "
                f"hidden size ({self.text_config.hidden_size}): DENEB's pair projection reads CLIP features of that "
                "width (768 for OpenCLIP ViT-L/14 and RoBERTa-base)"
            )
        if (2 * self.hidden_size) % self.num_sequence_heads:
            raise ValueError(
                f"the Sim-Vec width 2 x {self.hidden_size} is not divisible by num_sequence_heads="
                f"{self.num_sequence_heads}"
            )
        super().__post_init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        """Width of the CLIP and sentence features (768 for the authors' model)."""
        return self.text_config.hidden_size

    @property
    def feature_size(self) -> int:
        """Width of the head's input: `3 x 2 x hidden` (4608 for the authors' model)."""
        return HEAD_BLOCKS * 2 * self.hidden_size

    @property
    def variant(self) -> str:
        """The metric this model computes, as `PACSConfig.variant` names it for PAC-S models."""
        return "deneb"

    @property
    def score_names(self) -> tuple[str, str]:
        """DENEB has no reference-free score: both names are `"DENEB"`."""
        return ("DENEB", "DENEB")


__all__ = ["DENEB_MODES", "DenebConfig"]
