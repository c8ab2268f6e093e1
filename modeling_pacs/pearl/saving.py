"""Saving Pearl directories that load anywhere (remote code, world-readable files)."""

from pathlib import Path

from ..hub import save_remote_code_model
from ..models.modeling_pearl import PearlModel


def save_pearl(model: PearlModel, directory: str | Path) -> None:
    """Save config, weights and remote code (`AutoModel.from_pretrained(dir, trust_remote_code=True)`), mode 0644."""
    save_remote_code_model(model, directory)


__all__ = ["save_pearl"]
