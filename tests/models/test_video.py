"""Video captions (docs/spec/pacs.md#video): `PACSModel.score_videos` on every video input form, parity with OpenAI's
original CLIP code plus an independent NumPy EMScore, seeking decoders, deduplication, and errors that name the bad
video."""

import sys

import av
import numpy as np
import pytest
import torch
from PIL import Image

from modeling_pacs.models.video import VideoFile, sample_frame_indices
from tests.fixtures.helpers import assert_scores_close
from tests.references.emscore import idf_lookup, idf_table, reference_components, video_components
from tests.references.original_clip import (
    build_original_clip,
    original_preprocess,
    original_simple_tokenizer,
    original_tokenize,
)

CAPTIONS = ["a man rides a bike down a hill", "two dogs play in the snow", "a cooking show"]
REFERENCES = [
    ["a person cycling downhill", "a man on a bicycle"],
    ["dogs playing outside in winter"],
    ["someone cooks pasta", "a chef in a kitchen", "a person cycling downhill"],
]


def end_of_text_id() -> int:
    return original_simple_tokenizer().encoder["<|endoftext|>"]


def random_frames(count: int, seed: int, size: tuple[int, int] = (64, 48)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    width, height = size
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]


def write_video(path, frames: list[np.ndarray], codec: str = "png", pix_fmt: str = "rgb24", options=None):
    """Encode `frames` at 25 fps. `png` in mov is lossless and all-intra: decoded frames equal the source."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=25)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = pix_fmt
        stream.options = options or {}
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Three short lossless clips (5, 7 and 3 frames)."""
    folder = tmp_path_factory.mktemp("videos")
    frames = [random_frames(5, 1), random_frames(7, 2), random_frames(3, 3)]
    paths = [write_video(folder / f"clip_{index}.mov", clip) for index, clip in enumerate(frames)]
    return paths, frames


def as_images(frames: list[np.ndarray]) -> list[Image.Image]:
    return [Image.fromarray(frame) for frame in frames]


def output_components(output, with_references: bool) -> np.ndarray:
    names = ["video_precision", "video_recall", "video_f", "video_coarse", "video_scores", "scores"]
    if with_references:
        names += ["reference_precision", "reference_recall", "reference_f", "reference_coarse", "reference_scores"]
    return np.stack([getattr(output, name).numpy() for name in names], axis=1)


# --------------------------------------------------------------------------------- parity with the original code
@pytest.fixture(scope="module")
def original_and_ours():
    from modeling_pacs.pacs.convert import convert_state_dict
    from tests.pacs.test_convert import TINY_HEAD_DIM

    original = build_original_clip(activation="quick_gelu", seed=5)
    ours = convert_state_dict(
        original.state_dict(), "pac_s_vit_b32", head_dim=TINY_HEAD_DIM, allow_other_geometry=True
    ).model
    return original, ours.eval()


def original_token_features(model, token_ids: torch.Tensor) -> torch.Tensor:
    """EMScore's `encode_text(local=True)` on OpenAI's `clip/model.py`: `ln_final(x) @ text_projection` everywhere."""
    with torch.no_grad():
        x = model.token_embedding(token_ids.long()) + model.positional_embedding
        x = model.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        return model.ln_final(x) @ model.text_projection


def original_video_inputs(model, captions, frames):
    """Per item: the original code's normalised token features (start- through end-of-text) and frame features."""
    token_ids = original_tokenize(captions)
    tokens = original_token_features(model, token_ids)
    lengths = (token_ids.argmax(dim=1) + 1).tolist()  # end-of-text is the largest id
    caption_tokens = {
        caption: tokens[row, :length].numpy() for row, (caption, length) in enumerate(zip(captions, lengths))
    }
    ids = {caption: token_ids[row, :length].tolist() for row, (caption, length) in enumerate(zip(captions, lengths))}
    with torch.no_grad():
        frame_features = [
            model.encode_image(torch.stack([original_preprocess(image) for image in as_images(clip)])).numpy()
            for clip in frames
        ]
    return caption_tokens, ids, frame_features


