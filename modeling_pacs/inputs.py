"""Forwarding module: `evaluate` modules registered with `pacs-pp register-metric` before the package layout changed
import this path. New code imports `modeling_pacs.models.inputs`."""

from .models.inputs import check_captions, check_references, describe_image

__all__ = ["check_captions", "check_references", "describe_image"]
