"""DetailCaps-4870 (Dong et al., 2024, "Benchmarking and Improving Detail Image Caption", arXiv 2405.19092): how
well a metric's scores on detailed captions agree with GPT-4's judgements of them.

The release is the Hub dataset `foundation-multimodal-models/DetailCaps-4870`: config `default`, split `test`, the
one file `DetailCaps-4870.parquet` (card YAML; revision fb4e2ea is the original release). One row per image
(4,870 on the card):

| column | holds | verified from |
|---|---|---|
| `binary` | the encoded image file | the authors' lmms-eval task (`detailcaps/utils.py:23`) |
| `image` | the image's identifier: a path (COCO, Flickr), a URL (LAION, CC, SBU, Coyo) or an item_id (SAM) | the card |
| `source` | the original dataset | the card |
| `GT_Caption_GPT4O`, `GT_Caption_GPT4V`, `GT_Caption_Gemini15Pro` | the references | lmms-eval `utils.py:31-37` |
| `CogVLM`, `ShareCaptioner`, `LLaVA_v15` | the three LVLMs' captions | third-party code only (UNVERIFIED) |
| `GPT4_Eval` | JSON `{"CogVLM": s, "ShareCaptioner": s, "LLaVA_v15": s}` or null | third-party code only (UNVERIFIED) |

The unverified names are matched ignoring case and punctuation, with a few alternative spellings (`CANDIDATES`,
`JUDGE`); a copy without them is refused with the columns it has. Images come from `binary`; a row without bytes is
resolved per source as the card documents, under `images/<source>/` (nothing is downloaded).

Protocol (the statistics of the CAPTURE README's consistency table; the paper's text and the authors' evaluation
code are not public, so the level and the definitions are our reading, docs/guides/benchmarks.md#detailcaps): one item
per (image, LVLM caption) with a judgement; rows whose `GPT4_Eval` is null are skipped. Statistics over all items:
Pearson (`PCC rho`), Kendall tau_b (`Kendall's tau`) and tau_c; per image: Kendall tau_b over its captions,
averaged over the images where it is defined (`Sample tau`); and `1 - R^2` with the judge's scores taken as
predictions of the metric's (`protocols.one_minus_r_squared`).
"""

import json
import logging
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from ..jobs import write_text_atomically
from .benchmark import Benchmark, BenchmarkOptions, data_error, scores_for
from .hf_local import hf_files, image_cache_dir, write_cached_image
from .protocols import grouped_kendall_tau, kendall_tau, one_minus_r_squared, pearson

logger = logging.getLogger("pacs_pp.benchmarks")

TITLE = "DetailCaps-4870"
RELEASE_FILE = "DetailCaps-4870.parquet"
# The Hub's LFS pointer for the file (commit b59c7df, unchanged through fb4e2ea and ec6ee4b): 970,877,037 bytes.
RELEASE_SHA256 = "b253e855958d3087b45856f8959e4f41c2e5b74e381b6dfaf7211779c278fb1a"
REFINED_FILE = "DetailCaps-4870_refined_EN.parquet"  # added in Hub commit ec6ee4b; its columns are unverified
EXPORT_PATTERNS = ("default/test/*.parquet", "test/*.parquet", "data/test-*.parquet")  # Hub parquet exports
LAYOUT = (
    f"the Hub release's {RELEASE_FILE} (or a save_to_disk folder of it, or its parquet export default/test/*.parquet) "
    "with columns binary (image bytes), image, source, GT_Caption_GPT4O, GT_Caption_GPT4V, GT_Caption_Gemini15Pro, "
    "CogVLM, ShareCaptioner, LLaVA_v15 and GPT4_Eval (a JSON object of the three LVLMs' scores); images of rows "
    "without bytes under images/<source>/"
)
REFERENCES = ("GT_Caption_GPT4O", "GT_Caption_GPT4V", "GT_Caption_Gemini15Pro")  # lmms-eval's order
# The LVLMs, by the names item ids use, and the spellings accepted for their columns and judgement keys.
CANDIDATES = {
    "CogVLM": ("CogVLM",),
    "ShareCaptioner": ("ShareCaptioner", "ShareCaptioner-7B"),
    "LLaVA_v15": ("LLaVA_v15", "LLaVA-1.5", "LLaVA-1.5-7B"),
}
JUDGE = ("GPT4_Eval", "GPT4_Evaluation", "GPT4_Score", "GPT4_Scores")
IMAGE_BYTES, IMAGE_ID, SOURCE = "binary", "image", "source"
# The card's sources (it spells Flickr "Flikr"), by lower-case name -> the folder under images/ and what `image` holds.
SOURCES = {
    "coco": ("COCO", "path"),
    "flickr": ("Flickr", "path"),
    "flikr": ("Flickr", "path"),
    "sam": ("SAM", "item_id"),
    "laion": ("LAION", "url"),
    "cc": ("CC", "url"),
    "sbu": ("SBU", "url"),
    "coyo": ("Coyo", "url"),
}
BATCH_ROWS = 256
SIGNATURES = ((b"\x89PNG\r\n\x1a\n", ".png"), (b"\xff\xd8\xff", ".jpg"), (b"GIF8", ".gif"), (b"BM", ".bmp"))


