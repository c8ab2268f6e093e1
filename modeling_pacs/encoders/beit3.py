"""BEiT-3 base retrieval (unilm `BEiT3ForRetrieval` on torchscale), ported as a transformers model, and its converter.

Architecture (torchscale `EncoderConfig` as Pearl builds it, docs/spec/pearl.md#encoders): a Multiway transformer (`A` =
vision, `B` = language copies of every projection, LayerNorm and FFN; shared nothing else), pre-LN with sub-LN
(`inner_attn_ln` before the attention output projection, `ffn_layernorm` inside the FFN), exact GELU, LayerNorm eps
1e-5, learned positions starting at index 2 (fairseq), unscaled embeddings, a final Multiway LayerNorm; `vision_head` /
`language_head` (no bias) on the first token, L2-normalised. Module names equal the official checkpoint's keys, so the
converter is a checked identity: every key used, every shape equal.

Deviation (docs/spec/pearl.md#a9): Pearl feeds texts without a padding mask, so its text features depend on the batch;
we pass the tokenizer's mask (features independent of the batch). Images: `Resize((224, 224))` (bilinear) + ImageNet
mean/std.
"""

import torch
from torch import nn
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel

from ..models.fast_clip import use_packed_linears
from ..models.inputs import ImageInput, check_positive_int
from .base import EMPTY_TEXT, batched_features, dropped_tokens, load_square_batch, replace_empty, tokenize

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BEIT3_MAX_TEXT_LENGTH = 77


class BEiT3Config(PreTrainedConfig):
    r"""
    Configuration of [`BEiT3ForRetrieval`]. Defaults: the base model of `beit3_base_itc_patch16_224.pth`.

    Example:

    ```python
    >>> from modeling_pacs.encoders.beit3 import BEiT3Config
    >>> BEiT3Config().num_image_positions
    199
    ```
    """

    model_type = "beit3_retrieval"

    hidden_size: int = 768
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    vocab_size: int = 64010
    image_size: int = 224
    patch_size: int = 16
    max_text_positions: int = 1024
    layer_norm_eps: float = 1e-5

    @property
    def num_image_positions(self) -> int:
        """Patches + CLS + the 2 fairseq offset rows."""
        return (self.image_size // self.patch_size) ** 2 + 1 + 2


class Multiway(nn.Module):
    """Two copies of a module: `A` for image tokens, `B` for text tokens (torchscale `MultiwayNetwork`)."""

    def __init__(self, make):
        super().__init__()
        self.A = make()
        self.B = make()

    def forward(self, x: torch.Tensor, text: bool) -> torch.Tensor:
        return self.B(x) if text else self.A(x)


class BEiT3FeedForward(nn.Module):
    def __init__(self, config: BEiT3Config):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_layernorm = nn.LayerNorm(config.intermediate_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.ffn_layernorm(nn.functional.gelu(self.fc1(x))))


class BEiT3Attention(nn.Module):
    def __init__(self, config: BEiT3Config):
        super().__init__()
        size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.scaling = (size // self.num_heads) ** -0.5
        for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
            setattr(self, name, Multiway(lambda: nn.Linear(size, size)))
        self.inner_attn_ln = Multiway(lambda: nn.LayerNorm(size, eps=config.layer_norm_eps))

    def forward(self, x: torch.Tensor, text: bool, padding_mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, size = x.shape

        def heads(tensor):
            return tensor.view(batch, length, self.num_heads, -1).transpose(1, 2)

        query = heads(self.q_proj(x, text)) * self.scaling
        key, value = heads(self.k_proj(x, text)), heads(self.v_proj(x, text))
        weights = query @ key.transpose(-1, -2)
        if padding_mask is not None:
            weights = weights.masked_fill(padding_mask[:, None, None, :], float("-inf"))
        attended = torch.softmax(weights.float(), dim=-1).type_as(weights) @ value
        attended = attended.transpose(1, 2).reshape(batch, length, size)
        return self.out_proj(self.inner_attn_ln(attended, text), text)


class BEiT3Layer(nn.Module):
    def __init__(self, config: BEiT3Config):
        super().__init__()
        self.self_attn = BEiT3Attention(config)
        self.self_attn_layer_norm = Multiway(lambda: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))
        self.ffn = Multiway(lambda: BEiT3FeedForward(config))
        self.final_layer_norm = Multiway(lambda: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))

    def forward(self, x: torch.Tensor, text: bool, padding_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x, text), text, padding_mask)
        return x + self.ffn(self.final_layer_norm(x, text), text)


class BEiT3VisionEmbedding(nn.Module):
    def __init__(self, config: BEiT3Config):
        super().__init__()
        self.proj = nn.Conv2d(3, config.hidden_size, kernel_size=config.patch_size, stride=config.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))  # masked-image pretraining only

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        patches = self.proj(pixel_values).flatten(2).transpose(1, 2)
        return torch.cat([self.cls_token.expand(patches.shape[0], -1, -1), patches], dim=1)


class BEiT3Encoder(nn.Module):
    def __init__(self, config: BEiT3Config):
        super().__init__()
        self.embed_positions = nn.Module()
        self.embed_positions.A = nn.Embedding(config.num_image_positions, config.hidden_size)
        self.embed_positions.B = nn.Embedding(config.max_text_positions, config.hidden_size)
        self.layers = nn.ModuleList(BEiT3Layer(config) for _ in range(config.num_hidden_layers))
        self.layer_norm = Multiway(lambda: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))

    def forward(self, x: torch.Tensor, text: bool, padding_mask: torch.Tensor | None) -> torch.Tensor:
        positions = torch.arange(2, x.shape[1] + 2, device=x.device)  # fairseq: positions start at 2
        table = self.embed_positions.B if text else self.embed_positions.A
        x = x + table(positions)[None]
        if padding_mask is not None:
            x = x * (1 - padding_mask.unsqueeze(-1).to(x.dtype))
        for layer in self.layers:
            x = layer(x, text, padding_mask)
        return self.layer_norm(x, text)


