"""Caption files in, score files out: what `pacs-score`, corpus scoring and the evaluation harness read and write.

Inputs are a JSON mapping `{image: caption | [captions]}`, JSON lines or CSV with `image`, `caption` and optional
`references`; relative image paths are resolved against an image root. Outputs are JSON (summary and items), JSON
lines or CSV (items and a MEAN row), written by the callers atomically.
"""

import csv
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import input_paths
from .csv_output import csv_text
from .errors import InputError, name_item, with_message
from .models.media import is_url
from .output_paths import strict_json

# ---------------------------------------------------------------------------------------------------- text files
CAPTIONS_FILE = (
    "the captions file itself (.json, .jsonl or .csv), which lists the images (or videos) and their captions"
)
REFERENCES_FILE = "the references file itself, a JSON object {image_path: [reference, ...]}"


def check_input_file(path: Path, what: str = "input file", expected: str = CAPTIONS_FILE) -> None:
    """Refuse a path that is not a readable file: a missing one, or a directory (with its own message)."""
    input_paths.check_input_file(path, what, expected)


def not_utf8_error(path: Path) -> InputError:
    """The error for a text file that is not UTF-8: it names the file, the first line (and, for a CSV file, the row)
    that cannot be decoded, and how to re-save the file as UTF-8."""
    path = Path(path)
    lines: list[bytes] = []  # the lines up to the first that does not decode
    with path.open("rb") as handle:
        for raw in handle:
            lines.append(raw)
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                bad_byte, column = raw[error.start], error.start + 1
                break
        else:
            return InputError(f"{path}: not UTF-8 text: re-save it as UTF-8")  # cut inside a character at the end
    where = f"line {len(lines)}"
    if path.suffix.lower() == ".csv":
        where = f"row {csv_row_of_line(lines, len(lines))} ({where})"
    encoding = "cp1252" if 0x80 <= bad_byte <= 0x9F else "latin1"  # 0x80-0x9f are Windows-1252's letters and quotes
    fixed = path.with_name(f"{path.stem}.utf8{path.suffix}")
    return InputError(
        f"{path}: {where} is not UTF-8 text (byte 0x{bad_byte:02x} at byte {column} of the line; the file was "
        f"probably saved as {'Windows-1252' if encoding == 'cp1252' else 'Latin-1'}): re-save it as UTF-8, e.g. "
        f"`iconv -f {encoding} -t utf-8 '{path}' > '{fixed}'`"
        + (", or 'CSV UTF-8' in a spreadsheet's Save As" if path.suffix.lower() == ".csv" else "")
    )


def csv_records(handle: Iterable[str]) -> Iterator[tuple[int, dict]]:
    """`(line, record)` of each row of an open CSV file, the records as `csv.DictReader` makes them (the first row
    names the columns, empty lines are skipped, a short row gets None cells), with the line each starts on: the header
    is line 1, and a quoted cell may span lines. A quote left open refuses the file (`csv_lines`)."""
    header: list[str] = []
    for line, cells in csv_lines(handle):
        if line == 1:
            header = cells
        elif cells:
            record = dict(zip(header, cells))
            record.update(dict.fromkeys(header[len(cells) :]))
            yield line, record


def csv_lines(handle: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """`(line, cells)` of each row of an open CSV file (`[]` for a blank line) with the line it starts on, as the csv
    module's default dialect reads them, except for a quoted cell that is never closed: read leniently, it swallows
    every later line, rows included, into one cell (a silent loss). Only the last row can hold one, so that row's
    lines are read again strictly at the end, and an open quote is an error naming the line where the cell opens."""
    raw: list[str] = []

    def recorded() -> Iterator[str]:
        for text in handle:
            raw.append(text)
            yield text

    reader = csv.reader(recorded())
    before, last = 0, []
    for cells in reader:
        last = raw[:]
        raw.clear()
        yield before + 1, cells
        before = reader.line_num
    try:
        list(csv.reader(last, strict=True))
    except csv.Error as error:
        if "unexpected end of data" in str(error):
            name = getattr(handle, "name", "the CSV file")
            line = before - len(last) + 1
            raise InputError(
                f"{name}: line {line}: a quoted cell opens on this line and is never closed, so every later line "
                'is read as part of it; close the quote (a quote inside a quoted cell is written "")'
            ) from None
        # another strict-only complaint (a stray quote inside a cell): the default dialect keeps it as text


def csv_row_of_line(raw_lines: list[bytes], line_number: int) -> int:
    """The data row (0-based, after the header) of a CSV file that line `line_number` (1-based) belongs to; a quoted
    cell may span lines."""
    text = [raw.decode("utf-8-sig" if index == 0 else "utf-8", errors="replace") for index, raw in enumerate(raw_lines)]
    reader = csv.reader(text)
    for record, _ in enumerate(reader):
        if reader.line_num >= line_number:
            return record - 1
    return max(0, reader.line_num - 1)


def check_utf8(path: Path) -> None:
    """Refuse a text file that is not UTF-8 (one streaming pass over its bytes), before any work depends on it."""
    with Path(path).open("rb") as handle:
        for raw in handle:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise not_utf8_error(path) from None


@contextmanager
def utf8_errors(path: Path):
    """Turn a `UnicodeDecodeError` of reading `path` as text into `not_utf8_error` (file, line, row and fix)."""
    try:
        yield
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None


# ---------------------------------------------------------------------------------------------------- reading
def resolve_image(image, image_root: Path):
    """Relative paths (and `~`) are resolved against `image_root`; other image values go to the engine as they are."""
    if isinstance(image, str) and not is_url(image):  # a URL stays one: the engine refuses it by name
        path = Path(os.path.expanduser(image))
        return str(path if path.is_absolute() else image_root / path)
    if isinstance(image, dict) and image.get("bytes") is None and image.get("path"):
        return resolve_image(image["path"], image_root)
    return image


def load_json_file(path: Path):
    """Parse a JSON file; errors name the file, line and column, and repeated object keys are refused."""

    def unique_keys(pairs: list[tuple]) -> dict:
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(
                    f"{path}: the key '{key}' appears twice, so one of its values would be lost: merge them "
                    "(several captions of one image go in a list)"
                )
            seen[key] = value
        return seen

    try:
        return json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=unique_keys)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from None
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None


