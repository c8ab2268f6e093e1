"""Training the captioner (docs/spec/pacs.md#scst): cross-entropy (Eq. 16) with the paper's schedule, then SCST (Eqs.
17-19) with a PAC-S++ / RefPAC-S++ / CLIP-S / CIDEr-D reward, and an on-disk cache of the frozen encoder's visual
features.

Data flows one way: dataset rows `(image, captions)` -> [`CaptioningCollator`] (decoding and the CLIP image pipeline,
or cached grid features; tokenisation) -> the captioner -> loss ([`PACSCaptionerForConditionalGeneration.forward`]
for XE, [`scst_loss`] for SCST, whose rewards come from `rewards.py` and so from `scoring.py`).
"""

import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from safetensors.torch import load_file, save_file
from torch.optim.lr_scheduler import LambdaLR
from transformers import Trainer
from transformers.utils import logging

from ..data.sources import SourceImages
from ..models.embedding_cache import image_content_key, model_fingerprint
from ..models.inputs import image_key, load_and_preprocess
from ..models.modeling_captioner import PACSCaptionerForConditionalGeneration

if TYPE_CHECKING:
    import datasets

    from ..data.sources import RowSource

logger = logging.get_logger(__name__)

IMAGE_COLUMN = "image"
CAPTIONS_COLUMN = "captions"
CAPTION_COLUMN = "caption"


# ----------------------------------------------------------------------------------------------------- schedule
def xe_learning_rate_factor(
    step: int, warmup_steps: int = 1000, constant_until: int = 10_000, decay_until: int = 15_000, final_ratio=0.04
) -> float:
    """Multiplier of the peak learning rate at `step` (Sec. 5.1): linear warm-up over `warmup_steps`, constant until
    `constant_until`, then a sub-linear decrease to `final_ratio` (1e-5 / 2.5e-4) at `decay_until`, constant after.

    The paper says only "sub-linearly"; we follow a square-root curve: `1 - (1 - final_ratio) * sqrt(progress)`.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step < constant_until:
        return 1.0
    if step < decay_until:
        progress = (step - constant_until) / (decay_until - constant_until)
        return 1.0 - (1.0 - final_ratio) * math.sqrt(progress)
    return final_ratio


def xe_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int = 1000,
    constant_until: int = 10_000,
    decay_until: int = 15_000,
    final_ratio: float = 0.04,
) -> LambdaLR:
    """The XE schedule of Sec. 5.1 as a `LambdaLR` over the optimizer's (peak) learning rate."""
    if not 0 < warmup_steps <= constant_until <= decay_until:
        raise ValueError(
            f"need 0 < warmup_steps <= constant_until <= decay_until, got {warmup_steps}, {constant_until}, "
            f"{decay_until}"
        )
    if not 0 < final_ratio <= 1:
        raise ValueError(f"final_ratio must be in (0, 1], got {final_ratio!r}")
    return LambdaLR(
        optimizer, lambda step: xe_learning_rate_factor(step, warmup_steps, constant_until, decay_until, final_ratio)
    )


