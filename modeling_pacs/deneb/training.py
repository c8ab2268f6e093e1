"""Training DENEB on Nebula (or Polaris) with a `Trainer`, on the shared supervised pieces (docs/spec/deneb.md
#training).

The authors' recipe (`configs/xlmr/base/da-estimator-cvpr.yaml`) is the default: CLIP and RoBERTa frozen
(`nr_frozen_epochs: 100000`; RoBERTa keeps its train-mode dropout), the ScalarMix, pair projections, Sim-Vec
transformers and head train; summed Huber loss with delta 0.5 (`loss: huber`, `estimator_base.py:75-83`); Adam lr 3e-6,
no weight decay, linear warm-up over 1000 steps then linear decay to 0 (their `linear_warmup` is transformers'
`linear` schedule); batch 16, gradient clipping 1.0, seed 12; early stopping on validation Kendall tau-c with
patience 1; each batch's texts normalised together as their training does (`normalization="official"`).

Data: Nebula on the Hub (`Ka2ukiMatsuda/Nebula`: `file_name`, `mt`, `refs`, `human_score`), the authors' CSVs
(`mt`, `refs`, `score`, `imgid`, images in a folder: layout `polaris_csv`), or Polaris on the Hub (`polaris`).

Example:

```python
>>> from modeling_pacs.deneb.training import DenebCollator, DenebTrainer, deneb_training_arguments, read_deneb_rows
>>> train = read_deneb_rows("nebula/train.parquet")
>>> args, callback = deneb_training_arguments("runs/deneb")
>>> trainer = DenebTrainer(model=prepare_deneb_for_training(model), args=args, train_dataset=train,
...                        eval_dataset=read_deneb_rows("nebula/validation.parquet"), data_collator=DenebCollator(),
...                        callbacks=[callback])
>>> trainer.train()
```
"""

from pathlib import Path
from typing import Any

import torch
from transformers import EvalPrediction, TrainingArguments

from ..data.sources import resolve_references
from ..models.modeling_deneb import DenebModel, cut_references_to_chunks
from ..supervised import (
    SupervisedMetricTrainer,
    correlation_metrics,
    early_stopping_callback,
    supervised_training_arguments,
)
from ..supervised.data import read_rows

NORMALIZATIONS = ("official", "per_item")
LAYOUTS = ("nebula", "polaris_csv", "polaris")
# The authors' early stopping (monitor: kendall, patience: 1) and validation metrics (`RegressionReport('c')`).
EARLY_STOPPING = ("kendall", 1)
REGRESSION_METRICS = {"pearson": "pearson", "kendall": "kendall_c", "spearman": "spearman"}
HUBER_DELTA = 0.5


