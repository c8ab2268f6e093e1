"""FOIL (docs/spec/benchmarks.md#foil): `foilv1.0_test_2017.json` + COCO `captions_val2014.json` (+
`dataset_coco.json`).

Pairs, by `pairs=`:
- "all" (official Polos `compute_foil.py`): every (foil, original) pair, groups in first-appearance order;
- "one_per_image": per image, its first original (file order) with its first foil (CLIPScore / Polos papers);
- "subset8k" ([paper-derived], PAC-S++ §5.3): "one_per_image" restricted to images of the Karpathy val and test
  splits (`dataset_coco.json`), the part of COCO not used to train PAC-S++.
References: the image's COCO captions minus those string-equal to the true caption; 1-ref = the first remaining,
4-ref = all remaining (official) or the first four (`four_refs="four"`, the papers' wording).
"""

from pathlib import Path

from .benchmark import Benchmark, BenchmarkOptions, data_error, read_json, scores_for
from .protocols import accuracy, remove_true_caption, strictly_greater
from .releases import folder_or_first, locate

TITLE = "FOIL"
FOIL_LAYOUT = (
    "foilv1.0_test_2017.json: COCO-style {images: [{id, file_name}], annotations: [{id, image_id, caption, foil}]}, "
    "a foil sharing the id of its original"
)
COCO_LAYOUT = (
    "COCO's annotations/captions_val2014.json (or captions_val2014.json in the data folder): {annotations: "
    "[{image_id, id, caption}]}"
)
KARPATHY_LAYOUT = "dataset_coco.json (Karpathy splits): {images: [{cocoid, split}]}"
PAIR_RULES = ("all", "one_per_image", "subset8k")


def build_pairs(annotations: list[dict], path: Path, pairs: str, allowed_images: set | None) -> list[tuple[dict, dict]]:
    """(original, foil) pairs by the chosen rule; every id group must hold exactly one original."""
    groups: dict = {}
    for annotation in annotations:
        group = groups.setdefault(annotation["id"], {"orig": [], "foil": []})
        group["foil" if annotation["foil"] else "orig"].append(annotation)
    result, seen_images = [], set()
    for annotation_id, group in groups.items():
        if len(group["orig"]) != 1:
            raise data_error(
                path,
                f"annotation id {annotation_id} has {len(group['orig'])} originals (exactly 1 expected)",
                FOIL_LAYOUT,
                TITLE,
            )
        original = group["orig"][0]
        if pairs == "all":
            result.extend((original, foil) for foil in group["foil"])
            continue
        image = original["image_id"]
        if image in seen_images or not group["foil"] or (allowed_images is not None and image not in allowed_images):
            continue
        seen_images.add(image)
        result.append((original, group["foil"][0]))
    return result


def load(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    pairs, four_refs = options.foil_pairs, options.foil_four_refs
    if pairs not in PAIR_RULES:
        raise ValueError(f"pairs must be one of {PAIR_RULES}, got {pairs!r}")
    if four_refs not in ("all", "four"):
        raise ValueError(f"four_refs must be 'all' (official) or 'four' (paper), got {four_refs!r}")
    foil_path = locate(data_dir, "foil", "foil", FOIL_LAYOUT, TITLE)
    coco_path = locate(data_dir, "foil", "coco", COCO_LAYOUT, TITLE)
    foil = read_json(foil_path, FOIL_LAYOUT, TITLE)
    coco = read_json(coco_path, COCO_LAYOUT, TITLE)
    files = [foil_path, coco_path]
    try:
        file_names = {image["id"]: image["file_name"] for image in foil["images"]}
        annotations = foil["annotations"]
    except (KeyError, TypeError) as error:
        raise data_error(foil_path, f"missing field {error}", FOIL_LAYOUT, TITLE) from error
    for number, annotation in enumerate(annotations):
        missing = {"id", "image_id", "caption", "foil"} - set(annotation)
        if missing:
            raise data_error(foil_path, f"annotation {number} lacks {sorted(missing)}", FOIL_LAYOUT, TITLE)
    coco_references: dict = {}
    try:
        for annotation in coco["annotations"]:
            coco_references.setdefault(annotation["image_id"], []).append(annotation["caption"])
    except (KeyError, TypeError) as error:
        raise data_error(coco_path, f"missing field {error}", COCO_LAYOUT, TITLE) from error
    allowed = None
    if pairs == "subset8k":
        karpathy_path = locate(data_dir, "foil", "karpathy", KARPATHY_LAYOUT, TITLE)
        karpathy = read_json(karpathy_path, KARPATHY_LAYOUT, TITLE)
        try:
            allowed = {image["cocoid"] for image in karpathy["images"] if image["split"] in ("val", "test")}
        except (KeyError, TypeError) as error:
            raise data_error(karpathy_path, f"missing field {error}", KARPATHY_LAYOUT, TITLE) from error
        files.append(karpathy_path)

    image_dir = folder_or_first(data_dir, "foil", "images").resolve()
    items = []
    for number, (original, foiled) in enumerate(build_pairs(annotations, foil_path, pairs, allowed)):
        image_id = original["image_id"]
        if image_id not in coco_references or image_id not in file_names:
            raise data_error(
                coco_path, f"image {image_id} has no COCO captions or no FOIL image entry", COCO_LAYOUT, TITLE
            )
        references = remove_true_caption(coco_references[image_id], original["caption"])
        if not references:
            raise data_error(
                coco_path, f"image {image_id}: no reference left once the true caption is removed", COCO_LAYOUT, TITLE
            )
        variants = {"1ref": references[:1], "4ref": references if four_refs == "all" else references[:4]}
        for variant, variant_references in variants.items():
            for kind, annotation in (("orig", original), ("foil", foiled)):
                items.append(
                    {
                        "id": f"foil/{number}/{kind}/{variant}",
                        "image": str(image_dir / file_names[image_id]),
                        "candidate": annotation["caption"],
                        "references": variant_references,
                        "pair": number,
                        "kind": kind,
                        "variant": variant,
                        "annotation_id": annotation["id"],
                    }
                )

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        statistics = {}
        for variant in ("1ref", "4ref"):
            chosen = [item for item in items if item["variant"] == variant]
            originals = scores_for([item for item in chosen if item["kind"] == "orig"], scores)
            foils = scores_for([item for item in chosen if item["kind"] == "foil"], scores)
            statistics[f"accuracy_{variant}"] = accuracy(strictly_greater(originals, foils))
        return statistics

    protocol = {
        "pairs": {
            "all": "every (foil, original) pair of the test file (official Polos code)",
            "one_per_image": "per image, its first original in file order and that original's first foil (papers)",
            "subset8k": "as one_per_image, images of the Karpathy val+test splits only (PAC-S++ paper)",
        }[pairs],
        "references": "COCO captions minus exact matches of the true caption; 1-ref = first remaining; 4-ref = "
        + ("all remaining (official)" if four_refs == "all" else "first four remaining (paper)"),
        "statistic": "100 x share of pairs with s(orig) > s(foil), strict",
    }
    return Benchmark("foil", items, files, protocol, evaluate, options={"pairs": pairs, "four_refs": four_refs})
