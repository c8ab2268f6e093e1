"""CLIP / PAC-S++ features from this engine's `PACSModel` (docs/spec/pearl.md#encoders, docs/spec/pearl.md#a1): raw
(unnormalised) projections."""

import torch

from ..models.inputs import ImageInput
from ..models.modeling_pacs import PACSModel
from ..pacs.loading import load_pacs_model


class PACSEncoder:
    """Pearl's CLIP encoder: PAC-S++ ViT-B/32 with the prompt "A photo depicts " (from the PACS config) by default.

    Example:

    ```python
    >>> from modeling_pacs.encoders import PACSEncoder
    >>> encoder = PACSEncoder.from_pretrained("pacs-pp/pac-s-pp-clip-vit-b32")  # or a PAC-S++ directory
    >>> encoder.encode_text(["a dog"]).shape == (1, encoder.dim)
    True
    ```
    """

    tokens = 1

    def __init__(self, model: PACSModel, name: str = "clip", batch_size: int = 64):
        self.model = model.eval()
        self.name = name
        self.dim = model.config.backbone_config.projection_dim
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(cls, name_or_path: str, name: str = "clip", device: str | None = None) -> "PACSEncoder":
        return cls(load_pacs_model(name_or_path, device=device or "cpu"), name=name)

    def encode_image(self, images: list[ImageInput], item_indices: list[int] | None = None) -> torch.Tensor:
        embeds = self.model.encode_images(images, self.batch_size, progress=False, item_indices=item_indices)
        return embeds.unsqueeze(1)

    @property
    def max_text_length(self) -> int:
        return self.model.config.max_text_length

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        return self.model.encode_texts(texts, 4 * self.batch_size, progress=False)

    def truncated_tokens(self, texts: list[str]) -> torch.LongTensor:
        """Tokens of each text (prompt prefix and special tokens included) past the context (`PACSModel`'s count)."""
        return self.model.truncated_tokens(list(texts))
