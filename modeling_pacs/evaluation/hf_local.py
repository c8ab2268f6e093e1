"""Local copies of the Hugging Face mirrors (`save_to_disk` folders or parquet files) of the rated-caption benchmarks:
`yuwd/Flickr8k-HumanEval` (configs expert / crowdflower), `yuwd/Composite`, `yuwd/Polaris`, `Ka2ukiMatsuda/Nebula`.

Column names, as verified (docs/spec/benchmarks.md):
- `yuwd/Polaris`: `refs` (list of strings), `cand`, `img` (image), `human_score` (float32); splits train / validation
  / test (26,122 rows, one fewer than `polaris_test.csv`). Sources: the dataset card's `dataset_info` (README.md at
  Hub commit 6de8caee) and CaptionEvalKit (`YuigaWada/CaptionEvalKit-for-VLMs@23f154b`
  `capevalkit/infrastructure/benchmarks/legacy.py:590`, which reads exactly these four columns).
- `Ka2ukiMatsuda/Nebula`: `file_name`, `image` (image), `refs` (list of strings), `mt`, `human_score` (float64);
  splits train / valid / test (3,298 rows). Sources: the dataset card (README.md at Hub commit a4c99b1, whose usage
  example prints these features) and CaptionEvalKit `legacy.py:565`.
- `yuwd/Composite` (config `default`) and `yuwd/Flickr8k-HumanEval` (configs `expert`, `crowdflower`), split `test`:
  only the image column `img` is verified (CaptionEvalKit `legacy.py:320-321` casts it after `load_dataset`); no
  dataset card was found, and CaptionEvalKit itself reads the other columns with fallbacks (`legacy.py:393-401`:
  `imgid|file_name|id`, `cand|mt|caption`, `refs|references`, `human_score|score`). Those alternatives are accepted
  here too, and an unknown layout is refused with the columns it has.

Embedded images are written once to a cache folder so that every item has an image path.
"""

import ast
import hashlib
import os
from pathlib import Path

from ..data.sources import is_saved_dataset
from .benchmark import BenchmarkDataError, data_error

COLUMNS = {
    "candidate": ("mt", "cand", "caption"),
    "references": ("refs", "references"),
    "human": ("human_score", "score"),
    "image": ("img", "image"),
    "image_name": ("imgid", "file_name", "id"),
}
LAYOUT = (
    "a local copy of the Hugging Face dataset: a save_to_disk folder or *.parquet files, split 'test' (for "
    "Flickr8k-HumanEval in a sub-folder named by its config, expert or crowdflower, when both are present), with "
    "columns mt|cand|caption, refs|references, human_score|score and img|image or imgid|file_name|id"
)


def find_hf_copy(data_dir: Path, config: str | None = None, split: str = "test") -> Path | None:
    """The save_to_disk folder, or the folder of the split's parquet files, under `data_dir`, if any. With `config`,
    a folder named by it is preferred (a copy holding several configs, e.g. Flickr8k-HumanEval's expert and
    crowdflower: `<config>/<split>/0000.parquet` as the Hub's parquet export, or `<config>/test-*.parquet`)."""
    for folder in ([data_dir / config] if config else []) + [data_dir]:
        if is_saved_dataset(folder):
            return folder
    parquet = sorted(data_dir.rglob("*.parquet"))
    if config:
        parquet = [path for path in parquet if config in path.relative_to(data_dir).parts[:-1]] or parquet
    in_split = [path for path in parquet if path.parent.name == split or path.name.startswith(f"{split}-")]
    parquet = in_split or parquet
    return parquet[0].parent if parquet else None


def _open(location: Path, split: str):
    import datasets

    if is_saved_dataset(location):
        dataset = datasets.load_from_disk(str(location))
    else:
        chosen = [str(path) for path in hf_files(location, split)]
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


def image_cache_dir(location: Path, name: str, stamp: str = "") -> Path:
    """Where a copy's embedded images are written: one folder per copy (its path, and `stamp`, e.g. the files' sizes
    and modification times, so that a replaced file gets a fresh folder)."""
    cache = Path(os.environ.get("PACS_PP_CACHE", Path.home() / ".cache" / "pacs_pp"))
    digest = hashlib.sha256((str(location.resolve()) + stamp).encode()).hexdigest()[:16]
    return cache / "benchmark_images" / f"{name}-{digest}"


def write_cached_image(path: Path, data: bytes):
    """Write embedded image bytes once, atomically (a reader never sees a partial file)."""
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


def read_hf_rows(data_dir: Path, name: str, split: str = "test", config: str | None = None) -> tuple[list[dict], Path]:
    """Rows `{mt, refs, score, imgid}` (imgid an absolute image path) and the copy's location."""
    location = find_hf_copy(data_dir, config, split)
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
            write_cached_image(path, image["bytes"])
        else:
            path = (data_dir / "images" / str(row[image_name] if image_name else image["path"])).resolve()
        rows.append({"mt": row[candidate], "refs": list(refs), "score": float(row[human]), "imgid": str(path)})
    return rows, location


def hf_files(location: Path, split: str = "test") -> list[Path]:
    """The split's data files in a local copy: what is read, and what the report checksums."""
    if is_saved_dataset(location):
        folder = location / split if (location / split).is_dir() else location
        return sorted(folder.glob("*.arrow"))
    files = sorted(location.glob("*.parquet"))
    return [path for path in files if path.name.startswith(f"{split}-")] or files
