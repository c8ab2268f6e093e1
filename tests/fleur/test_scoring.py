"""FLEUR's parsing, digit location and smoothing (`models/scoring_fleur.py`) on crafted answers, against values
worked by hand from the authors' code (fleur.py:128-171)."""

import math

import pytest
import torch

from modeling_pacs.models.scoring_fleur import digit_steps, parse_answer, score_answer, smooth_score

DIGITS = list(range(10))  # token id of digit d is d; 10 = "▁", 11 = ".", 12 = "</s>"
SPACE, DOT, EOS = 10, 11, 12


def tokens(text: str) -> list[int]:
    return [SPACE] + [DOT if char == "." else int(char) for char in text] + [EOS]


def test_parse_answer_reads_digits_and_dots_as_the_authors_do():
    assert parse_answer("0.85</s>") == 0.85
    assert parse_answer("Score: 0.7.</s>") == 0.7
    assert parse_answer("..0.6..</s>") == 0.6
    assert parse_answer("good</s>") is None and parse_answer("0.8 or 0.9</s>") is None
    assert parse_answer("0.85") is None  # no stop string: the last 4 characters are cut all the same


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("0.0", (3, None)),  # two zeros: the second (after the dot)
        ("0.05", (3, 4)),
        ("0.66", (3, 4)),  # first decimal: the first 6; second decimal: the second 6
        ("0.55", (3, 4)),
        ("0.11", (3, 4)),
        ("0.8", (3, None)),
        ("1.0", (1, None)),
    ],
)
def test_digit_steps_follow_the_authors_rules_for_repeated_digits(answer, expected):
    assert digit_steps(tokens(answer), float(answer), DIGITS) == expected


def test_one_point_zero_with_two_ones_and_a_missing_digit_fail():
    assert digit_steps(tokens("1.01"), 1.0, DIGITS) == "digit_not_found"
    assert digit_steps([SPACE, 5, EOS], 0.7, DIGITS) == "digit_not_found"


def test_smoothing_is_the_expectation_over_the_digit_tokens():
    first = torch.full((13,), -30.0)
    first[[7, 8]] = 0.0  # p(7) = p(8) = 1/2
    second = torch.full((13,), -30.0)
    second[5] = 0.0
    assert float(smooth_score(0.75, first, second, DIGITS)) == pytest.approx(0.75 + 0.05, abs=1e-6)
    assert float(smooth_score(0.7, first, None, DIGITS)) == pytest.approx(0.75, abs=1e-6)
    one = torch.full((13,), -30.0)
    one[[0, 1]] = 0.0
    assert float(smooth_score(1.0, one, None, DIGITS)) == pytest.approx(0.9 * 0.5 + 0.5, abs=1e-6)


def test_failed_answers_score_nan_with_their_outcome():
    logits = [torch.zeros(13)] * 8
    assert score_answer("1.5</s>", tokens("1.5"), logits, DIGITS)[1] == "out_of_range"
    score, outcome, printed = score_answer("no</s>", [SPACE, EOS], logits, DIGITS)
    assert math.isnan(score) and outcome == "unparsable" and printed is None
    assert score_answer("0.8</s>", tokens("0.8"), logits, DIGITS, smoothing="none")[:2] == (0.8, "ok")
