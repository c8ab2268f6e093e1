"""Training Polos on Polaris (docs/spec/polos.md#training, docs/spec/polos.md#polaris) with a `Trainer`.

The code's recipe is the default: only the head and the ScalarMix train (CLIP and RoBERTa frozen; RoBERTa keeps its
train-mode dropout), summed MSE on the max-over-references score, Adam (0.9, 0.999) lr 3e-5 with no weight decay, a
constant schedule, batch 64 x 4 accumulation, gradient clipping 1.0, seed 42, and each batch's texts normalised
together as the official code does (`normalization="official"`). Early stopping follows the paper (validation
Kendall tau-c, patience 5, `early_stopping="paper"`); `"code"` gives the released code's (Pearson, patience 1).
`cache_features=True` computes the frozen encoders' outputs once per image and text (RoBERTa then without dropout).

Data: the original CSVs (`polaris_{train,val,test}.csv`: `mt`, `refs` as a Python-literal list, `score`, `imgid`,
images in `images/`) or the Hub parquet layout (`refs`, `cand`, `img`, `human_score`).

Example:

```python
>>> from modeling_pacs.polos.training import PolosTrainer, PolarisCollator, read_polaris, polos_training_arguments
>>> train, val = read_polaris("data_en/polaris/polaris_train.csv"), read_polaris("data_en/polaris/polaris_val.csv")
>>> args, callback = polos_training_arguments("runs/polos")
>>> trainer = PolosTrainer(model=model, args=args, train_dataset=train, eval_dataset=val,
...                        data_collator=PolarisCollator(), callbacks=[callback])
>>> trainer.train()
```
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import EvalPrediction, TrainingArguments

from ..data.sources import resolve_references
from ..models.inputs import image_key
from ..models.modeling_polos import PolosModel, cut_references_to_chunks
from ..models.scoring import max_by_owner
from ..supervised import (
    SupervisedMetricTrainer,
    correlation_metrics,
    early_stopping_callback,
    supervised_training_arguments,
)
from ..supervised.data import read_rows

NORMALIZATIONS = ("official", "per_item")
# Early-stopping policies (metric, patience): the paper's (validation Kendall tau-c, patience 5) and the released
# code's (Pearson, 1) (docs/spec/polos.md#training).
EARLY_STOPPING = {"paper": ("kendall", 5), "code": ("pearson", 1)}
# Polos's validation metrics (its `regression_metrics.py`): name -> correlation.
REGRESSION_METRICS = {"pearson": "pearson", "kendall": "kendall_c", "spearman": "spearman"}


# ---------------------------------------------------------------------------------------------------- data
def read_polaris_csv(path: str | Path, image_root: str | Path | None = None) -> list[dict]:
    """Rows of an original Polaris CSV: `image` (path under `image_root`, default `images/` beside the CSV),
    `candidate`, `references` (at least one), `score` and `row`. Malformed rows raise a `RowError` naming row and
    column."""
    path = Path(path)
    image_root = Path(image_root) if image_root else path.parent / "images"
    return read_rows(path, "polaris_csv", references_required=True, image_root=image_root)


def read_polaris_parquet(path: str | Path) -> list[dict]:
    """Rows of a Polaris parquet file of the Hub layout (`yuwd/Polaris`), in the same form as the CSV reader's; the
    images stay in the file (an `ImageReference` per row, read by `PolarisCollator` for its batch)."""
    return read_rows(path, "polaris", references_required=True, image_bytes=True)


def read_polaris(path: str | Path, image_root: str | Path | None = None) -> list[dict]:
    """A Polaris split from a `.csv` (original layout) or a `.parquet` file (Hub layout)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return read_polaris_csv(path, image_root)
    if suffix == ".parquet":
        return read_polaris_parquet(path)
    raise ValueError(f"'{path}': expected a Polaris .csv or .parquet file")


class PolarisCollator:
    """Rows -> a batch of raw inputs (images are decoded by the model's CLIP pipeline) and the targets."""

    def __call__(self, rows: list[dict]) -> dict:
        return {
            "images": resolve_references([row["image"] for row in rows]),
            "candidates": [row["candidate"] for row in rows],
            "references": [row["references"] for row in rows],
            "row_indices": [row["row"] for row in rows],
            "targets": torch.tensor([row["score"] for row in rows], dtype=torch.float32),
        }


