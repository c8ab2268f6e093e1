"""The Pearl head's CPU fast path (`modeling_pacs.fast_pearl`) against an independent NumPy forward (float64) and
against the module path, and when it applies."""

import numpy as np
import pytest
import torch
from torch import nn

from modeling_pacs import PearlConfig, PearlModel
from modeling_pacs.models.fast_pearl import FastPearlHead
from modeling_pacs.pearl.hadamard_init import initialise_hadamard_nets
from tests.fixtures.helpers import assert_scores_close
from tests.fixtures.pearl import one_torch_thread, random_features, tiny_pearl_config  # noqa: F401 (autouse fixture)


def randomise(model: PearlModel, seed: int, head_scale: float = 4.0) -> PearlModel:
    """Non-default BatchNorm statistics and affine maps, DiffNets away from `u - c`, head weights scaled by
    `head_scale` (so the scores of the tiny model spread over (0, 1) and a wrong term shows)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                size = module.num_features
                module.running_mean.copy_(torch.randn(size, generator=generator) * 0.3)
                module.running_var.copy_(torch.rand(size, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(size, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(size, generator=generator) * 0.2)
        for arsm in [*model.image_arsms.values(), *model.reference_arsms.values()]:
            arsm.diff_net.weight.add_(torch.randn(arsm.diff_net.weight.shape, generator=generator) * 0.3)
            arsm.diff_net.bias.copy_(torch.randn(arsm.diff_net.bias.shape, generator=generator) * 0.3)
        for head in (model.image_head, model.reference_head):
            for module in head:
                if isinstance(module, nn.Linear):
                    module.weight.mul_(head_scale)
    return model.eval()


@pytest.fixture(scope="module")
def tiny_pearl():
    torch.manual_seed(0)
    return randomise(PearlModel(tiny_pearl_config()), seed=1)


# ---------------------------------------------------------------------------------------------------- NumPy
def array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().double().numpy()


def numpy_linear(x, linear):
    return x @ array(linear.weight).T + array(linear.bias)


def numpy_hadamard(net, u, c):
    """Pearl's `HadamardNet` on `[N, D]` pairs: 1x1 convolutions over (u_k, c_k), eval-mode BatchNorm, ReLU."""
    hidden = np.stack([u, c], axis=-1)
    modules = list(net.network)
    for module in modules:
        if isinstance(module, nn.Conv2d):
            hidden = hidden @ array(module.weight)[:, :, 0, 0].T + array(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            scale = array(module.weight) / np.sqrt(array(module.running_var) + module.eps)
            hidden = (hidden - array(module.running_mean)) * scale + array(module.bias)
        elif isinstance(module, nn.ReLU):
            hidden = np.maximum(hidden, 0)
    return hidden[..., 0]


def numpy_arsm(arsm, u, c):
    if arsm.input_projection is not None:
        u, c = numpy_linear(u, arsm.input_projection), numpy_linear(c, arsm.input_projection)
    else:
        width = ((0, 0), (0, arsm.feature_dim - u.shape[-1]))
        u, c = np.pad(u, width), np.pad(c, width)
    weight = array(arsm.diff_net.weight)
    diff = u * weight[:, 0] + c * weight[:, 1] + array(arsm.diff_net.bias)

    def adapter(x):
        return numpy_linear(np.maximum(numpy_linear(x, arsm.adapter[0]), 0), arsm.adapter[3])

    return np.concatenate([adapter(diff), adapter(numpy_hadamard(arsm.hadamard_net, u, c))], axis=-1)


def numpy_layer_norm(x, norm):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.eps) * array(norm.weight) + array(norm.bias)


def numpy_attention(queries, keys_values, attention):
    """`nn.MultiheadAttention(query, key=value=keys_values)` of one sequence, batch first, no mask."""
    width, heads = attention.embed_dim, attention.num_heads
    weight, bias = array(attention.in_proj_weight), array(attention.in_proj_bias)
    q = queries @ weight[:width].T + bias[:width]
    k = keys_values @ weight[width : 2 * width].T + bias[width : 2 * width]
    v = keys_values @ weight[2 * width :].T + bias[2 * width :]
    size = width // heads
    outputs = []
    for head in range(heads):
        part = slice(head * size, (head + 1) * size)
        logits = q[:, part] @ k[:, part].T / np.sqrt(size)
        weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        outputs.append(weights @ v[:, part])
    return numpy_linear(np.concatenate(outputs, axis=-1), attention.out_proj)


