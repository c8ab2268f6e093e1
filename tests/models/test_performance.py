"""Speed changes of the engine keep every number: each fast path is compared with a straightforward re-computation.

- preprocessing by lookup table vs the per-pixel fp32 operations it replaces (and NumPy's);
- decoding that overlaps encoding (`prefetch_batches`) vs one image at a time;
- texts tokenised and encoded in chunks vs each caption encoded alone.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import modeling_pacs.models.modeling_pacs as modeling
from modeling_pacs.models.inputs import (
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    load_image,
    normalisation_table,
    prefetch_batches,
    preprocess_image,
)
from tests.fixtures.helpers import random_image


def per_pixel_normalisation(image, size: int = 224) -> torch.Tensor:
    """The previous engine's code path: resize + crop, then ToTensor and Normalize as torch operations."""
    width, height = image.size
    new_size = (size, int(size * height / width)) if width <= height else (int(size * width / height), size)
    if new_size != image.size:
        image = image.resize(new_size, 3)  # bicubic
    top, left = int(round((new_size[1] - size) / 2.0)), int(round((new_size[0] - size) / 2.0))
    image = image.crop((left, top, left + size, top + size))
    pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255)
    return (pixels - torch.tensor(OPENAI_CLIP_MEAN).view(3, 1, 1)) / torch.tensor(OPENAI_CLIP_STD).view(3, 1, 1)


@pytest.mark.parametrize("size", [(500, 375), (375, 500), (224, 224), (97, 131), (641, 427)])
def test_lookup_preprocessing_is_bit_identical_to_per_pixel_operations(size):
    image = random_image(size[0], size)
    ours = preprocess_image(image, 224)
    assert ours.dtype == torch.float32 and ours.shape == (3, 224, 224) and ours.is_contiguous()
    assert torch.equal(ours, per_pixel_normalisation(image))


def test_normalisation_table_matches_numpy_fp32():
    levels = np.arange(256, dtype=np.float32) / np.float32(255)
    mean = np.asarray(OPENAI_CLIP_MEAN, dtype=np.float32)[:, None]
    std = np.asarray(OPENAI_CLIP_STD, dtype=np.float32)[:, None]
    expected = (levels[None, :] - mean) / std
    table = normalisation_table()
    assert table.shape == (3, 256) and table.dtype == np.float32
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="read-only"):
        table[0, 0] = 0


class RecordingPool(ThreadPoolExecutor):
    def __init__(self):
        super().__init__(max_workers=2)
        self.submitted = []

    def submit(self, function, *args):
        self.submitted.append(args[0])
        return super().submit(function, *args)


def test_prefetch_yields_batches_in_order_with_the_next_one_submitted():
    batches = [range(0, 3), range(3, 6), range(6, 7)]
    with RecordingPool() as pool:
        loaded = prefetch_batches(pool, lambda index: index * 10, batches)
        assert next(loaded) == [0, 10, 20]
        assert pool.submitted == [0, 1, 2, 3, 4, 5]  # batch 2 is decoding while batch 1 is encoded
        assert list(loaded) == [[30, 40, 50], [60]]
        assert pool.submitted == list(range(7))
    with ThreadPoolExecutor(2) as pool:
        assert list(prefetch_batches(pool, lambda index: index, [])) == []


def test_prefetch_raises_errors_when_their_batch_is_reached():
    def load(index):
        if index == 4:
            raise ValueError("image 4 ('broken.jpg') could not be decoded")
        return index

    with ThreadPoolExecutor(2) as pool:
        loaded = prefetch_batches(pool, load, [range(0, 2), range(2, 4), range(4, 6)])
        assert next(loaded) == [0, 1]
        assert next(loaded) == [2, 3]
        with pytest.raises(ValueError, match=r"image 4 \('broken.jpg'\) could not be decoded"):
            next(loaded)


def test_prefetched_image_encoding_equals_one_image_at_a_time(tiny_model, image_folder):
    images = list(image_folder) + [image_folder[0]]
    embeds = tiny_model.encode_images(images, batch_size=2, num_workers=3)
    with torch.inference_mode():
        for index, path in enumerate(images):
            pixels = per_pixel_normalisation(load_image(path))[None]
            expected = tiny_model.clip.visual_projection(
                tiny_model.clip.vision_model(pixel_values=pixels).pooler_output
            )
            torch.testing.assert_close(embeds[index], expected[0], rtol=0, atol=1e-6)


def test_broken_image_in_a_later_batch_is_named(tiny_model, image_folder, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    images = list(image_folder[:4]) + [broken]
    with pytest.raises(ValueError, match=r"image 4 \('.*broken.jpg'\) could not be decoded"):
        tiny_model.encode_images(images, batch_size=2)


def test_texts_are_tokenised_in_chunks_and_equal_each_caption_alone(tiny_model, monkeypatch):
    rng = np.random.default_rng(0)
    words = "a dog cat man runs on the grass beach red ball with two children playing near water".split()
    captions = [" ".join(rng.choice(words, size=rng.integers(1, 12))) for _ in range(23)]
    monkeypatch.setattr(modeling, "TEXT_CHUNK_SIZE", 8)
    calls = []
    tokenize = type(tiny_model).tokenize
    monkeypatch.setattr(
        type(tiny_model),
        "tokenize",
        lambda self, texts, *rest: calls.append(len(texts)) or tokenize(self, texts, *rest),
    )
    embeds = tiny_model.encode_texts(captions, batch_size=4)
    assert calls == [8, 8, 7]
    assert embeds.shape == (23, tiny_model.config.backbone_config.projection_dim)
    with torch.inference_mode():
        for index, caption in enumerate(captions):
            tokens = tokenize(tiny_model, [caption])
            pooled = tiny_model.clip.text_model(**tokens).pooler_output
            expected = tiny_model.clip.text_projection(pooled)[0]
            # Unnormalised entries reach ~2: compared as the unit vectors the scores use (a batch changes the rounding).
            torch.testing.assert_close(
                F.normalize(embeds[index], dim=0), F.normalize(expected, dim=0), rtol=0, atol=1e-6
            )


def test_chunked_scores_equal_unchunked_scores(tiny_model, image_folder, monkeypatch):
    images = [image_folder[i % 6] for i in range(12)]
    candidates = [f"a photo number {i} of a dog" for i in range(12)]
    references = [[f"reference {i} {j} of a cat" for j in range(3)] for i in range(12)]
    whole = tiny_model.score(images, candidates, references)
    monkeypatch.setattr(modeling, "TEXT_CHUNK_SIZE", 5)
    chunked = tiny_model.score(images, candidates, references, text_batch_size=5, image_batch_size=4)
    torch.testing.assert_close(chunked.scores, whole.scores, rtol=0, atol=1e-6)
    torch.testing.assert_close(chunked.ref_scores, whole.ref_scores, rtol=0, atol=1e-6)


def test_return_tokens_is_not_chunked(tiny_model, monkeypatch):
    monkeypatch.setattr(modeling, "TEXT_CHUNK_SIZE", 2)
    captions = ["a dog", "a cat on a mat", "two birds", "a red car parked"]
    features = tiny_model.encode_texts(captions, batch_size=1, return_tokens=True)
    assert features.input_ids.shape[0] == 4 and features.token_embeds.shape[:2] == features.input_ids.shape
    # The pooled path runs fast_clip's packed kernels, return_tokens runs transformers': compared as unit vectors.
    torch.testing.assert_close(
        F.normalize(features.text_embeds, dim=-1),
        F.normalize(tiny_model.encode_texts(captions), dim=-1),
        atol=1e-6,
        rtol=0,
    )
