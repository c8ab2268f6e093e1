"""Polos configuration (docs/spec/polos.md: CLIP ViT-B/32 + SimCSE RoBERTa-base, ScalarMix, MLP head)."""

from transformers import AutoConfig, CLIPConfig, PreTrainedConfig, RobertaConfig
from transformers.configuration_utils import SubConfigSpec

from .sentence_mix import ROBERTA_BASE, SentenceEncoderConfigMixin

POLOS_MODES = ("per_item", "official")
# Number of CLIP blocks in the feature vector (docs/spec/polos.md#features): v, c, |v-c|, v*c, |r-c|, r*c.
CLIP_BLOCKS = 6
# Number of text-encoder blocks in the feature vector: r, c, |c-r|, c*r.
TEXT_BLOCKS = 4


class PolosConfig(SentenceEncoderConfigMixin, PreTrainedConfig):
    r"""
    Configuration of a [`PolosModel`][modeling_pacs.PolosModel]: Polos (Wada et al., CVPR 2024), a supervised
    reference-based caption metric.

    Args:
        clip_config (`dict` or `CLIPConfig`, *optional*):
            The CLIP dual encoder (text and image towers, raw projected features). Defaults to ViT-B/32.
        text_config (`dict` or `RobertaConfig`, *optional*):
            The sentence encoder, `princeton-nlp/sup-simcse-roberta-base` in the released model. Defaults to
            RoBERTa-base geometry.
        text_encoder_id (`str`, *optional*, defaults to `"princeton-nlp/sup-simcse-roberta-base"`):
            Hub id of the sentence encoder (tokenizer and config source of the converter).
        clip_model_id (`str`, *optional*, defaults to `"openai/clip-vit-base-patch32"`):
            Hub id of the CLIP backbone.
        hidden_sizes (`list[int]`, *optional*, defaults to `[2304, 1152]`):
            Hidden widths of the 3-layer Tanh MLP head (`hidden_sizes: "2304,1152"` of the official config).
        dropout (`float`, *optional*, defaults to 0.1):
            Dropout after each hidden layer of the head (training only).
        scalar_mix_dropout (`float`, *optional*, defaults to 0.1):
            Probability of dropping a layer weight of the ScalarMix (training only).
        prompt_prefix (`str`, *optional*, defaults to `"A photo depicts "`):
            Prepended to candidates and references on the CLIP side only; RoBERTa reads the raw caption.
        max_text_length (`int`, *optional*, defaults to 77):
            CLIP context length (longer texts are cut, end-of-text kept last, as OpenAI's `tokenize(truncate=True)`).
        mode (`str`, *optional*, defaults to `"per_item"`):
            Default scoring mode: `"per_item"` (each sentence normalised by its own statistics, every reference
            used; deterministic and independent of the batch) or `"official"` (the released code's chunking).
        official_batch_size (`int`, *optional*, defaults to 32):
            Chunk size of the `"official"` mode when none is given (the validation scripts used 32).

    Example:

    ```python
    >>> from modeling_pacs import PolosConfig, PolosModel
    >>> config = PolosConfig()
    >>> config.feature_size
    6144
    >>> model = PolosModel(config)
    ```
    """

    model_type = "polos"
    sub_configs_defaults = {
        "clip_config": SubConfigSpec(config_class=AutoConfig, model_type="clip"),
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="roberta"),
    }

    clip_config: dict | PreTrainedConfig | None = None
    text_config: dict | PreTrainedConfig | None = None
    text_encoder_id: str = "princeton-nlp/sup-simcse-roberta-base"
    clip_model_id: str = "openai/clip-vit-base-patch32"
    hidden_sizes: list[int] | None = None
    dropout: float = 0.1
    scalar_mix_dropout: float = 0.1
    prompt_prefix: str = "A photo depicts "
    max_text_length: int = 77
    mode: str = "per_item"
    official_batch_size: int = 32

    def __post_init__(self, **kwargs):
        if self.mode not in POLOS_MODES:
            raise ValueError(f"mode must be one of {list(POLOS_MODES)}, got {self.mode!r}")
        if self.hidden_sizes is None:
            self.hidden_sizes = [2304, 1152]
        if not all(isinstance(size, int) and size > 0 for size in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive integers, got {self.hidden_sizes!r}")
        for name in ("dropout", "scalar_mix_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)!r}")
        if not isinstance(self.official_batch_size, int) or self.official_batch_size < 1:
            raise ValueError(f"official_batch_size must be a positive integer, got {self.official_batch_size!r}")
        if self.clip_config is None:
            self.clip_config = CLIPConfig()
        elif isinstance(self.clip_config, dict):
            clip = dict(self.clip_config)
            self.clip_config = AutoConfig.for_model(clip.pop("model_type", "clip"), **clip)
        if self.text_config is None:
            self.text_config = RobertaConfig(**ROBERTA_BASE)
        elif isinstance(self.text_config, dict):
            text = dict(self.text_config)
            self.text_config = AutoConfig.for_model(text.pop("model_type", "roberta"), **text)
        super().__post_init__(**kwargs)

    @property
    def feature_size(self) -> int:
        """Width of the head's input: `4 * text hidden + 6 * CLIP projection` (6144 for the released model)."""
        return TEXT_BLOCKS * self.text_config.hidden_size + CLIP_BLOCKS * self.clip_config.projection_dim

    @property
    def variant(self) -> str:
        """The metric this model computes, as `PACSConfig.variant` names it for PAC-S models."""
        return "polos"

    @property
    def score_names(self) -> tuple[str, str]:
        """Polos has no reference-free score: both names are `"Polos"`."""
        return ("Polos", "Polos")


__all__ = ["POLOS_MODES", "PolosConfig"]
