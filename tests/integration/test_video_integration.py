"""Videos through `pacs-score` and the `evaluate` module: the same numbers as `PACSModel.score_videos`."""

import json
from pathlib import Path

import evaluate
import pytest
from PIL import Image

from modeling_pacs.cli import build_score_parser, score_main
from tests.fixtures.helpers import assert_scores_close
from tests.models.test_video import random_frames, write_video

METRIC_DIR = str(Path(__file__).resolve().parents[2] / "metric" / "pacs_pp")
CAPTIONS = ["a man rides a bike", "two dogs play in the snow", "a cooking show"]
REFERENCES = [["a person cycling"], ["dogs playing outside", "dogs in winter"], ["someone cooks pasta"]]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("integration_videos")
    paths = [write_video(folder / f"clip_{index}.mov", random_frames(4 + index, 20 + index)) for index in range(3)]
    frame_folder = folder / "frames"
    frame_folder.mkdir()
    for index, frame in enumerate(random_frames(5, 30)):
        Image.fromarray(frame).save(frame_folder / f"frame_{index:02d}.png")
    return paths, frame_folder


def test_pacs_score_scores_videos_by_extension(videos, tiny_model, tiny_model_dir, tmp_path, capsys):
    paths, _ = videos
    items = tmp_path / "videos.jsonl"
    rows = [{"video": path.name, "caption": c, "references": r} for path, c, r in zip(paths, CAPTIONS, REFERENCES)]
    items.write_text("\n".join(json.dumps(row) for row in rows))
    output = tmp_path / "scores.json"
    arguments = ["--model", str(tiny_model_dir), "--image-root", str(paths[0].parent), "--output", str(output)]
    score_main([str(items), *arguments, "--num-frames", "3", "--idf", "off"])
    result = json.loads(output.read_text())
    expected = tiny_model.score_videos(paths, CAPTIONS, references=REFERENCES, num_frames=3, idf=False)
    assert [item["video"] for item in result["items"]] == [path.name for path in paths]  # labelled as what it is
    assert all("image" not in item for item in result["items"])
    for column, values in [
        ("PAC-S++ video", expected.video_scores),
        ("video_P", expected.video_precision),
        ("video_R", expected.video_recall),
        ("video_F", expected.video_f),
        ("video_coarse", expected.video_coarse),
        ("RefPAC-S++ video", expected.scores),
        ("reference_P", expected.reference_precision),
        ("reference_coarse", expected.reference_coarse),
    ]:
        assert_scores_close([item[column] for item in result["items"]], values.tolist(), what=column)
    assert result["mean"]["RefPAC-S++ video"] == pytest.approx(expected.mean_score, abs=1e-6)
    assert "3 video captions scored" in capsys.readouterr().out


def test_pacs_score_video_flag_reads_frame_folders_and_an_idf_corpus(videos, tiny_model, tiny_model_dir, tmp_path):
    _, frame_folder = videos
    items = tmp_path / "items.json"
    items.write_text(json.dumps({str(frame_folder): ["a man rides a bike", "a red car"]}))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a man rides a bike\na dog\n\na red car parked\n")
    output = tmp_path / "scores.csv"
    arguments = ["--model", str(tiny_model_dir), "--output", str(output), "--video", "--idf", str(corpus)]
    score_main([str(items), *arguments])
    lines = output.read_text().splitlines()
    expected = tiny_model.score_videos(
        [frame_folder] * 2, ["a man rides a bike", "a red car"], idf=["a man rides a bike", "a dog", "a red car parked"]
    )
    header = lines[0].split(",")
    column = header.index("PAC-S++ video")
    assert_scores_close([float(line.split(",")[column]) for line in lines[1:3]], expected.video_scores.tolist())
    assert lines[3].startswith("MEAN")