def numpy_vss(vss, tokens):
    """Positions, the post-norm ReLU transformer, then the learnable queries' cross-attention, per sequence."""
    summaries = []
    for sequence in tokens:
        hidden = sequence + array(vss.positions)[: len(sequence)]
        for layer in vss.transformer.layers:
            hidden = numpy_layer_norm(hidden + numpy_attention(hidden, hidden, layer.self_attn), layer.norm1)
            feed_forward = numpy_linear(np.maximum(numpy_linear(hidden, layer.linear1), 0), layer.linear2)
            hidden = numpy_layer_norm(hidden + feed_forward, layer.norm2)
        summaries.append(numpy_attention(array(vss.queries)[0], hidden, vss.cross_attention).reshape(-1))
    return np.stack(summaries)


def numpy_head(head, x):
    linears = [module for module in head if isinstance(module, nn.Linear)]
    for linear in linears[:-1]:
        x = np.tanh(numpy_linear(x, linear))
    return 1 / (1 + np.exp(-numpy_linear(x, linears[-1])[:, 0]))


def numpy_pearl(model, features, reference_mask):
    """`(score, img_score, ref_scores)` of Pearl's eval forward, Eqs. 1-3, in float64."""
    config = model.config
    candidate = {name: array(value) for name, value in features["candidate_features"].items()}
    batch = next(iter(candidate.values())).shape[0]
    image_tokens = []
    for encoder in config.image_encoders:
        name = encoder["name"]
        image = array(features["image_features"][name])
        pairs = [
            numpy_arsm(model.image_arsms[name], image[:, token], candidate[name]) for token in range(image.shape[1])
        ]
        image_tokens += pairs
    img_score = numpy_head(model.image_head, numpy_vss(model.vss, np.stack(image_tokens, axis=1)))
    ref_scores = np.zeros(reference_mask.shape)
    for row, slot in zip(*np.nonzero(reference_mask)):
        tokens = [
            numpy_arsm(
                model.reference_arsms[e["name"]],
                array(features["reference_features"][e["name"]][row, slot])[None],
                candidate[e["name"]][row][None],
            )[0]
            for e in config.reference_encoders
        ]
        ref_scores[row, slot] = numpy_head(model.reference_head, numpy_vss(model.vss, np.stack(tokens)[None]))[0]
    has_refs = reference_mask.any(axis=1)
    best = np.where(reference_mask, ref_scores, 0).max(axis=1)
    score = np.where(has_refs, config.lambda_img * img_score + (1 - config.lambda_img) * best, img_score)
    return score, img_score[:batch], ref_scores


# ---------------------------------------------------------------------------------------------------- tests
def scores(model, features, mask, fast: bool):
    model.fast_cpu_head = fast
    try:
        with torch.inference_mode():
            return model(**features, reference_mask=torch.from_numpy(mask))
    finally:
        model.fast_cpu_head = True


def test_fast_head_matches_numpy_and_the_modules(tiny_pearl):
    features = random_features(batch=5, num_refs=4, seed=2)
    mask = np.array([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1], [1, 1, 0, 0]], dtype=bool)
    expected_score, expected_img, expected_refs = numpy_pearl(tiny_pearl, features, mask)
    assert np.ptp(expected_score) > 0.1  # the scores spread: a wrong term would show
    assert tiny_pearl.fast_head() is None  # gradients enabled here: the modules
    with torch.inference_mode():
        assert isinstance(tiny_pearl.fast_head(), FastPearlHead)
    for fast in (True, False):
        output = scores(tiny_pearl, features, mask, fast)
        assert_scores_close(output.score, expected_score, what=f"score (fast={fast})")
        assert_scores_close(output.img_score, expected_img, what=f"img_score (fast={fast})")
        assert_scores_close(output.ref_scores, np.where(mask, expected_refs, 0), what=f"ref_scores (fast={fast})")


