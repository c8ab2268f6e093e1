"""Grammar measures of generated captions (SPEC §5; PAC-S++ §5.8): Rep-1..4 and %Incorrect, as pure functions.

Words are lower-cased, with punctuation removed and split on whitespace. Rep-n counts, per caption, the n-gram
occurrences beyond the first of each n-gram (total n-grams minus distinct n-grams) and averages over captions.
%Incorrect is the share of captions whose last word is a preposition, conjunction or determiner, x100.

    >>> repeated_ngrams("a dog and a dog on a beach", 1)
    3
    >>> grammar_measures(["a dog on a", "a cat"])["incorrect"]
    50.0
"""

import re
from collections.abc import Sequence

DETERMINERS = frozenset(
    "a an the this that these those some any each every either neither no another his her its their our my your".split()
)
CONJUNCTIONS = frozenset("and or but nor so yet while although though because if than as whereas".split())
PREPOSITIONS = frozenset(
    "of in on at with by from to into onto over under near behind beside besides between through across along "
    "around above below beneath up down out off about for against toward towards inside outside upon during "
    "without within among amid past via like".split()
)
INCORRECT_ENDINGS = DETERMINERS | CONJUNCTIONS | PREPOSITIONS


def words(caption: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", caption.lower()).split()


def repeated_ngrams(caption: str, n: int) -> int:
    """n-gram occurrences in `caption` beyond the first of each distinct n-gram."""
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    tokens = words(caption)
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(ngrams) - len(set(ngrams))


def ends_incorrectly(caption: str) -> bool:
    """True when the last word is a preposition, conjunction or determiner (or the caption has no word)."""
    tokens = words(caption)
    return not tokens or tokens[-1] in INCORRECT_ENDINGS


def grammar_measures(captions: Sequence[str]) -> dict[str, float]:
    """`rep_1`..`rep_4` (mean repeated n-grams per caption) and `incorrect` (% of captions ending badly)."""
    if not captions:
        raise ValueError("grammar measures of no captions: pass at least one caption")
    measures = {f"rep_{n}": sum(repeated_ngrams(c, n) for c in captions) / len(captions) for n in range(1, 5)}
    measures["incorrect"] = 100 * sum(ends_incorrectly(c) for c in captions) / len(captions)
    return measures
