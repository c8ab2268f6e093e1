"""Where each benchmark's files sit in its original release and in a flat copy: the one table the loaders look files
up in, the tests build their release-layout fixtures from, and docs/guides/benchmark-releases.md lists.

Each file (or folder) has candidate paths relative to `--data-dir`, tried in order: first the folder structure of
the official download(s), then the flat copy the loaders documented before (every file directly in `--data-dir`).
A missing file is reported with every path that was tried.
"""

from dataclasses import dataclass
from pathlib import Path

from .benchmark import DOCS, BenchmarkDataError


@dataclass(frozen=True)
class ReleaseFile:
    """One file or folder of a benchmark's release."""

    role: str  # the loader's name for it
    paths: tuple[str, ...]  # candidates relative to --data-dir: release layout first, flat copy last
    source: str  # the download it comes from
    folder: bool = False


def _flickr8k(annotations: str, json_name: str) -> tuple[ReleaseFile, ...]:
    return (
        ReleaseFile("clipscore_json", (json_name,), f"clipscore's flickr8k_example/download.py output ({json_name})"),
        ReleaseFile(
            "tokens",
            ("Flickr8k_text/Flickr8k.token.txt", "Flickr8k.token.txt"),
            "Flickr8k_text.zip (Hodosh et al. 2013), extracted into Flickr8k_text/",
        ),
        ReleaseFile(
            "annotations",
            (f"Flickr8k_text/{annotations}", annotations),
            "Flickr8k_text.zip, extracted into Flickr8k_text/",
        ),
        ReleaseFile(
            "images",
            ("Flicker8k_Dataset", "images"),
            "Flickr8k_Dataset.zip (its folder is spelled Flicker8k_Dataset)",
            True,
        ),
    )


COCO_CAPTIONS = ("annotations/captions_val2014.json", "captions_val2014.json")
COCO_SOURCE = "COCO annotations_trainval2014.zip (annotations/captions_val2014.json)"

RELEASES: dict[str, tuple[ReleaseFile, ...]] = {
    "flickr8k_expert": _flickr8k("ExpertAnnotations.txt", "flickr8k.json"),
    "flickr8k_cf": _flickr8k("CrowdFlowerAnnotations.txt", "crowdflower_flickr8k.json"),
    "composite": (
        *(
            ReleaseFile(
                f"amt_{subset}_{kind}",
                (f"AMT_eval/{subset}_{kind}.csv", f"{subset}_{kind}.csv"),
                "AMT_eval (Aditya et al. 2015), extracted into AMT_eval/ (the archive's own folder is unverified)",
            )
            for subset in ("8k", "30k", "coco")
            for kind in ("correctness", "throughness")
        ),
        ReleaseFile("references_8k", ("Flickr8k_text/Flickr8k.token.txt", "Flickr8k.token.txt"), "Flickr8k_text.zip"),
        ReleaseFile(
            "references_30k",
            ("flickr30k/results_20130124.token", "results_20130124.token"),
            "Flickr30k flickr30k.tar.gz, extracted into flickr30k/",
        ),
        ReleaseFile("references_coco", COCO_CAPTIONS, COCO_SOURCE),
        ReleaseFile("images_8k", ("Flicker8k_Dataset", "Flickr8k_Dataset", "images"), "Flickr8k_Dataset.zip", True),
        ReleaseFile(
            "images_30k", ("flickr30k-images", "flickr30k_images", "images"), "Flickr30k flickr30k-images.tar", True
        ),
        ReleaseFile("images_coco", ("val2014", "images"), "COCO val2014.zip", True),
        ReleaseFile(
            "deneb_csv",
            (
                "data_en/composite/en_test_composite_da.csv",
                "en_test_composite_da.csv",
                "en_test_composite_da2.csv",
            ),
            "DENEB's data_en/ folder (validate/validate_cvpr.py path)",
        ),
        ReleaseFile("deneb_images", ("data_en/images", "images", "../images"), "DENEB's data_en/images/", True),
    ),
    "pascal50s": (
        ReleaseFile(
            "pairs",
            ("pyCIDErConsensus/pair_pascal.mat", "pair_pascal.mat"),
            "pyCIDErConsensus.zip (Vedantam et al. 2015)",
        ),
        ReleaseFile(
            "consensus",
            ("pyCIDErConsensus/consensus_pascal.mat", "consensus_pascal.mat"),
            "pyCIDErConsensus.zip (Vedantam et al. 2015)",
        ),
        ReleaseFile(
            "images",
            ("VOCdevkit/VOC2010/JPEGImages", "JPEGImages", "images"),
            "VOCtrainval_03-May-2010.tar (VOCdevkit/VOC2010/JPEGImages)",
            True,
        ),
    ),
    "foil": (
        ReleaseFile(
            "foil",
            ("foilv1.0_test_2017.json", "data_en/foil/foilv1.0_test_2017.json"),
            "foilv1.0_test_2017.json (foilunitn.github.io); data_en/foil/ is the Polos code's place for it",
        ),
        ReleaseFile("coco", (*COCO_CAPTIONS, "data_en/coco/captions_val2014.json"), COCO_SOURCE),
        ReleaseFile("karpathy", ("dataset_coco.json",), "Karpathy's caption_datasets.zip (--foil-pairs subset8k only)"),
        ReleaseFile("images", ("val2014", "images", "data_en/images"), "COCO val2014.zip", True),
    ),
    "vatex_eval": (
        *(
            ReleaseFile(name, (f"{name}.pkl",), "EMScore's VATEX-EVAL Google Drive folder (files at its top level)")
            for name in ("candidates_list", "gts_list", "human_scores", "video_ids")
        ),
        ReleaseFile("idf_corpus", ("vatex_train_en_annotations.json",), "EMScore's VATEX-EVAL folder (optional)"),
        ReleaseFile(
            "features",
            ("VATEX-EVAL_video_feats",),
            "EMScore's VATEX-EVAL folder: CLIP ViT-B/32 features, <video_id>.pt (--video-features)",
            True,
        ),
        ReleaseFile(
            "videos", ("videos",), "the raw VATEX validation videos, <video_id>.mp4 (needed for PAC-S++)", True
        ),
    ),
    "activitynet_foil": (
        *(
            ReleaseFile(
                name, (f"{name}.json",), "EMScore's ActivityNet-FOIL Google Drive folder (files at its top level)"
            )
            for name in (
                "anet_entities_test_1",
                "anet_entities_test_2",
                "final_right_video_sentences",
                "final_foil_video_sentences",
            )
        ),
        ReleaseFile("idf_corpus", ("train.json",), "EMScore's ActivityNet-FOIL folder (optional)"),
        ReleaseFile(
            "features",
            ("ActivityNet-FOIL_video_feats",),
            "EMScore's ActivityNet-FOIL folder: CLIP ViT-B/32 features, <video_id>.pt (--video-features)",
            True,
        ),
        ReleaseFile("videos", ("videos",), "the raw ActivityNet videos, <video_id>.mp4 (needed for PAC-S++)", True),
    ),
    "polaris": (
        ReleaseFile(
            "csv",
            ("data_en/polaris/polaris_test.csv", "polaris_test.csv"),
            "Polos's data_en/ folder (validate/validate_cvpr.py path); the Hub's yuwd/Polaris file polaris_test.csv",
        ),
        ReleaseFile(
            "images",
            ("data_en/polaris/images", "data_en/images", "images", "../images"),
            "Polos's data_en/ folder",
            True,
        ),
    ),
    "nebula": (
        ReleaseFile(
            "csv",
            ("data_en/nebula/nebula_test.csv", "nebula_test.csv"),
            "DENEB's data_en/ folder (validate/validate_cvpr.py path)",
        ),
        ReleaseFile("images", ("data_en/images", "images", "../images"), "DENEB's data_en/images/", True),
    ),
}


