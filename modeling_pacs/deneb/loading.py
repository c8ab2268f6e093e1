"""Load a DENEB model directory or Hub id (the registry's loader for model_type `deneb`)."""

import torch

from ..models.modeling_deneb import DenebModel
from ..pacs.loading import place


def load_deneb_model(name_or_path: str, device: str | None = None, dtype: str | None = None) -> DenebModel:
    """A `DenebModel` in eval mode on `device`, in fp32 (DENEB declares fp32 only)."""
    return place(DenebModel.from_pretrained(name_or_path, dtype=torch.float32), device, dtype)


__all__ = ["load_deneb_model"]
