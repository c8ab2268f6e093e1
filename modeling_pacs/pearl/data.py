"""Pearl's training data: the Spica layout (`spica_{train,val,test}.csv`) and the Nebula / Polaris layouts.

Every layout is read into rows `{"row", "image", "candidate", "references", "score"}`; malformed cells raise an error
that names the file, the row and the fix. Rows with `refs == []` are reference-free (SPEC-pearl A14) and are counted
and logged at load time.
"""

import ast
import csv
import json
import logging
import math
from pathlib import Path

logger = logging.getLogger(__name__)

# Column names of each layout (SPEC-pearl §6): image, candidate, references, human score.
LAYOUTS = {
    "spica": {"image": "imgid", "candidate": "mt", "references": "refs", "score": "score"},
    "nebula": {"image": "file_name", "candidate": "mt", "references": "refs", "score": "human_score"},
    "polaris": {"image": "img", "candidate": "cand", "references": "refs", "score": "human_score"},
}
# Pearl's code marks reference-free rows with this sentinel; it means the same as `[]`.
NO_REFS_SENTINEL = "NO REFS!!!"


def parse_references(cell, row: int, source: str) -> list[str]:
    """A `refs` cell (Python-literal or JSON list of str, or an actual list) as a list; `[]`/empty means none."""
    if isinstance(cell, (list, tuple)):
        value = list(cell)
    elif cell is None or (isinstance(cell, str) and cell.strip() in ("", "[]")):
        value = []
    elif isinstance(cell, str):
        try:
            value = ast.literal_eval(cell.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as error:
            raise ValueError(
                f"{source} row {row}: refs cell {cell[:80]!r} is not a list literal ({type(error).__name__}): "
                "write it as ['first reference', 'second reference'] or [] for none"
            ) from None
    else:
        raise ValueError(f"{source} row {row}: refs cell is {type(cell).__name__}, expected a list of strings")
    if not isinstance(value, (list, tuple)) or not all(isinstance(reference, str) for reference in value):
        raise ValueError(
            f"{source} row {row}: refs cell {str(cell)[:80]!r} must be a list of strings, e.g. ['a dog'] or []"
        )
    return [reference for reference in value if reference != NO_REFS_SENTINEL]


def parse_score(cell, row: int, source: str) -> float:
    try:
        score = float(cell)
    except (TypeError, ValueError):
        raise ValueError(f"{source} row {row}: score {cell!r} is not a number") from None
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise ValueError(f"{source} row {row}: score {cell!r} must be a finite number in [0, 1] (normalise it first)")
    return score


def rows_from_records(records, layout: str, source: str) -> list[dict]:
    """Map records (dicts, e.g. CSV rows or `datasets` rows) of `layout` to Pearl rows, validating each."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: expected one of {sorted(LAYOUTS)}")
    columns = LAYOUTS[layout]
    rows = []
    for row, record in enumerate(records):
        missing = [column for column in columns.values() if column not in record]
        if missing:
            raise ValueError(f"{source} row {row}: missing column(s) {missing} of the {layout} layout ({columns})")
        candidate = record[columns["candidate"]]
        if not isinstance(candidate, str):
            raise ValueError(f"{source} row {row}: candidate {candidate!r} is not a string")
        image = record[columns["image"]]
        if isinstance(image, dict):
            image = image.get("path")
        if not isinstance(image, str) or not image:
            raise ValueError(f"{source} row {row}: image column {columns['image']!r} must name an image file")
        rows.append(
            {
                "row": row,
                "image": image,
                "candidate": candidate,
                "references": parse_references(record[columns["references"]], row, source),
                "score": parse_score(record[columns["score"]], row, source),
            }
        )
    reference_free = sum(1 for row in rows if not row["references"])
    logger.info("%s: %d rows, %d of them reference-free (refs == [])", source, len(rows), reference_free)
    return rows


def read_rows(path: str | Path, layout: str = "spica") -> list[dict]:
    """Read a `.csv` or `.jsonl` file of `layout` (row numbers in errors count data rows from 0)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file '{path}' does not exist")
    if path.suffix.lower() == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    elif path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            records = list(csv.DictReader(handle))
    else:
        raise ValueError(f"{path}: unsupported format {path.suffix!r} (use .csv or .jsonl)")
    return rows_from_records(records, layout, path.name)


def split_paths(data_dir: str | Path, layout: str = "spica") -> dict[str, Path]:
    """`{split: path}` of `<layout>_{train,val,test}.csv` (Spica: `spica_train.csv`, ...) that exist in `data_dir`."""
    data_dir = Path(data_dir)
    found = {split: data_dir / f"{layout}_{split}.csv" for split in ("train", "val", "test")}
    return {split: path for split, path in found.items() if path.is_file()}


__all__ = ["LAYOUTS", "parse_references", "read_rows", "rows_from_records", "split_paths"]