def test_fast_head_does_not_depend_on_the_batch(tiny_pearl):
    features = random_features(batch=6, num_refs=3, seed=4)
    with torch.inference_mode():
        whole = tiny_pearl(**features).score
        rows = [
            tiny_pearl(**{k: {n: v[i : i + 1] for n, v in f.items()} for k, f in features.items()}).score
            for i in range(6)
        ]
    assert_scores_close(whole, torch.cat(rows), what="one batch vs one item at a time")


def test_default_geometry_fast_head_equals_the_padded_module_forward():
    """At the released geometry (BLIP-2 256-d and CLIP 512-d features zero-padded to 768, the shipped HadamardNet
    initialisation, non-default BatchNorm statistics): the fast path equals the modules with HadamardNet run on
    every padded coordinate, as Pearl's code runs it."""
    torch.manual_seed(0)
    config = PearlConfig(
        image_encoders=[{"name": "clip", "dim": 512, "tokens": 1}, {"name": "blip2", "dim": 256, "tokens": 2}],
        reference_encoders=[{"name": "blip2", "dim": 256}, {"name": "stella", "dim": 768}],
        encoder_specs={},
    )
    model = PearlModel(config)
    initialise_hadamard_nets(model)
    model = randomise(model, seed=5, head_scale=1.0)
    generator = torch.Generator().manual_seed(6)

    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    features = {
        "candidate_features": {"clip": randn(3, 512), "blip2": randn(3, 256), "stella": randn(3, 768)},
        "image_features": {"clip": randn(3, 1, 512), "blip2": randn(3, 2, 256)},
        "reference_features": {"blip2": randn(3, 2, 256), "stella": randn(3, 2, 768)},
    }
    mask = torch.tensor([[True, True], [True, False], [False, False]])
    with torch.inference_mode():
        fast = model(**features, reference_mask=mask)
        model.fast_cpu_head = False
        modules = model(**features, reference_mask=mask)  # the eval-mode modules: padded coordinates skipped
        for arsm in [*model.image_arsms.values(), *model.reference_arsms.values()]:
            arsm.training = True  # PearlARSM's training branch: HadamardNet on every padded coordinate (the
            # submodules stay in eval mode: running BatchNorm statistics, no dropout)
        padded = model(**features, reference_mask=mask)
    expected = dict(zip(("score", "img_score", "ref_scores"), numpy_pearl(model, features, mask.numpy())))
    expected["ref_scores"] = np.where(mask.numpy(), expected["ref_scores"], 0)
    for name in ("score", "img_score", "ref_scores"):
        assert_scores_close(getattr(fast, name), getattr(padded, name), what=f"{name}: fast vs padded modules")
        assert_scores_close(getattr(modules, name), getattr(padded, name), what=f"{name}: modules vs padded")
        assert_scores_close(getattr(fast, name), expected[name], what=f"{name}: fast vs NumPy")
        assert_scores_close(getattr(padded, name), expected[name], what=f"{name}: padded modules vs NumPy")


def test_fast_head_applies_only_in_eval_mode_without_gradients_and_follows_weight_changes(tiny_pearl):
    model = randomise(PearlModel(tiny_pearl_config()), seed=7)
    features = random_features(batch=3, num_refs=2, seed=8)
    with torch.inference_mode():
        assert model.fast_head() is not None
        model.fast_cpu_head = False
        assert model.fast_head() is None
        model.fast_cpu_head = True
        model.train()
        assert model.fast_head() is None
        model.eval()
        before = model(**features).score
    with torch.no_grad():
        norm = next(m for m in model.image_arsms["clip"].hadamard_net.modules() if isinstance(m, nn.BatchNorm2d))
        norm.running_mean.add_(0.5)  # changed in place: the packed copy is rebuilt
        model.image_head[0].weight.mul_(2.0)
    with torch.inference_mode():
        after = model(**features).score
        model.fast_cpu_head = False
        modules = model(**features).score
    assert not torch.allclose(before, after)
    assert_scores_close(after, modules, what="after an in-place weight change")
