"""FLEUR's answer parsing and score smoothing as pure functions (docs/spec/fleur.md#smoothing), transcribed from
`Yebin46/FLEUR` fleur.py:128-171 (reffleur.py and fleur_exp.py repeat it).

The authors parse the generated text, find the tokens of the printed decimal digits among the generated tokens, and
replace the printed number by the expectation of the digit tokens' probabilities at those steps:

    score = sum_r r * 0.1 * p1(r) + [sum_r r * 0.01 * p2(r)]      for a printed 0.0 <= x < 1.0
    score = 0.9 * p1(0) + p1(1)                                   for a printed 1.0 (p1 at the token "1")

where p1 (p2) is the softmax, over the original vocabulary, of the logits at the step that produced the first
(second) decimal digit, and r runs over 0..9. Where the authors' code fails (`except: print("Error!")`, which then
reuses the previous caption's score) an outcome names the failure and the score is NaN.
"""

import re
from collections.abc import Sequence

import torch

# Per-item outcomes (`FleurOutput.outcomes`): "ok", or why the answer gave no score.
OK = "ok"
UNPARSABLE = "unparsable"  # no number in the answer (float() fails), or a number Python prints in exponent form
OUT_OF_RANGE = "out_of_range"  # a number outside [0, 1] (the authors skip the row: `continue`)
DIGIT_NOT_FOUND = "digit_not_found"  # the digit's token is not among the generated tokens, or "1" twice for 1.0
FAILURES = (UNPARSABLE, OUT_OF_RANGE, DIGIT_NOT_FOUND)


def parse_answer(text: str) -> float | None:
    """The number in an answer as the authors read it (fleur.py:129-132): the text without its last 4 characters
    (the stop string `</s>`), digits and dots only, dots stripped at both ends, `float()`; None when that fails.

    Example:

    ```python
    >>> parse_answer("0.85</s>"), parse_answer("Score: 0.7.</s>"), parse_answer("good</s>")
    (0.85, 0.7, None)
    ```
    """
    digits_and_dots = re.sub(r"[^\d\.]", "", text[:-4])
    number = re.sub(r"\.+$", "", re.sub(r"^\.+", "", digits_and_dots))
    try:
        return float(number)
    except ValueError:
        return None


def digit_steps(generated: Sequence[int], value: float, digit_tokens: Sequence[int]) -> tuple[int, int | None] | str:
    """The generation steps whose tokens are the printed digits (fleur.py:135-157), or the failure outcome.

    Below 1.0: the first decimal digit of `str(value)`; when its token occurs several times, the second occurrence
    for a 0 (the integer part's 0 comes first: `0.0`, `0.05`), the first one otherwise (`0.66`). The second decimal
    digit, when `str(value)` has one, takes the second occurrence when there are several (`0.55`, `0.11`).
    At 1.0: the step of the token "1", which must occur once.
    """
    text = str(value)

    def occurrences(digit: int) -> list[int]:
        return [step for step, token in enumerate(generated) if token == digit_tokens[digit]]

    if value >= 1.0:
        steps = occurrences(1)
        return (steps[0], None) if len(steps) == 1 else DIGIT_NOT_FOUND  # the authors index a tuple with 2+ steps
    if "." not in text:  # exponent form, e.g. 1e-05: str.index('.') raises in the authors' code
        return UNPARSABLE
    first_digit = int(text[text.index(".") + 1])
    steps = occurrences(first_digit)
    if not steps:
        return DIGIT_NOT_FOUND
    first = steps[0] if len(steps) == 1 else steps[1] if first_digit == 0 else steps[0]
    if len(text) <= 3:
        return first, None
    steps = occurrences(int(text[text.index(".") + 2]))
    if not steps:
        return DIGIT_NOT_FOUND
    return first, steps[0] if len(steps) == 1 else steps[1]


def smooth_score(
    value: float, first_logits: torch.Tensor, second_logits: torch.Tensor | None, digit_tokens: Sequence[int]
) -> torch.Tensor:
    """FLEUR's score smoothing (fleur.py:146-171) from the logits (over the original vocabulary) of the steps that
    printed the digits; `second_logits` is None when one decimal was printed.

    Example:

    ```python
    >>> import torch
    >>> logits = torch.full((12,), -1e4); logits[8] = 0.0  # all mass on the digit 8 (token ids 0..9 here)
    >>> float(smooth_score(0.8, logits, None, list(range(10))))
    0.8
    ```
    """
    digits = torch.as_tensor(list(digit_tokens), device=first_logits.device)
    rates = torch.arange(10, dtype=first_logits.dtype, device=first_logits.device)
    first = torch.softmax(first_logits, dim=-1)[digits]
    if value >= 1.0:
        return 0.9 * first[0] + first[1]
    score = (first * rates * 0.1).sum()
    if second_logits is not None:
        score = score + (torch.softmax(second_logits, dim=-1)[digits] * rates * 0.01).sum()
    return score


def score_answer(
    text: str,
    generated: Sequence[int],
    step_logits: Sequence[torch.Tensor],
    digit_tokens: Sequence[int],
    smoothing: str = "fleur",
) -> tuple[float, str, float | None]:
    """(score, outcome, printed number) of one answer: `text` is the decoded answer with its stop string, as the
    authors decode it; `generated` its token ids; `step_logits[i]` the logits of step i over the original vocabulary.
    A failed answer scores NaN and names its outcome."""
    value = parse_answer(text)
    if value is None:
        return float("nan"), UNPARSABLE, None
    if value < 0 or value > 1:
        return float("nan"), OUT_OF_RANGE, value
    steps = digit_steps(generated, value, digit_tokens)
    if isinstance(steps, str):
        return float("nan"), steps, value
    if smoothing == "none":
        return value, OK, value
    first, second = steps
    second_logits = None if second is None else step_logits[second]
    return float(smooth_score(value, step_logits[first], second_logits, digit_tokens)), OK, value


__all__ = ["FAILURES", "OK", "digit_steps", "parse_answer", "score_answer", "smooth_score"]