def captions_of(image: str, value, input_path: Path) -> list[str]:
    """The captions of one image in a JSON mapping: a string or a list of strings."""
    captions = [value] if isinstance(value, str) else value
    if not isinstance(captions, list) or not all(isinstance(caption, str) for caption in captions):
        raise ValueError(
            f"{input_path}: the captions of '{image}' are {json.dumps(value)[:80]}: expected a string or a list of "
            "strings"
        )
    return captions


def read_json_lines(path: Path):
    """`(line number, object)` of each non-blank line of a JSON lines file; a line that is not JSON is an error
    naming the file and the line (a byte-order mark is tolerated)."""
    with utf8_errors(path), Path(path).open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield line_number, json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: line {line_number} is not valid JSON: {error.msg}") from None


def read_items(input_path: Path, image_root: Path) -> list[dict]:
    """Read (image, caption, references) items from a JSON mapping, JSONL or CSV file."""
    check_input_file(input_path)
    suffix = input_path.suffix.lower()
    lines: list[int] = []  # the line each item starts on (JSON lines, CSV)
    if suffix == ".json":
        mapping = load_json_file(input_path)
        if not isinstance(mapping, dict):
            raise ValueError(f"{input_path}: a JSON input must be an object {{image_path: caption or [captions]}}")
        items = [
            {"image": image, "caption": caption}
            for image, value in mapping.items()
            for caption in captions_of(image, value, input_path)
        ]
    elif suffix == ".jsonl":
        items = []
        for line_number, item in read_json_lines(input_path):
            if not isinstance(item, dict):
                raise ValueError(f'{input_path}: line {line_number} is not a JSON object {{"image", "caption"}}')
            items.append(item)
            lines.append(line_number)
    elif suffix == ".csv":
        # utf-8-sig: a byte-order mark (Excel writes one) must not rename the first column
        with utf8_errors(input_path), input_path.open(newline="", encoding="utf-8-sig") as handle:
            numbered = list(csv_records(handle))
        items, lines = [item for _, item in numbered], [line for line, _ in numbered]
        for row, item in enumerate(items):
            cell = item.pop("references", None)
            if cell is None or not cell.strip():
                continue  # no references for this row: its reference-based cells are empty (results.score_items)
            try:
                item["references"] = json.loads(cell)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{input_path}: row {row} (line {lines[row]}): the references cell is not a JSON list "
                    f'({error.msg}); write it as ["first reference", "second reference"]'
                ) from None
    else:
        raise ValueError(f"{input_path}: unsupported input format '{suffix}' (use .json, .jsonl or .csv)")
    if not items:
        raise ValueError(f"{input_path} holds no captions: nothing to score")
    for row, item in enumerate(items):
        where = f"row {row} (line {lines[row]})" if lines else f"row {row}"
        if "image" not in item and "video" in item:
            item["image"] = item.pop("video")
        missing = [column for column in ("image", "caption") if column not in item]
        if missing:
            raise ValueError(f"{input_path}: {where} lacks {missing} (each item needs 'image' and 'caption')")
        if not isinstance(item["image"], str):
            raise ValueError(f"{input_path}: {where}: the image is {item['image']!r}: expected a path string")
        item["image_path"] = resolve_image(item["image"], image_root)
    return items


def row_lines(path: Path, rows: set[int]) -> dict[int, int]:
    """The line of `path` (1-based) where each of `rows` (0-based input rows, as the readers count them) starts: for
    JSON lines, blank lines are not rows; for CSV, line 1 is the header, a quoted cell may span lines, and an empty line
    is not a row (`csv.DictReader`). Read again on an error only, so scoring keeps no line numbers."""
    found: dict[int, int] = {}
    if not rows:
        return found
    with path.open(newline="", encoding="utf-8-sig") as handle:
        if path.suffix.lower() == ".csv":
            for row, (line, _) in enumerate(csv_records(handle)):
                if row in rows:
                    found[row] = line
                if row >= max(rows):
                    break
        else:
            row = 0
            for line_number, line in enumerate(handle, start=1):
                if line.strip():
                    if row in rows:
                        found[row] = line_number
                    row += 1
                    if row > max(rows):
                        break
    return found


