"""Stella text features (docs/spec/pearl.md#encoders): `NovaSearch/stella_en_400M_v5` (remote code), masked mean pooling
of the last hidden state, the `2_Dense_768` projection (1024 -> 768), L2 normalisation; max length 512, no prompt.

Stella runs on `Alibaba-NLP/new-impl`'s remote code (`NewConfig` / `NewModel`), written for transformers 4. Under
transformers 5 [`load_text_model`] makes it run as it did there: without xformers it takes the padded attention path
(Stella's card: `use_memory_efficient_attention=False, unpad_inputs=False`; the same features), it rebuilds the
non-persistent buffers (position ids, RoPE caches) that transformers 5's meta-device loading leaves uninitialised,
and it gives the model transformers 4's `get_extended_attention_mask`, which transformers 5 removed.
"""

import importlib.util
import json
import logging
import types
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer

from ..models.fast_clip import use_packed_linears
from ..models.inputs import ImageInput, check_positive_int
from .base import EMPTY_TEXT, batched_features, dropped_tokens, replace_empty, tokenize

logger = logging.getLogger(__name__)

STELLA_MAX_LENGTH = 512


def extended_attention_mask(self, attention_mask: torch.Tensor, input_shape=None) -> torch.Tensor:
    """transformers 4's `ModuleUtilsMixin.get_extended_attention_mask` for encoders: a `[B, T]` (or `[B, T, T]`) mask
    of 1s and 0s -> an additive bias, 0 where attended and the dtype's minimum where masked."""
    extended = attention_mask[:, None, None, :] if attention_mask.dim() == 2 else attention_mask[:, None, :, :]
    extended = extended.to(dtype=self.dtype)
    return (1.0 - extended) * torch.finfo(self.dtype).min


def load_text_model(path: str, device: str | None = None) -> nn.Module:
    """`AutoModel.from_pretrained(path, trust_remote_code=True)` in fp32, with the transformers-5 fixes for remote
    code written for transformers 4 (see the module docstring); native transformers models load unchanged."""
    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    if getattr(config, "use_memory_efficient_attention", False) and importlib.util.find_spec("xformers") is None:
        logger.info("%s: xformers is not installed: running the padded attention (the same features)", path)
        config.use_memory_efficient_attention = False
        config.unpad_inputs = False
    model = AutoModel.from_pretrained(path, config=config, trust_remote_code=True, dtype=torch.float32)
    if type(model).__module__.startswith("transformers_modules"):
        # Built by its own __init__, the model computes its non-persistent buffers; the weights are the loaded ones.
        rebuilt = type(model)(model.config)
        rebuilt.load_state_dict(model.state_dict(), strict=True)
        model = rebuilt
        if not hasattr(model, "get_extended_attention_mask"):
            model.get_extended_attention_mask = types.MethodType(extended_attention_mask, model)
    return model.to(device or "cpu")


def load_dense_projection(path: str, subfolder: str) -> nn.Linear:
    """The sentence-transformers `Dense` layer of `path/subfolder` (config.json + linear weights), loaded safely."""
    local = Path(path) / subfolder
    if not local.is_dir():
        from huggingface_hub import snapshot_download

        local = Path(snapshot_download(path, allow_patterns=[f"{subfolder}/*"])) / subfolder
    settings = json.loads((local / "config.json").read_text())
    if settings.get("activation_function", "torch.nn.modules.linear.Identity") != "torch.nn.modules.linear.Identity":
        raise ValueError(f"{local}: only an Identity activation is supported, got {settings['activation_function']}")
    if (local / "model.safetensors").is_file():
        from safetensors.torch import load_file

        state_dict = load_file(local / "model.safetensors")
    else:
        state_dict = torch.load(local / "pytorch_model.bin", map_location="cpu", weights_only=True)
    layer = nn.Linear(settings["in_features"], settings["out_features"], bias=settings.get("bias", True))
    layer.load_state_dict({key.removeprefix("linear."): value for key, value in state_dict.items()})
    return layer


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden states over the real (mask 1) tokens."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class StellaEncoder:
    """Stella (text only): a transformers `AutoModel` (remote code for the real checkpoint) + mean pool + Dense.

    Example:

    ```python
    >>> from modeling_pacs.encoders import StellaEncoder
    >>> encoder = StellaEncoder.from_pretrained("NovaSearch/stella_en_400M_v5")  # needs the Hub or a local copy
    >>> encoder.encode_text(["a dog"]).shape
    torch.Size([1, 768])
    ```
    """

    tokens = 0
    max_text_length = STELLA_MAX_LENGTH

    def __init__(
        self,
        model,
        tokenizer,
        projection: nn.Linear,
        name: str = "stella",
        empty_text: str | None = EMPTY_TEXT,
        batch_size: int = 64,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.projection = projection.eval()
        use_packed_linears(self.model)  # oneDNN's packed kernels in inference on CPU (fast_clip)
        use_packed_linears(self.projection)
        self.name = name
        self.dim = projection.out_features
        self.empty_text = empty_text
        self.batch_size = check_positive_int(batch_size, "batch_size")

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        name: str = "stella",
        device: str | None = None,
        projection_subfolder: str = "2_Dense_768",
        empty_text: str | None = EMPTY_TEXT,
    ) -> "StellaEncoder":
        model = load_text_model(path, device)
        projection = load_dense_projection(path, projection_subfolder).to(device or "cpu")
        return cls(model, AutoTokenizer.from_pretrained(path), projection, name, empty_text)

    def encode_image(self, images: list[ImageInput], item_indices: list[int] | None = None) -> torch.Tensor:
        raise TypeError(f"encoder '{self.name}' (Stella) encodes text only: it cannot be an image encoder of Pearl")

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        texts = replace_empty(texts, self.empty_text)

        def encode(rows: slice) -> torch.Tensor:
            tokens = tokenize(self.tokenizer, texts[rows], STELLA_MAX_LENGTH, self.model.device)
            pooled = self.projection(mean_pool(self.model(**tokens).last_hidden_state, tokens["attention_mask"]))
            return nn.functional.normalize(pooled, dim=-1)

        return batched_features(len(texts), self.batch_size, encode, (self.dim,))

    def truncated_tokens(self, texts: list[str]) -> torch.LongTensor:
        """Tokens of each text past the 512-token context (empty texts counted as the placeholder they become)."""
        return dropped_tokens(self.tokenizer, replace_empty(texts, self.empty_text), STELLA_MAX_LENGTH)
