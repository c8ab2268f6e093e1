"""Image pipeline: torchvision's Resize/CenterCrop/ToTensor/Normalize semantics, every input kind, every PIL mode."""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPImageProcessorPil

from modeling_pacs.models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, load_image, preprocess_image
from tests.fixtures.helpers import random_image


def torchvision_reference(image: Image.Image, size: int = 224) -> np.ndarray:
    """The official transform re-derived from torchvision's source: Resize(size, BICUBIC) on the shorter side with
    the longer side truncated by int(), CenterCrop with int(round(...)) offsets, ToTensor, Normalize (float64)."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    new_width, new_height = (new_short, new_long) if width <= height else (new_long, new_short)
    resized = image.resize((new_width, new_height), Image.BICUBIC)
    pixels = np.asarray(resized, dtype=np.float64) / 255.0
    top = int(round((new_height - size) / 2.0))
    left = int(round((new_width - size) / 2.0))
    pixels = pixels[top : top + size, left : left + size]
    pixels = (pixels - np.array(OPENAI_CLIP_MEAN)) / np.array(OPENAI_CLIP_STD)
    return pixels.transpose(2, 0, 1)


@pytest.mark.parametrize("size", [(320, 240), (240, 320), (224, 224), (500, 375), (97, 131), (225, 300), (301, 224)])
def test_preprocessing_matches_torchvision_semantics(size):
    image = random_image(sum(size), size)
    ours = preprocess_image(image, 224).numpy()
    assert ours.shape == (3, 224, 224)
    np.testing.assert_allclose(ours, torchvision_reference(image), atol=1e-5)


@pytest.mark.parametrize("size", [(320, 240), (224, 224), (500, 376)])
def test_preprocessing_matches_transformers_processor_where_crops_agree(size):
    # transformers floors the crop offset where torchvision rounds; for even margins both agree.
    image = random_image(3, size)
    processor = CLIPImageProcessorPil(image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    expected = processor(images=image, return_tensors="pt")["pixel_values"][0]
    assert torch.allclose(preprocess_image(image, 224), expected, atol=1e-5)


def test_odd_margin_is_rounded_like_torchvision_not_floored():
    # 224 x 259: margin 35 -> torchvision crops from row round(17.5) = 18, transformers from row 17.
    pixels = np.zeros((259, 224, 3), dtype=np.uint8)
    pixels[np.arange(259)] = np.arange(259, dtype=np.uint8)[:, None, None]
    ours = preprocess_image(Image.fromarray(pixels), 224)
    first_row_value = ours[0, 0, 0].item() * OPENAI_CLIP_STD[0] + OPENAI_CLIP_MEAN[0]
    assert round(first_row_value * 255) == 18


def test_every_input_kind_gives_the_same_pixels(tmp_path):
    image = random_image(11, (300, 200))
    path = tmp_path / "image.png"
    image.save(path)
    array = np.asarray(image)
    inputs = {
        "path": path,
        "str path": str(path),
        "bytes": path.read_bytes(),
        "pil": image,
        "uint8 array": array,
        "float array": array.astype(np.float32) / 255.0,
        "CHW tensor": torch.from_numpy(array.copy()).permute(2, 0, 1),
        "datasets bytes": {"bytes": path.read_bytes(), "path": None},
        "datasets path": {"bytes": None, "path": str(path)},
    }
    expected = preprocess_image(image, 224)
    for kind, value in inputs.items():
        result = preprocess_image(load_image(value, 0), 224)
        assert torch.allclose(result, expected, atol=1e-6), kind


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "CMYK", "LA", "1", "I;16", "I", "F"])
def test_any_pil_mode_is_converted_to_rgb(mode, tmp_path):
    rgb = random_image(5, (64, 48))
    gray = np.asarray(rgb.convert("L"))
    if mode == "I;16":
        image = Image.fromarray((gray.astype(np.uint16) * 257), mode="I;16")
        expected = np.repeat(gray[..., None], 3, axis=2)
    elif mode == "I":  # in memory: the int32 rule, 0-255 as is (16-bit files: tests/models/test_image_inputs.py)
        image = Image.fromarray(gray.astype(np.int32), mode="I")
        expected = np.repeat(gray[..., None], 3, axis=2)
    elif mode == "F":  # the float rule: [0, 1]
        image = Image.fromarray(gray.astype(np.float32) / 255, mode="F")
        expected = np.repeat(gray[..., None], 3, axis=2)
    else:
        image = rgb.convert(mode)
        expected = np.asarray(image.convert("RGB"))
    loaded = load_image(image, 0)
    assert loaded.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(loaded), expected)


def test_sixteen_bit_png_is_rescaled_not_clipped(tmp_path):
    """Grayscale 16-bit PNGs keep their high byte, as Pillow decodes 16-bit colour PNGs (tests/models/
    test_image_inputs.py checks the two agree with uint16 arrays)."""
    values = np.linspace(0, 65535, 64 * 32).reshape(32, 64).astype(np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(values, mode="I;16").save(path)
    loaded = np.asarray(load_image(path, 0))[..., 0]
    np.testing.assert_array_equal(loaded, (values // 256).astype(np.uint8))
    assert loaded.max() == 255 and loaded.min() == 0


def test_no_exif_rotation_is_applied(tmp_path):
    image = random_image(2, (120, 80))
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW" orientation tag: the official code ignores it, so do we
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif.tobytes())
    loaded = load_image(buffer.getvalue(), 0)
    assert loaded.size == (120, 80)
