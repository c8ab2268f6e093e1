"""The PAC-S++ formulas as pure tensor functions (SPEC §1; Eqs. 4 and 5 of the PAC-S++ paper).

Everything that scores (the model, the `evaluate` module, the Space, the benchmarks, rewards) calls these.
Inputs are embeddings as produced by the encoders; normalisation happens here.
"""

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


def fuse_pearl_scores(
    img_score: torch.Tensor, ref_scores: torch.Tensor, ref_mask: torch.Tensor, lambda_img: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pearl Eqs. 2-3: best reference score (masked slots count 0) and the lambda fusion where a reference exists.

    Args:
        img_score: `[B]` image-head scores. ref_scores: `[B, R]` reference-head scores. ref_mask: `[B, R]` bool.

    Returns:
        `(score, ref_score, has_refs)`, each `[B]`.
    """
    ref_score = torch.where(ref_mask, ref_scores, torch.zeros_like(ref_scores)).amax(dim=1)
    has_refs = ref_mask.any(dim=1)
    score = torch.where(has_refs, lambda_img * img_score + (1 - lambda_img) * ref_score, img_score)
    return score, ref_score, has_refs


def pearl_huber_loss(
    img_score: torch.Tensor, ref_score: torch.Tensor, has_refs: torch.Tensor, labels: torch.Tensor, delta: float
) -> torch.Tensor:
    """Pearl's loss (SPEC-pearl §5, A4): `sum_b H(y_img_b, y_b) + sum_{b with refs} H(y_ref_b, y_b)`, Huber `delta`."""
    image_term = F.huber_loss(img_score, labels, reduction="sum", delta=delta)
    reference_term = F.huber_loss(ref_score[has_refs], labels[has_refs], reduction="sum", delta=delta)
    return image_term + reference_term


__all__ = [
    "cosine_similarity",
    "fuse_pearl_scores",
    "harmonic_mean",
    "max_reference_similarity",
    "pearl_huber_loss",
    "reference_based_score",
    "reference_free_score",
]
