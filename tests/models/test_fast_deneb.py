"""DENEB's CPU fast path for the Sim-Vec transformers and head (`modeling_pacs.models.fast_deneb`): batched items equal
a NumPy float64 computation of each item alone (the authors' layers written out: pair vectors, class token,
sinusoidal positions, post-norm ReLU `TransformerEncoderLayer`s, the Tanh head) and the module path, within 1e-6."""

import math

import numpy as np
import pytest
import torch

from modeling_pacs.models.fast_clip import FastEncoderLayer, packed_linear_available
from modeling_pacs.models.modeling_deneb import PER_ITEM_ROWS, sim_vec_items_per_call
from modeling_pacs.testing.deneb import make_tiny_deneb_model
from tests.fixtures.helpers import assert_scores_close, random_image

pytestmark = pytest.mark.skipif(not packed_linear_available(), reason="this torch build has no oneDNN packed kernels")


@pytest.fixture(scope="module")
def deneb():
    model = make_tiny_deneb_model(seed=4, width=32, num_layers=2)
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():  # visible weights everywhere the path reads (the defaults leave biases at zero)
        modules = (model.clip_sequence_encoder, model.text_sequence_encoder, model.clip_projection)
        for module in (*modules, model.text_projection):
            for parameter in module.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2 + (parameter.dim() == 1))
    return model


def features(items: int, references: int, width: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    single = [torch.randn(items, width, generator=generator) for _ in range(3)]
    multiple = [torch.randn(items, references, width, generator=generator) for _ in range(2)]
    return [single[0], single[1], multiple[0], single[2], multiple[1]]


def numpy_layer_norm(x, norm):
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.eps) * numpy(norm.weight) + numpy(norm.bias)


def numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().double().numpy()


def numpy_sequence_encoder(sequence: np.ndarray, encoder) -> np.ndarray:
    """One item's `[L, W]` sequence -> its class token's output: positions, then each post-norm layer in full."""
    hidden = np.concatenate([numpy(encoder.class_token)[0], sequence])
    length, width = hidden.shape
    position, pair = np.arange(length)[:, None], np.arange(0, width, 2)
    angle = position * np.exp(pair * (-math.log(10000.0) / width))
    positions = np.zeros((length, width))
    positions[:, 0::2], positions[:, 1::2] = np.sin(angle), np.cos(angle)
    hidden = hidden + positions
    for layer in encoder.encoder.layers:
        attention = layer.self_attn
        heads, size = attention.num_heads, width // attention.num_heads
        qkv = hidden @ numpy(attention.in_proj_weight).T + numpy(attention.in_proj_bias)
        query, key, value = (part.reshape(length, heads, size).transpose(1, 0, 2) for part in np.split(qkv, 3, -1))
        logits = query @ key.transpose(0, 2, 1) / math.sqrt(size)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        attended = (weights / weights.sum(-1, keepdims=True)) @ value
        attended = attended.transpose(1, 0, 2).reshape(length, width)
        out = attended @ numpy(attention.out_proj.weight).T + numpy(attention.out_proj.bias)
        hidden = numpy_layer_norm(hidden + out, layer.norm1)
        inner = np.maximum(hidden @ numpy(layer.linear1.weight).T + numpy(layer.linear1.bias), 0)
        hidden = numpy_layer_norm(
            hidden + inner @ numpy(layer.linear2.weight).T + numpy(layer.linear2.bias), layer.norm2
        )
    return hidden[0]


