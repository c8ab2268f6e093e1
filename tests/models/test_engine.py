"""The batch engine: deduplication, batch-size invariance, progress bars, devices, and bad input messages."""

import numpy as np
import pytest
import torch

from modeling_pacs import PACSModel
from modeling_pacs.loading import load_model, resolve_device
from modeling_pacs.models.inputs import ImageInputError
from tests.fixtures.helpers import random_image


class RowCounter:
    """Counts the rows each tower encodes, through a forward hook on its embeddings (every encoder path runs them)."""

    def __init__(self, tower):
        self.rows = 0
        self.handle = tower.embeddings.register_forward_hook(self.count)

    def count(self, module, inputs, output):
        self.rows += output.shape[0]

    def remove(self):
        self.handle.remove()


def test_identical_images_and_texts_are_encoded_once(tiny_model, image_folder):
    images = [image_folder[0], str(image_folder[0]), image_folder[1], image_folder[0], image_folder[1]]
    candidates = ["a dog", "a dog", "a cat", "a bird", "a dog"]
    references = [["a dog", "a cat"], ["a bird"], ["a dog"], ["a cat"], ["a fish"]]
    vision = RowCounter(tiny_model.clip.vision_model)
    text = RowCounter(tiny_model.clip.text_model)
    try:
        output = tiny_model.score(images, candidates, references=references)
    finally:
        vision.remove()
        text.remove()
    assert vision.rows == 2  # two distinct files (a Path and a str of the same file are one image)
    assert text.rows == 4  # "a dog", "a cat", "a bird", "a fish": candidates and references share encodings
    # duplicates get identical scores
    assert output.scores[0] == output.scores[1] == output.scores[4]
    array = np.asarray(random_image(1, (64, 64)))
    vision = RowCounter(tiny_model.clip.vision_model)
    try:
        tiny_model.score([array, array.copy(), random_image(1, (64, 64))], ["a", "b", "c"])
    finally:
        vision.remove()
    assert vision.rows == 2  # equal arrays collide by content; a PIL image is keyed by identity


def test_scores_do_not_depend_on_batch_size(tiny_model, image_folder):
    captions = [f"caption number {i} " + "word " * i for i in range(len(image_folder))]
    references = [[f"reference {i}", "a photo"] for i in range(len(image_folder))]
    one = tiny_model.score(image_folder, captions, references, image_batch_size=1, text_batch_size=1)
    many = tiny_model.score(image_folder, captions, references, image_batch_size=64, text_batch_size=256)
    assert torch.allclose(one.image_text_cosines, many.image_text_cosines, atol=1e-6, rtol=0)
    assert torch.allclose(one.ref_scores, many.ref_scores, atol=1e-6, rtol=0)
    assert one.mean_score == pytest.approx(float(one.scores.mean()))
    assert one.mean_ref_score == pytest.approx(float(one.ref_scores.mean()))


def test_per_item_scores_match_independent_embedding_math(tiny_model, image_folder):
    captions = ["one", "two", "three", "four", "five", "six"]
    output = tiny_model.score(image_folder, captions)
    image_embeds = tiny_model.encode_images(image_folder).numpy().astype(np.float64)
    text_embeds = tiny_model.encode_texts(captions).numpy().astype(np.float64)
    cosines = (image_embeds * text_embeds).sum(1) / (
        np.linalg.norm(image_embeds, axis=1) * np.linalg.norm(text_embeds, axis=1)
    )
    np.testing.assert_allclose(output.image_text_cosines.numpy(), cosines, atol=1e-6)
    np.testing.assert_allclose(output.scores.numpy(), 2.5 * np.maximum(cosines, 0), atol=1e-6)


def test_progress_bar_on_request(tiny_model, image_folder, capsys):
    tiny_model.score(image_folder, ["a"] * len(image_folder), progress=True)
    assert "encoding images" in capsys.readouterr().err
    tiny_model.score(image_folder, ["a"] * len(image_folder))
    assert "encoding images" not in capsys.readouterr().err  # short jobs stay quiet by default


