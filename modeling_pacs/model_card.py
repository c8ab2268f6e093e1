"""Forwarding module: `evaluate` modules registered with `pacs-pp register-metric` before the package layout changed
import this path. New code imports `modeling_pacs.pacs.model_card`."""

from .pacs.model_card import CITATION

__all__ = ["CITATION"]
