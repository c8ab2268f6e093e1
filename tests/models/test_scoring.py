"""Eqs. 4 and 5 against an independent NumPy computation (docs/spec/pacs.md#metric)."""

import numpy as np
import pytest
import torch

from modeling_pacs.models.scoring import (
    harmonic_mean,
    max_reference_similarity,
    reference_based_score,
    reference_free_score,
)


def numpy_cosine(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def numpy_score(image, text, w):
    return w * max(numpy_cosine(image, text), 0.0)


def numpy_ref_score(image, text, references, w):
    a = numpy_score(image, text, w)
    b = max(0.0, max(numpy_cosine(text, r) for r in references))
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


@pytest.fixture
def embeddings():
    rng = np.random.default_rng(7)
    images = rng.normal(size=(6, 16))
    texts = rng.normal(size=(6, 16))
    texts[0] = images[0] + 0.1 * rng.normal(size=16)  # strongly positive cosine
    texts[1] = -images[1]  # cosine exactly -1: clipped to 0
    return images, texts


@pytest.mark.parametrize("w", [1.0, 2.0, 2.5, 3.0])
def test_reference_free_score_matches_numpy_and_scales_with_w(embeddings, w):
    images, texts = embeddings
    ours = reference_free_score(torch.tensor(images), torch.tensor(texts), w).numpy()
    expected = [numpy_score(i, t, w) for i, t in zip(images, texts)]
    np.testing.assert_allclose(ours, expected, atol=1e-6)
    assert ours[1] == 0.0
    assert ours[0] == pytest.approx(w * numpy_cosine(images[0], texts[0]), abs=1e-6)


def test_negative_cosines_are_clipped_to_zero():
    image = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    text = torch.tensor([[-1.0, 0.2], [0.6, 0.8]])
    scores = reference_free_score(image, text, 2.5)
    assert scores[0].item() == 0.0
    assert scores[1].item() == pytest.approx(2.5 * 0.6, abs=1e-7)


def test_reference_based_score_matches_numpy_with_several_references():
    rng = np.random.default_rng(3)
    images = rng.normal(size=(4, 8))
    candidates = rng.normal(size=(4, 8))
    reference_lists = [rng.normal(size=(n, 8)) for n in (1, 3, 5, 2)]
    reference_lists[2][4] = candidates[2] * 3  # best reference (cosine 1) is the last of five
    owner = torch.tensor([i for i, refs in enumerate(reference_lists) for _ in refs])
    flat = torch.tensor(np.concatenate(reference_lists))
    for w in (2.0, 2.5):
        ours = reference_based_score(torch.tensor(images), torch.tensor(candidates), flat, owner, w).numpy()
        expected = [numpy_ref_score(i, c, r, w) for i, c, r in zip(images, candidates, reference_lists)]
        np.testing.assert_allclose(ours, expected, atol=1e-6)
    best = max_reference_similarity(torch.tensor(candidates), flat, owner).numpy()
    assert best[2] == pytest.approx(1.0, abs=1e-6)


def test_w_changes_reference_based_score_but_not_its_reference_term():
    image = torch.tensor([[1.0, 0.0]])
    candidate = torch.tensor([[0.8, 0.6]])  # cos(image, candidate) = 0.8
    reference = torch.tensor([[0.0, 1.0]])  # cos(candidate, reference) = 0.6, NOT scaled by w
    owner = torch.tensor([0])
    for w in (1.0, 2.5):
        a, b = w * 0.8, 0.6
        expected = 2 * a * b / (a + b)
        assert reference_based_score(image, candidate, reference, owner, w).item() == pytest.approx(expected, abs=1e-6)


def test_harmonic_mean_is_zero_when_both_terms_are_zero():
    a = torch.tensor([0.0, 0.0, 1.0, 2.0])
    b = torch.tensor([0.0, 0.5, 0.0, 2.0])
    result = harmonic_mean(a, b)
    assert result.tolist() == [0.0, 0.0, 0.0, 2.0]
    assert not torch.isnan(result).any()


def test_reference_based_score_when_everything_is_negative_is_zero_not_nan():
    image = torch.tensor([[1.0, 0.0]])
    candidate = torch.tensor([[-1.0, 0.0]])
    reference = torch.tensor([[1.0, 0.0]])
    score = reference_based_score(image, candidate, reference, torch.tensor([0]), 2.5)
    assert score.item() == 0.0