def spelling(name: str) -> str:
    """A column name compared without case and punctuation: `LLaVA-1.5` and `llava_15` are the same."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def find_column(names: list[str], accepted: tuple[str, ...]) -> str | None:
    """The column named exactly as the first accepted name present, else the first one that matches a spelling."""
    exact = next((name for name in accepted if name in names), None)
    wanted = {spelling(name) for name in accepted}
    return exact or next((name for name in names if spelling(name) in wanted), None)


@dataclass
class Columns:
    """The release's column names for each role."""

    references: list[str]
    candidates: dict[str, str]  # LVLM name -> column
    judge: str
    image_bytes: str | None
    image_id: str | None
    source: str | None


def resolve_columns(names: list[str], location: Path) -> Columns:
    missing = [name for name in REFERENCES if name not in names]
    candidates = {model: find_column(names, accepted) for model, accepted in CANDIDATES.items()}
    missing += [" or ".join(CANDIDATES[model]) for model, column in candidates.items() if column is None]
    judge = find_column(names, JUDGE)
    if judge is None:
        missing.append(" or ".join(JUDGE))
    if missing:
        raise data_error(location, f"no column(s) {missing} (its columns: {names})", LAYOUT, TITLE)
    present = {name: name if name in names else None for name in (IMAGE_BYTES, IMAGE_ID, SOURCE)}
    if present[IMAGE_BYTES] is None and present[IMAGE_ID] is None:
        raise data_error(
            location, f"no image column: neither '{IMAGE_BYTES}' (bytes) nor '{IMAGE_ID}' (its columns: {names})",
            LAYOUT, TITLE,
        )  # fmt: skip
    return Columns(list(REFERENCES), candidates, judge, present[IMAGE_BYTES], present[IMAGE_ID], present[SOURCE])


@dataclass
class Release:
    """One local copy of the release: where it is, the files read, its columns, and its rows in order as record
    batches of the columns asked for (parquet is read column by column, a save_to_disk folder memory-mapped)."""

    location: Path
    description: str
    files: list[Path]
    column_names: list[str]
    batches: Callable[[list[str]], Iterator[Any]]


def parquet_release(files: list[Path], location: Path, description: str) -> Release:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = None
    for path in files:
        try:
            schema_names = pq.read_schema(path).names
        except (pa.ArrowInvalid, OSError) as error:
            raise data_error(path, f"not a readable parquet file ({error})", LAYOUT, TITLE) from error
        if names is not None and schema_names != names:
            raise data_error(path, f"its columns {schema_names} differ from {files[0].name}'s {names}", LAYOUT, TITLE)
        names = schema_names

    def batches(columns: list[str]) -> Iterator[Any]:
        for path in files:
            yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=columns)

    return Release(location, description, files, list(names), batches)


def saved_release(folder: Path) -> Release:
    import datasets

    loaded = datasets.load_from_disk(str(folder))
    if isinstance(loaded, datasets.DatasetDict):
        if "test" not in loaded:
            raise data_error(folder, f"no 'test' split (it has {sorted(loaded)})", LAYOUT, TITLE)
        loaded = loaded["test"]
    table = loaded.data.table  # memory-mapped: image bytes are read batch by batch

    def batches(columns: list[str]) -> Iterator[Any]:
        yield from table.select(columns).to_batches(max_chunksize=BATCH_ROWS)

    return Release(folder, f"save_to_disk folder {folder}", hf_files(folder), list(table.column_names), batches)


def find_release(data_dir: Path) -> Release:
    """The Hub file, else a save_to_disk folder, else a parquet export, else the refined English file (warned)."""
    from ..data.sources import is_saved_dataset

    release = data_dir / RELEASE_FILE
    if release.is_file():
        return parquet_release([release], release, RELEASE_FILE)
    if is_saved_dataset(data_dir):
        return saved_release(data_dir)
    for pattern in EXPORT_PATTERNS:
        files = sorted(data_dir.glob(pattern))
        if files:
            return parquet_release(files, data_dir, f"parquet export {pattern} in {data_dir}")
    refined = data_dir / REFINED_FILE
    if refined.is_file():
        logger.warning(
            "%s: no %s, reading the human-refined %s (its columns are unverified; the card's default config is "
            "the original file)", data_dir, RELEASE_FILE, REFINED_FILE,
        )  # fmt: skip
        return parquet_release([refined], refined, f"{REFINED_FILE} (human-refined references)")
    found = sorted(str(path.relative_to(data_dir)) for path in data_dir.rglob("*.parquet"))
    problem = "file not found" + (f" (parquet files in the folder: {found[:10]})" if found else "")
    raise data_error(release, problem, LAYOUT, TITLE)


