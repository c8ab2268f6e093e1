"""Composite from its original release (docs/spec/benchmarks.md#composite): the six AMT_eval MTurk result files of
Aditya et al. (2015) plus the references of the three source corpora.

No official loader of these files exists (the only official Composite code, DENEB's, reads a pre-built CSV: see
`rated_csv.py`). The layout below was verified against the three public third-party loaders that read the release:

- `ForJadeForest/DistillCLIP@f12fde3` `test/preprocess/composite_preprocess.py` (the file was deleted at its HEAD):
  line 2 "each csv need to delete the last two rows"; line 31 the three `*_correctness.csv` files; lines 76-80 skip
  the header, then split each record after its image URL on `;` into the URL, the captions (3 for 8k, 4 for 30k and
  COCO) and their ratings; lines 36, 50, 63 the references from `Flickr8k.token.txt`, `results_20130124.token` and
  `captions_val2014.json` (`'COCO_val2014_' + str(image_id).zfill(12) + '.jpg'`); lines 84, 96, 110 the image is the
  URL's file name under the corpus's image folder;
- a third-party CLIPScore evaluation script (it defines `composite_data_cleaning`; the search index did not name its
  repository) reads the six files with `pd.read_csv(..., sep=';')`, keeps `Input.image_url`, `Input.text1..4` and
  `Answer.Q1Answer..Q4Answer` and drops rows with a missing value (the summary rows). In commented-out code it
  combines the two ratings of one caption (matched by image URL and caption position) as their sum (30k, COCO) or
  mean (8k): the only combination found anywhere, offered here as `rating="mean"` (the mean everywhere);
- a third-party TIGEr-style correlation script (`sets = ["8k_correctness.csv", ...]`, repository not named either)
  reads them with `sep=";"`, keeps the `Input.*`/`Answer.*` columns (image URL first) and drops the last two rows
  (`data_in.iloc[0:-2, ...]`).

Protocol (**[paper-derived]**, docs/spec/benchmarks.md#composite): one item per rated caption, rating "correctness"
(CLIPScore issue #7), references = the image's source-corpus references minus exact matches of the candidate
(CLIPScore §4.1; option: keep them), strings whitespace-normalised as pacscore/clipscore do
(docs/spec/benchmarks.md#common), NaN or empty ratings skipped and logged (the pacscore policy,
docs/spec/benchmarks.md#flickr8k-expert), statistics Kendall tau_b and tau_c (headline tau_c), Spearman and Pearson.
"""

import csv
import io
import logging
import math
import re
from pathlib import Path, PurePosixPath

from .benchmark import (
    Benchmark,
    BenchmarkOptions,
    data_error,
    normalise_spaces,
    read_json,
    read_tab_lines,
    require_file,
)
from .protocols import correlation_report
from .releases import find, folder_or_first, locate

logger = logging.getLogger("pacs_pp.benchmarks")

TITLE = "Composite"
RATINGS = ("correctness", "thoroughness", "mean")
# subset -> reference file name (its folder and the image folders: releases.RELEASES["composite"])
SUBSETS = {"8k": "Flickr8k.token.txt", "30k": "results_20130124.token", "coco": "captions_val2014.json"}
# the release's spelling of "thoroughness"
FILE_RATINGS = {"correctness": "correctness", "thoroughness": "throughness"}
AMT_ROLES = [f"amt_{subset}_{kind}" for subset in SUBSETS for kind in FILE_RATINGS.values()]
CSV_LAYOUT = (
    "the AMT_eval MTurk results (in AMT_eval/ or in the data folder): ';'-separated, a header row with "
    "Input.image_url, Input.text1..Input.textN and "
    "Answer.Q1Answer..Answer.QNAnswer (N = 3 for 8k, 4 for 30k and coco; 1-5 ratings), summary rows without an image "
    "URL at the end"
)
TOKEN_LAYOUT = "{name}: '<image>.jpg#<k>\\t<caption>' per line"
COCO_LAYOUT = (
    "annotations/captions_val2014.json (or captions_val2014.json): COCO captions JSON with 'images' (id, file_name) "
    "and 'annotations' (image_id, caption)"
)
# CLIPScore §4.1 / SPICE: 11,985 judgements = 3,995 images x 3; the 30k and COCO files rate 4 captions per image,
# and which caption the papers left out is not documented anywhere found (docs/spec/benchmarks.md#composite,
# docs/spec/benchmarks.md#open-questions).
PAPER_JUDGEMENTS = 11985
IMAGE_NAME = re.compile(r"\.(jpe?g|png)$", re.IGNORECASE)


def has_amt_files(data_dir: Path) -> bool:
    """Whether `data_dir` holds any of the six original AMT_eval files."""
    return any(find(data_dir, "composite", role) is not None for role in AMT_ROLES)


