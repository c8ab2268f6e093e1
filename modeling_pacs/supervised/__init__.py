"""Generic pieces for training supervised caption metrics on human judgements (Polos, Pearl): correlation metrics,
early stopping on a validation correlation, row validation that names the row and column, and a `Trainer` base
whose evaluation returns predictions and targets.

Not remote code: it may import scipy and datasets. Polos uses it in `modeling_pacs/polos/training.py`.

Example:

```python
>>> from modeling_pacs.supervised import regression_metrics
>>> regression_metrics([0.1, 0.4, 0.3], [0.0, 0.5, 0.2])["kendall"]
1.0
```
"""

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import EarlyStoppingCallback, EvalPrediction, Trainer
from transformers.utils import logging

logger = logging.get_logger(__name__)

# Early-stopping settings: the paper's (validation Kendall tau-c, patience 5) and the released code's (Pearson, 1).
EARLY_STOPPING = {"paper": ("kendall", 5), "code": ("pearson", 1)}


class RowError(ValueError):
    """A training or validation row is malformed; the message names the file, the row and the column."""


def row_error(source: str, row: int, column: str, problem: str) -> RowError:
    return RowError(f"{source}: row {row}, column '{column}': {problem}")


def check_target(value: Any, source: str, row: int, column: str, low: float = 0.0, high: float = 1.0) -> float:
    """A finite float within [low, high], or a `RowError` naming the row and column."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise row_error(source, row, column, f"{value!r} is not a number") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise row_error(source, row, column, f"{value!r} is not a finite number in [{low}, {high}]")
    return number


def regression_metrics(predictions: Sequence[float], targets: Sequence[float]) -> dict[str, float]:
    """Pearson, Kendall tau-c and Spearman correlations (the metrics of Polos's `regression_metrics.py`)."""
    from scipy import stats

    predictions = np.asarray(predictions, dtype=np.float64).ravel()
    targets = np.asarray(targets, dtype=np.float64).ravel()
    if len(predictions) < 2 or np.ptp(predictions) == 0 or np.ptp(targets) == 0:
        # Correlations are undefined on constant inputs: report 0 rather than NaN (never written to JSON as NaN).
        return {"pearson": 0.0, "kendall": 0.0, "spearman": 0.0}
    return {
        "pearson": float(stats.pearsonr(predictions, targets)[0]),
        "kendall": float(stats.kendalltau(predictions, targets, variant="c")[0]),
        "spearman": float(stats.spearmanr(predictions, targets)[0]),
    }


def compute_regression_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """`Trainer(compute_metrics=...)` form of [`regression_metrics`]."""
    return regression_metrics(prediction.predictions, prediction.label_ids)


def early_stopping_callback(policy: str = "paper") -> tuple[EarlyStoppingCallback, str]:
    """The callback and the metric to select on: `"paper"` (Kendall tau-c, patience 5) or `"code"` (Pearson, 1).

    The `TrainingArguments` must evaluate and save at the same cadence, with `load_best_model_at_end=True`,
    `metric_for_best_model` set to the returned metric and `greater_is_better=True`.
    """
    if policy not in EARLY_STOPPING:
        raise ValueError(f"early stopping policy must be one of {sorted(EARLY_STOPPING)}, got {policy!r}")
    metric, patience = EARLY_STOPPING[policy]
    return EarlyStoppingCallback(early_stopping_patience=patience), metric


class SupervisedMetricTrainer(Trainer):
    """A `Trainer` for metrics regressed on human scores: subclasses implement `predict_batch(model, inputs)` and
    `compute_loss` uses it; evaluation collects predictions and targets (`inputs["targets"]`) for
    [`compute_regression_metrics`].

    Example:

    ```python
    >>> class MyTrainer(SupervisedMetricTrainer):
    ...     def predict_batch(self, model, inputs):
    ...         return model.score_batch(inputs)
    ```
    """

    loss_reduction = "sum"
    # The summed batch loss is not scaled here: Trainer divides it by the accumulation steps (as Lightning does).
    loss_is_scaled_for_ga = False

    def predict_batch(self, model, inputs: dict) -> torch.Tensor:
        raise NotImplementedError

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        predictions = self.predict_batch(model, inputs)
        targets = inputs["targets"].to(predictions.device, predictions.dtype)
        loss = torch.nn.functional.mse_loss(predictions, targets, reduction=self.loss_reduction)
        return (loss, predictions) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss, predictions = self.compute_loss(model, inputs, return_outputs=True)
        if prediction_loss_only:
            return loss.detach(), None, None
        return loss.detach(), predictions.detach(), inputs["targets"].detach()

    def _remove_unused_columns(self, dataset, description=None):
        # Collators read columns that no forward signature names.
        return dataset


__all__ = [
    "EARLY_STOPPING",
    "RowError",
    "SupervisedMetricTrainer",
    "check_target",
    "compute_regression_metrics",
    "early_stopping_callback",
    "regression_metrics",
    "row_error",
]
