"""Grammar measures of generated captions (docs/spec/pacs.md#scst; PAC-S++ paper Sec. 5.8): Rep-n and %Incorrect.

- Rep-n: the average, over captions, of the number of repeated n-grams in a caption, i.e. its count of n-grams
  minus its count of distinct n-grams ("a dog and a dog": Rep-1 = 2, Rep-2 = 1). The paper gives no code; this is
  the reading under which a caption without repetition scores 0 and every extra occurrence counts once.
- %Incorrect: the percentage of captions whose last word is a preposition, a conjunction or a determiner (a caption
  cut off mid-phrase, as CLIP-S rewards produce: "a dog sitting on a").

Words are lower-cased and split on anything that is not a letter, digit or apostrophe.
"""

import re
from collections import Counter
from collections.abc import Sequence

# Closed word classes that cannot end an English caption.
PREPOSITIONS = frozenset(
    "about above across after against along amid among around as at atop before behind below beneath beside besides "
    "between beyond by down during except for from in inside into like near of off on onto out outside over past "
    "through throughout to toward towards under underneath until up upon via with within without".split()
)
CONJUNCTIONS = frozenset("and but or nor so yet because while although though whereas if than whether".split())
DETERMINERS = frozenset(
    "a an the this that these those my your his her its our their some any each every either neither no "
    "another such what which whose".split()
)
INCORRECT_ENDINGS = PREPOSITIONS | CONJUNCTIONS | DETERMINERS
WORD = re.compile(r"[a-z0-9']+")


def words(caption: str) -> list[str]:
    """Lower-cased words of a caption, punctuation dropped."""
    return WORD.findall(caption.lower())


def repeated_ngrams(caption: str, n: int) -> int:
    """Number of n-grams of `caption` that repeat an earlier one (n-grams minus distinct n-grams)."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    tokens = words(caption)
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(ngrams) - len(Counter(ngrams))


def has_incorrect_ending(caption: str) -> bool:
    """True when the caption's last word is a preposition, conjunction or determiner."""
    tokens = words(caption)
    return bool(tokens) and tokens[-1] in INCORRECT_ENDINGS


def grammar_measures(captions: Sequence[str], max_n: int = 4) -> dict[str, float]:
    """`{"rep_1": ..., ..., "rep_<max_n>": ..., "incorrect_percent": ...}` over a list of captions.

    Example:

    ```python
    >>> grammar_measures(["a dog and a dog", "a cat on a"], max_n=2)
    {'rep_1': 1.5, 'rep_2': 0.5, 'incorrect_percent': 50.0}
    ```
    """
    if isinstance(captions, str):
        raise TypeError("captions must be a list of strings, got a single string: wrap it in a list")
    captions = list(captions)
    for index, caption in enumerate(captions):
        if not isinstance(caption, str):
            raise TypeError(f"caption {index} is {type(caption).__name__} ({caption!r}), expected a string")
    if not captions:
        raise ValueError("grammar measures need at least one caption")
    measures = {
        f"rep_{n}": sum(repeated_ngrams(caption, n) for caption in captions) / len(captions)
        for n in range(1, max_n + 1)
    }
    measures["incorrect_percent"] = 100.0 * sum(map(has_incorrect_ending, captions)) / len(captions)
    return measures


__all__ = ["INCORRECT_ENDINGS", "grammar_measures", "has_incorrect_ending", "repeated_ngrams", "words"]