def image_suffix(data: bytes) -> str:
    """The file extension of encoded image bytes (decoding goes by content, so this only names the file)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ".webp"
    return next((suffix for signature, suffix in SIGNATURES if data.startswith(signature)), ".img")


def cache_images(release: Release, column: str, num_rows: int) -> dict[int, Path]:
    """Row -> the file its bytes were written to, once per copy: `index.json` lists a complete cache, so a later
    load reads no image byte."""
    stamp = "".join(f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime_ns};" for path in release.files)
    cache = image_cache_dir(release.location, "detailcaps", stamp)
    index_path = cache / "index.json"
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        paths = {int(row): cache / name for row, name in index["images"].items()}
        if index["rows"] == num_rows and all(path.is_file() for path in paths.values()):
            return paths
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or an incomplete one: write it
    paths, row = {}, 0
    for batch in release.batches([column]):
        for value in batch.column(0).to_pylist():
            data = value.get("bytes") if isinstance(value, dict) else value
            if data:
                paths[row] = cache / f"{row:05d}{image_suffix(data)}"
                write_cached_image(paths[row], data)
            row += 1
    index = {"rows": num_rows, "images": {str(row): path.name for row, path in paths.items()}}
    write_text_atomically(index_path, [json.dumps(index)])
    return paths


def local_image(images_dir: Path, source: str | None, identifier: str) -> tuple[Path, bool]:
    """The card's "identity of images" per source: a path (COCO, Flickr), an item_id (SAM) or a URL (LAION, CC, SBU,
    Coyo), looked up under `images/<source>/`. Returns the first candidate that exists, else the preferred one."""
    unknown = re.sub(r"[^A-Za-z0-9_-]", "_", source or "") or "unknown"  # a folder name, never a path
    folder, kind = SOURCES.get((source or "").strip().lower(), (unknown, "path"))
    if kind == "url":
        candidates = [images_dir / folder / PurePosixPath(urlparse(identifier).path).name]
    elif kind == "item_id":
        stem = PurePosixPath(identifier).name
        candidates = [images_dir / folder / name for name in (stem, f"{stem}.jpg", f"sa_{stem}.jpg")]
    else:
        relative = PurePosixPath(identifier)
        candidates = [images_dir / folder / relative.name]
        if not relative.is_absolute() and ".." not in relative.parts:
            candidates.insert(0, images_dir / relative)
    return next(((path, True) for path in candidates if path.is_file()), (candidates[0], False))


def parse_judgement(value: Any, row: int, judge: str, location: Path) -> dict[str, Any] | None:
    """`GPT4_Eval` as a dict keyed by `spelling` (a JSON string or a struct); None for a null."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            problem = f"row {row}: {judge} is not JSON ({error}): {value[:80]!r}"
            raise data_error(location, problem, LAYOUT, TITLE) from error
    if value is None:
        return None
    if not isinstance(value, dict):
        problem = f"row {row}: {judge} is {value!r}, not an object of scores by LVLM"
        raise data_error(location, problem, LAYOUT, TITLE)
    return {spelling(str(key)): score for key, score in value.items()}


def judge_score(judgement: dict[str, Any], model: str, row: int, location: Path) -> float | None:
    """The judge's score of one LVLM's caption; None where the judgement has none."""
    accepted = {spelling(name) for name in CANDIDATES[model]}
    value = next((score for key, score in judgement.items() if key in accepted), None)
    if value is None:
        return None
    score = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            score = float(value)
        except ValueError:
            pass  # named below
    if not math.isfinite(score):
        raise data_error(location, f"row {row}: the score of {model} is {value!r}, not a finite number", LAYOUT, TITLE)
    return score


