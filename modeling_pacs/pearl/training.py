"""Training Pearl on cached features (SPEC-pearl §5, A4, A11, A12, A16): a `Trainer` with Pearl's recipe.

Rows (from `pearl.data`) -> [`PearlDataCollator`] (features from the [`FeatureCache`], references capped at
`max_refs`, mixed reference-free / reference-based batches) -> `PearlModel` (summed Huber loss, the reference term
only for rows with references) -> [`PearlTrainer`] (Adam 1e-5, batch 16, 1000 warm-up steps then linear decay,
gradient clipping 1.0, early stopping on validation Kendall tau-c with patience 1, best checkpoint kept).
"""

import math

import numpy as np
import torch
from transformers import EarlyStoppingCallback, Trainer, TrainingArguments

from ..modeling_pearl import PearlModel
from .features import FeatureCache, assemble_batch

# SPEC-pearl §5 (App. C; configs/xlmr/base/da-estimator-base.yaml).
PEARL_RECIPE = {
    "learning_rate": 1e-5,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 16,
    "num_train_epochs": 5,
    "warmup_steps": 1000,
    "lr_scheduler_type": "linear",
    "max_grad_norm": 1.0,
    "weight_decay": 0.0,  # AdamW with no weight decay is Adam (Pearl: torch.optim.Adam, wd 0)
    "optim": "adamw_torch",
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "seed": 12,
    "eval_strategy": "epoch",
    "save_strategy": "epoch",
    "load_best_model_at_end": True,
    "metric_for_best_model": "kendall_c",
    "greater_is_better": True,
    "remove_unused_columns": False,
    "report_to": [],
}
EARLY_STOPPING_PATIENCE = 1


class PearlDataCollator:
    """Rows -> model inputs from cached features. Each row needs `image`, `candidate`, `references`, `score`."""

    def __init__(self, cache: FeatureCache, config):
        self.cache = cache
        self.config = config

    def __call__(self, rows: list[dict]) -> dict:
        images = [row["image"] for row in rows]
        candidates = [row["candidate"] for row in rows]
        references = [row["references"][: self.config.max_refs] for row in rows]
        flat = [reference for item in references for reference in item]
        names = self.config.encoder_names
        candidate_features = {name: self.cache.texts(name, candidates) for name in names}
        image_features = {
            encoder["name"]: self.cache.images(encoder["name"], images) for encoder in self.config.image_encoders
        }
        lists, position = [], 0
        for item in references:
            lists.append(list(range(position, position + len(item))))
            position += len(item)
        reference_features = {
            encoder["name"]: self.cache.texts(encoder["name"], flat) for encoder in self.config.reference_encoders
        }
        batch = assemble_batch(self.config, candidate_features, image_features, lists, reference_features)
        batch["labels"] = torch.tensor([row["score"] for row in rows], dtype=torch.float32)
        return batch


def kendall_tau(predictions: np.ndarray, human: np.ndarray, variant: str) -> float:
    """100 x scipy's Kendall tau (`variant` "b" or "c"), as Pearl's evaluation reports it; NaN-free (0 if undefined)."""
    from scipy.stats import kendalltau

    value = kendalltau(predictions, human, variant=variant).statistic
    return 0.0 if value is None or not math.isfinite(value) else 100.0 * float(value)


def compute_pearl_metrics(evaluation) -> dict:
    predictions = np.asarray(evaluation.predictions).reshape(-1)
    labels = np.asarray(evaluation.label_ids).reshape(-1)
    return {"kendall_c": kendall_tau(predictions, labels, "c"), "kendall_b": kendall_tau(predictions, labels, "b")}


class PearlTrainer(Trainer):
    """`Trainer` for Pearl: evaluation predicts the fused score (Eq. 3), the quantity early stopping monitors.

    Example:

    ```python
    >>> from modeling_pacs.pearl.training import PearlTrainer, pearl_training_arguments, PearlDataCollator
    >>> trainer = PearlTrainer(model=model, args=pearl_training_arguments("runs/pearl"), train_dataset=train_rows,
    ...                        eval_dataset=val_rows, data_collator=PearlDataCollator(cache, model.config))
    >>> trainer.train()
    ```
    """

    def __init__(self, *args, early_stopping: bool = True, **kwargs):
        kwargs.setdefault("compute_metrics", compute_pearl_metrics)
        super().__init__(*args, **kwargs)
        if early_stopping:
            self.add_callback(EarlyStoppingCallback(early_stopping_patience=EARLY_STOPPING_PATIENCE))

    def floating_point_ops(self, inputs: dict) -> int:
        # The inputs are dicts of feature tensors: count 6 x parameters per item, as Trainer does for token models.
        return 6 * len(inputs["labels"]) * self.model.num_parameters()

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            output = model(**inputs)
        loss = output.loss.detach() if output.loss is not None else None
        return loss, output.score.detach(), inputs.get("labels")


def pearl_training_arguments(output_dir: str, **overrides) -> TrainingArguments:
    """Pearl's recipe as `TrainingArguments`; `overrides` replace fields (e.g. `warmup_steps=2` for a smoke run)."""
    settings = {**PEARL_RECIPE, **overrides}
    for field in ("learning_rate", "per_device_train_batch_size", "num_train_epochs"):
        if not settings[field] > 0:
            raise ValueError(f"{field} must be > 0, got {settings[field]!r}")
    if settings["warmup_steps"] < 0 or not settings["max_grad_norm"] > 0:
        raise ValueError("warmup_steps must be >= 0 and max_grad_norm > 0")
    return TrainingArguments(output_dir=output_dir, **settings)


def new_pearl_model(config) -> PearlModel:
    """A fresh PearlModel; with the default HadamardNet shape its HadamardNets start from the shipped multiplication."""
    from .hadamard_init import DEFAULT_CHANNELS, initialise_hadamard_nets

    model = PearlModel(config)
    if list(config.hadamard_channels) == DEFAULT_CHANNELS:
        initialise_hadamard_nets(model)
    return model


__all__ = [
    "PEARL_RECIPE",
    "PearlDataCollator",
    "PearlTrainer",
    "compute_pearl_metrics",
    "kendall_tau",
    "new_pearl_model",
    "pearl_training_arguments",
]