def decode_text(path: Path) -> str:
    """UTF-8 (with or without BOM), else Windows-1252 (older MTurk exports), logged."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        logger.warning("%s is not UTF-8: read as Windows-1252", path)
        return data.decode("cp1252", errors="replace")


def parse_rating(value: str | None, path: Path, line: int, column: str) -> float:
    """A 1-5 rating; empty or NaN gives NaN (skipped later), anything else non-numeric is an error."""
    text = (value or "").strip()
    if not text:
        return math.nan
    try:
        rating = float(text)
    except ValueError as error:
        raise data_error(path, f"line {line}: {column} is {text!r}, not a number", CSV_LAYOUT, TITLE) from error
    if math.isinf(rating):
        raise data_error(path, f"line {line}: {column} is {text!r}, not a finite number", CSV_LAYOUT, TITLE)
    return rating


def read_amt_csv(path: Path) -> list[dict]:
    """Rows `{line, url, captions, ratings}` in file order, trailing summary rows dropped (logged)."""
    require_file(path, CSV_LAYOUT, TITLE)
    reader = csv.reader(io.StringIO(decode_text(path), newline=""), delimiter=";")
    header = next(reader, None)
    if not header or "Input.image_url" not in header:
        raise data_error(path, f"no Input.image_url column (header: {header})", CSV_LAYOUT, TITLE)
    column = {name: position for position, name in enumerate(header)}
    count = 0
    while f"Input.text{count + 1}" in column:
        count += 1
    answers = [f"Answer.Q{k}Answer" for k in range(1, count + 1)]
    missing = [name for name in answers if name not in column]
    if count == 0 or missing:
        problem = "no Input.text1 column" if count == 0 else f"columns {missing} are missing"
        raise data_error(path, f"{problem} (header: {header})", CSV_LAYOUT, TITLE)
    rows, summary = [], []
    for line, fields in enumerate(reader, start=2):
        if not fields:
            continue
        url = fields[column["Input.image_url"]].strip() if len(fields) > column["Input.image_url"] else ""
        if not IMAGE_NAME.search(url):
            summary.append(line)
            continue
        if summary:
            raise data_error(
                path, f"line {summary[0]} has no image URL but rated rows follow it (line {line})", CSV_LAYOUT, TITLE
            )
        if len(fields) != len(header):
            raise data_error(
                path, f"line {line} has {len(fields)} ';'-separated fields, the header {len(header)}", CSV_LAYOUT, TITLE
            )
        rows.append(
            {
                "line": line,
                "url": url,
                "captions": [fields[column[f"Input.text{k}"]] for k in range(1, count + 1)],
                "ratings": [parse_rating(fields[column[name]], path, line, name) for name in answers],
            }
        )
    if summary:
        logger.info("%s: %d trailing summary rows without an image URL dropped", path.name, len(summary))
    if not rows:
        raise data_error(path, "no rated rows", CSV_LAYOUT, TITLE)
    return rows


def read_token_references(path: Path) -> dict[str, list[str]]:
    """Flickr8k/Flickr30k token files: references per image file name, in file order."""
    layout = TOKEN_LAYOUT.format(name=path.name)
    references: dict[str, list[str]] = {}
    for caption_id, caption in read_tab_lines(path, 2, layout, TITLE):
        references.setdefault(caption_id.split("#")[0], []).append(caption)
    return references


def read_coco_references(path: Path) -> dict[str, list[str]]:
    """captions_val2014.json: references per image file name (`COCO_val2014_%012d.jpg`), annotation order."""
    index = read_json(path, COCO_LAYOUT, TITLE)
    try:
        names = {image["id"]: image["file_name"] for image in index["images"]}
        references: dict[str, list[str]] = {}
        for annotation in index["annotations"]:
            name = names.get(annotation["image_id"], f"COCO_val2014_{annotation['image_id']:012d}.jpg")
            references.setdefault(name, []).append(annotation["caption"])
    except (KeyError, TypeError, ValueError) as error:
        raise data_error(path, f"lacks {error}", COCO_LAYOUT, TITLE) from error
    return references


def subset_rows(data_dir: Path, subset: str, rating: str) -> tuple[list[dict], list[Path]]:
    """Rows of one subset with the chosen rating; `mean` matches the two files by image URL occurrence."""
    kinds = list(FILE_RATINGS.values()) if rating == "mean" else [FILE_RATINGS[rating]]
    paths = [locate(data_dir, "composite", f"amt_{subset}_{kind}", CSV_LAYOUT, TITLE) for kind in kinds]
    tables = [read_amt_csv(path) for path in paths]
    rows = tables[0]
    if rating == "mean":
        seen: dict[str, int] = {}
        others: dict[tuple[str, int], dict] = {}
        for row in tables[1]:
            occurrence = seen[row["url"]] = seen.get(row["url"], -1) + 1
            others[(row["url"], occurrence)] = row
        seen.clear()
        unmatched = 0
        for row in rows:
            occurrence = seen[row["url"]] = seen.get(row["url"], -1) + 1
            other = others.get((row["url"], occurrence))
            if other is None or len(other["ratings"]) != len(row["ratings"]):
                unmatched += 1
                row["ratings"] = [math.nan] * len(row["ratings"])
                continue
            row["ratings"] = [(a + b) / 2 for a, b in zip(row["ratings"], other["ratings"])]
            if other["captions"] != row["captions"]:
                raise data_error(
                    paths[1],
                    f"line {other['line']}: the captions differ from {paths[0].name} line {row['line']}",
                    CSV_LAYOUT,
                    TITLE,
                )
        if unmatched:
            logger.warning("%s: %d rows have no thoroughness row for their image: skipped", paths[0].name, unmatched)
    return rows, paths


def load_amt(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    """The Composite items from the original AMT_eval files (see the module docstring for the protocol)."""
    rating, keep = options.composite_rating, options.composite_keep_candidate
    if rating not in RATINGS:
        raise ValueError(f"composite_rating must be one of {RATINGS}, got {rating!r}")
    if keep and options.composite_remove_candidate:
        raise ValueError("composite_keep_candidate and composite_remove_candidate contradict each other")
    items, files, skipped, removed = [], [], 0, 0
    for subset, reference_name in SUBSETS.items():
        rows, csv_paths = subset_rows(data_dir, subset, rating)
        reference_layout = COCO_LAYOUT if subset == "coco" else TOKEN_LAYOUT.format(name=reference_name)
        reference_path = locate(data_dir, "composite", f"references_{subset}", reference_layout, TITLE)
        if subset == "coco":
            references_by_image = read_coco_references(reference_path)
        else:
            references_by_image = read_token_references(reference_path)
        files += [*csv_paths, reference_path]
        image_dir = folder_or_first(data_dir, "composite", f"images_{subset}").resolve()
        occurrences: dict[str, int] = {}
        for row in rows:
            name = PurePosixPath(row["url"]).name
            occurrence = occurrences[name] = occurrences.get(name, -1) + 1
            if name not in references_by_image:
                raise data_error(
                    reference_path,
                    f"no references for image {name} ({csv_paths[0].name} line {row['line']})",
                    reference_layout,
                    TITLE,
                )
            references = [normalise_spaces(reference) for reference in references_by_image[name]]
            key = Path(name).stem + (f"~{occurrence}" if occurrence else "")
            for position, (caption, human) in enumerate(zip(row["captions"], row["ratings"])):
                if math.isnan(human):
                    skipped += 1
                    continue
                candidate = normalise_spaces(caption)
                kept = references if keep else [reference for reference in references if reference != candidate]
                removed += len(references) - len(kept)
                items.append(
                    {
                        "id": f"composite/{subset}/{key}/{position}",
                        "image": str(image_dir / name),
                        "candidate": candidate,
                        "references": kept,
                        "human": human,
                        "subset": subset,
                    }
                )
    if skipped:
        logger.warning("Composite: %d captions with a missing or NaN rating skipped", skipped)
    if len(items) != PAPER_JUDGEMENTS:
        logger.warning(
            "Composite: %d rated captions, the papers report %d (3 per image; the 30k and COCO files rate 4 per "
            "image and which one the papers left out is undocumented): numbers are not directly comparable",
            len(items),
            PAPER_JUDGEMENTS,
        )
    protocol = {
        "source": "AMT_eval MTurk files (Aditya et al. 2015) + Flickr8k/Flickr30k/COCO references",
        "layout": "original AMT_eval CSVs",
        "rating": {
            "correctness": "correctness (CLIPScore)",
            "thoroughness": "thoroughness (the *_throughness.csv files)",
            "mean": "mean of correctness and thoroughness per caption",
        }[rating],
        "items": f"one per rated caption, file order, {skipped} missing/NaN ratings skipped [paper-derived]; "
        f"{len(items)} items (papers: {PAPER_JUDGEMENTS})",
        "references": (
            "source-corpus references, candidate kept"
            if keep
            else f"source-corpus references minus exact matches of the candidate ({removed} removed; CLIPScore §4.1)"
        ),
        "statistic": "100 x Kendall tau_b/tau_c, Spearman, Pearson; headline kendall_tau_c; "
        + ("raw coefficient rounded to 4 decimals" if options.official_rounding else "unrounded"),
    }
    evaluate = correlation_report(items, options.official_rounding)
    return Benchmark("composite", items, files, protocol, evaluate, human_field="human")
