"""`--video-features DIR`: VATEX-EVAL and ActivityNet-FOIL scored from EMScore's released per-frame CLIP features
(`<video_id>.pt`, one `[n_frames, 512]` L2-normalised fp32 tensor each; here random, in that format, at the tiny
model's width). Checked against EMScore's formulas in NumPy (tests/references/emscore.py) with EMScore's evaluation
scripts' frame selection (`VATEX-EVAL-demo.py`: 10 frames at `np.linspace(0, n-1, 10)`; `ActivityNet-FOIL_demo.py`:
`feats[int(a*n//duration):int(b*n//duration)]`, the duration read from test_1 then test_2), against scoring the raw
videos when the features are the same encoder's, and PAC-S++ is refused (it needs the raw videos)."""

import json
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from modeling_pacs.cli import evaluate_benchmarks
from modeling_pacs.evaluation import BenchmarkOptions, load_benchmark
from modeling_pacs.evaluation.runner import score_video_items
from modeling_pacs.loading import load_model
from modeling_pacs.models.backbones import embedding_dim
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.benchmark_files import write_activitynet_foil, write_vatex_eval
from tests.fixtures.helpers import SCORE_TOLERANCE, assert_scores_close
from tests.references.emscore import combined_components, idf_lookup, idf_table, reference_components, video_components

VATEX_FRAMES = {"video0_000001_000011": 23, "video1_000001_000011": 10, "video2_000001_000011": 4}
ANET_FRAMES = {"v1": 40, "v2": 17}
VATEX_CORPUS = {"train0": ["a dog runs on grass", "candidate one"], "train1": ["reference words", "a cat sleeps"]}


