"""The inputs of `pacs-pp evaluate-captions` -> the items of `evaluate_captions`: COCO caption results with their
annotations (`read_coco_results`), or a local `datasets` folder (`read_dataset_folder`); pacs-score's own formats are
read by `caption_files.read_items`.

A results file is what captioning codebases write for the COCO evaluation server: `[{"image_id": 42, "caption":
"..."}, ...]`. The annotations are a COCO captions file (`captions_val2014.json`, nocaps: `images` with `id` and
`file_name`, `annotations` with `image_id` and `caption`) or Karpathy's split file (`dataset_coco.json`: `images` with
`cocoid` or `imgid`, `filepath`, `filename` and `sentences`). Images are found under an image folder by file name
(Karpathy's: `filepath/filename`).

A result whose image id is not in the annotations is an error naming it; annotated images without a result are not
evaluated (as COCOEvalCap does with `params["image_id"] = cocoRes.getImgIds()`), and their count is reported.
"""

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..input_paths import check_input_file


@dataclass
class CocoCaptions:
    """The items read (input order of the results file) and the number of annotated images without a result."""

    items: list[dict]
    unmatched_images: int


def read_json(path: Path, what: str):
    from ..caption_files import load_json_file

    expected = "the COCO results file itself" if what == "--results" else "the COCO captions file itself"
    check_input_file(path, f"{what} file", expected + " (.json)")
    try:
        return load_json_file(Path(path))
    except ValueError as error:
        raise InputError(str(error)) from None


def read_annotations(path: Path) -> dict:
    """`{image_id: (file name relative to the image folder, [references])}`, in the file's image order."""
    data = read_json(path, "--annotations")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InputError(
            f"{path}: not a COCO captions file: expected an object with 'images' (id, file_name) and 'annotations' "
            "(image_id, caption), or Karpathy's split file ('images' with 'sentences')"
        )
    images: dict = {}
    if "annotations" in data:
        for index, image in enumerate(data["images"]):
            if not isinstance(image, dict) or "id" not in image or "file_name" not in image:
                raise InputError(f"{path}: images[{index}] lacks 'id' or 'file_name'")
            images[image["id"]] = (image["file_name"], [])
        for index, annotation in enumerate(data["annotations"]):
            if not isinstance(annotation, dict) or not isinstance(annotation.get("caption"), str):
                raise InputError(f"{path}: annotations[{index}] lacks a 'caption' string")
            if annotation.get("image_id") not in images:
                raise InputError(
                    f"{path}: annotations[{index}] names image_id {annotation.get('image_id')!r}, which 'images' lacks"
                )
            images[annotation["image_id"]][1].append(annotation["caption"])
    else:  # Karpathy's split file
        for index, image in enumerate(data["images"]):
            image_id = image.get("cocoid", image.get("imgid")) if isinstance(image, dict) else None
            if image_id is None or "filename" not in image or not isinstance(image.get("sentences"), list):
                raise InputError(f"{path}: images[{index}] lacks 'cocoid' (or 'imgid'), 'filename' or 'sentences'")
            file_name = str(Path(image.get("filepath", "")) / image["filename"])
            images[image_id] = (file_name, [sentence["raw"] for sentence in image["sentences"]])
    return images


def read_coco_results(results: Path, annotations: Path, images: Path | None) -> CocoCaptions:
    """The items of a COCO results file, with the references and image paths of its annotations."""
    rows = read_json(results, "--results")
    if not isinstance(rows, list):
        raise InputError(f'{results}: a COCO results file is a list [{{"image_id": 42, "caption": "..."}}, ...]')
    annotated = read_annotations(annotations)
    folder = Path(images) if images is not None else Path(annotations).parent
    items, unknown = [], []
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or "image_id" not in row or "caption" not in row:
            raise InputError(f'{results}: entry {index} is not {{"image_id": ..., "caption": "..."}}: {row!r}'[:300])
        if row["image_id"] not in annotated:
            unknown.append(row["image_id"])
            continue
        file_name, references = annotated[row["image_id"]]
        items.append({"image_id": row["image_id"], "image": str(folder / file_name), "caption": row["caption"],
                      "references": references})  # fmt: skip
    if unknown:
        hint = ""
        if any(isinstance(image_id, str) and image_id.isdigit() and int(image_id) in annotated for image_id in unknown):
            hint = " (the results give ids as strings, the annotations as numbers: write them as numbers)"
        listed = ", ".join(map(repr, unknown[:5])) + (" ..." if len(unknown) > 5 else "")
        raise InputError(
            f"{results}: {len(unknown)} results name image ids that {annotations} does not annotate ({listed}){hint}: "
            "evaluate against the annotations of the split the captions were generated for"
        )
    if not items:
        raise InputError(f"{results} holds no results: nothing to evaluate")
    scored = {item["image_id"] for item in items}
    return CocoCaptions(items, sum(1 for image_id in annotated if image_id not in scored))


def read_dataset_folder(folder: Path) -> list[dict]:
    """The rows of a `datasets` folder (`Dataset.save_to_disk`) with columns `image` (a `datasets.Image` or a path),
    `caption`, and optionally `references` (a list of strings) and `image_id` (default: the row number). Images stay
    undecoded (`{"bytes", "path"}`) until the evaluation decodes each once."""
    import datasets

    from ..corpus_scoring import undecoded_images

    try:
        dataset = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError) as error:
        raise InputError(f"{folder}: not a datasets folder saved with save_to_disk ({error})") from None
    if isinstance(dataset, datasets.DatasetDict):
        splits = ", ".join(f"{folder / split}" for split in dataset)
        raise InputError(f"{folder} holds several splits: pass the folder of one ({splits})")
    missing = [column for column in ("image", "caption") if column not in dataset.column_names]
    if missing:
        raise InputError(f"{folder}: the dataset lacks the column(s) {missing} (it has {dataset.column_names})")
    dataset = undecoded_images(dataset, "image")
    return [{"image_id": row.get("image_id", index), "image": row["image"], "caption": row["caption"],
             "references": row.get("references")} for index, row in enumerate(dataset)]  # fmt: skip


__all__ = ["CocoCaptions", "read_annotations", "read_coco_results", "read_dataset_folder"]
