"""Eqs. 9-14 (docs/spec/pacs.md#video, EMScore's code) against an independent NumPy computation, item by item,
unpadded."""

import math

import numpy as np
import pytest
import torch

from modeling_pacs.models.scoring import (
    combined_video_scores,
    idf_table,
    reference_video_scores,
    video_scores,
)
from tests.fixtures.helpers import assert_scores_close
from tests.references.emscore import greedy_match, reference_components, unit, video_components
from tests.references.emscore import idf_table as numpy_idf_table

SOT, EOT, PAD = 49406, 49407, 0


# ------------------------------------------------------------------------------------------- padding helpers
def pad(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(row) for row in rows)
    dim = rows[0].shape[-1] if rows[0].ndim == 2 else None
    shape = (len(rows), longest, dim) if dim else (len(rows), longest)
    padded = torch.full(shape, 7.0)  # junk in padding must not matter
    mask = torch.zeros(len(rows), longest, dtype=torch.long)
    for index, row in enumerate(rows):
        padded[index, : len(row)] = torch.as_tensor(row, dtype=torch.float32)
        mask[index, : len(row)] = 1
    return padded, mask


def components(scores) -> np.ndarray:
    return np.stack([component.numpy() for component in scores], axis=1)


@pytest.fixture
def items():
    """Captions of 3..12 tokens with IDF-like weights (start-of-text 0), videos of 1..9 frames."""
    rng = np.random.default_rng(3)
    captions, weights, videos = [], [], []
    for length, frames in [(5, 4), (12, 1), (3, 9), (8, 7)]:
        captions.append(rng.normal(size=(length, 16)))
        weights.append(np.concatenate([[0.0], rng.uniform(0.1, 2.0, size=length - 1)]))
        videos.append(rng.normal(size=(frames, 16)))
    return captions, weights, videos


# ------------------------------------------------------------------------------------------- IDF
def test_idf_table_follows_emscore_rules():
    word_a, word_b, word_c = 320, 1125, 4009
    corpus = [
        [SOT, word_a, word_b, EOT],
        [SOT, word_a, word_b, EOT],  # a duplicate counts twice
        [SOT, word_a, word_c, EOT],
        [SOT] + [word_c] * 75 + [EOT],  # exactly 77 tokens: no pad in its set
    ]
    table = idf_table(corpus, end_of_text_id=EOT)
    expected, unseen = numpy_idf_table(corpus, end_of_text_id=EOT)
    assert sorted(table.weights) == sorted(expected) == sorted([PAD, SOT, EOT, word_a, word_b, word_c])
    for token, value in expected.items():
        assert table.weights[token] == pytest.approx(value, abs=1e-12)
    # Hand-computed values: N = 4.
    assert table.weights[SOT] == 0.0
    assert table.weights[word_a] == pytest.approx(math.log(5 / 4))
    assert table.weights[word_b] == pytest.approx(math.log(5 / 3))  # df 2: the duplicate is counted
    assert table.weights[PAD] == pytest.approx(math.log(5 / 4))  # df 3: the 77-token caption has no pad
    table_values = [0.0, math.log(5 / 4), math.log(5 / 3), math.log(5 / 3), math.log(5 / 4), 0.0]
    assert table.weights[EOT] == pytest.approx(sum(table_values) / 6)  # mean incl. pad, SOT and EOT's own 0
    assert table.unseen == pytest.approx(math.log(5))
    weights = table.lookup(torch.tensor([[SOT, word_a, 999, EOT]]))
    assert weights.dtype == torch.float32
    assert_scores_close(weights[0], [0.0, math.log(5 / 4), math.log(5), table.weights[EOT]], atol=1e-7)


def test_idf_table_of_an_empty_corpus_weighs_every_id_log_one():
    table = idf_table([], end_of_text_id=EOT)
    assert table.weights == {}
    assert table.unseen == 0.0


# ------------------------------------------------------------------------------------------- Eqs. 9-13
def test_video_scores_match_numpy(items):
    captions, weights, videos = items
    tokens, token_mask = pad(captions)
    token_weights, _ = pad(weights)
    frames, frame_mask = pad(videos)
    result = video_scores(tokens, token_mask, token_weights, frames, frame_mask)
    expected = np.array([video_components(*item) for item in zip(captions, weights, videos, strict=True)])
    assert_scores_close(components(result), expected)
    # Eq. 11: R is the plain mean over frames of the best token; Eq. 13: (coarse + F) / 2.
    assert_scores_close(result.score, (result.coarse + result.f) / 2)