# ----------------------------------------------------------------------------------------------------- SCST
def scst_loss(sequence_log_probs: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """Eq. 19: `-(1/l) sum_i (r_i - b) log p(t_i)` per image, `b` the mean reward of its `l` beams; batch mean.

    Args:
        sequence_log_probs: `[num_images, num_beams]` log-probabilities of the generated captions (with gradient).
        rewards: `[num_images, num_beams]` rewards (no gradient flows through them).
    """
    if sequence_log_probs.shape != rewards.shape or sequence_log_probs.dim() != 2:
        raise ValueError(
            f"log-probabilities {tuple(sequence_log_probs.shape)} and rewards {tuple(rewards.shape)} must both be "
            "[num_images, num_beams]"
        )
    rewards = rewards.detach().to(sequence_log_probs)
    advantages = rewards - rewards.mean(dim=1, keepdim=True)
    return -(advantages * sequence_log_probs).mean(dim=1).mean()


def generated_token_mask(sequences: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 on the generated tokens up to and including the first end-of-text (position 0, the start token, is 0)."""
    tokens = sequences[:, 1:]
    is_eos = (tokens == eos_token_id).long()
    before_or_at_first_eos = (is_eos.cumsum(dim=1) - is_eos) == 0
    mask = torch.zeros_like(sequences, dtype=torch.bool)
    mask[:, 1:] = before_or_at_first_eos
    return mask


def sequence_log_probs(logits: torch.Tensor, sequences: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """`log f_theta(t)` of each generated sequence (start token first), summed over its tokens through end-of-text.

    `logits` are the decoder's outputs on `sequences[:, :-1]` (teacher forcing on the generated tokens).
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # half-precision models: fp32 softmax
    token_log_probs = logits.log_softmax(dim=-1).gather(-1, sequences[:, 1:, None]).squeeze(-1)
    mask = generated_token_mask(sequences, eos_token_id)[:, 1:]
    return (token_log_probs * mask).sum(dim=1)


RewardFunction = Callable[..., list[float]]


class SCSTTrainer(Trainer):
    r"""
    Self-critical sequence training (Eqs. 17-19): per image, beam search gives `num_beams` captions, the reward
    function scores them, and the loss of Eq. 19 (baseline = mean reward of that image's beams) is minimised.

    The batches come from [`CaptioningCollator`] with `stage="scst"` (encoder inputs plus the raw `images` and the
    `references`). `train()` with `resume_from_checkpoint` continues a run: beam search is deterministic and the
    Trainer restores weights, optimizer, scheduler, data order and RNG states.

    Under `torchrun` / `accelerate launch` every process runs beam search on the unwrapped model, the reward and
    Eq. 19 on its own share of the batch, so an image's baseline is always the mean over its own beams; DDP averages
    the gradients over processes, which is the gradient of the global batch's loss when every process holds as many
    images (the default: each gets `per_device_train_batch_size`). The logged reward is the mean over all processes.

    Args:
        reward_function: `(completions, images=..., references=...) -> list[float]`, e.g. [`PACSReward`].
        tokenizer: the CLIP tokenizer, to decode generated ids into captions.
        num_beams (`int`, defaults to 5): beams per image (all are returned and rewarded).
        max_new_tokens (`int`, defaults to 20): longest generated caption.

    Example:

    ```python
    >>> from modeling_pacs.captioning.training import CaptioningCollator, SCSTTrainer
    >>> trainer = SCSTTrainer(model=captioner, args=args, train_dataset=dataset, reward_function=reward,
    ...                       tokenizer=tokenizer, data_collator=CaptioningCollator(tokenizer, 224, stage="scst"))
    >>> trainer.train()
    ```
    """

    def __init__(
        self,
        *args,
        reward_function: RewardFunction,
        tokenizer,
        num_beams: int = 5,
        max_new_tokens: int = 20,
        **kwargs,
    ):
        for name, value in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if num_beams < 2:
            raise ValueError("num_beams must be at least 2: the baseline is the mean reward over an image's beams")
        super().__init__(*args, **kwargs)
        self.reward_function = reward_function
        self.caption_tokenizer = tokenizer
        self.num_beams = num_beams
        self.max_new_tokens = max_new_tokens
        self.reward_log: list[float] = []
        self.reward_seconds = 0.0

    def generate_beams(self, model: PACSCaptionerForConditionalGeneration, encoder_inputs: dict) -> torch.Tensor:
        """Eq. 17 with beam search (eval mode: no dropout): `[num_images * num_beams, length]` ids, the beams of an
        image adjacent."""
        was_training = model.training
        model.eval()
        with torch.no_grad():
            encoder_outputs = model.get_encoder()(**encoder_inputs)
            sequences = model.generate(
                encoder_outputs=encoder_outputs,
                num_beams=self.num_beams,
                num_return_sequences=self.num_beams,
                max_new_tokens=self.max_new_tokens,
            )
        model.train(was_training)
        return sequences

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        images = inputs.pop("images")
        references = inputs.pop("references")
        captioner = self.accelerator.unwrap_model(model)
        encoder_inputs = {key: inputs[key] for key in ("pixel_values", "visual_features") if key in inputs}
        sequences = self.generate_beams(captioner, encoder_inputs)
        captions = self.caption_tokenizer.batch_decode(sequences, skip_special_tokens=True)
        repeated_images = [image for image in images for _ in range(self.num_beams)]
        repeated_references = [item for item in references for _ in range(self.num_beams)]
        started = time.perf_counter()
        rewards = self.reward_function(captions, images=repeated_images, references=repeated_references)
        self.reward_seconds += time.perf_counter() - started
        rewards = torch.tensor(rewards, dtype=torch.float32, device=sequences.device).view(-1, self.num_beams)
        self.reward_log.append(float(rewards.mean()))
        # Through the (possibly DDP-wrapped) model, so gradients are synchronised across processes; they flow into
        # the trainable encoder layers and the decoder (the CLIP tower is frozen).
        logits = model(**encoder_inputs, decoder_input_ids=sequences[:, :-1]).logits
        log_probs = sequence_log_probs(logits, sequences, captioner.config.eos_token_id).view(-1, self.num_beams)
        loss = scst_loss(log_probs, rewards)
        return (loss, {"rewards": rewards, "sequences": sequences}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # Every process logs the training loss at the same steps, so the reward is summed over all of them here: the
        # logged reward is the mean over the global batch, not rank 0's share of it.
        if "loss" in logs:
            totals = torch.tensor([sum(self.reward_log), len(self.reward_log)], dtype=torch.float64)
            totals = self.accelerator.reduce(totals.to(self.args.device), reduction="sum").cpu()
            if totals[1] > 0:
                logs["reward"] = float(totals[0] / totals[1])
            self.reward_log = []
        super().log(logs, start_time)


# ----------------------------------------------------------------------------------------------------- data
def caption_labels(tokenizer, captions: list[str], max_length: int) -> torch.Tensor:
    """Teacher-forcing targets: the CLIP ids after the start token through end-of-text, padding as -100."""
    tokens = tokenizer(captions, padding="longest", truncation=True, max_length=max_length, return_tensors="pt")
    labels = tokens["input_ids"][:, 1:]
    return labels.masked_fill(tokens["attention_mask"][:, 1:] == 0, -100)


class VisualFeatureCache:
    r"""
    Grid features of the frozen CLIP tower (Eq. 15), one safetensors file per distinct image, in a folder named by
    the tower's weight fingerprint. Files are written atomically, so an interrupted precomputation resumes.

    Example:

    ```python
    >>> cache = VisualFeatureCache("features/", captioner)
    >>> cache.precompute(dataset["image"], batch_size=64)
    >>> collator = CaptioningCollator(tokenizer, 224, feature_cache=cache)
    ```
    """

    def __init__(self, directory: str | os.PathLike, captioner: PACSCaptionerForConditionalGeneration):
        self.captioner = captioner
        vision_model = captioner.get_encoder().vision_model
        self.directory = Path(directory) / model_fingerprint(vision_model)
        self.image_size = captioner.config.vision_config.image_size

    def path(self, image: Any, index: int) -> Path:
        key = image_content_key(image)
        if key is None:
            load_and_preprocess(image, index, self.image_size)  # raises the pipeline's error naming the item
            raise ValueError(f"image {index} could not be read to cache its features")
        return self.directory / key[:2] / f"{key}.safetensors"

    def precompute(self, images: Sequence[Any], batch_size: int = 64, progress: bool = True) -> int:
        """Compute and store the features of every image not stored yet; returns how many were computed."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        missing = {}
        for index, image in enumerate(images):
            path = self.path(image, index)
            if not path.is_file() and path not in missing:
                missing[path] = (index, image)
        pending = list(missing.items())
        starts = range(0, len(pending), batch_size)
        if progress and len(pending) > batch_size:
            starts = logging.tqdm(starts, desc="caching visual features", unit="batch")
        encoder = self.captioner.get_encoder()
        device = next(encoder.parameters()).device
        for start in starts:
            chunk = pending[start : start + batch_size]
            pixels = torch.stack([load_and_preprocess(image, index, self.image_size) for _, (index, image) in chunk])
            features = encoder.visual_features(pixels.to(device)).cpu()
            for (path, _), feature in zip(chunk, features):
                write_tensor_atomically(path, feature.contiguous())
        return len(pending)

    def load(self, images: Sequence[Any], indices: Sequence[int]) -> torch.Tensor:
        """Stored features `[len(images), num_tokens, width]`; an image not precomputed is an error."""
        features = []
        for image, index in zip(images, indices):
            path = self.path(image, index)
            if not path.is_file():
                raise FileNotFoundError(
                    f"no cached visual features for image {index}: run VisualFeatureCache.precompute on the dataset "
                    "first (scripts/train_captioner.py --feature_cache DIR does)"
                )
            features.append(load_file(str(path))["features"])
        return torch.stack(features)


def write_tensor_atomically(path: Path, tensor: torch.Tensor):
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".safetensors")
    os.close(handle)
    try:
        save_file({"features": tensor}, temporary)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class CaptioningCollator:
    r"""
    Batches of `(image, captions)` rows for the captioner.

    `stage="xe"`: rows hold one `caption` (or a `captions` list, whose first caption is used); the batch has the
    encoder input and `labels`. `stage="scst"`: rows hold `captions` (the references); the batch has the encoder
    input, the raw `images` (for the reward) and `references`. The encoder input is `pixel_values` (CLIP image
    pipeline) or, with a [`VisualFeatureCache`], `visual_features`. With `image_sources` (as [`CaptionRows`] has
    them), `image` holds row numbers and the batch's images are read from the source here.

    Example:

    ```python
    >>> collator = CaptioningCollator(tokenizer, image_size=224, stage="xe")
    >>> batch = collator([{"image": "cat.jpg", "caption": "a cat on a sofa"}])
    >>> sorted(batch)
    ['labels', 'pixel_values']
    ```
    """

    def __init__(
        self,
        tokenizer,
        image_size: int,
        stage: str = "xe",
        feature_cache: VisualFeatureCache | None = None,
        max_length: int = 77,
        index_column: str | None = "row_index",
        image_sources: "dict[str, RowSource] | None" = None,
    ):
        if stage not in ("xe", "scst"):
            raise ValueError(f"stage must be 'xe' or 'scst', got {stage!r}")
        self.tokenizer = tokenizer
        self.image_size = image_size
        self.stage = stage
        self.feature_cache = feature_cache
        self.max_length = max_length
        self.index_column = index_column
        self.image_source = (image_sources or {}).get(IMAGE_COLUMN)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        indices = [row.get(self.index_column, position) for position, row in enumerate(rows)]
        images = SourceImages([row[IMAGE_COLUMN] for row in rows], self.image_source, IMAGE_COLUMN)[:]
        if self.feature_cache is not None:
            batch = {"visual_features": self.feature_cache.load(images, indices)}
        else:
            pixels = [load_and_preprocess(image, index, self.image_size) for image, index in zip(images, indices)]
            batch = {"pixel_values": torch.stack(pixels)}
        if self.stage == "xe":
            captions = [row_caption(row, index) for row, index in zip(rows, indices)]
            batch["labels"] = caption_labels(self.tokenizer, captions, self.max_length)
        else:
            batch["images"] = images
            batch["references"] = [row_references(row, index) for row, index in zip(rows, indices)]
        return batch


def row_caption(row: dict[str, Any], index: int) -> str:
    caption = row.get(CAPTION_COLUMN)
    if caption is None and row.get(CAPTIONS_COLUMN):
        caption = row[CAPTIONS_COLUMN][0]
    if not isinstance(caption, str):
        raise ValueError(f"row {index} has no caption: give a '{CAPTION_COLUMN}' string or a '{CAPTIONS_COLUMN}' list")
    return caption


def row_references(row: dict[str, Any], index: int) -> list[str]:
    references = row.get(CAPTIONS_COLUMN)
    if references is None and isinstance(row.get(CAPTION_COLUMN), str):
        references = [row[CAPTION_COLUMN]]
    if not references or not all(isinstance(reference, str) for reference in references):
        raise ValueError(f"row {index} has no reference captions: give a '{CAPTIONS_COLUMN}' list of strings")
    return list(references)


def combined(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def group_captions_by_image(keys: Sequence[Any], images: pa.Array, captions: pa.Array) -> pa.Table:
    """One row per distinct key, in order of first appearance: the image of its first row and all its `captions`
    in row order (SCST and evaluation read an image with its references)."""
    group_of: dict[Any, int] = {}
    groups = np.fromiter((group_of.setdefault(key, len(group_of)) for key in keys), dtype=np.int64, count=len(keys))
    images, captions = combined(images), combined(captions)
    order = np.argsort(groups, kind="stable")
    counts = np.bincount(groups, minlength=len(group_of))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    first_rows = order[offsets[:-1]]
    return pa.table(
        {
            IMAGE_COLUMN: images.take(pa.array(first_rows, pa.int64())),
            CAPTIONS_COLUMN: pa.ListArray.from_arrays(pa.array(offsets), captions.take(pa.array(order, pa.int64()))),
        }
    )


def one_caption_per_row(rows: "datasets.Dataset") -> pa.Table:
    """One row per (image, caption) (XE training) from a row table holding `captions` lists, in order."""
    table = rows.with_format("arrow")[:]
    captions = table.column(CAPTIONS_COLUMN).combine_chunks()
    images = table.column(IMAGE_COLUMN).take(pc.list_parent_indices(captions))
    return pa.table({IMAGE_COLUMN: images, CAPTION_COLUMN: pc.list_flatten(captions)})


# ----------------------------------------------------------------------------------------------------- datasets
@dataclass
class CaptionRows:
    """A caption split as a row table (no image bytes in memory): `image` (a path, or the row number of the image in
    `image_sources["image"]`), `captions` (a list of strings) and `row_index`."""

    dataset: "datasets.Dataset"
    image_sources: "dict[str, RowSource]" = field(default_factory=dict)
    digest: str = ""

    @property
    def images(self) -> SourceImages:
        """The images, read from their source on access (paths as they are)."""
        return SourceImages(self.dataset[IMAGE_COLUMN], self.image_sources.get(IMAGE_COLUMN), IMAGE_COLUMN)

    def __len__(self) -> int:
        return len(self.dataset)


def load_caption_dataset(
    dataset: str | None = None,
    split: str = "train",
    karpathy_json: str | None = None,
    image_root: str | None = None,
    max_samples: int | None = None,
    data_dir: str | os.PathLike | None = None,
) -> CaptionRows:
    """One row per image with its `captions`: from COCO Karpathy (`karpathy_json` + `image_root`; split `train`
    includes `restval`) or any `datasets` dataset (a Hub id or a `save_to_disk` folder) with an `image` column and a
    `captions` list or a `caption` string column (grouped by `cocoid` when there is one, else by image).

    The result is a row table ([`modeling_pacs.data`]), memory-mapped from `data_dir` (in memory without one): an
    image column of paths stays paths; images stored in the dataset (bytes) become row numbers into it, read by the
    collator for each batch.
    """
    from ..data import ArrowSource, load_datasets, memory_mapped_rows, read_karpathy, select_split

    if max_samples is not None and max_samples <= 0:
        raise ValueError(f"max_samples must be positive, got {max_samples}")
    image_sources: dict = {}
    if karpathy_json:
        if not image_root:
            raise ValueError("karpathy_json needs image_root (the folder holding train2014/ and val2014/)")
        captions = read_karpathy(karpathy_json, image_root, ("train", "restval") if split == "train" else (split,))
        keys = captions.column("cocoid").to_pylist()
        table = group_captions_by_image(keys, captions.column(IMAGE_COLUMN), captions.column(CAPTION_COLUMN))
    elif dataset:
        loaded = select_split(load_datasets(dataset), split, dataset)
        names = loaded.column_names
        if IMAGE_COLUMN not in names or not {CAPTIONS_COLUMN, CAPTION_COLUMN} & set(names):
            raise ValueError(
                f"the dataset has columns {names}: it needs '{IMAGE_COLUMN}' and '{CAPTIONS_COLUMN}' (a list of "
                f"captions) or '{CAPTION_COLUMN}'"
            )
        source = ArrowSource.from_dataset(loaded, str(dataset))
        image_type = source.table.schema.field(IMAGE_COLUMN).type
        if pa.types.is_string(image_type) or pa.types.is_large_string(image_type):
            images = source.table.column(IMAGE_COLUMN)  # paths: kept as they are
            image_values = images.to_pylist()
        else:  # bytes stay in the dataset: rows refer to them
            images = pa.array(np.arange(source.num_rows), pa.int64())
            image_sources = {IMAGE_COLUMN: source}
            image_values = None
        if CAPTIONS_COLUMN in names:
            table = pa.table({IMAGE_COLUMN: images, CAPTIONS_COLUMN: source.table.column(CAPTIONS_COLUMN)})
        else:
            if "cocoid" in names:
                keys = source.read_columns(["cocoid"]).column(0).to_pylist()
            else:
                values = (
                    image_values
                    if image_values is not None
                    else SourceImages(range(source.num_rows), source, IMAGE_COLUMN)
                )
                keys = [image_key(value) for value in values]
            table = group_captions_by_image(keys, images, source.table.column(CAPTION_COLUMN))
    else:
        raise ValueError("give a dataset (Hub id or save_to_disk folder), or karpathy_json with image_root")
    if max_samples is not None:
        table = table.slice(0, max_samples)
    table = table.append_column("row_index", pa.array(np.arange(table.num_rows), pa.int64()))
    rows, digest = memory_mapped_rows(table, data_dir, f"captions-{split}")
    return CaptionRows(rows, image_sources, digest)


__all__ = [
    "CaptionRows",
    "CaptioningCollator",
    "SCSTTrainer",
    "VisualFeatureCache",
    "caption_labels",
    "generated_token_mask",
    "group_captions_by_image",
    "load_caption_dataset",
    "one_caption_per_row",
    "scst_loss",
    "sequence_log_probs",
    "xe_learning_rate_factor",
    "xe_scheduler",
]
