"""Load a Polos model directory or Hub id (the registry's loader for model_type `polos`)."""

import torch

from ..models.modeling_polos import PolosModel
from ..pacs.loading import place


def load_polos_model(name_or_path: str, device: str | None = None, dtype: str | None = None) -> PolosModel:
    """A `PolosModel` in eval mode on `device`, in fp32 or the opt-in `dtype`."""
    return place(PolosModel.from_pretrained(name_or_path, dtype=torch.float32), device, dtype)


__all__ = ["load_polos_model"]
