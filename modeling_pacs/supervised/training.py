"""Training a supervised caption metric with a `Trainer`: early stopping on a validation correlation, checked
training arguments, and a `Trainer` base whose evaluation returns predictions and targets (every supervised
metric's recipe comes in as arguments)."""

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import EarlyStoppingCallback, Trainer, TrainingArguments
from transformers.utils import logging

logger = logging.get_logger(__name__)


def early_stopping_callback(policy: tuple[str, int]) -> tuple[EarlyStoppingCallback, str]:
    """The callback and the metric to select on for an early-stopping `policy`, a `(metric, patience)` pair (e.g.
    `("kendall_c", 1)`: validation Kendall tau-c, patience 1); each metric keeps its own policies in its training
    module.

    The `TrainingArguments` must evaluate and save at the same cadence, with `load_best_model_at_end=True`,
    `metric_for_best_model` set to the returned metric and `greater_is_better=True`: [`supervised_training_arguments`]
    sets them.
    """
    metric, patience = policy
    if not isinstance(patience, int) or patience < 1:
        raise ValueError(f"early stopping patience must be an integer >= 1, got {patience!r}")
    return EarlyStoppingCallback(early_stopping_patience=patience), metric


def check_training_settings(settings: Mapping[str, Any], zero_learning_rate: bool = False) -> None:
    """Reject settings that would diverge or train on nothing, naming the field. `zero_learning_rate` accepts a
    learning rate of 0 (for a recipe that allows it: a run that only evaluates)."""
    for field in ("learning_rate", "per_device_train_batch_size", "num_train_epochs", "max_grad_norm"):
        value = settings.get(field)
        if field == "learning_rate" and zero_learning_rate and value == 0:
            continue
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{field} must be > 0, got {value!r}")
    for field in ("per_device_eval_batch_size", "gradient_accumulation_steps"):
        value = settings.get(field)
        if value is not None and not (isinstance(value, int) and value > 0):
            raise ValueError(f"{field} must be a positive integer, got {value!r}")
    warmup = settings.get("warmup_steps", 0)
    if not (isinstance(warmup, (int, float)) and warmup >= 0):
        raise ValueError(f"warmup_steps must be >= 0, got {warmup!r}")


def supervised_training_arguments(
    output_dir: str | Path, recipe: Mapping[str, Any], metric: str, zero_learning_rate: bool = False, **overrides
) -> TrainingArguments:
    """A metric's `recipe` (with `overrides`) as `TrainingArguments`, checked by [`check_training_settings`], that
    evaluate and save every epoch and keep the best checkpoint by the validation `metric` (the one
    [`early_stopping_callback`] monitors)."""
    settings = {
        "eval_strategy": "epoch",
        "save_strategy": "epoch",
        "load_best_model_at_end": True,
        "metric_for_best_model": metric,
        "greater_is_better": True,
        "remove_unused_columns": False,
        **recipe,
        **overrides,
    }
    check_training_settings(settings, zero_learning_rate)
    return TrainingArguments(output_dir=str(output_dir), **settings)


class SupervisedMetricTrainer(Trainer):
    """A `Trainer` for metrics regressed on human scores. Subclasses either implement `predict_batch(model, inputs)`
    (then the loss is the summed MSE to `inputs["targets"]`) or override `compute_loss` to return the model's own
    loss and predictions (e.g. a summed Huber loss). Evaluation collects predictions and the targets
    (`inputs[target_key]`) for `compute_metrics`.

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
    target_key = "targets"

    def predict_batch(self, model, inputs: dict) -> torch.Tensor:
        raise NotImplementedError

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        predictions = self.predict_batch(model, inputs)
        targets = inputs[self.target_key].to(predictions.device, predictions.dtype)
        loss = torch.nn.functional.mse_loss(predictions, targets, reduction=self.loss_reduction)
        return (loss, predictions) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss, predictions = self.compute_loss(model, inputs, return_outputs=True)
        if prediction_loss_only:
            return loss.detach(), None, None
        return loss.detach(), predictions.detach(), inputs[self.target_key].detach()

    def _remove_unused_columns(self, dataset, description=None):
        # Collators read columns that no forward signature names.
        return dataset


def train_and_save(trainer: Trainer, resume_from_checkpoint: str | Path | None, output_dir: Path) -> int:
    """A training command's last steps (`train_polos.py`, `train_deneb.py`): train (resuming from the checkpoint
    when given), evaluate, save the model as a Hub-ready directory `output_dir/final` and print the validation
    metrics and where it went. Returns the command's exit status (0)."""
    from ..hub import save_remote_code_model

    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    metrics = trainer.evaluate()
    save_remote_code_model(trainer.model.eval(), output_dir / "final")
    print(f"validation: {', '.join(f'{k} {v:.4f}' for k, v in metrics.items() if isinstance(v, float))}")
    print(f"wrote {output_dir / 'final'}")
    return 0


__all__ = [
    "train_and_save",
    "SupervisedMetricTrainer",
    "check_training_settings",
    "early_stopping_callback",
    "supervised_training_arguments",
]