@pytest.mark.parametrize("idf_mode", ["default", "off", "corpus"])
def test_scores_equal_numpy_emscore_on_original_clip_features(original_and_ours, clips, idf_mode):
    """Token and frame embeddings of the original code equal ours (<= 1e-5), and score_videos equals EMScore's
    formulas computed in NumPy on the original code's features, for each IDF mode."""
    original, ours = original_and_ours
    paths, frames = clips
    long_caption = "a " + " ".join(["very long caption about a red bicycle"] * 30)  # 200+ words: truncated
    candidates = [*CAPTIONS, long_caption]
    videos = [*paths, paths[0]]
    references = [*REFERENCES, ["a red bicycle", "a bike"]]
    corpus = ["a man on a hill", "dogs in snow", "a kitchen", "a man on a hill", "bikes and dogs"]
    texts = sorted({*candidates, *(r for refs in references for r in refs), *corpus})
    caption_tokens, ids, frame_features = original_video_inputs(original, texts, frames + [frames[0]])

    # Embeddings: frames through our video path, tokens through encode_texts without the prompt prefix.
    for ours_frames, theirs in zip(ours.encode_videos(paths), frame_features, strict=False):
        torch.testing.assert_close(ours_frames, torch.from_numpy(theirs), atol=1e-5, rtol=0)
    features = ours.encode_texts(texts, return_tokens=True, prompt_prefix="")
    for row, text in enumerate(texts):
        length = int(features.attention_mask[row].sum())
        assert features.input_ids[row, :length].tolist() == ids[text]
        torch.testing.assert_close(
            features.token_embeds[row, :length], torch.from_numpy(caption_tokens[text]), atol=1e-5, rtol=0
        )
    assert len(ids[long_caption]) == 77

    flat_references = [r for refs in references for r in refs]
    if idf_mode == "default":
        table, unseen = idf_table([ids[text] for text in flat_references], end_of_text_id())
        idf = True
    elif idf_mode == "corpus":
        table, unseen = idf_table([ids[text] for text in corpus], end_of_text_id())
        idf = corpus
    else:
        table, unseen, idf = {}, 1.0, False

    def weights(text):
        return idf_lookup(table, unseen, ids[text])

    expected = []
    for item, caption in enumerate(candidates):
        video = video_components(caption_tokens[caption], weights(caption), frame_features[item])
        reference = reference_components(
            caption_tokens[caption], weights(caption), [(caption_tokens[r], weights(r)) for r in references[item]]
        )
        combined = (np.array(video) + np.array(reference)) / 2
        expected.append([*video, combined[4], *reference])
    output = ours.score_videos(videos, candidates, references=references, idf=idf)
    assert_scores_close(output_components(output, with_references=True), np.array(expected), atol=1e-5)
    assert output.mean_score == pytest.approx(float(np.mean([row[5] for row in expected])), abs=1e-5)


def test_reference_free_default_idf_uses_the_candidates(original_and_ours, clips):
    original, ours = original_and_ours
    paths, frames = clips
    caption_tokens, ids, frame_features = original_video_inputs(original, CAPTIONS, frames)
    table, unseen = idf_table([ids[caption] for caption in CAPTIONS], end_of_text_id())
    expected = [
        video_components(caption_tokens[c], idf_lookup(table, unseen, ids[c]), frame_features[item])
        for item, c in enumerate(CAPTIONS)
    ]
    output = ours.score_videos(paths, CAPTIONS)
    assert_scores_close(output_components(output, with_references=False)[:, :5], np.array(expected), atol=1e-5)
    assert_scores_close(output.scores, output.video_scores)
    assert output.reference_scores is None and output.num_frames.tolist() == [5, 7, 3]


# --------------------------------------------------------------------------------- input forms and sampling
def test_every_video_form_scores_like_its_frames_as_images(tiny_model, clips, tmp_path):
    paths, frames = clips
    folder = tmp_path / "frames"
    folder.mkdir()
    for index, frame in enumerate(frames[1]):
        Image.fromarray(frame).save(folder / f"{index:03d}.png")
    (folder / "notes.txt").write_text("not a frame")
    as_lists = [as_images(clip) for clip in frames]
    expected = tiny_model.score_videos(as_lists, CAPTIONS, references=REFERENCES)
    forms = [
        paths,
        [paths[0], folder, paths[2]],
        [np.stack(clip) for clip in frames],
        [torch.from_numpy(np.stack(clip)) for clip in frames],
        tiny_model.encode_videos(as_lists),
    ]
    for videos in forms:
        output = tiny_model.score_videos(videos, CAPTIONS, references=REFERENCES)
        assert_scores_close(output_components(output, True), output_components(expected, True))
    assert expected.scores.min() != expected.scores.max()


def test_num_frames_samples_linspace_and_repeats_short_videos(tiny_model, clips):
    paths, frames = clips
    output = tiny_model.score_videos(paths, CAPTIONS, num_frames=4)
    assert output.num_frames.tolist() == [4, 4, 4]
    assert sample_frame_indices(3, 4) == [0, 0, 1, 2]  # np.linspace(0, 2, 4).astype(int)
    assert sample_frame_indices(7, 4) == [0, 2, 4, 6]
    sampled = [[as_images(clip)[i] for i in sample_frame_indices(len(clip), 4)] for clip in frames]
    expected = tiny_model.score_videos(sampled, CAPTIONS)
    assert_scores_close(output_components(output, False), output_components(expected, False))


