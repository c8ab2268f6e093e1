"""Pearl configuration (docs/spec/pearl.md#port-layout): a supervised, reference-flexible caption metric on frozen
encoder features."""

from transformers import PreTrainedConfig

# Default encoders and their feature shapes (docs/spec/pearl.md#encoders, docs/spec/pearl.md#port-layout). Token order
# in each GEM is the list order.
DEFAULT_IMAGE_ENCODERS = [
    {"name": "clip", "dim": 512, "tokens": 1},
    {"name": "beit3", "dim": 768, "tokens": 1},
    {"name": "blip2", "dim": 256, "tokens": 32},
]
DEFAULT_REFERENCE_ENCODERS = [
    {"name": "blip2", "dim": 256},
    {"name": "beit3", "dim": 768},
    {"name": "stella", "dim": 768},
]
# The documented fallback while BEiT-3 weights are not at hand (Tab. 2 (vii): about -0.5 tau-c reference-based).
NO_BEIT3_IMAGE_ENCODERS = [encoder for encoder in DEFAULT_IMAGE_ENCODERS if encoder["name"] != "beit3"]
NO_BEIT3_REFERENCE_ENCODERS = [encoder for encoder in DEFAULT_REFERENCE_ENCODERS if encoder["name"] != "beit3"]
# How each default encoder is loaded (docs/spec/pearl.md#encoders, docs/spec/pearl.md#a1, docs/spec/pearl.md#a13).
# `path` is a Hub id or a folder of the model directory.
DEFAULT_ENCODER_SPECS = {
    "clip": {"type": "pacs", "path": "pacs-pp/pac-s-pp-clip-vit-b32", "prompt_prefix": "A photo depicts "},
    "blip2": {"type": "blip2", "path": "Salesforce/blip2-itm-vit-g", "empty_text": "[EMPTY]"},
    "beit3": {"type": "beit3", "path": "pacs-pp/beit3-base-itc-patch16-224", "empty_text": "[EMPTY]"},
    "stella": {
        "type": "stella",
        "path": "NovaSearch/stella_en_400M_v5",
        "projection_subfolder": "2_Dense_768",
        "empty_text": "[EMPTY]",
    },
}