@pytest.fixture(scope="module")
def clip_s(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_clip_s") / "model"
    make_tiny_model(directory, variant="clip_s", seed=2)
    return str(directory), load_model(str(directory))


def feature_dim(model) -> int:
    return embedding_dim(model.config.backbone_config)


def release_features(count: int, dim: int, seed: int) -> torch.Tensor:
    """One feature file's tensor as EMScore's extract_video_embeddings.py writes it: fp32, rows L2-normalised."""
    rows = torch.randn(count, dim, generator=torch.Generator().manual_seed(seed))
    return rows / rows.norm(dim=-1, keepdim=True)


def write_features(folder: Path, frame_counts: dict[str, int], dim: int) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for seed, (video_id, count) in enumerate(frame_counts.items()):
        tensor = release_features(count, dim, seed)
        torch.save(tensor, folder / f"{video_id}.pt")
        arrays[video_id] = tensor.numpy().astype(np.float64)
    return arrays


def vatex_release(root: Path, dim: int) -> tuple[Path, dict[str, np.ndarray]]:
    root, _ = write_vatex_eval(root)
    (root / "vatex_train_en_annotations.json").write_text(json.dumps(VATEX_CORPUS))
    return root, write_features(root / "VATEX-EVAL_video_feats", VATEX_FRAMES, dim)


def anet_release(root: Path, dim: int) -> tuple[Path, dict[str, np.ndarray]]:
    root = write_activitynet_foil(root)
    for video in (root / "videos").iterdir():  # users without the raw videos
        video.unlink()
    (root / "videos").rmdir()
    test_2 = json.loads((root / "anet_entities_test_2.json").read_text())
    test_2["v1"]["duration"] = 25.0  # EMScore reads test_2's duration last: it is the one used
    (root / "anet_entities_test_2.json").write_text(json.dumps(test_2))
    return root, write_features(root / "ActivityNet-FOIL_video_feats", ANET_FRAMES, dim)


def text_inputs(model, texts: list[str]) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    """Each text's token embeddings (start- through end-of-text) and token ids, from the model's text tower."""
    features = model.encode_texts(texts, return_tokens=True, prompt_prefix="")
    tokens, ids = {}, {}
    for row, text in enumerate(texts):
        length = int(features.attention_mask[row].sum())
        tokens[text] = features.token_embeds[row, :length].double().numpy()
        ids[text] = features.input_ids[row, :length].tolist()
    return tokens, ids


def numpy_scores(model, items: list[dict], frames_of, corpus: list[str]) -> dict[str, dict[str, float]]:
    """`score` (EMScore(X,V) full_F) and `ref_score` (EMScore(X,V,X*) full_F) per item, in NumPy."""
    texts = sorted({text for item in items for text in [item["candidate"], *item["references"]]} | set(corpus))
    tokens, ids = text_inputs(model, texts)
    table, unseen = idf_table([ids[text] for text in corpus], model.tokenizer.eos_token_id)
    columns = {"score": {}, "ref_score": {}}
    for item in items:
        caption = item["candidate"]
        weights = idf_lookup(table, unseen, ids[caption])
        video = video_components(tokens[caption], weights, frames_of(item))
        references = [(tokens[r], idf_lookup(table, unseen, ids[r])) for r in item["references"]]
        reference = reference_components(tokens[caption], weights, references)
        columns["score"][item["id"]] = video.score
        columns["ref_score"][item["id"]] = combined_components(video, reference).score
    return columns


def assert_columns_close(actual: dict, expected: dict):
    assert sorted(actual) == sorted(expected) == ["ref_score", "score"]
    for column in expected:
        ids = sorted(expected[column])
        assert sorted(actual[column]) == ids
        assert_scores_close([actual[column][i] for i in ids], [expected[column][i] for i in ids], what=column)


def test_vatex_eval_from_released_features_equals_numpy_emscore(clip_s, tmp_path):
    _, model = clip_s
    root, features = vatex_release(tmp_path / "vatex", feature_dim(model))
    benchmark = load_benchmark("vatex_eval", root)
    actual = score_video_items(model, benchmark, 4, root / "VATEX-EVAL_video_feats", "clip_s")

    def frames_of(item):  # VATEX-EVAL-demo.py: 10 frames, [int(i) for i in np.linspace(0, n - 1, 10)]
        frames = features[item["video_id"]]
        return frames[[int(i) for i in np.linspace(0, len(frames) - 1, 10)]]

    corpus = [caption for captions in VATEX_CORPUS.values() for caption in captions]
    assert_columns_close(actual, numpy_scores(model, benchmark.items, frames_of, corpus))


def test_activitynet_foil_from_released_features_equals_numpy_emscore(clip_s, tmp_path):
    _, model = clip_s
    root, features = anet_release(tmp_path / "anet", feature_dim(model))
    benchmark = load_benchmark("activitynet_foil", root)
    assert sorted({item["video_id"] for item in benchmark.items}) == ["v1", "v2"]  # v3 has no feature file
    test_1 = json.loads((root / "anet_entities_test_1.json").read_text())
    test_2 = json.loads((root / "anet_entities_test_2.json").read_text())
    right = json.loads((root / "final_right_video_sentences.json").read_text())["results"]
    for item in benchmark.items:  # ActivityNet-FOIL_demo.py's use_ref_timestamps, written out
        _, video_id, _, index = item["id"].split("/")
        a, b = (int(t) for t in test_1[video_id]["timestamps"][int(index)])
        chosen = [
            j
            for j, (c, d) in enumerate(test_2[video_id]["timestamps"])
            if len(set(range(a, b + 1)) & set(range(int(c), int(d) + 1))) / len(range(int(c), int(d) + 1)) > 0.4
        ] or list(range(len(test_2[video_id]["timestamps"])))
        assert item["references"] == [test_2[video_id]["sentences"][k] for k in chosen]
    assert len(right["v1"]) == 2

    def frames_of(item):  # ActivityNet-FOIL_demo.py: every frame of the segment, duration from test_2
        frames = features[item["video_id"]]
        start, end = test_1[item["video_id"]]["timestamps"][int(item["id"].split("/")[-1])]
        duration = test_2[item["video_id"]]["duration"]
        return frames[int(start * len(frames) // duration) : int(end * len(frames) // duration)]

    # v1's first segment [2.7, 5.2] of 40 frames over 25 s (test_2): frames 4:8 (test_1's 20 s would give 5:10)
    first = next(item for item in benchmark.items if item["id"] == "activitynet_foil/v1/right/0")
    assert len(frames_of(first)) == 4
    corpus = [reference for item in benchmark.items for reference in item["references"]]  # no train.json: default
    actual = score_video_items(model, benchmark, 4, root / "ActivityNet-FOIL_video_feats", "clip_s")
    expected = numpy_scores(model, benchmark.items, frames_of, corpus)
    assert_columns_close(actual, expected)
    # Accuracy: per video, the mean over its sentences, right > foil strictly (EMScore's main()).
    for column in ("score", "ref_score"):
        means = {
            kind: {v: np.mean([s for i, s in expected[column].items() if f"/{v}/{kind}/" in i]) for v in ANET_FRAMES}
            for kind in ("right", "foil")
        }
        wins = [means["right"][v] > means["foil"][v] for v in ANET_FRAMES]
        assert benchmark.evaluate(actual[column], column)["accuracy"] == pytest.approx(100 * np.mean(wins))


def write_video(path: Path, frames: list[np.ndarray]) -> Path:
    """Lossless (png in mov, all-intra): the decoded frames equal `frames`."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("png", rate=25)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "rgb24"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path


@pytest.mark.parametrize("benchmark_name", ["vatex_eval", "activitynet_foil"])
def test_features_of_the_same_encoder_give_the_raw_videos_rows(benchmark_name, clip_s, tmp_path):
    # EMScore's extraction (every decoded frame through the image tower, rows L2-normalised) done with the tiny
    # model: the CLI's tables from the features and from the raw videos agree.
    model_dir, model = clip_s
    if benchmark_name == "vatex_eval":
        root, _ = vatex_release(tmp_path / "data", feature_dim(model))
        frame_counts, folder = VATEX_FRAMES, root / "VATEX-EVAL_video_feats"
    else:
        root, _ = anet_release(tmp_path / "data", feature_dim(model))
        frame_counts, folder = ANET_FRAMES, root / "ActivityNet-FOIL_video_feats"
    rng = np.random.default_rng(7)
    (root / "videos").mkdir(exist_ok=True)
    for video_id, count in frame_counts.items():
        frames = [rng.integers(0, 256, (24, 32, 3), dtype=np.uint8) for _ in range(count)]
        path = write_video(root / "videos" / f"{video_id}.mov", frames)
        embeds = model.encode_videos([str(path)])[0]
        torch.save(embeds / embeds.norm(dim=-1, keepdim=True), folder / f"{video_id}.pt")
    released = tmp_path / "features_only"
    folder.rename(released)  # --video-features DIR may be anywhere
    common = ["--benchmark", benchmark_name, "--data-dir", str(root), "--model", model_dir, "--vatex-unrounded"]
    from_videos = evaluate_benchmarks.main(common)["benchmarks"][benchmark_name]
    from_features = evaluate_benchmarks.main([*common, "--video-features", str(released)])["benchmarks"][benchmark_name]
    assert from_features["protocol"]["frames_from"].startswith("EMScore's released CLIP ViT-B/32 per-frame features")
    assert from_videos["protocol"]["frames_from"] == "the raw videos"
    assert len(from_videos["rows"]) == len(from_features["rows"]) == 2
    for row_videos, row_features in zip(from_videos["rows"], from_features["rows"]):
        assert row_videos["column"] == row_features["column"]
        names = sorted(row_videos["statistics"])
        assert names == sorted(row_features["statistics"])
        assert_scores_close(
            [row_features["statistics"][n] for n in names],
            [row_videos["statistics"][n] for n in names],
            atol=100 * SCORE_TOLERANCE,  # statistics are x100
            what=row_videos["column"],
        )


def test_pac_s_pp_with_features_only_is_refused(tiny_model_dir, tmp_path):
    root, _ = vatex_release(tmp_path / "vatex", 512)
    with pytest.raises(SystemExit, match=r"PAC-S\+\+ \(and PAC-S\) needs the raw videos.*videos/<video_id>.mp4"):
        evaluate_benchmarks.main(
            ["--benchmark", "vatex_eval", "--data-dir", str(root), "--model", str(tiny_model_dir)]
            + ["--video-features", str(root)]
        )


def test_bad_feature_files_and_arguments_are_named(clip_s, tmp_path):
    model_dir, model = clip_s
    dim = feature_dim(model)
    root, _ = vatex_release(tmp_path / "vatex", dim)
    folder = root / "VATEX-EVAL_video_feats"
    benchmark = load_benchmark("vatex_eval", root, BenchmarkOptions())
    target = folder / "video1_000001_000011.pt"

    def score():
        return score_video_items(model, benchmark, 4, root, "clip_s")  # the release sub-folder is found

    cases = [
        (lambda: target.unlink(), r"1 of 3 video feature files not found, first: .*video1_000001_000011.pt"),
        (lambda: torch.save(release_features(5, dim + 1, 0), target), rf"shape \(5, {dim + 1}\), expected one"),
        (lambda: torch.save(release_features(5, dim, 0)[0], target), r"shape \(.*\), expected one \[n_frames"),
        (lambda: torch.save({"feats": release_features(5, dim, 0)}, target), r"holds a dict, expected one"),
        (lambda: torch.save(torch.full((3, dim), float("nan")), target), "holds NaN or infinite values"),
        (lambda: torch.save(Path("x"), target), r"not a tensor file torch.load\(weights_only=True\) can read"),
        (lambda: target.write_bytes(b"not a file torch wrote"), r"not a tensor file torch.load"),
    ]
    for damage, message in cases:
        damage()
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            score()
        torch.save(release_features(10, dim, 1), target)
    torch.save(release_features(10, dim, 1).half(), target)  # fp16 copies are read as fp32
    assert set(score()) == {"score", "ref_score"}
    with pytest.raises(SystemExit, match="--video-features applies to --benchmark vatex_eval and activitynet_foil"):
        evaluate_benchmarks.main(
            ["--benchmark", "foil", "--data-dir", str(root), "--model", model_dir, "--video-features", str(folder)]
        )
    with pytest.raises(SystemExit, match="--video-features .*absent: no such folder"):
        evaluate_benchmarks.main(
            ["--benchmark", "vatex_eval", "--data-dir", str(root), "--model", model_dir]
            + ["--video-features", str(tmp_path / "absent")]
        )