def release_file(benchmark: str, role: str) -> ReleaseFile:
    return next(entry for entry in RELEASES[benchmark] if entry.role == role)


def find(data_dir: Path, benchmark: str, role: str) -> Path | None:
    """The first candidate path of `role` that exists under `data_dir`, or None."""
    entry = release_file(benchmark, role)
    for relative in entry.paths:
        path = data_dir / relative
        if path.is_dir() if entry.folder else path.is_file():
            return path
    return None


def locate(data_dir: Path, benchmark: str, role: str, layout: str, title: str) -> Path:
    """The first existing candidate; a missing file is an error that names every path tried."""
    found = find(data_dir, benchmark, role)
    if found is not None:
        return found
    return missing(data_dir, benchmark, role, layout, title)


def missing(data_dir: Path, benchmark: str, role: str, layout: str, title: str):
    entry = release_file(benchmark, role)
    tried = ", ".join(str(data_dir / relative) for relative in entry.paths)
    kind = "folder" if entry.folder else "file"
    raise BenchmarkDataError(
        f"{data_dir / entry.paths[0]}: {kind} not found (looked for {tried}; it comes from {entry.source}). "
        f"Expected {layout} (see {DOCS}, '{title}')."
    )


def folder_or_first(data_dir: Path, benchmark: str, role: str) -> Path:
    """An image folder: the first that exists, else the release layout's (errors on the image name it)."""
    return find(data_dir, benchmark, role) or data_dir / release_file(benchmark, role).paths[0]


def markdown_table(titles: dict[str, str]) -> str:
    """The table as docs/guides/benchmark-releases.md lists it, benchmarks named by `titles` (as in
    `evaluation.BENCHMARKS`); a test keeps the page in step with `RELEASES`."""
    lines = ["| benchmark | file | release layout | also read from | comes from |", "|---|---|---|---|---|"]
    for name, entries in RELEASES.items():
        for entry in entries:
            place = f"`{entry.paths[0]}{'/' if entry.folder else ''}`"
            others = ", ".join(f"`{path}{'/' if entry.folder else ''}`" for path in entry.paths[1:]) or "–"
            source = entry.source.replace("<", "&lt;").replace(">", "&gt;")
            lines.append(f"| {titles[name]} | {entry.role} | {place} | {others} | {source} |")
    return "\n".join(lines) + "\n"
