"""BLIP-2's ViT on `fast_clip`'s packed layers (`encoders.blip2.FastBlip2Vision`) against transformers' forward."""

import torch

from modeling_pacs.encoders.blip2 import BLIP2Encoder, FastBlip2Vision
from modeling_pacs.pearl.tiny import make_tiny_blip2
from tests.helpers import assert_scores_close, random_image
from tests.pearl_helpers import one_torch_thread  # noqa: F401 (autouse fixture)


def test_fast_vision_features_equal_transformers_forward(tmp_path):
    encoder = BLIP2Encoder.from_pretrained(str(make_tiny_blip2(tmp_path / "blip2", seed=2)))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # q and v biases away from their zero initialisation, larger weights
        for layer in encoder.vision_model.vision_model.encoder.layers:
            layer.self_attn.qkv.bias.copy_(torch.randn(layer.self_attn.qkv.bias.shape, generator=generator))
            layer.mlp.fc1.weight.mul_(3.0)
    images = [random_image(index, (60 + 10 * index, 50)) for index in range(5)]
    fast = encoder.encode_image(images)
    assert isinstance(encoder._fast_vision.encoders, FastBlip2Vision)  # the fast path ran
    encoder.fast_cpu_vision = False
    slow = encoder.encode_image(images)
    assert fast.shape == slow.shape == (5, encoder.tokens, encoder.dim)
    assert (fast[0] - fast[1]).abs().max() > 1e-3  # the features depend on the image: the comparison means something
    assert_scores_close(fast.flatten(), slow.flatten(), what="BLIP-2 image features, fast vs transformers")
    # The ViT's own output, before the Q-Former averages over it.
    pixels = torch.randn(3, 3, encoder.image_size, encoder.image_size, generator=generator)
    vision = encoder.vision_model.vision_model
    with torch.inference_mode():
        hidden = FastBlip2Vision.build(vision)(pixels)
        expected = vision(pixel_values=pixels).last_hidden_state
    torch.testing.assert_close(hidden, expected, rtol=0, atol=1e-5)


def test_fast_vision_applies_only_without_gradients(tmp_path):
    encoder = BLIP2Encoder.from_pretrained(str(make_tiny_blip2(tmp_path / "blip2", seed=4)))
    pixels = torch.randn(2, 3, encoder.image_size, encoder.image_size)
    with torch.enable_grad():
        encoder.image_embeds(pixels)
    assert encoder._fast_vision.encoders is None
    with torch.inference_mode():
        encoder.image_embeds(pixels)
    assert isinstance(encoder._fast_vision.encoders, FastBlip2Vision)
