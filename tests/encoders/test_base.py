"""Pearl's encoders (BLIP-2, BEiT-3) decode images with the engine's one validator: the same rules, the same
`ImageInputError` naming the item, and pixels equal to those of the 8-bit RGB equivalent."""

import numpy as np
import pytest
import torch

from modeling_pacs.encoders.base import load_square_batch
from modeling_pacs.models.inputs import ImageInputError

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def test_square_batches_follow_the_image_rules():
    pixels = np.random.default_rng(0).integers(0, 256, (10, 12, 3), dtype=np.uint8)
    equivalents = [pixels / 255, torch.from_numpy(pixels).permute(2, 0, 1), pixels.astype(np.uint16) * 257]
    for bicubic in (True, False):
        expected = load_square_batch([pixels], [0], 8, MEAN, STD, bicubic)
        batch = load_square_batch(equivalents, [0, 1, 2], 8, MEAN, STD, bicubic)
        assert torch.equal(batch, expected.expand(3, -1, -1, -1))
    refused = {
        r"image 7 is a float64 NumPy array of shape \(10, 12, 3\) with values from 0 to 255": pixels.astype(float),
        r"image 7 is a bool NumPy array of shape \(10, 12\): dtype bool is not an image dtype": np.ones((10, 12), bool),
        r"image 7 is a datasets.Image dict with no bytes and no path": {"bytes": None, "path": None},
    }
    for message, image in refused.items():
        with pytest.raises(ImageInputError, match=message):
            load_square_batch([pixels, image], [6, 7], 8, MEAN, STD)