def test_batch_composition_does_not_change_scores(tiny_model, clips):
    paths, _ = clips
    one = tiny_model.score_videos(paths, CAPTIONS, references=REFERENCES, batch_size=1)
    many = tiny_model.score_videos(paths, CAPTIONS, references=REFERENCES, batch_size=64)
    assert_scores_close(output_components(one, True), output_components(many, True))


def test_identical_videos_are_decoded_and_encoded_once(tiny_model, clips):
    paths, _ = clips
    encoded = []
    handle = tiny_model.clip.vision_model.embeddings.register_forward_hook(
        lambda module, args, output: encoded.append(output.shape[0])
    )
    try:
        output = tiny_model.score_videos([paths[0], paths[1], paths[0], str(paths[0])], ["a", "b", "c", "d"])
    finally:
        handle.remove()
    assert sum(encoded) == 5 + 7
    assert output.num_frames.tolist() == [5, 7, 5, 5]


def test_lower_level_api_scores_segments_of_one_encoded_video(tiny_model, clips):
    """Encode a video once, then score sentences on slices of its frames (ActivityNet-FOIL style)."""
    paths, frames = clips
    frame_embeds = tiny_model.encode_videos([paths[1]])[0]
    table = tiny_model.build_idf_table(["a man", "a dog runs", "a man"])
    segments = [frame_embeds[0:3], frame_embeds[3:7]]
    output = tiny_model.score_videos(segments, ["a man", "a dog runs"], idf=table)
    images = as_images(frames[1])
    expected = tiny_model.score_videos([images[0:3], images[3:7]], ["a man", "a dog runs"], idf=table)
    assert_scores_close(output.scores, expected.scores)
    assert output.num_frames.tolist() == [3, 4]


# --------------------------------------------------------------------------------- decoding
def test_sampling_a_long_video_decodes_only_the_needed_frames(tmp_path):
    frames = random_frames(300, 7, size=(32, 32))
    lossless = write_video(tmp_path / "long.mov", frames)
    with VideoFile(lossless) as video:
        indices = sample_frame_indices(video.frame_count, 10)
        decoded = [np.asarray(image) for image in video.read(indices)]
    assert video.frame_count == 300
    assert video.decoded_frames == 10  # all-intra: each seek lands on the wanted frame
    for image, index in zip(decoded, indices, strict=True):
        np.testing.assert_array_equal(image, frames[index])

    # A codec with groups of pictures: seeks land on keyframes; frames equal those of a full sequential decode.
    grouped = write_video(tmp_path / "long.mp4", frames, "libx264", "yuv420p", {"g": "25", "bf": "2"})
    with av.open(str(grouped)) as container:
        every_frame = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    with VideoFile(grouped) as video:
        decoded = [np.asarray(image) for image in video.read([0, 0, 33, 34, 150, 299])]
    for image, index in zip(decoded, [0, 0, 33, 34, 150, 299], strict=True):
        np.testing.assert_array_equal(image, every_frame[index])
    assert video.decoded_frames <= 4 * 25  # at most one group of pictures per distinct wanted frame