def json_entry(path: Path, row: int) -> str | None:
    """Where row `row` (0-based, as `read_items` counts them) of a JSON mapping `{image: caption | [captions]}` sits:
    `["cat.png"]`, or `["cat.png"][1]` for the second caption of a list; None when the file has no such row."""
    mapping = load_json_file(path)
    for image, value in mapping.items() if isinstance(mapping, dict) else ():
        count = len(value) if isinstance(value, list) else 1
        if row < count:
            key = f"[{json.dumps(image, ensure_ascii=False)}]"
            return f"{key}[{row}]" if isinstance(value, list) else key
        row -= count
    return None


def name_row(source: Path, row: int) -> str:
    """`row 1234 (line 1236 of corpus.csv)`: an input row (0-based) and, for a text file, the line it starts on (CSV:
    the header is line 1; JSON lines: blank lines are no rows); for a JSON mapping, its key and list index,
    `row 3 (captions.json["cat.png"][1])`. A parquet file or a dataset has rows only."""
    suffix = source.suffix.lower() if source.is_file() else None
    if suffix in (".jsonl", ".csv"):
        line = row_lines(source, {row}).get(row)
        if line is not None:
            return f"row {row} (line {line} of {source.name})"
    elif suffix == ".json":
        entry = json_entry(source, row)
        if entry is not None:
            return f"row {row} ({source.name}{entry})"
    return f"row {row}"


@contextmanager
def rows_named(source: Path):
    """Inside, an error about item i of a call on the rows of `source` (in order) names row i and where it is in the
    file (`name_row`): `image 3 ('a.png') does not exist` -> `row 3 (line 5 of captions.csv): image ('a.png') does not
    exist`. Other errors pass unchanged."""
    try:
        yield
    except (OSError, ValueError, TypeError) as error:
        message = name_item(str(error), lambda row: name_row(source, row))
        if message is None:
            raise
        raise with_message(error, message) from error


def attach_references(items: list[dict], references_path: Path, image_root: Path):
    check_input_file(references_path, "references file", REFERENCES_FILE)
    mapping = load_json_file(references_path)
    if not isinstance(mapping, dict):
        raise ValueError(f"{references_path}: references must be a JSON object {{image_path: [reference, ...]}}")
    by_path = {resolve_image(key, image_root): value for key, value in mapping.items()}
    for item in items:
        references = by_path.get(item["image_path"])
        if references is None:
            raise ValueError(f"{references_path}: no references for image '{item['image']}'")
        item["references"] = [references] if isinstance(references, str) else references


# ---------------------------------------------------------------------------------------------------- writing
OUTPUT_SUFFIXES = (".json", ".jsonl", ".csv")


def format_results(
    items: list[dict],
    names: list[str],
    means: dict,
    model_name: str,
    w: float,
    suffix: str,
    num_without_references: int | None = None,
    media: str = "image",
    raw_csv: bool = False,
) -> str:
    """The output file's text: JSON (summary + items), JSONL (one item per line) or CSV (items + a MEAN row). `media`
    names the items' first column: `"image"`, or `"video"` for videos. A CSV text cell that a spreadsheet would run as
    a formula gets a `'` in front, unless `raw_csv` (`csv_output.escape_cell`).

    An item without references (the references policy, `results.score_items`) has empty reference-based cells: `null`
    in JSON and JSON lines, an empty cell in CSV; a mean over no item is empty too. The JSON summary counts those
    items (`num_without_references`) when references were given.
    """
    rows = [{media: item["image"], "caption": item["caption"], **{n: item[n] for n in names}} for item in items]
    if suffix == ".csv":
        return csv_text([media, "caption", *names], [*rows, {media: "MEAN", "caption": "", **means}], raw=raw_csv)
    if suffix == ".jsonl":
        return "".join(strict_json(row, ensure_ascii=False) + "\n" for row in rows)
    summary = {"model": model_name, "w": w, "num_items": len(items), "mean": means}
    if num_without_references is not None:
        summary["num_without_references"] = num_without_references
    summary["items"] = rows
    return strict_json(summary, indent=2, ensure_ascii=False) + "\n"


__all__ = [
    "OUTPUT_SUFFIXES",
    "attach_references",
    "captions_of",
    "check_input_file",
    "check_utf8",
    "csv_records",
    "csv_row_of_line",
    "format_results",
    "json_entry",
    "load_json_file",
    "name_row",
    "not_utf8_error",
    "read_items",
    "read_json_lines",
    "resolve_image",
    "row_lines",
    "rows_named",
    "utf8_errors",
]