def test_batch_independence_with_all_negative_cosines(items):
    """EMScore zero-pads and multiplies by the mask, so a negative maximum becomes 0 beside a longer item."""
    captions, weights, videos = items
    rng = np.random.default_rng(11)
    direction = rng.normal(size=16)
    negative_caption = np.stack([direction + 0.05 * rng.normal(size=16) for _ in range(3)])
    negative_video = np.stack([-direction + 0.05 * rng.normal(size=16) for _ in range(2)])
    negative_weights = np.array([0.0, 1.0, 2.0])

    def score(caption_list, weight_list, video_list):
        tokens, token_mask = pad(caption_list)
        token_weights, _ = pad(weight_list)
        frames, frame_mask = pad(video_list)
        return components(video_scores(tokens, token_mask, token_weights, frames, frame_mask))

    alone = score([negative_caption], [negative_weights], [negative_video])[0]
    batched = score(captions + [negative_caption], weights + [negative_weights], videos + [negative_video])[-1]
    expected = video_components(negative_caption, negative_weights, negative_video)
    assert max(expected[:4]) < -0.9  # every cosine is negative: P, R, F and coarse all are
    assert_scores_close(alone, expected)
    assert_scores_close(batched, alone)


def test_zero_idf_sum_falls_back_to_uniform_weights():
    """A one-caption corpus gives every token of that caption weight 0; EMScore would return 0/0 = NaN."""
    rng = np.random.default_rng(5)
    caption, video = rng.normal(size=(4, 8)), rng.normal(size=(3, 8))
    tokens, token_mask = pad([caption])
    frames, frame_mask = pad([video])
    result = video_scores(tokens, token_mask, torch.zeros(1, 4), frames, frame_mask)
    assert_scores_close(components(result)[0], video_components(caption, np.ones(4), video))


# ------------------------------------------------------------------------------------------- references, Eq. 14
def reference_inputs(captions, weights, references):
    """Flatten (candidate, reference) pairs for `reference_video_scores`."""
    pairs, owners = [], []
    for item, item_references in enumerate(references):
        for reference in item_references:
            pairs.append((captions[item], weights[item], *reference))
            owners.append(item)
    candidate_tokens, candidate_mask = pad([pair[0] for pair in pairs])
    candidate_weights, _ = pad([pair[1] for pair in pairs])
    reference_tokens, reference_mask = pad([pair[2] for pair in pairs])
    reference_weights, _ = pad([pair[3] for pair in pairs])
    owner = torch.tensor(owners)
    return (
        candidate_tokens,
        candidate_mask,
        candidate_weights,
        reference_tokens,
        reference_mask,
        reference_weights,
        owner,
    )


def test_reference_part_maximises_each_component_separately(items):
    captions, weights, _ = items
    rng = np.random.default_rng(9)
    references = []
    for caption in captions:
        item_references = []
        for count in range(3):
            length = int(rng.integers(2, 10))
            reference = rng.normal(size=(length, 16))
            if count == 0:  # a reference close to the caption's words but with an unrelated end-of-text
                reference[: min(length, len(caption)) - 1] += 2 * caption[: min(length, len(caption)) - 1]
            item_references.append((reference, np.concatenate([[0.0], rng.uniform(0.1, 2.0, size=length - 1)])))
        references.append(item_references)
    result = reference_video_scores(*reference_inputs(captions, weights, references), num_items=len(captions))
    expected = np.array([reference_components(c, w, r) for c, w, r in zip(captions, weights, references, strict=True)])
    assert_scores_close(components(result), expected)

    # The test means something: for some item the best P and the best coarse come from different references.
    def argmax_component(item, component):
        per_reference = [
            (
                *greedy_match(captions[item], weights[item], *reference),
                float(unit(captions[item][-1]) @ unit(reference[0][-1])),
            )
            for reference in references[item]
        ]
        return int(np.argmax([values[component] for values in per_reference]))

    assert any(argmax_component(item, 0) != argmax_component(item, 3) for item in range(len(captions)))


def test_reference_based_video_score_is_the_mean_of_the_two_parts(items):
    captions, weights, videos = items
    rng = np.random.default_rng(4)
    references = [[(rng.normal(size=(4, 16)), np.array([0.0, 1.0, 1.5, 0.7]))] for _ in captions]
    tokens, token_mask = pad(captions)
    token_weights, _ = pad(weights)
    frames, frame_mask = pad(videos)
    video = video_scores(tokens, token_mask, token_weights, frames, frame_mask)
    reference = reference_video_scores(*reference_inputs(captions, weights, references), num_items=len(captions))
    combined = combined_video_scores(video, reference)
    video_expected = np.array([video_components(*item) for item in zip(captions, weights, videos, strict=True)])
    reference_expected = np.array(
        [reference_components(c, w, r) for c, w, r in zip(captions, weights, references, strict=True)]
    )
    expected = (video_expected + reference_expected) / 2  # P, R, F, coarse and (Eq. 14) the final score
    assert_scores_close(components(combined), expected)
    assert_scores_close(combined.score, (combined.coarse + combined.f) / 2)
