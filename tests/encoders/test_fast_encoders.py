"""Pearl's encoders on packed oneDNN kernels: BLIP-2's ViT on `fast_clip`'s layers (`encoders.blip2.FastBlip2Vision`)
and every other linear layer through `fast_clip.use_packed_linears`, against transformers' forward with `F.linear`."""

import copy

import pytest
import torch
from torch import nn

from modeling_pacs.encoders.beit3 import BEiT3RetrievalEncoder
from modeling_pacs.encoders.blip2 import BLIP2Encoder, FastBlip2Vision
from modeling_pacs.encoders.stella import StellaEncoder
from modeling_pacs.models.fast_clip import PackedLinearForward, plain_linears, use_packed_linears
from modeling_pacs.testing.pearl import make_tiny_beit3, make_tiny_blip2, make_tiny_stella
from tests.fixtures.helpers import assert_scores_close, random_image
from tests.fixtures.pearl import one_torch_thread  # noqa: F401 (autouse fixture)

IMAGES = [random_image(index, (60 + 10 * index, 50)) for index in range(5)]
TEXTS = ["a dog running on the grass", "two people riding a bike", "", "a cat", "a red car on the street"]


def test_fast_vision_features_equal_transformers_forward(tmp_path):
    encoder = BLIP2Encoder.from_pretrained(str(make_tiny_blip2(tmp_path / "blip2", seed=2)))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # q and v biases away from their zero initialisation, larger weights
        for layer in encoder.vision_model.vision_model.encoder.layers:
            layer.self_attn.qkv.bias.copy_(torch.randn(layer.self_attn.qkv.bias.shape, generator=generator))
            layer.mlp.fc1.weight.mul_(3.0)
    fast = encoder.encode_image(IMAGES)
    assert isinstance(encoder._fast_vision.encoders, FastBlip2Vision)  # the fast path ran
    encoder.fast_cpu_vision = False
    with plain_linears():
        slow = encoder.encode_image(IMAGES)
    assert fast.shape == slow.shape == (5, encoder.tokens, encoder.dim)
    assert (fast[0] - fast[1]).abs().max() > 1e-3  # the features depend on the image: the comparison means something
    assert_scores_close(fast.flatten(), slow.flatten(), what="BLIP-2 image features, fast vs transformers")
    # The ViT's own output, before the Q-Former averages over it.
    pixels = torch.randn(3, 3, encoder.image_size, encoder.image_size, generator=generator)
    vision = encoder.vision_model.vision_model
    with torch.inference_mode():
        hidden = FastBlip2Vision.build(vision)(pixels)
        with plain_linears():
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


@pytest.mark.parametrize("kind", ["blip2", "beit3", "stella"])
def test_packed_linears_give_transformers_features(tmp_path, kind):
    builders = {
        "blip2": (make_tiny_blip2, BLIP2Encoder),
        "beit3": (make_tiny_beit3, BEiT3RetrievalEncoder),
        "stella": (make_tiny_stella, StellaEncoder),
    }
    build, encoder_class = builders[kind]
    encoder = encoder_class.from_pretrained(str(build(tmp_path / kind, seed=5)))
    models = [getattr(encoder, name, None) for name in ("model", "vision_model", "text_model", "projection")]
    linears = [m for model in models if isinstance(model, nn.Module) for m in model.modules() if type(m) is nn.Linear]
    assert linears and all(isinstance(linear.forward, PackedLinearForward) for linear in linears)
    fast = encoder.encode_text(TEXTS)
    assert any(linear.forward.packed is not None for linear in linears)  # the packed kernels ran
    with plain_linears():
        slow = encoder.encode_text(TEXTS)
    assert_scores_close(fast.flatten(), slow.flatten(), what=f"{kind} text features, packed vs F.linear")
    if kind != "stella":
        fast, slow = encoder.encode_image(IMAGES), None
        with plain_linears():
            encoder.fast_cpu_vision = False  # BLIP-2: transformers' ViT too (other encoders ignore it)
            slow = encoder.encode_image(IMAGES)
        assert_scores_close(fast.flatten(), slow.flatten(), what=f"{kind} image features, packed vs F.linear")


def test_packed_linear_forward_follows_gradients_weight_changes_and_copies():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    assert use_packed_linears(model) == 2
    assert use_packed_linears(model) == 2  # idempotent
    x = torch.randn(4, 6)
    with torch.inference_mode():
        before = model(x)
    assert model[0].forward.packed is not None
    output = model(x)  # gradients enabled: F.linear, and a graph
    output.sum().backward()
    assert model[0].weight.grad is not None
    with torch.no_grad():
        model[0].weight.mul_(2.0)
    with torch.inference_mode():
        after = model(x)
        with plain_linears():
            expected = model(x)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected, rtol=0, atol=1e-6)
    copied = copy.deepcopy(model)
    assert copied[0].forward.linear is copied[0] and copied[0].forward.packed is None
    with torch.inference_mode():
        torch.testing.assert_close(copied(x), expected, rtol=0, atol=1e-6)
