"""Flickr8k-Expert and Flickr8k-CF (docs/spec/benchmarks.md#flickr8k-expert, docs/spec/benchmarks.md#flickr8k-cf):
clipscore's JSON files, or the raw Hodosh text files.

The raw files are turned into the same structure clipscore's `flickr8k_example/download.py` writes, with its
exclusions: Expert drops pairs whose candidate is one of the image's references; CF removes every judged candidate
from the image's references, accumulating over the image's candidates, first occurrence only (`list.remove`).
"""

import logging
import math
from collections import defaultdict
from pathlib import Path

from .benchmark import (
    Benchmark,
    BenchmarkOptions,
    data_error,
    normalise_spaces,
    read_json,
    read_tab_lines,
    scores_for,
)
from .hf_local import find_hf_copy, hf_files, read_hf_rows
from .protocols import kendall_tau
from .releases import find, locate, release_file

logger = logging.getLogger("pacs_pp.benchmarks")

EXPERT = "Flickr8k-Expert"
CROWDFLOWER = "Flickr8k-CF"
JSON_LAYOUT = (
    "clipscore's {name} (a dict image_id -> {{image_path, ground_truth: [refs], human_judgement: [{{caption, "
    "rating}}]}}) with images in images/ or Flicker8k_Dataset/, or the raw files Flickr8k.token.txt + {raw} "
    "(in Flickr8k_text/ as Flickr8k_text.zip extracts, or in the data folder)"
)
TOKEN_LAYOUT = "Flickr8k.token.txt: '<image>.jpg#<k>\\t<caption>' per line"


