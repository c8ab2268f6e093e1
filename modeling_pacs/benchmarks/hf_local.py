"""Local copies of the Hugging Face mirrors (`save_to_disk` folders or parquet files) of the rated-caption benchmarks:
`yuwd/Flickr8k-HumanEval` (configs expert / crowdflower), `yuwd/Composite`, `yuwd/Polaris`, `Ka2ukiMatsuda/Nebula`.

The column names are the ones CaptionEvalKit reads (third-party; BENCHMARKS.md §2, §3, §8, §9), unverified against the
datasets: candidate `mt|cand|caption`, references `refs|references` (a list or a Python list literal), human score
`human_score|score`, image `img|image` (embedded) or a file name `imgid|file_name|id` under `images/`. Embedded images
are written once to a cache folder so that every item has an image path.
"""

import ast
import hashlib
import os
from pathlib import Path

from .data import BenchmarkDataError, data_error

COLUMNS = {
    "candidate": ("mt", "cand", "caption"),
    "references": ("refs", "references"),
    "human": ("human_score", "score"),
    "image": ("img", "image"),
    "image_name": ("imgid", "file_name", "id"),
}
LAYOUT = (
    "a local copy of the Hugging Face dataset: a save_to_disk folder or *.parquet files, split 'test', with columns "
    "mt|cand|caption, refs|references, human_score|score and img|image or imgid|file_name"
)


def find_hf_copy(data_dir: Path) -> Path | None:
    """The save_to_disk folder or the first parquet file's folder under `data_dir`, if any."""
    if (data_dir / "dataset_dict.json").is_file() or (data_dir / "state.json").is_file():
        return data_dir
    parquet = sorted(data_dir.rglob("*.parquet"))
    return parquet[0].parent if parquet else None


def _open(location: Path, split: str):
    import datasets

    if (location / "dataset_dict.json").is_file() or (location / "state.json").is_file():
        dataset = datasets.load_from_disk(str(location))
    else:
        files = sorted(str(path) for path in location.glob("*.parquet"))
        chosen = [f for f in files if Path(f).name.startswith(f"{split}-")] or files
        dataset = datasets.load_dataset("parquet", data_files={split: chosen}, split=split)
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            raise data_error(location, f"no '{split}' split (found {sorted(dataset)})", LAYOUT, "Hugging Face copies")
        dataset = dataset[split]
    for column, feature in dataset.features.items():
        if isinstance(feature, datasets.Image):
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
    return dataset


def _column(names: list[str], role: str, location: Path, required: bool = True) -> str | None:
    found = next((name for name in COLUMNS[role] if name in names), None)
    if found is None and required:
        raise data_error(
            location, f"no {role} column (one of {COLUMNS[role]}; found {names})", LAYOUT, "Hugging Face copies"
        )
    return found


def image_cache_dir(location: Path, name: str) -> Path:
    cache = Path(os.environ.get("PACS_PP_CACHE", Path.home() / ".cache" / "pacs_pp"))
    digest = hashlib.sha256(str(location.resolve()).encode()).hexdigest()[:16]
    return cache / "benchmark_images" / f"{name}-{digest}"


def read_hf_rows(data_dir: Path, name: str, split: str = "test") -> tuple[list[dict], Path]:
    """Rows `{mt, refs, score, imgid}` (imgid an absolute image path) and the copy's location."""
    location = find_hf_copy(data_dir)
    if location is None:
        raise BenchmarkDataError(f"{data_dir}: no save_to_disk folder or parquet file. Expected {LAYOUT}")
    dataset = _open(location, split)
    names = list(dataset.column_names)
    candidate, references = _column(names, "candidate", location), _column(names, "references", location)
    human = _column(names, "human", location)
    embedded, image_name = _column(names, "image", location, False), _column(names, "image_name", location, False)
    if embedded is None and image_name is None:
        raise data_error(location, "no image column (img|image or imgid|file_name|id)", LAYOUT, "Hugging Face copies")
    cache = image_cache_dir(location, name)
    rows = []
    for number, row in enumerate(dataset):
        refs = row[references]
        if isinstance(refs, str):
            try:
                refs = ast.literal_eval(refs)
            except (ValueError, SyntaxError) as error:
                raise data_error(
                    location, f"row {number}: unreadable references ({error})", LAYOUT, "Hugging Face copies"
                ) from error
        image = row.get(embedded) if embedded else None
        if image and image.get("bytes"):
            stem = Path(str(row[image_name]) if image_name else image.get("path") or "image").name
            path = cache / f"{number:06d}_{stem}"
            if not path.is_file():
                cache.mkdir(parents=True, exist_ok=True)
                temporary = path.with_name(f".{path.name}.tmp")
                temporary.write_bytes(image["bytes"])
                temporary.replace(path)
        else:
            path = (data_dir / "images" / str(row[image_name] if image_name else image["path"])).resolve()
        rows.append({"mt": row[candidate], "refs": list(refs), "score": float(row[human]), "imgid": str(path)})
    return rows, location


def hf_files(location: Path) -> list[Path]:
    """The data files of a local copy, for the report's checksums."""
    return sorted(location.glob("*.parquet")) or sorted(location.rglob("*.arrow"))
