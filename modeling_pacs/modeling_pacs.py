"""Forwarding module: `evaluate` modules registered with `pacs-pp register-metric` before the package layout changed
import this path. New code imports `modeling_pacs.PACSModel` (or `modeling_pacs.models.modeling_pacs`)."""

from .models.modeling_pacs import PACSModel

__all__ = ["PACSModel"]