def numpy_item_score(model, image, candidate_clip, reference_clip, candidate_text, reference_text) -> float:
    """One item with its `R` references, every step in float64 (docs/spec/deneb.md#sim-vec, #head)."""

    def pair(first, second, projection):
        weight, bias = numpy(projection.weight), numpy(projection.bias)
        return np.concatenate([np.abs(first - second) @ weight.T + bias, (first * second) @ weight.T + bias], -1)

    image_pair = pair(image, candidate_clip, model.clip_projection)
    clip_sequence = np.concatenate(
        [image_pair[None], pair(reference_clip, candidate_clip[None], model.clip_projection)]
    )
    text_sequence = pair(candidate_text[None], reference_text, model.text_projection)
    hidden = np.concatenate(
        [
            numpy_sequence_encoder(clip_sequence, model.clip_sequence_encoder),
            numpy_sequence_encoder(text_sequence, model.text_sequence_encoder),
            image_pair,
        ]
    )
    layers = list(model.head.layers)
    for layer in layers[:-1]:
        hidden = np.tanh(hidden @ numpy(layer.weight).T + numpy(layer.bias))
    logit = hidden @ numpy(layers[-1].weight).T + numpy(layers[-1].bias)
    return float(1 / (1 + np.exp(-logit[0])))


@pytest.mark.parametrize("references", [1, 3])
def test_batched_fast_scores_equal_each_item_alone_in_numpy_and_the_modules(deneb, references):
    inputs = features(6, references, deneb.config.hidden_size, seed=references)
    with torch.inference_mode():
        assert deneb.fast_sim_vec() is not None
        fast = deneb.item_scores(*inputs)
        deneb.fast_cpu_encoders = False
        try:
            modules = deneb.item_scores(*inputs)
        finally:
            deneb.fast_cpu_encoders = True
    expected = [numpy_item_score(deneb, *(numpy(part[item]) for part in inputs)) for item in range(6)]
    assert np.ptp(expected) > 0.05  # scores that tell the items apart
    assert_scores_close(fast, expected)
    assert_scores_close(modules, expected)


def test_the_path_is_off_in_training_with_gradients_and_when_switched_off(deneb):
    assert deneb.fast_sim_vec() is None  # gradients enabled
    with torch.inference_mode():
        deneb.fast_cpu_encoders = False
        assert deneb.fast_sim_vec() is None
        deneb.fast_cpu_encoders = True
        deneb.head.train()
        assert deneb.fast_sim_vec() is None
        deneb.head.eval()
        built = deneb.fast_sim_vec()
        assert built is not None and deneb.fast_sim_vec() is built  # built once for unchanged weights
        with torch.no_grad():
            deneb.head.layers[0].bias.add_(0.0)
        assert deneb.fast_sim_vec() is not built  # rebuilt after an in-place change


def test_a_class_token_only_layer_equals_the_full_layers_first_position(deneb):
    layer = deneb.clip_sequence_encoder.encoder.layers[0]
    hidden = torch.randn(4, 5, 2 * deneb.config.hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        full = FastEncoderLayer(layer)(hidden)
        first = FastEncoderLayer(layer, first_only=True)(hidden)
        expected = layer(hidden)
    assert first.shape == (4, 1, hidden.shape[-1])
    np.testing.assert_allclose(full.numpy(), expected.numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(first[:, 0].numpy(), full[:, 0].numpy(), rtol=0, atol=1e-6)


def test_per_item_calls_fill_a_bounded_number_of_positions():
    assert [sim_vec_items_per_call(count) for count in (1, 5, 998)] == [682, 292, 2]
    assert sim_vec_items_per_call(PER_ITEM_ROWS) == 1


def test_an_official_chunk_runs_roberta_once_per_distinct_sentence(deneb, monkeypatch):
    """Two images with two candidates each share their references: 4 candidates + 8 reference positions, 8 distinct."""
    images = [random_image(index, (64, 48)) for index in (0, 0, 1, 1)]
    candidates = ["a cat sleeping", "two cats", "a dog running", "two dogs"]
    references = [["a cat", "a sofa"]] * 2 + [["a dog", "grass"]] * 2
    with torch.inference_mode():
        fast = deneb.fast_text_encoder()
    batch_sizes = []
    statistics = fast.statistics

    def recorded(input_ids, lengths):
        batch_sizes.append(len(lengths))
        return statistics(input_ids, lengths)

    monkeypatch.setattr(fast, "statistics", recorded)
    deneb.score(images, candidates, references, mode="official", batch_size=4)
    assert batch_sizes == [8]