def load(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    """The DetailCaps-4870 items and the consistency protocol (see the module docstring)."""
    judge_scale = options.detailcaps_judge_scale
    if not (isinstance(judge_scale, (int, float)) and math.isfinite(judge_scale) and judge_scale > 0):
        raise ValueError(f"detailcaps_judge_scale must be a finite number > 0, got {judge_scale!r}")
    release = find_release(data_dir)
    columns = resolve_columns(release.column_names, release.location)
    text_columns = [*columns.references, *columns.candidates.values(), columns.judge]
    text_columns += [column for column in (columns.image_id, columns.source) if column]
    rows = [row for batch in release.batches(text_columns) for row in batch.to_pylist()]
    if not rows:
        raise data_error(release.location, "no rows", LAYOUT, TITLE)
    cached = cache_images(release, columns.image_bytes, len(rows)) if columns.image_bytes else {}
    images_dir = (data_dir / "images").resolve()
    items, null_rows, skipped, missing = [], 0, 0, []
    for number, row in enumerate(rows):
        judgement = parse_judgement(row[columns.judge], number, columns.judge, release.location)
        if judgement is None:
            null_rows += 1
            continue
        references = [row[column] for column in columns.references if isinstance(row[column], str)]
        references = [reference for reference in references if reference.strip()]
        if not references:
            raise data_error(release.location, f"row {number}: no reference caption in {REFERENCES}", LAYOUT, TITLE)
        source = row.get(columns.source) if columns.source else None
        identifier = row.get(columns.image_id) if columns.image_id else None
        image = cached.get(number)
        if image is None:
            if not identifier:
                problem = f"row {number}: no image bytes in '{IMAGE_BYTES}' and no identifier in '{IMAGE_ID}'"
                raise data_error(release.location, problem, LAYOUT, TITLE)
            image, found = local_image(images_dir, source, str(identifier))
            if not found:
                missing.append((number, source, identifier, image))
        for model, column in columns.candidates.items():
            caption, score = row[column], judge_score(judgement, model, number, release.location)
            if score is None or not isinstance(caption, str) or not caption.strip():
                skipped += 1
                continue
            items.append(
                {
                    "id": f"detailcaps/{number}/{model}",
                    "image": str(image),
                    "candidate": caption,
                    "references": references,
                    "human": score,
                    "row": number,
                    "model": model,
                    "source": source,
                    "image_identifier": identifier,
                }
            )
    if not items:
        raise data_error(release.location, f"no caption with a GPT-4 judgement in {columns.judge}", LAYOUT, TITLE)
    if null_rows or skipped:
        logger.warning(
            "%s: %d rows without a judgement and %d captions without a score or text skipped", TITLE, null_rows, skipped
        )
    if missing:
        number, source, identifier, expected = missing[0]
        logger.warning(
            "%s: %d images are neither in '%s' nor on disk (first: row %d, source %s, image %r: expected %s); "
            "nothing is downloaded, so --model cannot score them (--scores and --dump-items work)",
            TITLE, len(missing), IMAGE_BYTES, number, source, identifier, expected,
        )  # fmt: skip
    return build_benchmark(items, release, len(rows), null_rows, skipped, len(missing), judge_scale)


def build_benchmark(
    items: list[dict], release: Release, num_rows: int, null_rows: int, skipped: int, missing: int, judge_scale: float
) -> Benchmark:
    human = [item["human"] for item in items]
    images = [item["row"] for item in items]
    by_image: dict[int, list[float]] = {}
    for image, score in zip(images, human):
        by_image.setdefault(image, []).append(score)
    judged = sum(len(scores) > 1 and len(set(scores)) > 1 for scores in by_image.values())

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        metric = scores_for(items, scores)
        sample_tau, used = grouped_kendall_tau(metric, human, images, "b")
        if used < judged:
            logger.info(
                "%s: %d images where the metric ties every caption left out of sample tau", TITLE, judged - used
            )
        return {
            "pearson": pearson(metric, human),
            "one_minus_r2": one_minus_r_squared(metric, [score / judge_scale for score in human]),
            "kendall_tau_b": kendall_tau(metric, human, "b"),
            "sample_kendall_tau_b": sample_tau,
            "kendall_tau_c": kendall_tau(metric, human, "c"),
        }

    protocol = {
        "source": f"{release.description} (Hub foundation-multimodal-models/DetailCaps-4870, split test; the Hub "
        f"file's SHA-256 is {RELEASE_SHA256[:12]}...)",
        "items": f"one per (image, LVLM caption) with a GPT-4 judgement: {len(items)} from {num_rows} rows x "
        f"{len(CANDIDATES)} LVLMs; {null_rows} rows with a null GPT4_Eval and {skipped} captions without a score or "
        f"text skipped; {missing} images not found",
        "references": "GT_Caption_GPT4O, GT_Caption_GPT4V, GT_Caption_Gemini15Pro as stored (lmms-eval order)",
        "judge": "GPT4_Eval as stored (scale unverified)"
        + (f"; divided by {judge_scale:g} for 1-R^2" if judge_scale != 1 else ""),
        "statistic": "over all items: pearson (PCC), kendall_tau_b (Kendall's tau), kendall_tau_c, x100; "
        f"sample_kendall_tau_b (Sample tau): tau_b within each image's captions, averaged over the {judged} images "
        "the judge does not tie, x100; one_minus_r2 = sum((metric - judge)^2) / sum((metric - mean metric)^2), a "
        "ratio (not x100) that depends on both scales [our reading of the CAPTURE README]",
        "paper": "CAPTURE README table: the average of DetailCaps-100 and DetailCaps-4870, not this set alone",
    }
    return Benchmark("detailcaps", items, release.files, protocol, evaluate, human_field="human")
