"""Test helpers shared by several test files."""

import numpy as np
from PIL import Image


def random_image(seed: int, size: tuple[int, int] = (320, 240), mode: str = "RGB") -> Image.Image:
    """A reproducible noise-and-gradient image of `size` (width, height)."""
    rng = np.random.default_rng(seed)
    width, height = size
    gradient = np.linspace(0, 255, width, dtype=np.float64)[None, :, None]
    pixels = (0.5 * rng.integers(0, 256, (height, width, 3)) + 0.5 * gradient).astype(np.uint8)
    return Image.fromarray(pixels).convert(mode)


# fp32 scores computed in another batch composition, process or thread count agree to about 1e-7, not bit for bit
# (BLAS kernels differ by CPU, threads and shapes): such comparisons use this tolerance.
SCORE_TOLERANCE = 1e-6


def caption_rows(folder, captions: list[list[str]]) -> list[dict]:
    """Captioning rows `{"image", "captions", "row_index"}`, one random 224x224 PNG written per image into `folder`."""
    rows = []
    for index, image_captions in enumerate(captions):
        path = folder / f"{index}.png"
        random_image(index, (224, 224)).save(path)
        rows.append({"image": str(path), "captions": image_captions, "row_index": index})
    return rows


def assert_scores_close(actual, expected, atol: float = SCORE_TOLERANCE, what: str = "scores"):
    """Equal length and every value within `atol` (the fp32 reproducibility tolerance across batches/processes)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=what)


def assert_rows_match(actual: list[dict], expected: list[dict], float_keys: tuple[str, ...]):
    """Rows equal exactly except the named float columns, which agree within SCORE_TOLERANCE."""
    assert len(actual) == len(expected)
    for key in float_keys:
        assert_scores_close([row[key] for row in actual], [row[key] for row in expected], what=key)
    strip = [{k: v for k, v in row.items() if k not in float_keys} for row in actual]
    assert strip == [{k: v for k, v in row.items() if k not in float_keys} for row in expected]