# ---------------------------------------------------------------------------------------------------- model
def prepare_polos_for_training(model: PolosModel) -> PolosModel:
    """Freeze CLIP and the sentence encoder; the head and the ScalarMix train (docs/spec/polos.md#training)."""
    for module in (model.clip_encoder, model.text_encoder):
        module.requires_grad_(False)
    return model


def polos_training_arguments(
    output_dir: str | Path, early_stopping: str = "paper", **overrides
) -> tuple[TrainingArguments, Any]:
    """The code's recipe as `TrainingArguments`, and the early-stopping callback of `early_stopping` (one of
    [`EARLY_STOPPING`]: `"paper"`, Kendall tau-c with patience 5, or `"code"`, Pearson with patience 1)."""
    if early_stopping not in EARLY_STOPPING:
        raise ValueError(f"early stopping policy must be one of {sorted(EARLY_STOPPING)}, got {early_stopping!r}")
    callback, metric = early_stopping_callback(EARLY_STOPPING[early_stopping])
    recipe = {
        "per_device_train_batch_size": 64,
        "per_device_eval_batch_size": 64,
        "gradient_accumulation_steps": 4,
        "learning_rate": 3e-5,
        "weight_decay": 0.0,
        "lr_scheduler_type": "constant",
        "max_grad_norm": 1.0,
        "num_train_epochs": 100,
        "save_total_limit": 2,
        "seed": 42,
        "report_to": "none",
        "dataloader_pin_memory": False,  # batches are file paths and strings; only the targets are tensors
    }
    arguments = supervised_training_arguments(output_dir, recipe, metric, zero_learning_rate=True, **overrides)
    return arguments, callback


def regression_metrics(predictions: Sequence[float], targets: Sequence[float]) -> dict[str, float]:
    """Pearson, Kendall tau-c and Spearman correlations (the metrics of Polos's `regression_metrics.py`)."""
    return correlation_metrics(predictions, targets, REGRESSION_METRICS)


def compute_regression_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """`Trainer(compute_metrics=...)` form of [`regression_metrics`]."""
    return regression_metrics(prediction.predictions, prediction.label_ids)


