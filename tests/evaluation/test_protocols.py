"""Protocol statistics against scipy (what the official code calls) and the official code's own rules."""

import random

import numpy as np
import pytest
import scipy.stats

from modeling_pacs.captioning.grammar import grammar_measures, repeated_ngrams
from modeling_pacs.captioning.grammar import has_incorrect_ending as ends_incorrectly
from modeling_pacs.evaluation.protocols import (
    accuracy,
    kendall_tau,
    official_round,
    overlapping_references,
    paired_accuracy,
    pascal_labels,
    pascal_predictions,
    per_annotator_correlations,
    pooled_correlations,
    remove_true_caption,
    sample_reference_draws,
    segment_frames,
    spearman,
    strictly_greater,
)


def test_identical_and_reversed_rankings_give_plus_and_minus_100():
    human = [1, 2, 3, 4, 5, 6]
    for variant in ("b", "c"):
        assert kendall_tau(human, human, variant) == pytest.approx(100)
        assert kendall_tau(human[::-1], human, variant) == pytest.approx(-100)
    assert spearman(human, human) == pytest.approx(100)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tau_b_tau_c_and_spearman_with_ties_agree_with_scipy(seed):
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 5, 300).astype(float)  # Flickr8k-like ratings: many ties
    metric = np.round(rng.random(300) + 0.2 * human, 1)  # ties in the metric too
    for variant in ("b", "c"):
        expected = 100 * scipy.stats.kendalltau(metric, human, variant=variant).statistic
        assert kendall_tau(metric, human, variant) == pytest.approx(expected, abs=1e-9)
    assert spearman(metric, human) == pytest.approx(100 * scipy.stats.spearmanr(metric, human).statistic, abs=1e-9)


def test_metric_ties_lower_tau_b_but_not_tau_c():
    human = [1, 2, 3, 4]
    tied = [1, 1, 3, 4]  # one metric tie, the order otherwise right
    assert kendall_tau(tied, human, "b") < kendall_tau(human, human, "b")
    assert kendall_tau(tied, human, "b") == pytest.approx(100 * scipy.stats.kendalltau(tied, human).statistic)
    assert kendall_tau(tied, human, "c") == pytest.approx(
        100 * scipy.stats.kendalltau(tied, human, variant="c").statistic
    )


def test_bad_correlation_inputs_are_named():
    with pytest.raises(ValueError, match=r"human scores\[1\] is nan"):
        kendall_tau([1, 2, 3], [1, float("nan"), 2])
    with pytest.raises(ValueError, match="got 2 metric scores and 3 human scores"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="variant must be 'b' or 'c'"):
        kendall_tau([1, 2], [1, 2], "a")
    assert np.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_official_rounding_rounds_the_raw_coefficient():
    assert official_round(54.12345) == pytest.approx(54.12)
    assert official_round(-3.14159) == pytest.approx(-3.14)


def test_pascal_labels_reproduce_the_official_seeded_draws():
    votes_a = [30, 10, 24, 24, 0, 24, 24, 24]
    votes_b = [18, 38, 24, 24, 48, 24, 24, 24]
    # The official loop (Polos pascal50s.py:75): random.seed(42), one random.random() per pair, tie or not.
    random.seed(42)
    expected = [0 if a > b + random.random() - 0.5 else 1 for a, b in zip(votes_a, votes_b)]
    assert pascal_labels(votes_a, votes_b) == expected
    assert expected[:2] == [0, 1] and expected[4] == 1  # majorities never depend on the draw
    generator = random.Random(42)
    draws = [generator.random() for _ in votes_a]
    assert [label for label, a, b in zip(expected, votes_a, votes_b) if a == b] == [
        0 if draw < 0.5 else 1 for draw, a, b in zip(draws, votes_a, votes_b) if a == b
    ]


def test_pascal_metric_tie_policies():
    assert pascal_predictions([0.9, 0.5, 0.4], [0.1, 0.5, 0.6], "b") == [0, 1, 1]
    assert pascal_predictions([0.9, 0.5, 0.4], [0.1, 0.5, 0.6], "a") == [0, 0, 1]
    assert pascal_predictions([0.9, 0.5, 0.4], [0.1, 0.5, 0.6], "wrong") == [0, None, 1]
    with pytest.raises(ValueError, match="tie_policy must be one of"):
        pascal_predictions([1], [1], "coin")