def read_tokens(data_dir: Path, benchmark: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """References per image id (no extension) and caption per caption id, as download.py reads them."""
    references, captions = defaultdict(list), {}
    name = "flickr8k_expert" if benchmark == EXPERT else "flickr8k_cf"
    path = locate(data_dir, name, "tokens", TOKEN_LAYOUT, benchmark)
    for caption_id, caption in read_tab_lines(path, 2, TOKEN_LAYOUT, benchmark):
        references[caption_id.split("#")[0]].append(caption)
        captions[caption_id] = caption
    return {image.split(".")[0]: refs for image, refs in references.items()}, captions


def build_expert_json(data_dir: Path) -> dict:
    """download.py:116-137 from `ExpertAnnotations.txt`: three entries per pair, pairs in a reference skipped."""
    references, captions = read_tokens(data_dir, EXPERT)
    layout = "ExpertAnnotations.txt: '<image>.jpg\\t<image>.jpg#<k>\\t<e1>\\t<e2>\\t<e3>' per line"
    path = locate(data_dir, "flickr8k_expert", "annotations", layout, EXPERT)
    index, skipped = {}, 0
    for image, caption_id, *ratings in read_tab_lines(path, 5, layout, EXPERT):
        if caption_id not in captions:
            raise data_error(path, f"caption id {caption_id} is not in Flickr8k.token.txt", layout, EXPERT)
        caption, image_id = captions[caption_id], image.split(".")[0]
        if image_id not in references:
            raise data_error(path, f"image {image} has no references in Flickr8k.token.txt", layout, EXPERT)
        if caption in references[image_id]:
            skipped += 1
            continue
        entry = index.setdefault(
            image_id,
            {"image_path": f"Flicker8k_Dataset/{image}", "ground_truth": references[image_id], "human_judgement": []},
        )
        entry["human_judgement"].extend({"caption": caption, "rating": float(rating)} for rating in ratings)
    logger.info("Flickr8k-Expert from raw files: %d pairs whose candidate is a reference skipped (SPICE)", skipped)
    return index


def build_crowdflower_json(data_dir: Path) -> dict:
    """download.py:50-88 from `CrowdFlowerAnnotations.txt`, including the accumulated reference removal."""
    references, captions = read_tokens(data_dir, CROWDFLOWER)
    layout = "CrowdFlowerAnnotations.txt: '<image>.jpg\\t<image>.jpg#<k>\\t<yes_prec>\\t<n_yes>\\t<n_no>' per line"
    path = locate(data_dir, "flickr8k_cf", "annotations", layout, CROWDFLOWER)
    index = {}
    for image, caption_id, yes_share, _, _ in read_tab_lines(path, 5, layout, CROWDFLOWER):
        if caption_id not in captions:
            raise data_error(path, f"caption id {caption_id} is not in Flickr8k.token.txt", layout, CROWDFLOWER)
        caption = captions[caption_id]
        entry = index.setdefault(
            image,
            {
                "image_path": f"Flicker8k_Dataset/{image}",
                "ground_truth": list(references[image.split(".")[0]]),
                "human_judgement": [],
            },
        )
        if caption in entry["ground_truth"]:
            entry["ground_truth"].remove(caption)
        entry["human_judgement"].append({"caption": caption, "rating": float(yes_share)})
    return index


def items_from_json(name: str, index: dict, data_dir: Path, json_path: Path, benchmark: str, layout: str) -> list[dict]:
    """pacscore `data/dataset.py:19-30`: one item per judgement in file order; NaN ratings skipped."""
    images_folder = data_dir / "images"  # pacscore's layout; else clipscore's paths relative to the data folder
    items, skipped = [], 0
    for image_id, entry in index.items():
        try:
            image_path, references, judgements = entry["image_path"], entry["ground_truth"], entry["human_judgement"]
        except (KeyError, TypeError) as error:
            raise data_error(json_path, f"entry {image_id!r} lacks {error}", layout, benchmark) from error
        image = images_folder / Path(image_path).name if images_folder.is_dir() else data_dir / image_path
        for position, judgement in enumerate(judgements):
            if not isinstance(judgement, dict) or not {"caption", "rating"} <= set(judgement):
                raise data_error(
                    json_path, f"{image_id!r} judgement {position} lacks caption or rating", layout, benchmark
                )
            rating = float(judgement["rating"])
            if math.isnan(rating):
                skipped += 1
                continue
            items.append(
                {
                    "id": f"{name}/{image_id}/{position}",
                    "image": str(image.resolve()),
                    "candidate": normalise_spaces(judgement["caption"]),
                    "references": [normalise_spaces(reference) for reference in references],
                    "human": rating,
                }
            )
    if skipped:
        logger.warning("%s: %d judgements with a NaN rating skipped (as pacscore does)", benchmark, skipped)
    return items


def kendall_report(items: list[dict]):
    human = [item["human"] for item in items]

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        metric = scores_for(items, scores)
        return {"kendall_tau_b": kendall_tau(metric, human, "b"), "kendall_tau_c": kendall_tau(metric, human, "c")}

    return evaluate


def items_from_hf(name: str, data_dir: Path, crowdflower: bool) -> Benchmark:
    """A local copy of `yuwd/Flickr8k-HumanEval` (one row per judgement, as the JSON's items)."""
    rows, location = read_hf_rows(data_dir, name, config="crowdflower" if crowdflower else "expert")
    items = [
        {
            "id": f"{name}/{number}",
            "image": row["imgid"],
            "candidate": normalise_spaces(row["mt"]),
            "references": [normalise_spaces(reference) for reference in row["refs"]],
            "human": row["score"],
        }
        for number, row in enumerate(rows)
        if not math.isnan(row["score"])
    ]
    expected_rows = 47830 if crowdflower else 16992
    if len(rows) != expected_rows:
        logger.warning("%s: the Hugging Face copy has %d rows, the original %d", name, len(rows), expected_rows)
    protocol = {
        "source": f"Hugging Face copy at {location} (third-party mirror, {len(rows)} rows)",
        "items": "one per row, NaN ratings skipped",
        "statistic": "100 x Kendall tau_b and tau_c over all items, unrounded",
    }
    return Benchmark(name, items, hf_files(location), protocol, kendall_report(items), human_field="human")


def load_flickr8k(data_dir: Path, crowdflower: bool) -> Benchmark:
    benchmark = CROWDFLOWER if crowdflower else EXPERT
    json_name = "crowdflower_flickr8k.json" if crowdflower else "flickr8k.json"
    raw_name = "CrowdFlowerAnnotations.txt" if crowdflower else "ExpertAnnotations.txt"
    layout = JSON_LAYOUT.format(name=json_name, raw=raw_name)
    json_path = data_dir / json_name
    name = "flickr8k_cf" if crowdflower else "flickr8k_expert"
    raw_path = find(data_dir, name, "annotations")
    if not json_path.is_file() and raw_path is None and find_hf_copy(data_dir) is not None:
        return items_from_hf(name, data_dir, crowdflower)
    if not json_path.is_file() and raw_path is None:
        tried = ", ".join(str(data_dir / relative) for relative in release_file(name, "annotations").paths)
        raise data_error(json_path, f"file not found, nor the raw {raw_name} (looked for {tried})", layout, benchmark)
    if json_path.is_file():
        index = read_json(json_path, layout, benchmark)
        if not isinstance(index, dict):
            raise data_error(json_path, "the top level is not an object keyed by image id", layout, benchmark)
        files, source = [json_path], json_name
    else:
        index = build_crowdflower_json(data_dir) if crowdflower else build_expert_json(data_dir)
        files = [locate(data_dir, name, "tokens", TOKEN_LAYOUT, benchmark), raw_path]
        source = (
            f"{files[0].relative_to(data_dir)} + {raw_path.relative_to(data_dir)}, rebuilt as clipscore's download.py"
        )
    items = items_from_json(name, index, data_dir, json_path, benchmark, layout)
    headline = "kendall_tau_b" if crowdflower else "kendall_tau_c"
    protocol = {
        "source": source,
        "items": "one per human judgement, file order, NaN ratings skipped (pacscore data/dataset.py)",
        "statistic": f"100 x scipy-equivalent Kendall tau_b and tau_c over all items, unrounded; headline {headline}",
    }
    return Benchmark(
        name,
        items,
        files,
        protocol,
        kendall_report(items),
        human_field="human",
    )


def load_expert(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    return load_flickr8k(data_dir, crowdflower=False)


def load_crowdflower(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    return load_flickr8k(data_dir, crowdflower=True)
