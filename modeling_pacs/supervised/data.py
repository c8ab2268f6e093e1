"""Rows of human-judgement data for supervised caption metrics (Polos, Pearl): one reader for every layout.

Layouts (docs/spec/pearl.md#data, docs/spec/polos.md#training), each a mapping of the row fields to the file's columns:

| layout | image | candidate | references | score | where |
|---|---|---|---|---|---|
| `spica` | `imgid` | `mt` | `refs` | `score` | `spica_{train,val,test}.csv` (Pearl) |
| `polaris_csv` | `imgid` | `mt` | `refs` | `score` | the original `polaris_{train,val,test}.csv` (Polos) |
| `nebula` | `file_name` | `mt` | `refs` | `human_score` | `Ka2ukiMatsuda/Nebula` |
| `polaris` | `img` | `cand` | `refs` | `human_score` | `yuwd/Polaris` on the Hub (parquet) |

Every file (`.csv`, `.jsonl` or `.parquet`) is read into rows `{"row", "image", "candidate", "references", "score"}`
(`row` counts data rows from 0). A malformed cell raises a [`RowError`] naming the file, the row, the column and the
fix. Each metric keeps its recipe as arguments: Pearl reads references as optional (`refs == []` or Pearl's
`"NO REFS!!!"` sentinel: a reference-free row) and keeps image names as keys into its feature cache; Polos needs at
least one reference per row and resolves image names under an image folder, checking that each file exists.

Example:

```python
>>> from modeling_pacs.supervised.data import rows_from_records
>>> record = {"img": "a.jpg", "cand": "a dog", "refs": "['a brown dog']", "human_score": 0.5}
>>> rows_from_records([record], "polaris", "p")
[{'row': 0, 'image': 'a.jpg', 'candidate': 'a dog', 'references': ['a brown dog'], 'score': 0.5}]
```
"""

import ast
import csv
import json
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..caption_files import csv_records
from ..data.sources import ImageReference, ParquetSource, is_bytes_type, resolve_references
from ..data.validation import check_caption, check_data_path, check_images, check_not_empty
from ..errors import InputError
from ..input_paths import check_input_file

logger = logging.getLogger(__name__)

LAYOUTS = {
    "spica": {"image": "imgid", "candidate": "mt", "references": "refs", "score": "score"},
    "polaris_csv": {"image": "imgid", "candidate": "mt", "references": "refs", "score": "score"},
    "nebula": {"image": "file_name", "candidate": "mt", "references": "refs", "score": "human_score"},
    "polaris": {"image": "img", "candidate": "cand", "references": "refs", "score": "human_score"},
}
# Pearl's code marks reference-free rows with this sentinel; it means the same as `[]`.
NO_REFS_SENTINEL = "NO REFS!!!"
FORMATS = (".csv", ".jsonl", ".parquet")


class RowError(InputError):
    """A training or validation row is malformed; the message names the file, the row and the column."""


def row_error(source: str, row: int | str, column: str, problem: str) -> RowError:
    """`source: row 3 (line 5), column 'refs': problem`; `row` is the row index (0-based, as `rows_from_records`
    counts records), or that index with the file's line (`row_label`)."""
    return RowError(f"{source}: row {row}, column '{column}': {problem}")


def row_label(row: int, lines: Sequence[int] | None) -> int | str:
    """A row as errors name it: its index, and the line of the file it starts on when the file has lines (CSV: the
    header is line 1; JSON lines: blank lines are not rows)."""
    return row if lines is None else f"{row} (line {lines[row]})"


def in_split(error: RowError, split: str, path: str | Path) -> RowError:
    """A reader's `RowError` as a training command reports it: with the split and the fix, as every training-data
    error is (`modeling_pacs.data.validation`)."""
    return RowError(
        f"{error} (split '{split}'). Fix: correct the file '{path}' as said, or drop the row, then rerun (the layouts' "
        "columns and cell formats: docs/spec/pearl.md#data)"
    )


