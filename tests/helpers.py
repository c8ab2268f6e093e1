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