def test_reference_draws_are_reproducible_and_distinct():
    first = sample_reference_draws(10, 48, num_draws=5, per_draw=5, seed=3)
    assert first == sample_reference_draws(10, 48, num_draws=5, per_draw=5, seed=3)
    assert first != sample_reference_draws(10, 48, num_draws=5, per_draw=5, seed=4)
    assert len(first) == 5 and all(len(pair) == 5 == len(set(pair)) for draw in first for pair in draw)
    assert all(0 <= index < 48 for draw in first for pair in draw for index in pair)
    with pytest.raises(ValueError, match="num_draws must be a positive integer, got 0"):
        sample_reference_draws(10, num_draws=0)


def test_foil_removes_exact_copies_of_the_true_caption_only():
    references = ["A dog runs.", "A dog runs. ", "a dog runs.", "A cat sits.", "A dog runs."]
    assert remove_true_caption(references, "A dog runs.") == ["A dog runs. ", "a dog runs.", "A cat sits."]
    assert strictly_greater([0.5, 0.5, 0.7], [0.4, 0.5, 0.8]) == [True, False, False]
    assert accuracy([True, False, False, True]) == 50.0


def test_vatex_per_annotator_averaging_differs_from_pooled_and_rounding_matters():
    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, (60, 3)).astype(float)
    metric = human.mean(axis=1) + rng.normal(0, 1.0, 60) + np.linspace(0, 1e-5, 60)
    result = per_annotator_correlations(metric, human)
    expected_tau = np.mean([scipy.stats.kendalltau(metric, human[:, k]).statistic for k in range(3)])
    expected_rho = np.mean([scipy.stats.spearmanr(metric, human[:, k]).statistic for k in range(3)])
    assert result["kendall_tau_b"] == pytest.approx(100 * expected_tau, abs=1e-9)
    assert result["spearman"] == pytest.approx(100 * expected_rho, abs=1e-9)
    pooled = pooled_correlations(metric, human)
    assert abs(pooled["kendall_tau_b"] - result["kendall_tau_b"]) > 0.1
    rounded = per_annotator_correlations(metric, human, round_predictions=True)
    rounded_metric = np.around(metric, 4)
    official = round(np.mean([scipy.stats.kendalltau(rounded_metric, human[:, k]).statistic for k in range(3)]), 4)
    assert rounded["kendall_tau_b"] == pytest.approx(100 * official, abs=1e-9)
    assert rounded["kendall_tau_b"] != result["kendall_tau_b"]


def test_anet_reference_overlap_rule_and_alignment():
    # candidate [2.7, 5.2] -> seconds 2..5; reference [0, 9] -> 0..9 (10 s): 4/10 = exactly 40 %, excluded
    assert overlapping_references([2.7, 5.2], [[0, 9]]) == [0]  # no reference qualifies -> all are used
    assert overlapping_references([2.7, 5.2], [[0, 9], [4.9, 6.9]]) == [1]  # 4..6: 2/3 > 40 %
    assert overlapping_references([2.0, 6.0], [[0, 9], [3, 3.5]]) == [0, 1]  # 5/10 > 40 %; 1/1
    assert segment_frames([1.0, 2.0], 30, 10.0) == slice(3, 6)
    assert segment_frames([0.0, 0.2], 10, 10.0) == slice(0, 0)  # empty for very short segments, as the original
    right = {"v2": 0.6, "v1": 0.9, "v3": 0.5}
    foil = {"v1": 0.8, "v3": 0.5, "v2": 0.7}  # a tie is a failure
    assert paired_accuracy(right, foil) == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="videos scored on one side only: \\['v4'\\]"):
        paired_accuracy({**right, "v4": 1.0}, foil)


def test_grammar_measures_known_values():
    assert repeated_ngrams("a man and a man and a dog", 1) == 4  # a x3, man x2, and x2 -> 2 + 1 + 1
    assert repeated_ngrams("a man and a man and a dog", 2) == 3  # "a man" x2, "man and" x2, "and a" x2
    assert repeated_ngrams("a man and a man and a dog", 3) == 2
    assert repeated_ngrams("a man and a man and a dog", 4) == 1
    assert ends_incorrectly("a dog sitting on the") and ends_incorrectly("two cats and")
    assert ends_incorrectly("a man riding a wave on a.") and not ends_incorrectly("a man riding a wave.")
    measures = grammar_measures(["a man and a man and a dog", "a dog on a"])
    assert measures == {"rep_1": 2.5, "rep_2": 1.5, "rep_3": 1.0, "rep_4": 0.5, "incorrect_percent": 50.0}
    with pytest.raises(ValueError, match="n must be a positive integer"):
        repeated_ngrams("a dog", 0)