def check_target(value: Any, source: str, row: int, column: str, low: float = 0.0, high: float = 1.0) -> float:
    """A finite float within [low, high], or a `RowError` naming the row and column."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise row_error(source, row, column, f"{value!r} is not a number") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise row_error(
            source, row, column, f"{value!r} is not a finite number in [{low}, {high}] (normalise the scores first)"
        )
    return number


def check_references(value: Any, source: str, row: int, column: str = "refs", required: bool = True) -> list[str]:
    """A list of reference strings from a list or a Python-literal / JSON list cell (parsed without `eval`).

    `required=False` (Pearl) reads an empty cell, `[]` or `["NO REFS!!!"]` as a reference-free row; `required=True`
    (Polos, which has no reference-free mode) needs at least one reference.
    """
    none_hint = " or [] for none" if not required else ""
    if value is None:
        parsed = []
    elif isinstance(value, str):
        text = value.strip()
        try:
            parsed = ast.literal_eval(text) if text else []
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise row_error(
                source,
                row,
                column,
                f"{value[:80]!r} is not a Python list literal: write it as ['a reference', 'another']{none_hint}",
            ) from None
    else:
        parsed = value
    if not isinstance(parsed, (list, tuple)) or not all(isinstance(reference, str) for reference in parsed):
        shown = str(value)[:80]
        raise row_error(source, row, column, f"{shown!r} must be a list of strings, e.g. ['a dog']{none_hint}")
    references = [reference for reference in parsed if reference != NO_REFS_SENTINEL]
    if required and not references:
        problem = f"expected a non-empty list of reference strings, got {value!r}"
        raise row_error(source, row, column, f"{problem}: this metric has no reference-free mode, drop the row")
    return references


def check_image(value: Any, source: str, row: int, column: str, image_root: Path | None, image_bytes: bool):
    """An image name (resolved under `image_root`, which must then hold it), or with `image_bytes` an image struct
    `{"bytes", "path"}` as `datasets` and parquet store it."""
    if isinstance(value, ImageReference) and image_bytes:
        return value  # an image left in its parquet file, read by the collator for its batch
    if isinstance(value, dict):
        if image_bytes and (value.get("bytes") or value.get("path")):
            return {"bytes": value.get("bytes"), "path": value.get("path")}
        value = value.get("path")
    if not isinstance(value, str) or not value.strip():
        wanted = "an image (bytes or path)" if image_bytes else "an image file name"
        raise row_error(source, row, column, f"expected {wanted}, got {value!r}")
    if image_root is None:
        return value
    image = image_root / value.strip()
    if not image.is_file():
        raise row_error(source, row, column, f"image '{image}' does not exist")
    return str(image)


def check_columns(present: Iterable[str], layout: str, source: str, where: str = "") -> None:
    columns = list(LAYOUTS[layout].values())
    missing = [column for column in columns if column not in set(present)]
    if missing:
        raise RowError(f"{source}: {where}missing columns {missing} (the {layout} layout has {columns})")


def rows_from_records(
    records: Iterable[dict],
    layout: str,
    source: str,
    references_required: bool = False,
    image_root: str | Path | None = None,
    image_bytes: bool = False,
    lines: Sequence[int] | None = None,
) -> list[dict]:
    """Map records (dicts: CSV rows, JSON lines, `datasets` or parquet rows) of `layout` to checked rows.

    Args:
        lines: the line of the file each record starts on (`read_records`), named in errors with the row.
        references_required: every row needs a reference (Polos); by default a row may be reference-free (Pearl).
        image_root: resolve image names under this folder and check that each file exists (Polos's CSVs).
        image_bytes: keep image structs (`{"bytes", "path"}`) as they are (Polos decodes them); otherwise an image
            is a name, the key of Pearl's feature cache.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: expected one of {sorted(LAYOUTS)}")
    columns = LAYOUTS[layout]
    root = Path(image_root) if image_root is not None else None
    rows = []
    for row, record in enumerate(records):
        label = row_label(row, lines)
        check_columns(record, layout, source, where=f"row {label}: ")
        candidate = record[columns["candidate"]]
        if not isinstance(candidate, str):
            raise row_error(source, label, columns["candidate"], f"expected a string, got {candidate!r}")
        rows.append(
            {
                "row": row,
                "image": check_image(record[columns["image"]], source, label, columns["image"], root, image_bytes),
                "candidate": candidate,
                "references": check_references(
                    record[columns["references"]], source, label, columns["references"], references_required
                ),
                "score": check_target(record[columns["score"]], source, label, columns["score"]),
            }
        )
    reference_free = sum(1 for row in rows if not row["references"])
    logger.info("%s: %d rows, %d of them reference-free (refs == [])", source, len(rows), reference_free)
    return rows


def read_records(path: Path, layout: str, image_bytes: bool = False) -> tuple[list[dict], list[int] | None]:
    """The records of a `.csv`, `.jsonl` or `.parquet` file, after checking its columns against `layout`, and the
    line each record starts on (None for parquet, which has no lines)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
        check_columns(header, layout, path.name)
        with path.open(newline="", encoding="utf-8") as handle:
            numbered = list(csv_records(handle))
        return [record for _, record in numbered], [line for line, _ in numbered]
    if suffix == ".jsonl":
        records, lines = [], []
        with path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise RowError(
                        f"{path.name}: line {line_number} is not JSON ({error.msg}): one JSON object per line"
                    ) from None
                lines.append(line_number)
        return records, lines
    if suffix == ".parquet":
        return read_parquet_records(path, layout, image_bytes), None
    raise ValueError(f"{path}: unsupported format {path.suffix!r} (use one of {list(FORMATS)})")


def read_parquet_records(path: Path, layout: str, image_bytes: bool) -> list[dict]:
    """The records of a parquet file with their text and scores read and their images left in the file: with
    `image_bytes`, an image column of bytes gives an [`ImageReference`] per row (None where a row has none);
    otherwise each image is its path (the key of Pearl's feature cache). No image byte is read here."""
    source = ParquetSource([path], root=path.parent, name=path.name)
    check_columns(source.column_names, layout, path.name)
    image_column = LAYOUTS[layout]["image"]
    small = [column for column in LAYOUTS[layout].values() if column != image_column]
    image_type = source.schema.field(image_column).type
    if image_bytes and (is_bytes_type(image_type) or pa.types.is_struct(image_type)):
        table, present = source.read(small, image_column)
        images = [ImageReference(source, image_column, row) if present[row] else None for row in range(len(table))]
    else:
        table, images = source.read_columns(small), source.image_paths(image_column)
    records = table.to_pylist()
    for record, image in zip(records, images):
        record[image_column] = image
    return records


def read_rows(
    path: str | Path,
    layout: str = "spica",
    references_required: bool = False,
    image_root: str | Path | None = None,
    image_bytes: bool = False,
) -> list[dict]:
    """Read and check a data file of `layout`; the options are [`rows_from_records`]'s."""
    path = Path(path)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: expected one of {sorted(LAYOUTS)}")
    check_input_file(path, "data file", f"the data file itself ({', '.join(FORMATS)})", missing=FileNotFoundError)
    records, lines = read_records(path, layout, image_bytes)
    return rows_from_records(records, layout, path.name, references_required, image_root, image_bytes, lines)


def validate_rows(
    rows: list[dict],
    source: str,
    split: str,
    layout: str,
    decode_images: bool = False,
    skip_bad_images: bool = False,
) -> list[dict]:
    """Refuse a split that cannot be trained on before any step runs: no rows, an empty candidate or reference, and
    with `decode_images` (Polos, which encodes images while training) an image that does not decode; with
    `skip_bad_images` such rows are dropped and counted in a log line instead (`modeling_pacs.data.validation`)."""
    check_not_empty(len(rows), source, split)
    columns = LAYOUTS[layout]
    for row in rows:
        check_caption(row["candidate"], source, split, row["row"], columns["candidate"])
        for reference in row["references"]:
            check_caption(reference, source, split, row["row"], columns["references"])
    if not decode_images:
        return rows
    numbers = [row["row"] for row in rows]
    bad = set(
        check_images(
            numbers,
            lambda positions: resolve_references([rows[position]["image"] for position in positions]),
            source,
            split,
            columns["image"],
            skip_bad_images,
        )
    )
    if bad:
        rows = [row for row in rows if row["row"] not in bad]
        check_not_empty(len(rows), source, f"{split}, after skipping the rows whose image does not decode")
    return rows


def split_paths(data_dir: str | Path, layout: str = "spica") -> dict[str, Path]:
    """`{split: path}` of `<name>_{train,val,test}.csv` that exist in `data_dir` (`spica_train.csv`, ...; the
    `polaris_csv` layout's files are `polaris_train.csv`, ...)."""
    data_dir = Path(data_dir)
    name = layout.removesuffix("_csv")
    found = {split: data_dir / f"{name}_{split}.csv" for split in ("train", "val", "test")}
    return {split: path for split, path in found.items() if path.is_file()}


def read_training_splits(
    train: Path, validation: Path, read: Callable[[Path], tuple[list[dict], str]], skip_bad_images: bool = False
) -> dict[str, list[dict]]:
    """`{"train": rows, "validation": rows}` as a training command (`train_polos.py`, `train_deneb.py`) checks them
    before any model is built: each path checked (`--train`, `--validation`), read with `read(path) -> (rows,
    layout)` (a reader's `RowError` gets the split and the fix, `in_split`), then `validate_rows` with the images
    decoded (rows whose image does not decode dropped and counted with `skip_bad_images`)."""
    splits = {}
    for split, path in (("train", train), ("validation", validation)):
        check_data_path(path, f"--{split}")
        try:
            rows, layout = read(path)
        except RowError as error:
            raise in_split(error, split, path) from None
        splits[split] = validate_rows(rows, path.name, split, layout, True, skip_bad_images)
    return splits


__all__ = [
    "read_training_splits",
    "LAYOUTS",
    "NO_REFS_SENTINEL",
    "RowError",
    "check_image",
    "check_references",
    "check_target",
    "in_split",
    "read_rows",
    "row_error",
    "rows_from_records",
    "split_paths",
    "validate_rows",
]
