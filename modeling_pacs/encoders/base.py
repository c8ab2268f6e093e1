"""The encoder protocol and what the encoders share: image pipelines, empty-text placeholders, batching."""

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import PIL.Image
import torch

from ..models.inputs import ImageInput, load_image, untruncated_token_ids

# Pearl's extractors replace empty captions with this for BLIP-2, BEiT-3 and Stella (docs/spec/pearl.md#encoders).
EMPTY_TEXT = "[EMPTY]"


@runtime_checkable
class PearlEncoder(Protocol):
    """A frozen feature extractor.

    Attributes: `name` (key in Pearl's config), `dim` (feature size), `tokens` (image tokens; 0 for text-only encoders).
    `encode_image(images)` returns `[B, tokens, dim]` fp32 on CPU; `encode_text(texts)` returns `[B, dim]`.
    Optional (every encoder of this package has them): `max_text_length` (the text context in tokens) and
    `truncated_tokens(texts)`, the `[B]` count of tokens of each text that `encode_text` does not read; an encoder
    without them counts as cutting nothing in `PearlScorer`'s `truncated_tokens`.
    """

    name: str
    dim: int
    tokens: int

    def encode_image(self, images: list[ImageInput], item_indices: list[int] | None = None) -> torch.Tensor: ...

    def encode_text(self, texts: list[str]) -> torch.Tensor: ...


def replace_empty(texts: list[str], placeholder: str | None) -> list[str]:
    """Empty or blank texts become `placeholder` (as Pearl's extractors do); `None` keeps them."""
    if placeholder is None:
        return list(texts)
    return [text if text.strip() else placeholder for text in texts]


def square_pixels(image: PIL.Image.Image, size: int, mean, std, bicubic: bool = True) -> torch.Tensor:
    """torchvision `Resize((size, size))` (bicubic: BLIP-2; bilinear: BEiT-3) + `ToTensor` + `Normalize`."""
    if image.size != (size, size):
        image = image.resize((size, size), PIL.Image.BICUBIC if bicubic else PIL.Image.BILINEAR)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255)
    return (pixels - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


def load_square_batch(
    images: list[ImageInput], indices: list[int], size: int, mean, std, bicubic: bool = True
) -> torch.Tensor:
    return torch.stack(
        [square_pixels(load_image(image, index), size, mean, std, bicubic) for image, index in zip(images, indices)]
    )


def batched_features(
    count: int, batch_size: int, encode: Callable[[slice], torch.Tensor], empty_shape: tuple[int, ...]
) -> torch.Tensor:
    """`encode(rows)` over consecutive slices of at most `batch_size` of `count` items, under inference mode,
    concatenated as fp32 on the CPU; a `[0, *empty_shape]` tensor for no item."""
    with torch.inference_mode():
        outputs = [encode(slice(start, start + batch_size)).float().cpu() for start in range(0, count, batch_size)]
    return torch.cat(outputs) if outputs else torch.zeros(0, *empty_shape)


def tokenize(tokenizer, texts: list[str], max_length: int, device: torch.device):
    """A padded (to the longest), truncated batch of token ids on `device`."""
    return tokenizer(texts, padding="longest", truncation=True, max_length=max_length, return_tensors="pt").to(device)


def token_counts(tokenizer, texts: list[str]) -> torch.LongTensor:
    """The untruncated number of tokens of each text, special tokens included."""
    if not texts:
        return torch.zeros(0, dtype=torch.long)
    ids = untruncated_token_ids(tokenizer, texts)
    return torch.tensor([len(row) for row in ids], dtype=torch.long)


def dropped_tokens(tokenizer, texts: list[str], max_length: int) -> torch.LongTensor:
    """How many tokens of each text `tokenize(tokenizer, texts, max_length, ...)` cuts: its untruncated length
    minus `max_length`, 0 when it fits."""
    return (token_counts(tokenizer, texts) - max_length).clamp(min=0)
