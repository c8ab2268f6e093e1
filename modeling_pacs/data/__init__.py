"""Training data that stays on disk: readers for every trainer (PAC-S++, the captioner, Polos, Pearl, synthetic data).

One rule: no split is held in memory, and no image byte is read before a batch needs it.
- `karpathy`: the one COCO Karpathy reader (`dataset_coco.json` -> Arrow columns, one row per caption).
- `sources`: row sources over parquet files (read in place) and Arrow tables (memory-mapped): small columns,
  which rows hold an image, and the image values of a batch's rows.
- `row_tables`: the training rows as ids, text and references into sources, memory-mapped and content-addressed.
- `synthetic_pairs`: PAC-S++'s join of Karpathy captions with their synthetic positives, by key, in Arrow.

A new trainer's data goes through the same pieces: read its small columns from a source, build a row table whose image
column holds paths or row numbers, and let its collator call `RowSource.take_images` for the batch.
"""

from .karpathy import KARPATHY_SCHEMA, KarpathyFormatError, read_karpathy
from .row_tables import RowTableWriter, memory_mapped_rows, refuse_bytes, write_row_table
from .sources import (
    ArrowSource,
    ImageReference,
    ParquetSource,
    RowSource,
    SourceImages,
    image_presence,
    is_saved_dataset,
    load_datasets,
    open_source,
    resolve_references,
    select_split,
)
from .synthetic_pairs import SyntheticDataError, TrainingRows, join_synthetic, karpathy_training_rows

__all__ = [
    "KARPATHY_SCHEMA",
    "ArrowSource",
    "ImageReference",
    "KarpathyFormatError",
    "ParquetSource",
    "RowTableWriter",
    "RowSource",
    "SourceImages",
    "SyntheticDataError",
    "TrainingRows",
    "image_presence",
    "is_saved_dataset",
    "join_synthetic",
    "karpathy_training_rows",
    "load_datasets",
    "memory_mapped_rows",
    "open_source",
    "read_karpathy",
    "refuse_bytes",
    "resolve_references",
    "select_split",
    "write_row_table",
]
