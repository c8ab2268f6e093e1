"""Training Pearl on cached features (docs/spec/pearl.md#training, choices A4, A11, A12, A16): a `Trainer` with Pearl's
recipe.

Rows (from `supervised.data`) -> `PearlDataCollator` (features from the `FeatureCache`, references capped at
`max_refs`, mixed reference-free / reference-based batches) -> `PearlModel` (summed Huber loss, the reference term
only for rows with references) -> [`PearlTrainer`][modeling_pacs.pearl.training.PearlTrainer] (Adam 1e-5, batch 16,
1000 warm-up steps then linear decay,
gradient clipping 1.0, early stopping on validation Kendall tau-c with patience 1, best checkpoint kept).
"""

import torch
from transformers import TrainingArguments

from ..data.validation import data_error
from ..models.modeling_pearl import PearlModel
from ..supervised import (
    SupervisedMetricTrainer,
    correlation_metrics,
    early_stopping_callback,
    supervised_training_arguments,
)
from ..supervised.data import LAYOUTS
from .features import FeatureCache, assemble_batch

# docs/spec/pearl.md#training (App. C; configs/xlmr/base/da-estimator-base.yaml).
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
    "report_to": [],
}
# Validation metrics as Pearl's evaluation reports them: 100 x Kendall tau-c and tau-b (docs/spec/pearl.md#evaluation).
PEARL_METRICS = {"kendall_c": "kendall_c", "kendall_b": "kendall_b"}
# Early stopping (metric, patience): validation Kendall tau-c with patience 1 (docs/spec/pearl.md#training,
# docs/spec/pearl.md#a11).
PEARL_EARLY_STOPPING = ("kendall_c", 1)


def check_rows_in_cache(rows: list[dict], cache: FeatureCache, source: str, split: str, layout: str) -> list[dict]:
    """Pearl trains on cached features: every row's image, candidate and references must be in the cache, else one
    `TrainingDataError` names the row before any step runs."""
    columns = LAYOUTS[layout]
    fix = "run extract_pearl_features.py on this data file (it adds what the cache lacks)"
    for row in rows:
        if row["image"] not in cache.image_index:
            problem = f"image {row['image']!r} has no features in the cache '{cache.directory}'"
            raise data_error(source, split, problem, fix, row["row"], columns["image"])
        for column, texts in (("candidate", [row["candidate"]]), ("references", row["references"])):
            missing = [text for text in texts if text not in cache.text_index]
            if missing:
                problem = f"{missing[0]!r} has no features in the cache '{cache.directory}'"
                raise data_error(source, split, problem, fix, row["row"], columns[column])
    return rows


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


def compute_pearl_metrics(evaluation) -> dict:
    """`Trainer(compute_metrics=...)`: 100 x Kendall tau-c and tau-b of the fused scores (0 where undefined)."""
    return correlation_metrics(evaluation.predictions, evaluation.label_ids, PEARL_METRICS, scale=100.0)


class PearlTrainer(SupervisedMetricTrainer):
    """`Trainer` for Pearl: evaluation predicts the fused score (Eq. 3), the quantity early stopping monitors.

    Example:

    ```python
    >>> from modeling_pacs.pearl.training import PearlTrainer, pearl_training_arguments, PearlDataCollator
    >>> trainer = PearlTrainer(model=model, args=pearl_training_arguments("runs/pearl"), train_dataset=train_rows,
    ...                        eval_dataset=val_rows, data_collator=PearlDataCollator(cache, model.config))
    >>> trainer.train()
    ```
    """

    target_key = "labels"

    def __init__(self, *args, early_stopping: bool = True, **kwargs):
        kwargs.setdefault("compute_metrics", compute_pearl_metrics)
        super().__init__(*args, **kwargs)
        if early_stopping:
            self.add_callback(early_stopping_callback(PEARL_EARLY_STOPPING)[0])

    def floating_point_ops(self, inputs: dict) -> int:
        # The inputs are dicts of feature tensors: count 6 x parameters per item, as Trainer does for token models.
        return 6 * len(inputs["labels"]) * self.model.num_parameters()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # The model's summed Huber loss (reference term only for rows with references) on the fused score (Eq. 3).
        output = model(**inputs)
        return (output.loss, output.score) if return_outputs else output.loss


def pearl_training_arguments(output_dir: str, **overrides) -> TrainingArguments:
    """Pearl's recipe as `TrainingArguments`; `overrides` replace fields (e.g. `warmup_steps=2` for a smoke run)."""
    return supervised_training_arguments(output_dir, PEARL_RECIPE, PEARL_EARLY_STOPPING[0], **overrides)


def new_pearl_model(config) -> PearlModel:
    """A fresh PearlModel; with the default HadamardNet shape its HadamardNets start from the shipped multiplication."""
    from .hadamard_init import DEFAULT_CHANNELS, initialise_hadamard_nets

    model = PearlModel(config)
    if list(config.hadamard_channels) == DEFAULT_CHANNELS:
        initialise_hadamard_nets(model)
    return model


__all__ = [
    "PEARL_EARLY_STOPPING",
    "PEARL_RECIPE",
    "PearlDataCollator",
    "PearlTrainer",
    "check_rows_in_cache",
    "PEARL_METRICS",
    "compute_pearl_metrics",
    "new_pearl_model",
    "pearl_training_arguments",
]
