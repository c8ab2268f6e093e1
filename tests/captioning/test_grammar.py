"""Rep-n and %Incorrect on crafted captions whose repeated n-grams and endings are counted by hand."""

import pytest

from modeling_pacs.captioning.grammar import grammar_measures, has_incorrect_ending, repeated_ngrams


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        # a dog and a dog: unigrams a,dog,and,a,dog (3 distinct) -> 2; bigrams a-dog,dog-and,and-a,a-dog -> 1; 0; 0
        ("a dog and a dog", (2, 1, 0, 0)),
        # "a man riding a man riding a man riding": 9 words, 3 distinct; bigrams 8 / 3 distinct; trigrams 7 / 3; 6 / 3
        ("a man riding a man riding a man riding", (6, 5, 4, 3)),
        ("A red car parked on the street.", (0, 0, 0, 0)),
        ("Dog, dog; DOG!", (2, 1, 0, 0)),
        ("", (0, 0, 0, 0)),
    ],
)
def test_repeated_ngrams_counted_by_hand(caption, expected):
    assert tuple(repeated_ngrams(caption, n) for n in (1, 2, 3, 4)) == expected


@pytest.mark.parametrize(
    ("caption", "incorrect"),
    [
        ("a dog sitting on a", True),
        ("a cat on the bed with", True),
        ("two people and", True),
        ("a plate of food and the.", True),
        ("a dog sitting on a bench", False),
        ("a cat on the bed.", False),
        ("", False),
    ],
)
def test_incorrect_endings(caption, incorrect):
    assert has_incorrect_ending(caption) is incorrect


def test_grammar_measures_average_over_captions():
    captions = ["a dog and a dog", "a man riding a man riding a man riding", "a dog sitting on a", "a red car"]
    measures = grammar_measures(captions)
    # Rep-1: (2 + 6 + 1 + 0) / 4; Rep-2: (1 + 5 + 0 + 0) / 4; Rep-3: 4 / 4; Rep-4: 3 / 4; one incorrect ending of 4.
    assert measures == {"rep_1": 2.25, "rep_2": 1.5, "rep_3": 1.0, "rep_4": 0.75, "incorrect_percent": 25.0}


def test_grammar_measures_validate_input():
    with pytest.raises(TypeError, match="single string"):
        grammar_measures("a dog")
    with pytest.raises(TypeError, match="caption 1 is int"):
        grammar_measures(["a dog", 3])
    with pytest.raises(ValueError, match="at least one caption"):
        grammar_measures([])
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        repeated_ngrams("a dog", 0)
