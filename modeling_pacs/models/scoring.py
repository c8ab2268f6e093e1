"""The PAC-S++ formulas as pure tensor functions (docs/spec/pacs.md#metric, docs/spec/pacs.md#video; Eqs. 4, 5 and 9-14
of the PAC-S++ paper).

Everything that scores (the model, the `evaluate` module, the Space, the benchmarks, rewards) calls these.
Inputs are embeddings as produced by the encoders; normalisation happens here. Another metric's formulas live in a
module named by it (`scoring_<metric>.py`, beside this one); the generic helpers here (`cosine_similarity`,
`max_by_owner`, `mean_or_nan`) serve those too.
"""

import math
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F


def cosine_similarity(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine similarity of two `[N, D]` tensors, computed in fp32."""
    return (F.normalize(first.float(), dim=-1) * F.normalize(second.float(), dim=-1)).sum(dim=-1)


def reference_free_score(image_embeds: torch.Tensor, text_embeds: torch.Tensor, w: float) -> torch.Tensor:
    """Eq. 4: `w * max(cos(E_v(v), E_t(t)), 0)` for each row pair."""
    return w * cosine_similarity(image_embeds, text_embeds).clamp(min=0)


def harmonic_mean(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """`2ab / (a + b)`, defined as 0 where `a + b = 0` (both scores are non-negative)."""
    total = first + second
    safe_total = torch.where(total == 0, torch.ones_like(total), total)
    return torch.where(total == 0, torch.zeros_like(total), 2 * first * second / safe_total)


def max_reference_similarity(
    candidate_embeds: torch.Tensor, reference_embeds: torch.Tensor, reference_owner: torch.Tensor
) -> torch.Tensor:
    """`max(0, max_{r in R_i} cos(t_i, r))` for each candidate i.

    Args:
        candidate_embeds: `[N, D]` candidate text embeddings.
        reference_embeds: `[M, D]` embeddings of all references, flattened.
        reference_owner: `[M]` index of the candidate each reference belongs to; every candidate owns at least one.
    """
    similarities = cosine_similarity(candidate_embeds[reference_owner], reference_embeds)
    best = torch.full((candidate_embeds.shape[0],), -2.0, device=similarities.device)
    best = best.scatter_reduce(0, reference_owner, similarities, reduce="amax")
    return best.clamp(min=0)


def reference_based_score(
    image_embeds: torch.Tensor,
    candidate_embeds: torch.Tensor,
    reference_embeds: torch.Tensor,
    reference_owner: torch.Tensor,
    w: float,
) -> torch.Tensor:
    """Eq. 5: harmonic mean of Eq. 4 and the best (unscaled, clipped) candidate-reference cosine."""
    return harmonic_mean(
        reference_free_score(image_embeds, candidate_embeds, w),
        max_reference_similarity(candidate_embeds, reference_embeds, reference_owner),
    )


def token_weighted_mean(
    values: torch.Tensor, owner: torch.Tensor, new_tokens: torch.Tensor, num_items: int
) -> torch.Tensor:
    """`sum_k (n_k / sum_j n_j) * values_k` over the pieces `k` of each item (docs/guides/long-captions.md).

    Args:
        values: `[P]` one value per caption piece.
        owner: `[P]` the item each piece belongs to; every item owns at least one piece.
        new_tokens: `[P]` the tokens each piece reads first (its weight `n_k`).

    An item of one piece gets its value unchanged (its share is exactly 1).
    """
    weights = new_tokens.to(torch.float64)
    totals = torch.zeros(num_items, dtype=torch.float64).index_add(0, owner, weights)
    shares = (weights / totals[owner]).to(values.dtype)
    return torch.zeros(num_items, dtype=values.dtype).index_add(0, owner, shares * values)


def max_by_owner(values: torch.Tensor, owner: torch.Tensor, num_owners: int) -> torch.Tensor:
    """`[num_owners]` maxima of `values` grouped by `owner` (an item's best reference)."""
    best = torch.full((num_owners,), float("-inf"), dtype=values.dtype, device=values.device)
    return best.scatter_reduce(0, owner, values, reduce="amax")


# ----------------------------------------------------------------------------------------------------- video (§2)
class VideoMatchScores(NamedTuple):
    """Per-item components of the EMScore-style video metric: fine-grained P, R, F, coarse cosine, final score."""

    precision: torch.Tensor
    recall: torch.Tensor
    f: torch.Tensor
    coarse: torch.Tensor
    score: torch.Tensor


class IDFTable(NamedTuple):
    """EMScore's IDF weights: `weights[id]` for ids seen in the corpus, `unseen` (`log(N+1)`) for every other id."""

    weights: dict[int, float]
    unseen: float

    def lookup(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The weight of every id of an integer tensor, as fp32."""
        flat = [self.weights.get(int(token), self.unseen) for token in input_ids.reshape(-1).tolist()]
        return torch.tensor(flat, dtype=torch.float32).reshape(input_ids.shape)


def idf_table(
    corpus_token_ids: Sequence[Sequence[int]], end_of_text_id: int, context_length: int = 77, pad_id: int = 0
) -> IDFTable:
    """EMScore's IDF table (docs/spec/pacs.md#video) from the token ids (start-of-text through end-of-text) of each
    corpus caption.

    Each caption counts as the SET of its `context_length`-padded ids (so `pad_id`, start- and end-of-text are in
    every set of a shorter caption); `idf(x) = log((N+1)/(df(x)+1))`. The end-of-text weight is then replaced by the
    mean of the whole table, its own value, pad and start-of-text included.
    """
    num_docs = len(corpus_token_ids)
    document_frequency = Counter()
    for token_ids in corpus_token_ids:
        id_set = set(token_ids)
        if len(token_ids) < context_length:
            id_set.add(pad_id)
        document_frequency.update(id_set)
    weights = {token: math.log((num_docs + 1) / (count + 1)) for token, count in document_frequency.items()}
    if weights:
        weights[end_of_text_id] = sum(weights.values()) / len(weights)
    return IDFTable(weights=weights, unseen=math.log(num_docs + 1))


def normalized_weights(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`weights / sum(weights)` over the real positions of each row (`mask`), 0 elsewhere.

    A row whose weights sum to 0 (every token is in every corpus caption, e.g. a one-caption corpus) gets uniform
    weights instead of EMScore's 0/0 = NaN.
    """
    mask = mask.bool()
    masked = torch.where(mask, weights.float(), torch.zeros_like(weights, dtype=torch.float32))
    total = masked.sum(dim=-1, keepdim=True)
    uniform = mask.float() / mask.sum(dim=-1, keepdim=True).clamp(min=1)
    return torch.where(total > 0, masked / torch.where(total > 0, total, torch.ones_like(total)), uniform)


def fine_grained_scores(
    token_embeds: torch.Tensor,
    token_mask: torch.Tensor,
    token_weights: torch.Tensor,
    target_embeds: torch.Tensor,
    target_mask: torch.Tensor,
    target_weights: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy token matching (Eqs. 10-12), BERTScore-style, for `B` padded rows.

    `P = sum_l w_l max_j cos(tok_l, target_j)` with the tokens' normalised weights, `R = sum_j v_j max_l cos(...)`
    with the targets' normalised weights (all-ones weights make R the mean over frames, Eq. 11), `F = 2PR/(P+R)`.
    Maxima run over real positions only, so a row's result does not depend on what shares its batch.

    Args:
        token_embeds: `[B, L, D]` caption token embeddings; token_mask, token_weights: `[B, L]`.
        target_embeds: `[B, M, D]` frame (or reference token) embeddings; target_mask, target_weights: `[B, M]`.
    """
    token_mask = token_mask.bool()
    target_mask = target_mask.bool()
    similarities = torch.bmm(F.normalize(token_embeds.float(), dim=-1), F.normalize(target_embeds.float(), dim=-1).mT)
    valid = token_mask[:, :, None] & target_mask[:, None, :]
    similarities = similarities.masked_fill(~valid, -math.inf)
    best_per_token = similarities.max(dim=2).values.masked_fill(~token_mask, 0.0)
    best_per_target = similarities.max(dim=1).values.masked_fill(~target_mask, 0.0)
    precision = (normalized_weights(token_weights, token_mask) * best_per_token).sum(dim=-1)
    recall = (normalized_weights(target_weights, target_mask) * best_per_target).sum(dim=-1)
    return precision, recall, harmonic_mean(precision, recall)


def coarse_video_embedding(frame_embeds: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
    """Eq. 7: the L2-normalised mean of the L2-normalised real frames (`[B, M, D]`, mask `[B, M]`) -> `[B, D]`."""
    frames = F.normalize(frame_embeds.float(), dim=-1) * frame_mask[:, :, None].float()
    return F.normalize(frames.sum(dim=1) / frame_mask.float().sum(dim=1, keepdim=True), dim=-1)


def last_token_embeds(token_embeds: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """The embedding at each row's last real position (end-of-text): the caption's global embedding `t_c`."""
    last = token_mask.long().sum(dim=1) - 1
    return token_embeds[torch.arange(token_embeds.shape[0]), last]


def coarse_fine_score(coarse: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Eq. 13: the mean of the coarse cosine and the fine-grained F."""
    return (coarse + f) / 2


def video_scores(
    token_embeds: torch.Tensor,
    token_mask: torch.Tensor,
    token_weights: torch.Tensor,
    frame_embeds: torch.Tensor,
    frame_mask: torch.Tensor,
) -> VideoMatchScores:
    """Reference-free video score of `B` captions against their frames (Eqs. 7, 9-13).

    Args:
        token_embeds: `[B, L, D]` token embeddings (start- through end-of-text are real); token_mask and
            token_weights (IDF weights, or ones): `[B, L]`.
        frame_embeds: `[B, M, D]` frame embeddings; frame_mask: `[B, M]`.
    """
    precision, recall, f = fine_grained_scores(
        token_embeds, token_mask, token_weights, frame_embeds, frame_mask, frame_mask.float()
    )
    coarse = cosine_similarity(
        coarse_video_embedding(frame_embeds, frame_mask), last_token_embeds(token_embeds, token_mask)
    )
    return VideoMatchScores(precision, recall, f, coarse, coarse_fine_score(coarse, f))


def reference_video_scores(
    candidate_tokens: torch.Tensor,
    candidate_mask: torch.Tensor,
    candidate_weights: torch.Tensor,
    reference_tokens: torch.Tensor,
    reference_mask: torch.Tensor,
    reference_weights: torch.Tensor,
    reference_owner: torch.Tensor,
    num_items: int,
) -> VideoMatchScores:
    """The reference part of the video metric (docs/spec/pacs.md#video), for `M` (candidate, reference) pairs owned by
    `num_items`.

    Row `m` pairs a candidate's tokens with those of one of its references (`reference_owner[m]` is the item).
    P is weighted by the candidate's normalised IDF, R by the reference's, F is their harmonic mean, coarse is the
    cosine of the two end-of-text embeddings; P, R, F and coarse are EACH maximised over an item's references.
    """
    precision, recall, f = fine_grained_scores(
        candidate_tokens, candidate_mask, candidate_weights, reference_tokens, reference_mask, reference_weights
    )
    coarse = cosine_similarity(
        last_token_embeds(candidate_tokens, candidate_mask), last_token_embeds(reference_tokens, reference_mask)
    )
    precision, recall, f, coarse = (
        max_by_owner(values, reference_owner, num_items) for values in (precision, recall, f, coarse)
    )
    return VideoMatchScores(precision, recall, f, coarse, coarse_fine_score(coarse, f))


def combined_video_scores(video: VideoMatchScores, reference: VideoMatchScores) -> VideoMatchScores:
    """Eq. 14: P, R, F and coarse are the means of the video and reference parts; the score is Eq. 13 of those."""
    precision, recall, f, coarse = (
        (video_part + reference_part) / 2 for video_part, reference_part in zip(video[:4], reference[:4], strict=True)
    )
    return VideoMatchScores(precision, recall, f, coarse, coarse_fine_score(coarse, f))


def mean_or_nan(values: torch.Tensor) -> float:
    """The mean of a score tensor as a float, NaN for none (an empty batch's corpus score)."""
    return float(values.mean()) if values.numel() else float("nan")


__all__ = [
    "mean_or_nan",
    "IDFTable",
    "VideoMatchScores",
    "coarse_fine_score",
    "coarse_video_embedding",
    "combined_video_scores",
    "cosine_similarity",
    "fine_grained_scores",
    "harmonic_mean",
    "idf_table",
    "last_token_embeds",
    "max_by_owner",
    "max_reference_similarity",
    "normalized_weights",
    "reference_based_score",
    "reference_free_score",
    "reference_video_scores",
    "token_weighted_mean",
    "video_scores",
]