def read_deneb_rows(path: str | Path, layout: str = "nebula", image_root: str | Path | None = None) -> list[dict]:
    """Rows of a Nebula / Polaris file (`layout` one of [`LAYOUTS`]); every row needs at least one reference. Image
    names resolve under `image_root`; Polaris's parquet files (`polaris`) keep their images inside."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    image_bytes = layout == "polaris"
    return read_rows(path, layout, references_required=True, image_root=image_root, image_bytes=image_bytes)


class DenebCollator:
    """Rows -> a batch of raw inputs (images are decoded by the model's CLIP pipeline) and the targets."""

    def __call__(self, rows: list[dict]) -> dict:
        return {
            "images": resolve_references([row["image"] for row in rows]),
            "candidates": [row["candidate"] for row in rows],
            "references": [row["references"] for row in rows],
            "row_indices": [row["row"] for row in rows],
            "targets": torch.tensor([row["score"] for row in rows], dtype=torch.float32),
        }


def prepare_deneb_for_training(model: DenebModel) -> DenebModel:
    """Freeze CLIP and the sentence encoder; everything after them trains."""
    for module in (model.clip_encoder, model.text_encoder):
        module.requires_grad_(False)
    return model


def deneb_training_arguments(output_dir: str | Path, **overrides) -> tuple[TrainingArguments, Any]:
    """The authors' recipe as `TrainingArguments`, and their early-stopping callback (Kendall tau-c, patience 1)."""
    callback, metric = early_stopping_callback(EARLY_STOPPING)
    recipe = {
        "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 16,
        "gradient_accumulation_steps": 1,
        "learning_rate": 3e-6,
        "weight_decay": 0.0,
        "lr_scheduler_type": "linear",
        "warmup_steps": 1000,
        "max_grad_norm": 1.0,
        "num_train_epochs": 100,
        "save_total_limit": 2,
        "seed": 12,
        "report_to": "none",
        "dataloader_pin_memory": False,  # batches are file paths and strings; only the targets are tensors
    }
    return supervised_training_arguments(output_dir, recipe, metric, **overrides), callback


def compute_regression_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Pearson, Kendall tau-c and Spearman of the predictions against the human scores."""
    return correlation_metrics(prediction.predictions, prediction.label_ids, REGRESSION_METRICS)


class DenebTrainer(SupervisedMetricTrainer):
    """Trains a [`DenebModel`][modeling_pacs.DenebModel] after its frozen encoders on rows collated by
    `DenebCollator`.

    Args:
        normalization: `"official"` (default: each batch's candidates share ScalarMix statistics, one group per
            reference index, references cut to the batch's smallest count, as the authors' training does) or
            `"per_item"` (each sentence alone, every reference: the default scoring mode).
    """

    def __init__(self, *args, normalization: str = "official", **kwargs):
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {list(NORMALIZATIONS)}, got {normalization!r}")
        kwargs.setdefault("compute_metrics", compute_regression_metrics)
        super().__init__(*args, **kwargs)
        self.normalization = normalization

    def create_optimizer(self):
        """Adam with PyTorch's defaults (no weight decay) on the trainable parameters, as the authors'."""
        if self.optimizer is None:
            parameters = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
            self.optimizer = torch.optim.Adam(parameters, lr=self.args.learning_rate)
        return self.optimizer

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The authors' summed Huber loss (delta 0.5) on the batch's scores."""
        predictions = self.predict_batch(model, inputs)
        targets = inputs[self.target_key].to(predictions.device)
        loss = torch.nn.functional.huber_loss(predictions, targets, reduction="sum", delta=HUBER_DELTA)
        return (loss, predictions) if return_outputs else loss

    def predict_batch(self, model: DenebModel, inputs: dict) -> torch.Tensor:
        """Scores of the batch with gradients through the ScalarMix, the projections, the Sim-Vec transformers and
        the head (the encoders are frozen)."""
        candidates, references = inputs["candidates"], inputs["references"]
        if self.normalization == "official":
            references = cut_references_to_chunks(references, len(candidates))
        flat_references = [reference for item_references in references for reference in item_references]
        texts = candidates + flat_references
        row_indices = inputs["row_indices"]
        # The encoders run in inference mode: clones are ordinary tensors autograd may save.
        image_clip = model.clip_encoder.encode_images(
            inputs["images"], item_indices=row_indices, progress=False
        ).clone()
        text_clip = model.clip_encoder.encode_texts(texts, progress=False).clone()
        labels = [f"candidate of row {row}" for row in row_indices]
        labels += [
            f"reference {j} of row {row_indices[i]}" for i, refs in enumerate(references) for j in range(len(refs))
        ]
        token_ids = model.tokenize_sentences(texts, labels)
        starts = [len(candidates)]
        for item_references in references:
            starts.append(starts[-1] + len(item_references))
        if self.normalization == "official":
            # The candidates form one group, the j-th references of all items another (docs/spec/deneb.md#batching).
            count = len(references[0])
            order = list(range(len(candidates))) + [
                starts[item] + j for j in range(count) for item in range(len(candidates))
            ]
            groups = [position // len(candidates) for position in range(len(order))]
            mixed = model.sentence_embeddings([token_ids[position] for position in order], groups)
            sentence = torch.empty_like(mixed)
            sentence[torch.tensor(order, device=mixed.device)] = mixed
        else:
            sentence = model.sentence_embeddings(token_ids, list(range(len(texts))))
        scores = torch.empty(len(candidates), device=model.device)
        by_count: dict[int, list[int]] = {}
        for item, item_references in enumerate(references):
            by_count.setdefault(len(item_references), []).append(item)
        image_clip, text_clip = image_clip.to(model.device), text_clip.to(model.device)
        for count, items in by_count.items():
            rows = torch.tensor([[starts[item] + j for j in range(count)] for item in items], device=model.device)
            index = torch.tensor(items, device=model.device)
            scores = scores.index_put(
                (index,),
                model.item_scores(
                    image_clip[index], text_clip[index], text_clip[rows], sentence[index], sentence[rows]
                ),
            )
        return scores


__all__ = [
    "EARLY_STOPPING",
    "LAYOUTS",
    "DenebCollator",
    "DenebTrainer",
    "compute_regression_metrics",
    "deneb_training_arguments",
    "prepare_deneb_for_training",
    "read_deneb_rows",
]
