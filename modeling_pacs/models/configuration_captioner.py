"""Configuration of the PAC-S++ SCST captioner (docs/spec/pacs.md#scst; PAC-S++ paper Sec. 4.2, Eq. 15)."""

from transformers import CLIPVisionConfig, PreTrainedConfig

CLIP_VOCAB_SIZE = 49408
CLIP_BOS_TOKEN_ID = 49406
CLIP_EOS_TOKEN_ID = 49407


class PACSCaptionerConfig(PreTrainedConfig):
    r"""
    Configuration of [`PACSCaptionerForConditionalGeneration`][modeling_pacs.PACSCaptionerForConditionalGeneration]:
    an encoder-decoder Transformer over the grid features
    of a frozen CLIP visual encoder, taken before its last layer norm and projection (Eq. 15), with the CLIP
    tokenizer's vocabulary. Defaults are the paper's: 3 + 3 layers, d=512, 8 heads.

    Args:
        vision_config (`dict` or `CLIPVisionConfig`, *optional*): the CLIP visual encoder (default: ViT-B/32).
        hidden_size (`int`, defaults to 512): width `d` of the captioner.
        encoder_layers (`int`, defaults to 3): Transformer layers over the visual features.
        decoder_layers (`int`, defaults to 3): Transformer decoder layers.
        num_attention_heads (`int`, defaults to 8): heads of every attention layer.
        intermediate_size (`int`, defaults to 2048): feed-forward width.
        dropout (`float`, defaults to 0.1): dropout in every layer.
        max_position_embeddings (`int`, defaults to 77): longest caption in tokens (CLIP's context).
        vocab_size (`int`, defaults to 49408): the CLIP BPE vocabulary.

    Example:

    ```python
    >>> from modeling_pacs.models.configuration_captioner import PACSCaptionerConfig
    >>> config = PACSCaptionerConfig()
    >>> config.hidden_size, config.encoder_layers, config.decoder_layers, config.num_attention_heads
    (512, 3, 3, 8)
    ```
    """

    model_type = "pacs_captioner"
    sub_configs = {"vision_config": CLIPVisionConfig}

    def __init__(
        self,
        vision_config: dict | CLIPVisionConfig | None = None,
        hidden_size: int = 512,
        encoder_layers: int = 3,
        decoder_layers: int = 3,
        num_attention_heads: int = 8,
        intermediate_size: int = 2048,
        dropout: float = 0.1,
        max_position_embeddings: int = 77,
        vocab_size: int = CLIP_VOCAB_SIZE,
        bos_token_id: int = CLIP_BOS_TOKEN_ID,
        eos_token_id: int = CLIP_EOS_TOKEN_ID,
        pad_token_id: int = CLIP_EOS_TOKEN_ID,
        tie_word_embeddings: bool = True,
        **kwargs,
    ):
        if vision_config is None:
            vision_config = CLIPVisionConfig(
                hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, patch_size=32
            )
        elif isinstance(vision_config, dict):
            vision_config = CLIPVisionConfig(**vision_config)
        for name, value in (
            ("hidden_size", hidden_size),
            ("encoder_layers", encoder_layers),
            ("decoder_layers", decoder_layers),
            ("num_attention_heads", num_attention_heads),
            ("intermediate_size", intermediate_size),
            ("max_position_embeddings", max_position_embeddings),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size ({hidden_size}) must be divisible by num_attention_heads ({num_attention_heads})"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.vision_config = vision_config
        self.hidden_size = hidden_size
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.max_position_embeddings = max_position_embeddings
        self.vocab_size = vocab_size
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.decoder_start_token_id = bos_token_id
        self.tie_word_embeddings = tie_word_embeddings
        kwargs["is_encoder_decoder"] = True
        super().__init__(**kwargs)


__all__ = ["PACSCaptionerConfig"]
