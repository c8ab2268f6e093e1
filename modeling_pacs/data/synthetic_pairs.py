"""PAC-S++ training rows: COCO Karpathy captions joined with their synthetic positives, in Arrow, by key.

Each human caption (`sentid`) gets the image generated from it (`synthetic_image`), and each image (`cocoid`) the
caption generated from it (`synthetic_caption`). The join reads only the key columns of the synthetic data (`sentid`,
`cocoid`, `synthetic_caption` and which rows hold an image): a sorted index of keys to synthetic row numbers,
looked up with NumPy. The result is a row table ([`row_tables`](row_tables.md)) whose `synthetic_image` is the row
number of the synthetic image in its [`RowSource`](sources.md); the collator reads the bytes of a batch's rows.

Policies:
- A caption without a synthetic image, or an image without a synthetic caption, gives a row that lacks synthetic
  data: such rows are skipped when their term of the loss is on (its lambda is not 0), counted and logged.
- A key with two different synthetic values (two images for one `sentid`, two captions for one `cocoid`) is an error
  naming both rows: the folder mixes generation runs, and choosing one silently would change the training data.
"""

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .karpathy import iter_karpathy_batches
from .row_tables import RowTableWriter
from .sources import RowSource, open_source

logger = logging.getLogger(__name__)

SYNTHETIC_IMAGE_COLUMN = "synthetic_image"
SYNTHETIC_CAPTION_COLUMN = "synthetic_caption"
# The Karpathy splits of each training split (docs/spec/pacs.md#training: restval trains).
KARPATHY_TRAINING_SPLITS = {"train": ("train", "restval"), "validation": ("val",)}


class SyntheticDataError(InputError):
    """The synthetic data cannot be joined to the captions; the message names the rows and the fix."""


@dataclass
class TrainingRows:
    """One split's rows: a memory-mapped `datasets.Dataset` with `image`, `caption`, `cocoid`, `sentid`,
    `synthetic_image` (a row number in `image_sources["synthetic_image"]`) and `synthetic_caption`."""

    dataset: object
    image_sources: dict[str, RowSource]
    digest: str
    num_captions: int
    skipped: dict[str, int] = field(default_factory=dict)