def test_device_selection():
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_empty_captions_are_scored(tiny_model, image_folder):
    output = tiny_model.score(image_folder[:2], ["", "   "], references=[[""], ["a dog"]])
    assert output.scores.shape == (2,) and torch.isfinite(output.scores).all()
    # both encode the prompt prefix alone, so they are the same text
    assert output.image_text_cosines[0] != output.image_text_cosines[1]  # different images
    ids = tiny_model.tokenize(["", "   "])["input_ids"]
    assert torch.equal(ids[0], ids[1])


def test_empty_input_gives_empty_output_and_nan_mean(tiny_model):
    output = tiny_model.score([], [])
    assert output.scores.shape == (0,)
    assert np.isnan(output.mean_score)


# ------------------------------------------------------------------------------------------------ bad input
def test_missing_image_file_names_the_path(tiny_model, image_folder, tmp_path):
    missing = tmp_path / "nowhere" / "cat.jpg"
    with pytest.raises(FileNotFoundError, match=r"image 1 \('.*nowhere/cat\.jpg'\) does not exist"):
        tiny_model.score([image_folder[0], missing], ["a", "b"])


def test_undecodable_bytes_name_the_item_index(tiny_model, image_folder):
    with pytest.raises(ValueError, match=r"image 2 \(15 bytes\) could not be decoded"):
        tiny_model.score([image_folder[0], image_folder[1], b"not an image..."], ["a", "b", "c"])


def test_corrupt_file_names_the_path(tiny_model, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(ValueError, match=r"image 0 \('.*broken\.png'\) could not be decoded"):
        tiny_model.score([broken], ["a"])


def test_length_mismatch(tiny_model, image_folder):
    with pytest.raises(ValueError, match="got 2 images and 3 candidates: pass exactly one image per candidate"):
        tiny_model.score(image_folder[:2], ["a", "b", "c"])
    with pytest.raises(ValueError, match="got 1 reference lists for 2 candidates"):
        tiny_model.score(image_folder[:2], ["a", "b"], references=[["x"]])


def test_references_that_are_not_lists_are_named(tiny_model, image_folder):
    with pytest.raises(TypeError, match=r"references of item 1 are int, expected a list of str"):
        tiny_model.score(image_folder[:2], ["a", "b"], references=[["x"], 7])


def test_non_string_caption(tiny_model, image_folder):
    with pytest.raises(TypeError, match=r"candidate 1 is int \(42\), expected a string"):
        tiny_model.score(image_folder[:2], ["a", 42])
    with pytest.raises(TypeError, match=r"reference 1 of item 0 is NoneType \(None\), expected a string"):
        tiny_model.score(image_folder[:1], ["a"], references=[["ok", None]])
    with pytest.raises(TypeError, match="got a single string: wrap it in a list"):
        tiny_model.score(image_folder[:1], "a caption")


def test_empty_reference_list_in_reference_based_call(tiny_model, image_folder):
    with pytest.raises(ValueError, match="item 1 has an empty reference list"):
        tiny_model.score(image_folder[:2], ["a", "b"], references=[["x"], []])


def test_unsupported_image_type(tiny_model):
    with pytest.raises(TypeError, match="image 0 has unsupported type int"):
        tiny_model.score([3], ["a"])


def test_bad_array_shape(tiny_model):
    with pytest.raises(ImageInputError, match=r"image 0 is a uint8 NumPy array of shape \(5, 5, 7\): read as HxWxC"):
        tiny_model.score([np.zeros((5, 5, 7), dtype=np.uint8)], ["a"])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("./no/such/model", "'./no/such/model' is not an existing model directory"),
        ("someone/not-a-real-pacs-model", "the Hugging Face Hub did not provide it"),
    ],
)
def test_missing_model_explains_how_to_get_weights(name, expected):
    for load in (PACSModel.from_pretrained, load_model, PACSModel.from_clip, PACSModel.from_siglip):
        with pytest.raises(OSError) as error:
            load(name)
        message = str(error.value)
        if load is load_model and "/" in name and not name.startswith("."):  # a Hub id: refused before loading
            assert "is not in the local Hugging Face cache, and HF_HUB_OFFLINE=1 forbids downloading it" in message
        else:
            assert expected in message
        # the README's command, not a repository script that a pip install does not have
        assert "pacs-pp convert --checkpoint FILE" in message and "make-tiny" in message
        assert "scripts/" not in message
        assert "HFValidationError" not in type(error.value).__name__
