"""What every benchmark loader returns, and the file readers they share (docs/spec/benchmarks.md).

An item is one scored caption: `{"id", "image" or "video", "candidate", "references", ...}` plus the fields its
protocol needs (human rating, pair, category). Ids are stable strings built from the original files, so scores
computed by any metric can be matched back to items.
"""

import ast
import csv
import hashlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..caption_files import csv_records
from ..errors import InputError

logger = logging.getLogger("pacs_pp.benchmarks")

DOCS = "docs/guides/benchmark-releases.md"


RATED_CSV_LAYOUT = "a CSV with columns mt, refs (a Python list literal), score, imgid"


class BenchmarkDataError(InputError):
    """A benchmark file is missing or does not have the layout of the original release."""


def data_error(path: Path, problem: str, layout: str, benchmark: str) -> BenchmarkDataError:
    return BenchmarkDataError(f"{path}: {problem}. Expected {layout} (see {DOCS}, '{benchmark}').")


@dataclass
class BenchmarkOptions:
    """Protocol switches; each default is the official code's behaviour (docs/spec/benchmarks.md#disagreements), the
    alternative the papers'. Every report states the values used."""

    official_rounding: bool = False  # Polos/DENEB: raw coefficient rounded to 4 decimals (CSV benchmarks)
    composite_remove_candidate: bool = False  # DENEB CSV / HF copy: drop references equal to the candidate (paper)
    composite_rating: str = "correctness"  # AMT_eval files: "correctness", "thoroughness" or "mean" of the two
    composite_keep_candidate: bool = False  # AMT_eval files: keep source references equal to the candidate
    pascal_references: str = "all"  # "all" 48 (official) or "draws" (paper: 5 draws of 5)
    pascal_draws: int = 5
    pascal_per_draw: int = 5
    pascal_seed: int = 0
    pascal_ties: str = "b"  # metric tie counts as B (official), "a", or "wrong"
    foil_pairs: str = "all"  # "all" (official), "one_per_image", "subset8k" (PAC-S++ paper)
    foil_four_refs: str = "all"  # "all" remaining (official) or "four" (paper)
    vatex_rounding: bool = True  # EMScore rounds predictions and results to 4 decimals
    detailcaps_judge_scale: float = 1.0  # DetailCaps: GPT-4 scores divided by this for 1-R^2 only (scale unverified)


@dataclass
class Benchmark:
    """Items of one benchmark and the protocol that turns per-item scores into the paper's statistics.

    Example:
        >>> from modeling_pacs.evaluation import load_benchmark
        >>> benchmark = load_benchmark("flickr8k_expert", "data/flickr8k")  # doctest: +SKIP
        >>> scores = {item["id"]: 1.0 for item in benchmark.items}  # doctest: +SKIP
        >>> benchmark.evaluate(scores)  # doctest: +SKIP
        {'kendall_tau_b': nan, 'kendall_tau_c': nan}
    """

    name: str
    items: list[dict]
    files: list[Path]
    protocol: dict[str, Any]
    evaluate: Callable[[dict[str, float]], dict[str, float]]
    human_field: str | None = None  # the item field a plot puts on its x axis
    modality: str = "image"
    options: dict[str, Any] = field(default_factory=dict)


def require_file(path: Path, layout: str, benchmark: str) -> Path:
    if not path.is_file():
        raise data_error(path, "file not found", layout, benchmark)
    return path


def read_json(path: Path, layout: str, benchmark: str) -> Any:
    require_file(path, layout, benchmark)
    try:
        return json.loads(path.read_text(encoding="utf-8"))  # accepts the bare NaN tokens json.dumps writes
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise data_error(path, f"not valid JSON ({error})", layout, benchmark) from error


def read_tab_lines(path: Path, num_fields: int, layout: str, benchmark: str) -> list[list[str]]:
    """Non-empty lines split on tabs after `strip()`, as the original scripts read them."""
    require_file(path, layout, benchmark)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        if len(fields) != num_fields:
            raise data_error(path, f"line {number} has {len(fields)} tab-separated fields", layout, benchmark)
        rows.append(fields)
    return rows


def read_rated_csv(path: Path, benchmark: str) -> list[dict]:
    """The Polos/DENEB CSV (`mt, refs, score, imgid`; `refs` a Python list literal), rows in file order."""
    layout = RATED_CSV_LAYOUT
    require_file(path, layout, benchmark)
    with path.open(newline="", encoding="utf-8") as handle:
        missing = {"mt", "refs", "score", "imgid"} - set(next(csv.reader(handle), []))
    if missing:
        raise data_error(path, f"columns {sorted(missing)} are missing", layout, benchmark)
    rows = []
    with path.open(newline="", encoding="utf-8") as handle:
        for index, (line, row) in enumerate(csv_records(handle)):
            where = f"row {index} (line {line})"  # a quoted cell may span lines: the row's first line
            try:
                references = ast.literal_eval(row["refs"])  # the official code eval()s it; literal_eval is safe
                score = float(row["score"])
            except (ValueError, SyntaxError, TypeError) as error:
                raise data_error(path, f"{where}: unreadable refs or score ({error})", layout, benchmark) from error
            if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
                raise data_error(path, f"{where}: refs is not a list of strings", layout, benchmark)
            rows.append({"mt": row["mt"], "refs": references, "score": score, "imgid": row["imgid"]})
    return rows


def first_existing(candidates: list[Path]) -> Path:
    """The first folder that exists, else the first one (errors then name the preferred location)."""
    return next((path for path in candidates if path.is_dir()), candidates[0])


def checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def normalise_spaces(text: str) -> str:
    """pacscore/clipscore's `" ".join(s.split())`."""
    return " ".join(text.split())


def scores_for(items: list[dict], scores: dict[str, float]) -> list[float]:
    """The score of each item, in item order; a missing or non-finite score names the item."""
    values = []
    for item in items:
        value = scores.get(item["id"])
        if value is None:
            raise ValueError(f"no score for item '{item['id']}': the scores must cover every item of the benchmark")
        if not math.isfinite(value):
            others = sum(1 for other in items if not math.isfinite(scores.get(other["id"]) or 0.0)) - 1
            raise ValueError(
                f"score of item '{item['id']}' is {value}"
                + (f" (and {others} more item(s))" if others else "")
                + ": scores must be finite numbers (an LLM judge scores NaN where its answer gives no number: its "
                "statistics need an answer for every item)"
            )
        values.append(float(value))
    return values


def parse_named(value: str, what: str) -> tuple[str, Path]:
    """A `NAME=FILE` option (`--scores`, `--captions`): the name defaults to the file's stem, except for captions."""
    name, separator, path = value.partition("=")
    if not separator:
        if what == "--captions":
            raise ValueError(f"--captions takes SYSTEM=FILE, got {value!r}")
        return Path(value).stem, Path(value)
    if not name or not path:
        raise ValueError(f"{what} takes NAME=FILE, got {value!r}")
    return name, Path(path)
