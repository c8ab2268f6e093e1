"""Correlation metrics of a supervised caption metric against human judgements (its validation metrics)."""

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..extras import require

CORRELATIONS = ("pearson", "spearman", "kendall_b", "kendall_c")


def correlation(predictions: np.ndarray, targets: np.ndarray, kind: str) -> float:
    """One of [`CORRELATIONS`] from scipy; 0.0 where it is undefined (never NaN, which JSON cannot hold)."""
    require("scipy", "train", "Validation correlations")
    from scipy import stats

    if kind == "pearson":
        value = stats.pearsonr(predictions, targets)[0]
    elif kind == "spearman":
        value = stats.spearmanr(predictions, targets)[0]
    elif kind in ("kendall_b", "kendall_c"):
        value = stats.kendalltau(predictions, targets, variant=kind[-1])[0]
    else:
        raise ValueError(f"correlation must be one of {list(CORRELATIONS)}, got {kind!r}")
    return float(value) if value is not None and math.isfinite(value) else 0.0


def correlation_metrics(
    predictions: Sequence[float], targets: Sequence[float], names: Mapping[str, str], scale: float = 1.0
) -> dict[str, float]:
    """`{name: scale x correlation}` for `names` (`{reported name: one of CORRELATIONS}`): each metric passes the
    names it reports and its scale (e.g. Kendall tau-b and tau-c x100)."""
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    predictions = np.asarray(predictions, dtype=np.float64).ravel()
    targets = np.asarray(targets, dtype=np.float64).ravel()
    if len(predictions) != len(targets):
        raise ValueError(f"got {len(predictions)} predictions for {len(targets)} targets")
    if len(predictions) < 2 or np.ptp(predictions) == 0 or np.ptp(targets) == 0:
        # Correlations are undefined on constant inputs: report 0 rather than NaN (never written to JSON as NaN).
        return {name: 0.0 for name in names}
    return {name: scale * correlation(predictions, targets, kind) for name, kind in names.items()}


__all__ = [
    "CORRELATIONS",
    "correlation",
    "correlation_metrics",
]
