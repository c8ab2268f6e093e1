"""VATEX-EVAL and ActivityNet-FOIL (docs/spec/benchmarks.md#vatex-eval, docs/spec/benchmarks.md#activitynet-foil):
EMScore's release files plus the raw videos.

The pickles are NumPy arrays: they are read with an unpickler that only rebuilds NumPy arrays, never arbitrary
objects. Scoring needs `PACSModel.score_videos` (see `scoring.score_video_items`); `--scores` needs only these files.
"""

import io
import logging
import pickle
from pathlib import Path

import numpy as np

from .benchmark import Benchmark, BenchmarkOptions, data_error, read_json, require_file, scores_for
from .protocols import overlapping_references, paired_accuracy, per_annotator_correlations

logger = logging.getLogger("pacs_pp.benchmarks")

VATEX = "VATEX-EVAL"
ANET = "ActivityNet-FOIL"
VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv", ".avi", ".mov")
PICKLE_LAYOUT = (
    "EMScore's VATEX-EVAL pickles: candidates_list.pkl (N strings), gts_list.pkl (N x 9 strings), human_scores.pkl "
    "(3N scores, annotator-major), video_ids.pkl (N ids), and videos/<video_id>.mp4"
)
ANET_LAYOUT = (
    "EMScore's ActivityNet-FOIL files: anet_entities_test_1.json and anet_entities_test_2.json ({video_id: {duration, "
    "timestamps, sentences}}), final_right_video_sentences.json and final_foil_video_sentences.json ({results: "
    "{video_id: [{sentence}]}}), and videos/<video_id>.mp4"
)
# Only what pickled NumPy arrays need (numpy 1.x and 2.x module names).
ALLOWED_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


class ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only NumPy arrays are expected")
        return super().find_class(module, name)


def read_array_pickle(path: Path) -> np.ndarray:
    require_file(path, PICKLE_LAYOUT, VATEX)
    try:
        array = ArrayUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise data_error(path, f"not a pickled NumPy array ({error})", PICKLE_LAYOUT, VATEX) from error
    return np.asarray(array)


def find_video(video_dir: Path, video_id: str) -> Path | None:
    return next(
        (
            video_dir / f"{video_id}{suffix}"
            for suffix in VIDEO_SUFFIXES
            if (video_dir / f"{video_id}{suffix}").is_file()
        ),
        None,
    )


def load_vatex_eval(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    """Items: each candidate twice, with reference column 0 ("1ref") and with all 9 ("9ref"); the no-reference score
    is the `score` column. Correlation per annotator, then averaged (EMScore `utils.py`); `official_rounding` rounds
    predictions to 4 decimals first and the result to 4 decimals (the official code's default)."""
    official_rounding = options.vatex_rounding
    names = ("candidates_list", "gts_list", "human_scores", "video_ids")
    candidates, references, human, video_ids = (read_array_pickle(data_dir / f"{name}.pkl") for name in names)
    count = len(candidates)
    if references.ndim != 2 or len(references) != count or human.size != 3 * count or len(video_ids) != count:
        raise data_error(
            data_dir / "gts_list.pkl",
            f"shapes disagree: {count} candidates, references {references.shape}, {human.size} human scores, "
            f"{len(video_ids)} video ids",
            PICKLE_LAYOUT,
            VATEX,
        )
    human = human.reshape(3, -1).T.astype(np.float64)  # annotator-major in the file
    video_dir = (data_dir / "videos").resolve()
    items = []
    for index in range(count):
        video = find_video(video_dir, str(video_ids[index])) or video_dir / f"{video_ids[index]}.mp4"
        for variant, chosen in (("1ref", references[index, :1]), ("9ref", references[index])):
            items.append(
                {
                    "id": f"vatex_eval/{index}/{variant}",
                    "video": str(video),
                    "video_id": str(video_ids[index]),
                    "candidate": str(candidates[index]),
                    "references": [str(reference) for reference in chosen],
                    "variant": variant,
                    "human": float(human[index].mean()),
                    "human_scores": human[index].tolist(),
                }
            )

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        statistics = {}
        for variant in ("1ref", "9ref") if column == "ref_score" else ("1ref",):
            values = scores_for([item for item in items if item["variant"] == variant], scores)
            suffix = f"_{variant}" if column == "ref_score" else ""
            for name, value in per_annotator_correlations(values, human, official_rounding).items():
                statistics[name + suffix] = value
        return statistics

    corpus_path = data_dir / "vatex_train_en_annotations.json"
    idf_corpus = None
    if corpus_path.is_file():
        idf_corpus = [
            caption for captions in read_json(corpus_path, PICKLE_LAYOUT, VATEX).values() for caption in captions
        ]
    protocol = {
        "frames": "10 uniformly sampled (np.linspace(0, n-1, 10))",
        "idf": "VATEX train captions (vatex_train_en_annotations.json)"
        if idf_corpus
        else "default corpus (train file absent)",
        "statistic": "Kendall tau_b and Spearman per annotator, averaged, x100; "
        + ("predictions and result rounded to 4 decimals (official)" if official_rounding else "unrounded")
        + "; the official p < 0.01 assertion is not applied",
    }
    files = [data_dir / f"{name}.pkl" for name in names] + ([corpus_path] if idf_corpus else [])
    options = {"num_frames": 10, "idf_corpus": idf_corpus}
    return Benchmark(
        "vatex_eval", items, files, protocol, evaluate, human_field="human", modality="video", options=options
    )


def read_anet_paragraphs(path: Path) -> dict:
    data = read_json(path, ANET_LAYOUT, ANET)
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and {"duration", "timestamps", "sentences"} <= set(v) for v in data.values()
    ):
        raise data_error(path, "entries need duration, timestamps and sentences", ANET_LAYOUT, ANET)
    return data