def test_bad_videos_give_errors_naming_the_file(tiny_model, clips, tmp_path):
    paths, _ = clips
    missing = tmp_path / "missing.mp4"
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    not_a_video = tmp_path / "notes.avi"
    not_a_video.write_text("this is a text file, not a video container\n" * 20)
    audio_only = tmp_path / "tone.wav"
    with av.open(str(audio_only), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), dtype=np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        container.mux(stream.encode(frame))
        container.mux(stream.encode())
    empty_video = tmp_path / "empty.avi"
    with av.open(str(empty_video), "w") as container:  # a valid header and stream, no frames
        stream = container.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "bgr0"
        container.start_encoding()
    unknown_codec = tmp_path / "unknown_codec.mkv"
    write_video(unknown_codec, random_frames(2, 9, size=(16, 16)), "ffv1", "bgr0")
    unknown_codec.write_bytes(unknown_codec.read_bytes().replace(b"V_FFV1", b"V_QQQQ"))  # a codec id FFmpeg lacks
    empty_folder = tmp_path / "no_frames"
    empty_folder.mkdir()
    (empty_folder / "readme.txt").write_text("no images here")
    cases = [
        (missing, FileNotFoundError, r"video 1 \('.*missing.mp4'\) does not exist"),
        (corrupt, ValueError, r"video 1 \('.*corrupt.mp4'\) could not be decoded \(corrupt file, or an unsupported"),
        (not_a_video, ValueError, r"video 1 \('.*notes.avi'\) could not be decoded"),
        (audio_only, ValueError, r"video 1 \('.*tone.wav'\) has no video stream"),
        (empty_video, ValueError, r"video 1 \('.*empty.avi'\) has zero frames: pass a video with at least one frame"),
        (unknown_codec, ValueError, r"video 1 \('.*unknown_codec.mkv'\) uses a video codec this FFmpeg build cannot"),
        (empty_folder, ValueError, r"video 1 \('.*no_frames'\) is a folder with no image files"),
        ([], ValueError, "video 1 is an empty list of frames"),
        (np.zeros((2, 8, 8)), ValueError, r"video 1 is a float64 NumPy array of shape \(2, 8, 8\): pass \(T, H, W"),
        (torch.zeros(3, 7), ValueError, "video 1 .* has 7 dimensions; this model's embeddings have 32"),
        (42, TypeError, "video 1 has unsupported type int"),
    ]
    for video, error, message in cases:
        with pytest.raises(error, match=message):
            tiny_model.score_videos([paths[0], video], ["a", "b"])


def test_bad_parameters_are_rejected(tiny_model, clips):
    paths, _ = clips
    for num_frames in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_frames must be a positive integer or None"):
            tiny_model.score_videos(paths[:1], ["a"], num_frames=num_frames)
    for name in ("batch_size", "text_batch_size"):
        with pytest.raises(ValueError, match=f"{name} must be a positive integer, got 0"):
            tiny_model.score_videos(paths[:1], ["a"], **{name: 0})
    with pytest.raises(ValueError, match="got 1 videos and 2 candidates: pass exactly one video per candidate"):
        tiny_model.score_videos(paths[:1], ["a", "b"])
    with pytest.raises(TypeError, match="videos must be a list with one video per candidate, got a single video "):
        tiny_model.score_videos(paths[0].as_posix(), ["a"])
    with pytest.raises(TypeError, match="idf must be True, False, a list of corpus captions or an IDFTable"):
        tiny_model.score_videos(paths[:1], ["a"], idf="corpus.txt")
    with pytest.raises(ValueError, match="the IDF corpus is empty"):
        tiny_model.score_videos(paths[:1], ["a"], idf=[])
    with pytest.raises(ValueError, match="item 0 has an empty reference list"):
        tiny_model.score_videos(paths[:1], ["a"], references=[[]])
    with pytest.raises(ValueError, match="video 0 .* has non-finite frame embeddings"):
        tiny_model.score_videos([torch.full((2, 32), float("nan"))], ["a"])


def test_missing_pyav_names_the_extra(tiny_model, clips, monkeypatch):
    paths, frames = clips
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(ImportError) as raised:
        tiny_model.score_videos(paths[:1], ["a"])
    assert str(raised.value) == "Reading video files needs av: pip install 'pacs-pp[video]'"
    assert tiny_model.score_videos([as_images(frames[0])], ["a"]).scores.shape == (1,)


def test_remote_code_directory_scores_videos(tiny_model, tiny_model_dir, clips):
    """The saved directory carries video.py and video_scoring.py (relative imports, PyAV only imported lazily), and
    the remote-code class loaded from it scores videos like the installed package."""
    import ast

    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    allowed = set(sys.stdlib_module_names) | {"torch", "transformers", "peft", "numpy", "PIL"}
    for name in ("video.py", "video_scoring.py"):
        tree = ast.parse((tiny_model_dir / name).read_text())
        top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        roots = {alias.name.split(".")[0] for node in top_level if isinstance(node, ast.Import) for alias in node.names}
        roots |= {
            node.module.split(".")[0] for node in top_level if isinstance(node, ast.ImportFrom) and node.level == 0
        }
        assert roots <= allowed, (name, roots - allowed)
    paths, _ = clips
    # What trust_remote_code runs (the installed package registers its own class with the Auto classes).
    remote_class = get_class_from_dynamic_module("modeling_pacs.PACSModel", str(tiny_model_dir))
    assert remote_class.__module__ != "modeling_pacs.models.modeling_pacs"
    remote = remote_class.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    expected = tiny_model.score_videos(paths, CAPTIONS, references=REFERENCES, num_frames=4)
    output = remote.score_videos(paths, CAPTIONS, references=REFERENCES, num_frames=4)
    assert_scores_close(output_components(output, True), output_components(expected, True))
