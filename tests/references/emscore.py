"""EMScore (docs/spec/pacs.md#video, the EMScore paper's Eqs. 6-14) in NumPy, written from the formulas.

The independent reference of `tests/models/test_video_emscore.py`: float64, one item at a time, no padding. Inputs
are the
token embeddings of a caption (start-of-text through end-of-text, `[L, D]`), its IDF weights (`[L]`) and the frame
embeddings of its video (`[T, D]`), none of them normalised yet. `emscore_batch_video_match` alone models a batched
call of EMScore's code, whose zero padding makes an item's result depend on the longer items beside it.

Example:

```python
>>> table, unseen = idf_table([[49406, 320, 49407], [49406, 1125, 49407]], end_of_text_id=49407)
>>> weights = idf_lookup(table, unseen, [49406, 320, 49407])
>>> video = video_components(np.random.randn(3, 8), weights, np.random.randn(5, 8))
>>> video.score == (video.coarse + video.f) / 2
True
```
"""

import math
from collections import Counter
from typing import NamedTuple

import numpy as np


class Components(NamedTuple):
    """Fine-grained precision, recall and F, the coarse cosine, and the score `(coarse + F) / 2` (Eq. 13)."""

    precision: float
    recall: float
    f: float
    coarse: float
    score: float


def idf_table(
    corpus_ids: list[list[int]], end_of_text_id: int, context_length: int = 77, pad_id: int = 0
) -> tuple[dict[int, float], float]:
    """IDF weights of a corpus given as token-id lists (start- through end-of-text), and the weight of unseen ids.

    A caption counts as the set of its ids after padding to `context_length` with `pad_id` (so a shorter caption
    contains the pad id); `idf(x) = log((N + 1) / (df(x) + 1))`, an id outside the corpus gets `log(N + 1)`, and the
    end-of-text weight becomes the mean of every weight in the table (its own included).
    """
    num_captions = len(corpus_ids)
    document_frequency = Counter()
    for ids in corpus_ids:
        document_frequency.update(set(ids) | ({pad_id} if len(ids) < context_length else set()))
    table = {token: math.log((num_captions + 1) / (df + 1)) for token, df in document_frequency.items()}
    if table:
        table[end_of_text_id] = sum(table.values()) / len(table)
    return table, math.log(num_captions + 1)


def default_idf_corpus(candidates: list[str], references: list[list[str]] | None) -> list[str]:
    """EMScore's default IDF corpus: every reference once per candidate (duplicates kept), else the candidates."""
    if references is None:
        return list(candidates)
    return [reference for item_references in references for reference in item_references]


def idf_lookup(table: dict[int, float], unseen: float, ids: list[int]) -> np.ndarray:
    return np.array([table.get(token, unseen) for token in ids], dtype=np.float64)


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def greedy_match(
    tokens: np.ndarray, token_weights: np.ndarray, targets: np.ndarray, target_weights: np.ndarray
) -> tuple[float, float, float]:
    """Eqs. 10-12: each token's best cosine over the targets, averaged with the tokens' normalised weights (P); each
    target's best cosine over the tokens, averaged with the targets' normalised weights (R); F = 2PR / (P + R)."""
    cosines = unit(tokens) @ unit(targets).T
    precision = float(np.average(cosines.max(axis=1), weights=token_weights))
    recall = float(np.average(cosines.max(axis=0), weights=target_weights))
    return precision, recall, 2 * precision * recall / (precision + recall)


def video_components(tokens: np.ndarray, token_weights: np.ndarray, frames: np.ndarray) -> Components:
    """Caption against its video: R weighs every frame equally (Eq. 11); coarse is the cosine of the normalised mean
    of the normalised frames (Eq. 7) and the end-of-text embedding (Eq. 9)."""
    precision, recall, f = greedy_match(tokens, token_weights, frames, np.ones(len(frames)))
    coarse = float(unit(unit(frames).mean(axis=0)) @ unit(tokens[-1]))
    return Components(precision, recall, f, coarse, (coarse + f) / 2)


def reference_components(
    tokens: np.ndarray, token_weights: np.ndarray, references: list[tuple[np.ndarray, np.ndarray]]
) -> Components:
    """Caption against its references `(tokens, weights)`: P, R, F (R weighted by the reference's IDF) and the
    cosine of the two end-of-text embeddings, each the maximum over the references on its own."""
    per_reference = []
    for reference_tokens, reference_weights in references:
        match = greedy_match(tokens, token_weights, reference_tokens, reference_weights)
        per_reference.append((*match, float(unit(tokens[-1]) @ unit(reference_tokens[-1]))))
    precision, recall, f, coarse = np.max(per_reference, axis=0).tolist()
    return Components(precision, recall, f, coarse, (coarse + f) / 2)


def combined_components(video: Components, reference: Components) -> Components:
    """Eq. 14: the means of the video and reference parts' P, R, F and coarse; the score is Eq. 13 of those means."""
    precision, recall, f, coarse = ((a + b) / 2 for a, b in zip(video[:4], reference[:4]))
    return Components(precision, recall, f, coarse, (coarse + f) / 2)


def emscore_batch_video_match(
    items: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> list[tuple[float, float, float]]:
    """P, R, F of `(tokens, token_weights, frames)` items scored in ONE batch of EMScore's code.

    EMScore pads every caption to the batch's longest caption and every video to its longest video with zero
    vectors, and multiplies the padded cosines by 0 instead of leaving them out of the maxima. So a token's best
    cosine is at least 0 when a longer video shares the batch, a frame's best cosine is at least 0 when a longer
    caption does, and R still divides by the item's own frame count. An item whose every cosine is negative gets
    P = R = 0 there, and F = 0/0 = NaN.
    """
    longest_caption = max(len(tokens) for tokens, _, _ in items)
    longest_video = max(len(frames) for _, _, frames in items)
    results = []
    for tokens, token_weights, frames in items:
        cosines = unit(tokens) @ unit(frames).T
        best_per_token = cosines.max(axis=1)
        best_per_frame = cosines.max(axis=0)
        if len(frames) < longest_video:
            best_per_token = np.maximum(best_per_token, 0.0)
        if len(tokens) < longest_caption:
            best_per_frame = np.maximum(best_per_frame, 0.0)
        precision = float(np.average(best_per_token, weights=token_weights))
        recall = float(best_per_frame.mean())
        f = 2 * precision * recall / (precision + recall) if precision + recall else math.nan  # EMScore: 0/0
        results.append((precision, recall, f))
    return results