class PolosTrainer(SupervisedMetricTrainer):
    """Trains a [`PolosModel`][modeling_pacs.PolosModel]'s head and ScalarMix on Polaris rows (collated by
    `PolarisCollator`).

    Args:
        normalization: `"official"` (default: each batch's candidates share ScalarMix statistics, references are
            cut to the batch's smallest count, one group per reference index, as the official training does) or
            `"per_item"` (each sentence alone, every reference: the default scoring mode).
        cache_features: compute CLIP features and RoBERTa hidden states once per image / text (eval mode, so
            without RoBERTa's dropout) instead of at every step.

    Example:

    ```python
    >>> args, callback = polos_training_arguments("runs/polos")
    >>> trainer = PolosTrainer(model=prepare_polos_for_training(model), args=args, train_dataset=train,
    ...                        eval_dataset=val, data_collator=PolarisCollator(), callbacks=[callback])
    ```
    """

    def __init__(self, *args, normalization: str = "official", cache_features: bool = False, **kwargs):
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {list(NORMALIZATIONS)}, got {normalization!r}")
        kwargs.setdefault("compute_metrics", compute_regression_metrics)
        super().__init__(*args, **kwargs)
        self.normalization = normalization
        self.cache_features = cache_features
        self.image_cache: dict = {}
        self.text_cache: dict = {}
        self.hidden_cache: dict = {}

    def create_optimizer(self):
        """Adam with PyTorch's defaults (betas 0.9/0.999, eps 1e-8, no weight decay) on the trainable parameters."""
        if self.optimizer is None:
            parameters = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
            self.optimizer = torch.optim.Adam(parameters, lr=self.args.learning_rate)
        return self.optimizer

    # Frozen encoders ----------------------------------------------------------------------------------------
    def clip_features(self, model: PolosModel, images: list, texts: list[str], row_indices: list[int]):
        """Raw CLIP image and text features (frozen), cached per image / text when asked to."""
        if not self.cache_features:
            image_embeds = model.clip_encoder.encode_images(images, item_indices=row_indices, progress=False)
            return image_embeds.clone(), model.clip_encoder.encode_texts(texts, progress=False).clone()
        new_images = {}
        for image, row in zip(images, row_indices):
            key = image_key(image)
            if key not in self.image_cache and key not in new_images:
                new_images[key] = (image, row)
        if new_images:
            keys = list(new_images)
            embeds = model.clip_encoder.encode_images(
                [new_images[key][0] for key in keys], item_indices=[new_images[key][1] for key in keys], progress=False
            ).clone()
            self.image_cache.update(zip(keys, embeds))
        new_texts = sorted({text for text in texts if text not in self.text_cache})
        if new_texts:
            self.text_cache.update(zip(new_texts, model.clip_encoder.encode_texts(new_texts, progress=False).clone()))
        return (
            torch.stack([self.image_cache[image_key(image)] for image in images]),
            torch.stack([self.text_cache[text] for text in texts]),
        )

    def text_hidden_states(self, model: PolosModel, texts: list[str], labels: list[str]):
        """`[L, B, T, D]` RoBERTa hidden states (frozen, padded) and the `[B, T]` mask."""
        token_ids = model.tokenize_sentences(texts, labels)
        if not self.cache_features:
            with torch.no_grad():
                return model.text_hidden_states(token_ids)
        missing = [index for index, text in enumerate(texts) if text not in self.hidden_cache]
        if missing:
            was_training = model.text_encoder.training
            model.text_encoder.eval()
            with torch.no_grad():
                for index in missing:
                    hidden, _ = model.text_hidden_states([token_ids[index]])
                    self.hidden_cache[texts[index]] = hidden[:, 0].cpu()
            model.text_encoder.train(was_training)
        states = [self.hidden_cache[text] for text in texts]
        length = max(state.shape[1] for state in states)
        padded = torch.zeros(states[0].shape[0], len(states), length, states[0].shape[2])
        mask = torch.zeros(len(states), length, dtype=torch.long)
        for row, state in enumerate(states):
            padded[:, row, : state.shape[1]] = state
            mask[row, : state.shape[1]] = 1
        return padded.to(model.device), mask.to(model.device)

    # Scores with gradients through the head and the mix ----------------------------------------------------
    def predict_batch(self, model: PolosModel, inputs: dict) -> torch.Tensor:
        candidates, references = inputs["candidates"], inputs["references"]
        if self.normalization == "official":
            references = cut_references_to_chunks(references, len(candidates))
        owner = [item for item, item_references in enumerate(references) for _ in item_references]
        flat_references = [reference for item_references in references for reference in item_references]
        row_indices = inputs["row_indices"]
        image_clip, text_clip = self.clip_features(model, inputs["images"], candidates + flat_references, row_indices)

        texts = candidates + flat_references
        labels = [f"candidate of row {row}" for row in row_indices]
        labels += [
            f"reference {j} of row {row_indices[i]}" for i, refs in enumerate(references) for j in range(len(refs))
        ]
        if self.normalization == "official":
            # Candidates form one group, the j-th references of all items another
            # (docs/spec/polos.md#official-batching).
            groups = [0] * len(candidates) + [1 + j for refs in references for j in range(len(refs))]
        else:
            groups = list(range(len(texts)))
        hidden_states, mask = self.text_hidden_states(model, texts, labels)
        group_tensor = torch.tensor(groups, dtype=torch.long, device=model.device)
        sentence = model.scalar_mix(hidden_states, mask, group_tensor)[:, 0, :]
        owner_tensor = torch.tensor(owner, dtype=torch.long, device=model.device)
        image_clip, text_clip = image_clip.to(model.device), text_clip.to(model.device)
        pair = model.pair_scores(
            sentence[len(candidates) :],
            sentence[: len(candidates)][owner_tensor],
            image_clip[owner_tensor],
            text_clip[: len(candidates)][owner_tensor],
            text_clip[len(candidates) :],
        )
        return max_by_owner(pair, owner_tensor, len(candidates))


__all__ = [
    "EARLY_STOPPING",
    "REGRESSION_METRICS",
    "PolarisCollator",
    "PolosTrainer",
    "compute_regression_metrics",
    "polos_training_arguments",
    "prepare_polos_for_training",
    "read_polaris",
    "read_polaris_csv",
    "read_polaris_parquet",
    "regression_metrics",
]
