"""Every benchmark loader reads its release in the folder structure of the official download(s) and as a flat copy,
with the same items, and a missing file is reported with every path tried. The cases come from the one table the
loaders look their files up in (`modeling_pacs.evaluation.releases.RELEASES`, listed in
docs/guides/benchmark-releases.md): each fixture is written once, then moved into each layout by that table."""

import shutil
from pathlib import Path

import pytest

from modeling_pacs.evaluation import BENCHMARKS, BenchmarkDataError, load_benchmark
from modeling_pacs.evaluation.releases import RELEASES, markdown_table
from tests.evaluation.test_composite import write_amt
from tests.fixtures.benchmark_files import (
    write_activitynet_foil,
    write_flickr8k_raw,
    write_foil,
    write_pascal50s,
    write_rated_csv,
    write_vatex_eval,
)

RATED_ROWS = [
    ("a man surfing", ["a man surfing", "a surfer rides a wave"], 4.0, "COCO_val2014_000000000042.jpg"),
    ("a dog", ["a dog sleeps", "a puppy"], 2.0, "COCO_val2014_000000000073.jpg"),
]
DENEB_ROLES = {"deneb_csv", "deneb_images"}
# case -> (benchmark, writer of the fixture in any layout the loader reads); Composite has two releases (the original
# AMT_eval files and DENEB's CSV), whose image folders share the flat name images/
CASES = {
    "flickr8k_expert": ("flickr8k_expert", write_flickr8k_raw),
    "flickr8k_cf": ("flickr8k_cf", write_flickr8k_raw),
    "composite": ("composite", write_amt),
    "composite_deneb_csv": ("composite", lambda root: write_rated_csv(root, "en_test_composite_da.csv", RATED_ROWS)),
    "pascal50s": ("pascal50s", write_pascal50s),
    "foil": ("foil", write_foil),
    "vatex_eval": ("vatex_eval", lambda root: write_vatex_eval(root)[0]),
    "activitynet_foil": ("activitynet_foil", write_activitynet_foil),
    "polaris": ("polaris", lambda root: write_rated_csv(root, "polaris_test.csv", RATED_ROWS)),
    "nebula": ("nebula", lambda root: write_rated_csv(root, "nebula_test.csv", RATED_ROWS)),
}


def test_the_table_covers_every_benchmark_with_a_release_and_a_flat_place():
    assert set(RELEASES) == set(BENCHMARKS) - {"detailcaps"}  # DetailCaps: its own parquet layouts (detailcaps.py)
    assert {benchmark for benchmark, _ in CASES.values()} == set(RELEASES)
    for entries in RELEASES.values():
        roles = [entry.role for entry in entries]
        assert len(roles) == len(set(roles))
        for entry in entries:
            assert entry.paths and entry.source


def flat_place(paths: tuple[str, ...]) -> str:
    """The flat copy's place: the last candidate directly in the data folder."""
    return [path for path in paths if "/" not in path][-1]


def move(source: Path, target: Path):
    """Move a file, or merge a folder's files into `target` (several image folders become one images/)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for child in source.iterdir():
            move(child, target / child.name)
        source.rmdir()
    else:
        source.replace(target)


def write_layout(case: str, root: Path, layout: str) -> Path:
    """The case's fixture with every file of the table at its release place (`release`) or flat place (`flat`)."""
    benchmark, writer = CASES[case]
    written = writer(root)
    for entry in RELEASES[benchmark]:
        if benchmark == "composite" and (entry.role in DENEB_ROLES) != (case == "composite_deneb_csv"):
            continue
        present = [
            relative for relative in entry.paths if not relative.startswith("..") and (written / relative).exists()
        ]
        if not present:
            continue
        target = entry.paths[0] if layout == "release" else flat_place(entry.paths)
        if present[0] != target:
            move(written / present[0], written / target)
    for folder in sorted(written.rglob("*"), reverse=True):  # folders emptied by the moves
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return written


def comparable(item: dict, root: Path) -> dict:
    """An item with its media path reduced to the file name, after checking that the file is where it says."""
    result = dict(item)
    for key in ("image", "video"):
        if key in item:
            path = Path(item[key])
            assert path.is_relative_to(root.resolve()), path
            if key == "image":
                assert path.is_file(), path
            result[key] = path.name
    return result


@pytest.mark.parametrize("case", sorted(CASES))
def test_release_layout_and_flat_copy_give_the_same_items(case, tmp_path):
    benchmark = CASES[case][0]
    roots = {layout: write_layout(case, tmp_path / layout, layout) for layout in ("release", "flat")}
    trees = {
        layout: sorted(path.relative_to(root).as_posix() for path in root.rglob("*")) for layout, root in roots.items()
    }
    # EMScore's video releases are flat already (files at the top of the Drive folder, features in *_video_feats/).
    assert (trees["release"] == trees["flat"]) == (benchmark in ("vatex_eval", "activitynet_foil"))
    loaded = {layout: load_benchmark(benchmark, root) for layout, root in roots.items()}
    release, flat = (
        [comparable(item, roots[layout]) for item in loaded[layout].items] for layout in ("release", "flat")
    )
    assert release and release == flat
    # The release layout's files are read from their release places.
    for path in loaded["release"].files:
        relative = path.relative_to(roots["release"]).as_posix()
        entry = next(entry for entry in RELEASES[benchmark] if relative in entry.paths)
        assert relative == entry.paths[0], relative


@pytest.mark.parametrize("layout", ["release", "flat"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_missing_file_names_every_place_it_was_looked_for(case, layout, tmp_path):
    benchmark = CASES[case][0]
    root = write_layout(case, tmp_path / "pristine", layout)
    files = [path.relative_to(root).as_posix() for path in load_benchmark(benchmark, root).files]
    assert files
    for number, relative in enumerate(files):
        copy = tmp_path / f"without_{number}"
        shutil.copytree(root, copy)
        (copy / relative).unlink()
        with pytest.raises(BenchmarkDataError) as error:
            load_benchmark(benchmark, copy)
        message = str(error.value)
        entry = next(entry for entry in RELEASES[benchmark] if relative in entry.paths)
        for candidate in entry.paths:
            assert str(copy / candidate) in message, (relative, message)
        assert f"(see docs/guides/benchmark-releases.md, '{BENCHMARKS[benchmark][0]}')" in message


def test_foil_reads_cocos_annotations_folder(tmp_path):
    # COCO ships its captions as annotations/captions_val2014.json (annotations_trainval2014.zip).
    root = write_foil(tmp_path / "foil")
    move(root / "captions_val2014.json", root / "annotations" / "captions_val2014.json")
    benchmark = load_benchmark("foil", root)
    assert root / "annotations" / "captions_val2014.json" in benchmark.files
    first = next(item for item in benchmark.items if item["id"] == "foil/0/orig/4ref")
    assert first["references"] == [
        "A dog lying on a couch.",
        "A dog resting.",
        "A puppy indoors.",
        "A pet on furniture.",
    ]


def test_the_docs_page_lists_the_table():
    page = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "benchmark-releases.md").read_text()
    listed = page.split("<!-- release-table:start -->\n")[1].split("<!-- release-table:end -->")[0]
    assert listed == markdown_table({name: title for name, (title, _) in BENCHMARKS.items()}), (
        "regenerate the table with modeling_pacs.evaluation.releases.markdown_table()"
    )
