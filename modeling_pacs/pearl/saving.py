"""Saving Pearl directories that load anywhere (remote code, world-readable files)."""

from pathlib import Path

from ..modeling_pacs import make_world_readable
from ..modeling_pearl import PearlModel


def save_pearl(model: PearlModel, directory: str | Path) -> None:
    """Save config, weights and remote code (`AutoModel.from_pretrained(dir, trust_remote_code=True)`), mode 0644."""
    type(model.config).register_for_auto_class()
    type(model).register_for_auto_class("AutoModel")
    model.save_pretrained(directory)
    make_world_readable(Path(directory))


__all__ = ["save_pearl"]
