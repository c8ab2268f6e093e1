"""Polos's CPU fast path (`modeling_pacs.fast_polos`) and the ScalarMix from per-sentence statistics, against
`scoring_polos.scalar_mix`, the NumPy ScalarMix of `tests/test_polos.py`, transformers' RoBERTa forward and the
transformers path's scores."""

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from transformers import RobertaModel

from modeling_pacs.models.fast_polos import FastPolosHead, FastRoberta
from modeling_pacs.models.scoring_polos import scalar_mix, scalar_mix_first_position, sentence_statistics
from modeling_pacs.testing.polos import make_tiny_polos_model, tiny_roberta_config
from tests.fixtures.helpers import assert_scores_close, random_image
from tests.models.test_polos import numpy_polos, numpy_scalar_mix


@pytest.fixture(scope="module")
def polos():
    return make_tiny_polos_model(seed=3, width=48, num_layers=3)


@contextmanager
def transformers_path(model):
    """The model scores through transformers' RoBERTa forward and the module head inside the block."""
    model.fast_cpu_encoders = False
    try:
        yield
    finally:
        model.fast_cpu_encoders = True


def test_scalar_mix_first_position_equals_scalar_mix_and_numpy():
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(4, 5, 7, 6, generator=generator) * 3 + 1.5
    lengths = torch.tensor([7, 3, 1, 5, 6])
    mask = (torch.arange(7)[None, :] < lengths[:, None]).long()
    weights = torch.tensor([0.3, -1.0, 0.7, 0.1])
    statistics = sentence_statistics(hidden, mask)
    for groups in ([0, 1, 2, 3, 4], [0, 0, 0, 0, 0], [0, 1, 1, 0, 2]):
        group_tensor = torch.tensor(groups)
        actual = scalar_mix_first_position(statistics, weights, torch.tensor(1.7), group_tensor)
        full = scalar_mix(hidden, mask, weights, torch.tensor(1.7), group_tensor)[:, 0]
        expected = numpy_scalar_mix(hidden.numpy(), mask.numpy(), weights.double().numpy(), 1.7, np.array(groups))
        np.testing.assert_allclose(actual.numpy(), full.numpy(), rtol=0, atol=1e-5, err_msg=str(groups))
        np.testing.assert_allclose(actual.numpy(), expected[:, 0], rtol=0, atol=1e-5, err_msg=str(groups))
        if groups == [0, 1, 2, 3, 4]:  # a sentence alone: scalar_mix's operations, one for one
            assert torch.equal(actual, full)
    # Repeated sentences (official mode: one distinct sentence in several groups) select the same statistics.
    index = torch.tensor([1, 1, 4, 0])
    repeated = scalar_mix_first_position(
        statistics.select(index), weights, torch.tensor(1.7), torch.tensor([0, 0, 0, 1])
    )
    copied = scalar_mix(hidden[:, index], mask[index], weights, torch.tensor(1.7), torch.tensor([0, 0, 0, 1]))[:, 0]
    np.testing.assert_allclose(repeated.numpy(), copied.numpy(), rtol=0, atol=1e-5)


def test_fast_roberta_statistics_equal_transformers_hidden_states():
    torch.manual_seed(0)
    roberta = RobertaModel(tiny_roberta_config(vocab_size=300, hidden_size=48, num_layers=3), add_pooling_layer=False)
    roberta.eval()
    lengths = [9, 4, 1, 7]
    input_ids = torch.ones(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = torch.randint(3, 300, (length,))
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    with torch.inference_mode():
        fast = FastRoberta.build(roberta).statistics(input_ids, lengths)
        states = torch.stack(roberta(input_ids=input_ids, attention_mask=mask, output_hidden_states=True).hidden_states)
    expected = sentence_statistics(states, mask)
    assert torch.equal(fast.tokens, expected.tokens)
    np.testing.assert_allclose(fast.first.numpy(), expected.first.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_allclose(fast.sums.numpy(), expected.sums.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fast.squares.numpy(), expected.squares.numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", ["per_item", "official"])
def test_fast_path_scores_equal_the_transformers_path_and_numpy(polos, mode):
    images = [random_image(index, (160 + 8 * index, 150)) for index in range(6)]
    candidates = ["a cat on a sofa", "a dog running in the park", "two people", "a plate of food", "an airplane",
                  "a cat"]  # fmt: skip
    shared = ["a cat sleeping", "a sofa with a cat", "a cat"]
    # Items 0 and 5 share their references (deduplicated inside an official chunk); item 2 has a repeated one.
    references = [shared, ["a dog", "a dog in a park"], ["two men", "two men"], ["food", "a plate"],
                  ["a plane over the city", "an airplane flying"], shared]  # fmt: skip
    batch_size = 3 if mode == "official" else None
    with torch.inference_mode():
        assert polos.fast_text_encoder() is not None and polos.fast_head() is not None
    fast = polos.score(images, candidates, references, mode=mode, batch_size=batch_size)
    with transformers_path(polos):
        slow = polos.score(images, candidates, references, mode=mode, batch_size=batch_size)
    expected, used = numpy_polos(polos, images, candidates, references, chunk_size=batch_size)
    assert fast.num_references_used.tolist() == slow.num_references_used.tolist() == used
    assert np.ptp(expected) > 0.05
    assert_scores_close(fast.scores, slow.scores, what=f"{mode}: fast vs transformers path")
    assert_scores_close(fast.scores, expected, atol=1e-5, what=f"{mode}: fast vs NumPy")
    for fast_pairs, slow_pairs in zip(fast.reference_scores, slow.reference_scores):
        assert_scores_close(fast_pairs, slow_pairs, what=f"{mode}: reference scores")


def test_fast_path_applies_only_in_eval_mode_without_gradients():
    model = make_tiny_polos_model(seed=4)
    assert model.fast_text_encoder() is None and model.fast_head() is None  # gradients enabled
    with torch.inference_mode():
        assert isinstance(model.fast_text_encoder(), FastRoberta)
        assert isinstance(model.fast_head(), FastPolosHead)
        model.fast_cpu_encoders = False
        assert model.fast_text_encoder() is None and model.fast_head() is None
        model.fast_cpu_encoders = True
        model.train()
        assert model.fast_text_encoder() is None and model.fast_head() is None
    model.eval()
    roberta = model.text_encoder
    roberta.config.hidden_act = "relu"
    assert FastRoberta.build(roberta) is None
    roberta.config.hidden_act = "gelu"


def test_fast_head_follows_weight_changes(polos):
    features = torch.randn(4, polos.config.feature_size, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        before = polos.fast_head()(features)
    with torch.no_grad():
        polos.head.layers[0].bias.add_(0.5)
    try:
        with torch.inference_mode():
            after = polos.fast_head()(features)
            expected = polos.head(features)
        assert not torch.allclose(before, after)
        assert_scores_close(after, expected, what="after an in-place weight change")
    finally:
        with torch.no_grad():
            polos.head.layers[0].bias.sub_(0.5)