def read_anet_submission(path: Path) -> dict:
    data = read_json(path, ANET_LAYOUT, ANET)
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise data_error(path, "no 'results' object", ANET_LAYOUT, ANET)
    return data["results"]


def load_activitynet_foil(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    """Sentence items of the right and foil paragraphs; a paragraph scores the mean of its sentences; accuracy is
    the share of videos whose right paragraph scores strictly higher, aligned by video id (EMScore's `set` order is
    not relied on)."""
    candidates_paragraphs = read_anet_paragraphs(data_dir / "anet_entities_test_1.json")
    reference_paragraphs = read_anet_paragraphs(data_dir / "anet_entities_test_2.json")
    right = read_anet_submission(data_dir / "final_right_video_sentences.json")
    foil = read_anet_submission(data_dir / "final_foil_video_sentences.json")
    video_dir, feature_dir = (data_dir / "videos").resolve(), data_dir / "ActivityNet-FOIL_video_feats"
    video_ids = sorted(set(right) & set(foil))
    if video_dir.is_dir() or feature_dir.is_dir():  # the official code keeps the videos it has features for
        kept = [v for v in video_ids if find_video(video_dir, v) or (feature_dir / f"{v}.pt").is_file()]
        if len(kept) < len(video_ids):
            logger.warning(
                "%s: %d of %d videos have no video or feature file and are left out (as the official code does)",
                ANET,
                len(video_ids) - len(kept),
                len(video_ids),
            )
        video_ids = kept
    items = []
    for video_id in video_ids:
        if video_id not in candidates_paragraphs or video_id not in reference_paragraphs:
            raise data_error(
                data_dir / "anet_entities_test_1.json",
                f"video {video_id} is missing from test_1 or test_2",
                ANET_LAYOUT,
                ANET,
            )
        timestamps = candidates_paragraphs[video_id]["timestamps"]
        reference = reference_paragraphs[video_id]
        for kind, submission in (("right", right), ("foil", foil)):
            for index, sentence in enumerate(submission[video_id]):
                segment = timestamps[index]
                chosen = overlapping_references(segment, reference["timestamps"])
                items.append(
                    {
                        "id": f"activitynet_foil/{video_id}/{kind}/{index}",
                        "video": str(find_video(video_dir, video_id) or video_dir / f"{video_id}.mp4"),
                        "candidate": sentence["sentence"],
                        "references": [reference["sentences"][k] for k in chosen],
                        "video_id": video_id,
                        "kind": kind,
                        "segment": list(segment),
                        # EMScore reads test_1's durations, then test_2's over them (`import_vid_duration`)
                        "duration": float(reference["duration"]),
                    }
                )

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        paragraphs = {"right": {}, "foil": {}}
        for item, value in zip(items, scores_for(items, scores)):
            paragraphs[item["kind"]].setdefault(item["video_id"], []).append(value)
        means = {
            kind: {video: float(np.mean(v)) for video, v in by_video.items()} for kind, by_video in paragraphs.items()
        }
        return {"accuracy": paired_accuracy(means["right"], means["foil"])}

    corpus_path = data_dir / "train.json"
    idf_corpus = None
    if corpus_path.is_file():  # ActivityNet-Captions train, sentences over 66 words dropped (official)
        train = read_anet_paragraphs(corpus_path)
        idf_corpus = [s for entry in train.values() for s in entry["sentences"] if len(s.split(" ")) <= 66]
    protocol = {
        "idf": "ActivityNet train sentences of <= 66 words" if idf_corpus else "default corpus (train.json absent)",
        "videos": "ids in both submissions with a video (or feature) file",
        "segments": "candidate timestamps from anet_entities_test_1.json, duration from anet_entities_test_2.json "
        "(EMScore reads it last); all frames of the segment",
        "references": "test_2 sentences overlapping > 40% of their own integer-second length; all if none",
        "statistic": "100 x share of videos with mean(right sentences) > mean(foil sentences), aligned by video id",
    }
    files = [
        data_dir / name
        for name in (
            "anet_entities_test_1.json",
            "anet_entities_test_2.json",
            "final_right_video_sentences.json",
            "final_foil_video_sentences.json",
        )
    ]
    options = {"idf_corpus": idf_corpus}
    return Benchmark("activitynet_foil", items, files, protocol, evaluate, modality="video", options=options)