class PearlConfig(PreTrainedConfig):
    r"""
    Configuration of a [`PearlModel`][modeling_pacs.PearlModel] ([docs/spec/pearl.md](../spec/pearl.md)). Defaults
    reproduce Pearl's code: 103.55 M parameters.

    Args:
        image_encoders (`list[dict]`): Img-GEM encoders in token order, each `{"name", "dim", "tokens"}` (feature
            size and tokens per image; BLIP-2 gives 32, one per Q-Former query).
        reference_encoders (`list[dict]`): Ref-GEM encoders in token order, each `{"name", "dim"}`.
        encoder_specs (`dict`): how the feature extractors are loaded: `{name: {"type", "path", ...}}`.
        feature_dim (`int`, defaults to 768): features are zero-padded to this size (a larger one is projected, A8).
        num_layers (`int`, defaults to 2), num_heads (`int`, defaults to 8), ffn_dim (`int`, defaults to 2048):
            the shared VSS transformer (post-LN `nn.TransformerEncoderLayer`, ReLU).
        num_queries (`int`, defaults to 8): learnable queries of the VSS cross-attention.
        head_hidden_sizes (`list[int]`, defaults to `[1536, 768]`): hidden sizes of the image and reference heads.
        dropout (`float`, defaults to 0.1): dropout of PE, transformer, attention, adapters and heads.
        hadamard_channels (`list[int]`): hidden channels of HadamardNet's 1x1 convolutions.
        lambda_img (`float`, defaults to 0.5): weight of the image score in Eq. 3.
        max_refs (`int`, defaults to 5): references per candidate in one forward; more raise an error (A10).
        huber_delta (`float`, defaults to 0.5): delta of the summed Huber loss (A4).
        max_positions (`int`, defaults to 1000): length of the sinusoidal position table.

    Example:

    ```python
    >>> from modeling_pacs import PearlConfig
    >>> config = PearlConfig()
    >>> config.token_dim, config.image_sequence_length, config.reference_sequence_length
    (1536, 34, 3)
    ```
    """

    model_type = "pearl"

    image_encoders: list | None = None
    reference_encoders: list | None = None
    encoder_specs: dict | None = None
    feature_dim: int = 768
    num_layers: int = 2
    num_heads: int = 8
    ffn_dim: int = 2048
    num_queries: int = 8
    head_hidden_sizes: list | None = None
    dropout: float = 0.1
    hadamard_channels: list | None = None
    lambda_img: float = 0.5
    max_refs: int = 5
    huber_delta: float = 0.5
    max_positions: int = 1000

    def __post_init__(self, **kwargs):
        if self.image_encoders is None:
            self.image_encoders = [dict(encoder) for encoder in DEFAULT_IMAGE_ENCODERS]
        if self.reference_encoders is None:
            self.reference_encoders = [dict(encoder) for encoder in DEFAULT_REFERENCE_ENCODERS]
        if self.encoder_specs is None:
            names = {encoder["name"] for encoder in self.image_encoders + self.reference_encoders}
            self.encoder_specs = {
                name: dict(DEFAULT_ENCODER_SPECS[name]) for name in names & set(DEFAULT_ENCODER_SPECS)
            }
        if self.head_hidden_sizes is None:
            self.head_hidden_sizes = [1536, 768]
        if self.hadamard_channels is None:
            self.hadamard_channels = [128, 256, 512, 1024, 512, 256, 128]
        self.validate_pearl()
        super().__post_init__(**kwargs)

    def validate_pearl(self):
        """Raise a ValueError naming the first invalid field."""
        for field in ("feature_dim", "num_layers", "num_heads", "ffn_dim", "num_queries", "max_refs", "max_positions"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"PearlConfig.{field} must be a positive integer, got {value!r}")
        if not 0.0 <= self.lambda_img <= 1.0:
            raise ValueError(f"PearlConfig.lambda_img must be in [0, 1], got {self.lambda_img!r}")
        if not self.huber_delta > 0:
            raise ValueError(f"PearlConfig.huber_delta must be > 0, got {self.huber_delta!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"PearlConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if (2 * self.feature_dim) % self.num_heads:
            raise ValueError(f"2 * feature_dim ({2 * self.feature_dim}) must be divisible by num_heads")
        if not self.image_encoders:
            raise ValueError("PearlConfig.image_encoders must name at least one encoder (the Img-GEM is always used)")
        for group in ("image_encoders", "reference_encoders"):
            for encoder in getattr(self, group):
                if not {"name", "dim"} <= set(encoder) or int(encoder["dim"]) <= 0:
                    raise ValueError(f"PearlConfig.{group}: each entry needs a name and a positive dim, got {encoder}")
                if group == "image_encoders" and int(encoder.get("tokens", 1)) <= 0:
                    raise ValueError(f"PearlConfig.image_encoders: tokens must be positive, got {encoder}")

    @property
    def token_dim(self) -> int:
        """Size of one ARSM token `[o_diff; o_had]`: twice the feature size."""
        return 2 * self.feature_dim

    @property
    def image_sequence_length(self) -> int:
        return sum(int(encoder.get("tokens", 1)) for encoder in self.image_encoders)

    @property
    def reference_sequence_length(self) -> int:
        return len(self.reference_encoders)

    @property
    def encoder_names(self) -> list[str]:
        """Every encoder the model reads features from, in first-use order."""
        names = [encoder["name"] for encoder in self.image_encoders + self.reference_encoders]
        return list(dict.fromkeys(names))

    @property
    def score_names(self) -> tuple[str, str]:
        """Names of the reference-free and reference-based scores."""
        return ("Pearl-img", "Pearl")


__all__ = ["PearlConfig"]