def sorted_index(keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keys sorted (stable), with the row number of each."""
    order = np.argsort(keys, kind="stable")
    return keys[order], rows[order]


def lookup(sorted_keys: np.ndarray, sorted_rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each wanted key in a sorted index, -1 where the key is absent."""
    positions = np.searchsorted(sorted_keys, wanted)
    positions = np.minimum(positions, max(len(sorted_keys) - 1, 0))
    found = (sorted_keys[positions] == wanted) if len(sorted_keys) else np.zeros(len(wanted), dtype=bool)
    return np.where(found, sorted_rows[positions] if len(sorted_rows) else -1, -1)


def key_array(table: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with 0 for nulls, validity) of a key column."""
    values = table.column(column)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    return pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.int64), valid


ROW_SCHEMA = pa.schema(
    [
        ("image", pa.string()),
        ("caption", pa.string()),
        ("cocoid", pa.int64()),
        ("sentid", pa.int64()),
        (SYNTHETIC_IMAGE_COLUMN, pa.int64()),
        (SYNTHETIC_CAPTION_COLUMN, pa.string()),
    ]
)


@dataclass
class SyntheticIndex:
    """The keys of the synthetic data, sorted for lookups: `sentid -> row` of the rows that hold an image, and
    `cocoid -> caption` (one per image). Built from one pass over the key columns; no image byte is read."""

    source: RowSource
    image_keys: np.ndarray
    image_rows: np.ndarray
    caption_keys: np.ndarray
    captions: pa.Array

    @classmethod
    def build(cls, source: RowSource) -> "SyntheticIndex":
        key_columns = [name for name in ("sentid", "cocoid", SYNTHETIC_CAPTION_COLUMN) if name in source.column_names]
        image_column = SYNTHETIC_IMAGE_COLUMN if SYNTHETIC_IMAGE_COLUMN in source.column_names else None
        keys, has_image = source.read(key_columns, image_column)
        image_keys, image_rows = cls.image_index(keys, has_image, source)
        caption_keys, captions = cls.caption_index(keys, source)
        return cls(source, image_keys, image_rows, caption_keys, captions)

    @staticmethod
    def image_index(keys: pa.Table, has_image: np.ndarray | None, source: RowSource):
        """Sorted sentids of the rows that hold an image, and those rows; a sentid twice is an error."""
        if has_image is None or "sentid" not in keys.column_names:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        sentids, valid = key_array(keys, "sentid")
        usable = valid & has_image
        sorted_keys, rows = sorted_index(sentids[usable], np.flatnonzero(usable))
        duplicate = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
        if duplicate.size:
            first = int(duplicate[0])
            raise SyntheticDataError(
                f"{source}: sentid {int(sorted_keys[first])} has two synthetic images "
                f"({source.describe_row(int(rows[first]))} and {source.describe_row(int(rows[first + 1]))}; "
                f"{duplicate.size} duplicated sentids in all): the folder mixes generation runs; keep one run's shards"
            )
        return sorted_keys, rows

    @staticmethod
    def caption_index(keys: pa.Table, source: RowSource) -> tuple[np.ndarray, pa.Array]:
        """Sorted cocoids and their caption; one cocoid with two different captions is an error."""
        if SYNTHETIC_CAPTION_COLUMN not in keys.column_names or "cocoid" not in keys.column_names:
            return np.zeros(0, np.int64), pa.array([], pa.string())
        cocoids, valid = key_array(keys, "cocoid")
        captions = keys.column(SYNTHETIC_CAPTION_COLUMN)
        valid &= captions.is_valid().to_numpy(zero_copy_only=False)
        sorted_keys, rows = sorted_index(cocoids[valid], np.flatnonzero(valid))
        # The generator writes an image's caption on each of its rows: equal copies are expected, different ones
        # are not.
        starts = np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[:1] - 1)) if len(rows) else rows
        first_of_row = np.repeat(starts, np.diff(np.append(starts, len(sorted_keys))))
        same = pc.equal(captions.take(pa.array(rows)), captions.take(pa.array(rows[first_of_row])))
        conflicts = np.flatnonzero(~same.to_numpy(zero_copy_only=False))
        if conflicts.size:
            bad = int(conflicts[0])
            raise SyntheticDataError(
                f"{source}: cocoid {int(sorted_keys[bad])} has two different synthetic captions "
                f"({source.describe_row(int(rows[first_of_row[bad]]))} and {source.describe_row(int(rows[bad]))}; "
                f"{conflicts.size} conflicting rows in all): the folder mixes generation runs; keep one run's shards"
            )
        return sorted_keys[starts], captions.take(pa.array(rows[starts])).combine_chunks()

    def join(self, captions: pa.Table | pa.RecordBatch) -> pa.Table:
        """Karpathy caption rows with `synthetic_image` (the synthetic row of the caption's `sentid`, null if none)
        and `synthetic_caption` (the caption generated for the image's `cocoid`, null if none)."""
        captions = pa.Table.from_batches([captions]) if isinstance(captions, pa.RecordBatch) else captions
        image_refs = lookup(self.image_keys, self.image_rows, key_array(captions, "sentid")[0])
        caption_refs = lookup(self.caption_keys, np.arange(len(self.caption_keys)), key_array(captions, "cocoid")[0])
        columns = [captions.column(name) for name in ("image", "caption", "cocoid", "sentid")]  # not `split`
        columns.append(pa.array(image_refs, type=pa.int64(), mask=image_refs < 0))
        columns.append(self.captions.take(pa.array(np.maximum(caption_refs, 0), mask=caption_refs < 0)))
        return pa.Table.from_arrays(columns, schema=ROW_SCHEMA)


def join_synthetic(captions: pa.Table, source: RowSource) -> pa.Table:
    """[`SyntheticIndex.join`] of caption rows with the synthetic data of `source`."""
    return SyntheticIndex.build(source).join(captions)


def karpathy_training_rows(
    karpathy_json: str | Path,
    image_root: str | Path,
    synthetic_data: str | Path,
    directory: str | Path,
    use_synthetic_images: bool = True,
    use_synthetic_captions: bool = True,
    splits: dict[str, tuple[str, ...]] = KARPATHY_TRAINING_SPLITS,
) -> dict[str, TrainingRows]:
    """The training and validation rows of COCO Karpathy with their synthetic positives, as memory-mapped row tables
    in `directory`. Rows lacking a synthetic value whose loss term is on are skipped and logged.

    Streaming: the synthetic data's keys are indexed once, then the Karpathy captions are read, joined and written a
    batch at a time, so the memory is that index (16 bytes a synthetic row, and one caption a synthetic image) and a
    batch, whatever the corpus size.

    Example:

    ```python
    >>> rows = karpathy_training_rows("dataset_coco.json", "coco/", "synthetic/", "runs/pacs/training-data")
    >>> train = rows["train"]
    >>> collator = PACSDataCollator(model, image_sources=train.image_sources)
    ```
    """
    import datasets

    started = time.perf_counter()
    source = open_source(synthetic_data, "--synthetic_data")
    required = [SYNTHETIC_IMAGE_COLUMN] * use_synthetic_images + [SYNTHETIC_CAPTION_COLUMN] * use_synthetic_captions
    absent = [column for column in required if column not in source.column_names]
    if absent:
        raise SyntheticDataError(
            f"{source}: no column(s) {absent} (it has {source.column_names}); the generator writes sentid, cocoid, "
            "synthetic_image and synthetic_caption. Set the loss weight of a missing column to 0 to train without it"
        )
    index = SyntheticIndex.build(source)
    captions_of = dict.fromkeys(splits, 0)
    skipped = {name: dict.fromkeys(required, 0) for name in splits}
    with contextlib.ExitStack() as stack:
        writers = {name: stack.enter_context(RowTableWriter(directory, name, ROW_SCHEMA)) for name in splits}
        wanted = {split for karpathy_splits in splits.values() for split in karpathy_splits}
        for batch in iter_karpathy_batches(karpathy_json, image_root, wanted):
            joined = index.join(batch)
            lacking = {column: ~joined.column(column).is_valid().to_numpy(zero_copy_only=False) for column in required}
            for name, karpathy_splits in splits.items():
                in_split = pc.is_in(batch.column("split"), value_set=pa.array(karpathy_splits))
                keep = in_split.to_numpy(zero_copy_only=False)
                captions_of[name] += int(keep.sum())
                for column, missing in lacking.items():
                    skipped[name][column] += int((missing & keep).sum())
                    keep = keep & ~missing
                writers[name].write(joined.filter(pa.array(keep)))
    result = {}
    for name, karpathy_splits in splits.items():
        num_captions, num_kept = captions_of[name], writers[name].num_rows
        if num_kept < num_captions:
            details = ", ".join(
                f"{count} without a {column.replace('_', ' ')}" for column, count in skipped[name].items()
            )
            logger.warning(
                f"{name}: {num_captions - num_kept} of {num_captions} rows lack synthetic data ({details}); skipped"
            )
        if num_captions and not num_kept:
            raise SyntheticDataError(
                f"{name}: none of the {num_captions} captions of the Karpathy split(s) {list(karpathy_splits)} has "
                f"its synthetic data in {source}: is it the synthetic data of this Karpathy file (keys sentid and "
                "cocoid)?"
            )
        dataset = datasets.Dataset.from_file(str(writers[name].path))
        result[name] = TrainingRows(
            dataset, {SYNTHETIC_IMAGE_COLUMN: source}, writers[name].digest, num_captions, skipped[name]
        )
    logger.info(
        "training data prepared in %.2f s: %s (synthetic data: %d rows in %s)",
        time.perf_counter() - started,
        ", ".join(f"{name} {len(rows.dataset)} rows" for name, rows in result.items()),
        source.num_rows,
        source,
    )
    return result


__all__ = [
    "KARPATHY_TRAINING_SPLITS",
    "ROW_SCHEMA",
    "SYNTHETIC_CAPTION_COLUMN",
    "SYNTHETIC_IMAGE_COLUMN",
    "SyntheticDataError",
    "SyntheticIndex",
    "TrainingRows",
    "join_synthetic",
    "karpathy_training_rows",
]
