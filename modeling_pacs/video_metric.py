"""Forwarding module: `evaluate` modules registered with `pacs-pp register-metric` before the package layout changed
import this path. New code imports `modeling_pacs.metric_module.video`."""

from .metric_module.video import check_video_batch, compute_video_results

__all__ = ["check_video_batch", "compute_video_results"]