class BEiT3Backbone(nn.Module):
    def __init__(self, config: BEiT3Config):
        super().__init__()
        self.text_embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.vision_embed = BEiT3VisionEmbedding(config)
        self.encoder = BEiT3Encoder(config)


class BEiT3ForRetrieval(PreTrainedModel):
    r"""
    BEiT-3 base retrieval: `get_image_features` / `get_text_features` give the L2-normalised ITC embeddings.

    Example:

    ```python
    >>> import torch
    >>> from modeling_pacs.encoders.beit3 import BEiT3Config, BEiT3ForRetrieval
    >>> model = BEiT3ForRetrieval(BEiT3Config(hidden_size=32, num_attention_heads=2, intermediate_size=64,
    ...     num_hidden_layers=1, vocab_size=50, image_size=32, patch_size=16)).eval()
    >>> model.get_text_features(torch.tensor([[0, 5, 2]])).shape
    torch.Size([1, 32])
    ```
    """

    config_class = BEiT3Config
    base_model_prefix = "beit3"
    main_input_name = "pixel_values"

    def __init__(self, config: BEiT3Config):
        super().__init__(config)
        self.beit3 = BEiT3Backbone(config)
        self.vision_head = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.language_head = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(1 / 0.07).log())
        self.post_init()

    def _init_weights(self, module):
        # Weights come from the converted checkpoint; fresh (tiny) models keep PyTorch's initialisation.
        pass

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.beit3.encoder(self.beit3.vision_embed(pixel_values), text=False, padding_mask=None)
        return nn.functional.normalize(self.vision_head(hidden[:, 0]), dim=-1)

    def get_text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        padding_mask = None if attention_mask is None else attention_mask == 0
        hidden = self.beit3.encoder(self.beit3.text_embed(input_ids), text=True, padding_mask=padding_mask)
        return nn.functional.normalize(self.language_head(hidden[:, 0]), dim=-1)


# The tokenizer and Auto classes read config.json: let them know this model type.
AutoConfig.register(BEiT3Config.model_type, BEiT3Config, exist_ok=True)


# ------------------------------------------------------------------------------------------------ encoder
class BEiT3RetrievalEncoder:
    """Pearl's BEiT-3 encoder: image `[B, 1, 768]` and text `[B, 768]` ITC features, L2-normalised.

    Example:

    ```python
    >>> from modeling_pacs.encoders.beit3 import BEiT3RetrievalEncoder
    >>> encoder = BEiT3RetrievalEncoder.from_pretrained("converted-beit3-dir")  # from convert_beit3_checkpoint
    >>> encoder.encode_text(["a dog"]).shape
    torch.Size([1, 768])
    ```
    """

    tokens = 1
    max_text_length = BEIT3_MAX_TEXT_LENGTH

    def __init__(
        self,
        model: BEiT3ForRetrieval,
        tokenizer,
        name: str = "beit3",
        empty_text: str | None = EMPTY_TEXT,
        batch_size: int = 32,
    ):
        self.model = model.eval()
        use_packed_linears(self.model)  # oneDNN's packed kernels in inference on CPU (fast_clip)
        self.tokenizer = tokenizer
        self.name = name
        self.dim = model.config.hidden_size
        self.empty_text = empty_text
        self.batch_size = check_positive_int(batch_size, "batch_size")

    @classmethod
    def from_pretrained(
        cls, path: str, name: str = "beit3", device: str | None = None, empty_text: str | None = EMPTY_TEXT
    ) -> "BEiT3RetrievalEncoder":
        from transformers import AutoTokenizer

        model = BEiT3ForRetrieval.from_pretrained(path, dtype=torch.float32).to(device or "cpu")
        return cls(model, AutoTokenizer.from_pretrained(path), name, empty_text)

    def encode_image(self, images: list[ImageInput], item_indices: list[int] | None = None) -> torch.Tensor:
        item_indices = item_indices or list(range(len(images)))
        size = self.model.config.image_size

        def encode(rows: slice) -> torch.Tensor:
            pixels = load_square_batch(images[rows], item_indices[rows], size, IMAGENET_MEAN, IMAGENET_STD, False)
            return self.model.get_image_features(pixels.to(self.model.device))

        return batched_features(len(images), self.batch_size, encode, (self.dim,)).unsqueeze(1)

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        texts = replace_empty(texts, self.empty_text)

        def encode(rows: slice) -> torch.Tensor:
            tokens = tokenize(self.tokenizer, texts[rows], BEIT3_MAX_TEXT_LENGTH, self.model.device)
            return self.model.get_text_features(tokens["input_ids"], tokens["attention_mask"])

        return batched_features(len(texts), 4 * self.batch_size, encode, (self.dim,))

    def truncated_tokens(self, texts: list[str]) -> torch.LongTensor:
        """Tokens of each text past the 77-token context (empty texts counted as the placeholder they become)."""
        return dropped_tokens(self.tokenizer, replace_empty(texts, self.empty_text), BEIT3_MAX_TEXT_LENGTH)