def test_pacs_score_video_errors(videos, image_folder, tiny_model_dir, tmp_path):
    paths, _ = videos
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({str(image_folder[0]): "an image", str(paths[0]): "a video"}))
    with pytest.raises(SystemExit) as raised:
        score_main([str(mixed), "--model", str(tiny_model_dir)])
    assert raised.value.code == (
        f"pacs-score: error: row 0 (mixed.json[\"{image_folder[0]}\"]): item ('{image_folder[0]}') is not a video "
        f"while '{paths[0]}' is: score images and videos in separate runs"
    )
    images_only = tmp_path / "images.json"
    images_only.write_text(json.dumps({str(image_folder[0]): "an image"}))
    with pytest.raises(SystemExit, match="--num-frames and --idf apply to videos only"):
        score_main([str(images_only), "--model", str(tiny_model_dir), "--num-frames", "4"])
    video_items = tmp_path / "videos.json"
    video_items.write_text(json.dumps({str(paths[0]): "a video"}))
    with pytest.raises(SystemExit, match="--idf must be 'on', 'off' or an existing corpus file"):
        score_main([str(video_items), "--model", str(tiny_model_dir), "--idf", "missing.txt"])
    with pytest.raises(SystemExit) as exit_info:
        score_main([str(video_items), "--model", str(tiny_model_dir), "--num-frames", "0"])
    assert exit_info.value.code == 2  # argparse: "must be a positive integer, got 0"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({str(tmp_path / "gone.mp4"): "a video"}))
    with pytest.raises(SystemExit) as raised:  # the core's "video 0" is the input's row 0, named by its key
        score_main([str(broken), "--model", str(tiny_model_dir)])
    assert raised.value.code.startswith(
        f"pacs-score: error: row 0 (broken.json[\"{tmp_path / 'gone.mp4'}\"]): video ('{tmp_path / 'gone.mp4'}') does "
        "not exist"
    )


def test_pacs_score_help_documents_video_options():
    help_text = build_score_parser().format_help()
    for expected in ("--video", "--num-frames", "--idf", "np.linspace", "mp4"):
        assert expected in help_text


@pytest.fixture(scope="module")
def metric(tiny_model_dir, tmp_path_factory):
    return evaluate.load(
        METRIC_DIR, model=str(tiny_model_dir), cache_dir=str(tmp_path_factory.mktemp("evaluate_video"))
    )


def test_evaluate_module_scores_videos(metric, videos, tiny_model):
    paths, frame_folder = videos
    media = [paths[0], frame_folder, [Image.fromarray(frame) for frame in random_frames(3, 40)]]
    results = metric.compute(predictions=CAPTIONS, videos=media, references=REFERENCES, num_frames=4, idf=False)
    expected = tiny_model.score_videos(media, CAPTIONS, references=REFERENCES, num_frames=4, idf=False)
    assert results["metric"] == "PAC-S++ (video)" and results["ref_metric"] == "RefPAC-S++ (video)"
    assert_scores_close(results["scores"], expected.video_scores.tolist())
    assert_scores_close(results["precision"], expected.video_precision.tolist())
    assert_scores_close(results["coarse"], expected.video_coarse.tolist())
    assert_scores_close(results["ref_scores"], expected.scores.tolist())
    assert_scores_close(results["reference_f"], expected.reference_f.tolist())
    assert results["score"] == pytest.approx(expected.mean_video_score, abs=1e-6)

    metric.add_batch(predictions=CAPTIONS[:2], videos=paths[:2])
    metric.add_batch(predictions=CAPTIONS[2:], videos=paths[2:])
    batched = metric.compute()
    assert_scores_close(batched["scores"], tiny_model.score_videos(paths, CAPTIONS).video_scores.tolist())
    assert "ref_scores" not in batched


def test_evaluate_module_video_errors(metric, videos, image_folder, tmp_path):
    paths, _ = videos
    with pytest.raises(ValueError, match="pass images= or videos=, not both"):
        metric.compute(predictions=["a"], images=[image_folder[0]], videos=[paths[0]])
    metric.add_batch(predictions=["a"], images=[image_folder[0]])
    with pytest.raises(ValueError, match="this computation already holds images; got videos"):
        metric.add_batch(predictions=["b"], videos=[paths[0]])
    metric.compute()
    with pytest.raises(FileNotFoundError, match=r"video 0 \('.*nothing.mp4'\) does not exist"):
        metric.compute(predictions=["a"], videos=[tmp_path / "nothing.mp4"])
    with pytest.raises(ValueError, match="num_frames must be a positive integer or None"):
        metric.compute(predictions=["a"], videos=[paths[0]], num_frames=0)
    for single in (paths[0], str(paths[0])):  # the single-item rule (docs/concepts/bad-input.md)
        with pytest.raises(TypeError, match=r"videos must be a list with one video per candidate, got a single video"):
            metric.compute(predictions=["a"], videos=single)
    with pytest.raises(ValueError, match=r"unexpected options \['num_frames'\]: .* apply to videos= only"):
        metric.compute(predictions=["a"], images=[image_folder[0]], num_frames=3)
