"""The Space's video tab, in process: its `/score_video` handler returns the engine's `score_videos` numbers."""

import importlib.util
from pathlib import Path

import pytest

from modeling_pacs.loading import load_model
from tests.fixtures.helpers import assert_scores_close
from tests.models.test_video import random_frames, write_video

APP = Path(__file__).resolve().parents[2] / "space" / "app.py"


@pytest.fixture(scope="module")
def app():
    specification = importlib.util.spec_from_file_location("pacs_space_app_video", APP)
    module = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def score_video(app, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))
        demo = app.build_demo(tiny=True)
        handlers = [function.fn for function in demo.fns.values() if function.api_name == "score_video"]
        assert len(handlers) == 1
        yield handlers[0]


@pytest.fixture()
def upload_folder(app, tmp_path):
    """A folder inside gradio's upload folder: the only place the handler reads files from."""
    import uuid

    folder = Path(app.gr.utils.get_upload_folder()) / f"test-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    yield folder
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def test_video_tab_scores_like_the_engine(app, score_video, upload_folder):
    clip = write_video(upload_folder / "clip.mov", random_frames(6, 50))
    captions = ["a man rides a bike", "two dogs play in the snow", "a cooking show"]
    best, _, details = score_video(str(clip), "\n".join(captions) + "\n\n", "a person cycling\n", 4, app.TINY_CHOICE)
    engine = load_model("tiny")
    expected = engine.score_videos([clip] * 3, captions, references=[["a person cycling"]] * 3, num_frames=4)
    by_caption = {row["caption"]: row for row in details["results"]}
    assert details["ranked_by"] == "RefPAC-S++ video"
    assert [row["rank"] for row in details["results"]] == [1, 2, 3]
    ranked = sorted(range(3), key=lambda item: -float(expected.scores[item]))
    assert [row["caption"] for row in details["results"]] == [captions[item] for item in ranked]
    for column, values in [
        ("RefPAC-S++ video", expected.scores),
        ("PAC-S++ video", expected.video_scores),
        ("video precision", expected.video_precision),
        ("video coarse", expected.video_coarse),
        ("reference f", expected.reference_f),
    ]:
        assert_scores_close([by_caption[caption][column] for caption in captions], values.tolist(), what=column)
    assert best.startswith(f"“{details['results'][0]['caption']}”") and "random weights" in best  # plain text


def test_video_tab_errors_are_readable(app, score_video, upload_folder, tmp_path):
    not_a_video = upload_folder / "notes.mp4"
    not_a_video.write_text("plain text, not a video\n" * 10)
    clip = write_video(upload_folder / "clip.mov", random_frames(3, 51))
    outside = write_video(tmp_path / "server_clip.mov", random_frames(3, 52))
    cases = [
        ((None, "a caption", "", 10), "upload a video clip first"),
        ((str(not_a_video), "a caption", "", 10), r"video 0 \('notes.mp4'\) could not be decoded"),
        ((str(clip), "  \n", "", 10), "enter at least one candidate caption"),
        ((str(clip), "a caption", "", 0), "frames must be between 1 and 32"),
        ((str(clip), "x" * 301, "", 10), "caption 1 .* is 301 characters long"),
        ((str(outside), "a caption", "", 10), "the video is not a file uploaded to this Space"),
        (("/etc/passwd", "a caption", "", 10), "the video is not a file uploaded to this Space"),
    ]
    for arguments, message in cases:
        with pytest.raises(app.gr.Error, match=message):
            score_video(*arguments, app.TINY_CHOICE)


def test_a_metric_of_images_is_refused_by_the_video_tab_by_name(app, upload_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    local = load_model("tiny:deneb").name_or_path  # a DENEB folder as the operator's model
    demo = app.build_demo(tiny=True, local_model=local, public=False)
    (score_video,) = [function.fn for function in demo.fns.values() if function.api_name == "score_video"]
    clip = write_video(upload_folder / "clip.mov", random_frames(2, 50))
    with pytest.raises(app.gr.Error) as error:
        score_video(str(clip), "a man rides a bike", "a person cycling", 2, local)
    assert error.value.title == "Not a video metric"
    assert error.value.message == (
        "DENEB scores images only, not videos: score videos with one of the metrics pac_s_pp, pac_s, clip_s"
    )
