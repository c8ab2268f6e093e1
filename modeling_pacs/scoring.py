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


# ---------------------------------------------------------------------------------------------------- Polos
def scalar_mix(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    layer_weights: torch.Tensor,
    gamma: torch.Tensor,
    groups: torch.Tensor,
) -> torch.Tensor:
    """Polos's ScalarMix with layer norm (SPEC-polos §1.2): `gamma * sum_k softmax(w)_k * norm_g(H_k)`.

    `norm_g` subtracts one scalar mean and divides by one scalar standard deviation per layer and per normalisation
    group, taken over all real tokens and features of the group's sentences (`sqrt(var + 1e-12)`).

    Args:
        hidden_states: `[L, B, T, D]` hidden states (embedding output first).
        attention_mask: `[B, T]`, 1 on real tokens.
        layer_weights: `[L]` unnormalised layer weights (dropped ones already set to -1e20 in training).
        gamma: scalar scale.
        groups: `[B]` normalisation group of each sentence (`arange(B)`: each sentence alone).
    """
    hidden_states = hidden_states.float()
    num_groups = int(groups.max()) + 1 if groups.numel() else 0
    mask = attention_mask.to(hidden_states.dtype)[None, :, :, None]
    masked = hidden_states * mask
    group_tokens = torch.zeros(num_groups, dtype=hidden_states.dtype, device=groups.device)
    group_tokens = group_tokens.index_add(0, groups, attention_mask.to(hidden_states.dtype).sum(dim=1))
    count = group_tokens * hidden_states.shape[-1]
    sums = torch.zeros(hidden_states.shape[0], num_groups, dtype=hidden_states.dtype, device=groups.device)
    mean = sums.index_add(1, groups, masked.sum(dim=(2, 3))) / count
    sentence_mean = mean[:, groups][:, :, None, None]
    squares = (((masked - sentence_mean) * mask) ** 2).sum(dim=(2, 3))
    variance = torch.zeros_like(sums).index_add(1, groups, squares) / count
    normed = (hidden_states - sentence_mean) / torch.sqrt(variance[:, groups][:, :, None, None] + 1e-12)
    weights = torch.softmax(layer_weights.float(), dim=0)
    return gamma * (weights[:, None, None, None] * normed).sum(dim=0)


def polos_features(
    reference_text: torch.Tensor,
    candidate_text: torch.Tensor,
    image: torch.Tensor,
    candidate_clip: torch.Tensor,
    reference_clip: torch.Tensor,
) -> torch.Tensor:
    """Polos's feature vector (SPEC-polos §1.4), in the code's order, for aligned rows of raw features:
    `[r, c, |c-r|, c*r, v, c', |v-c'|, v*c', |r'-c'|, r'*c']` (unprimed: sentence encoder, primed: CLIP)."""
    return torch.cat(
        [
            reference_text,
            candidate_text,
            (candidate_text - reference_text).abs(),
            candidate_text * reference_text,
            image,
            candidate_clip,
            (image - candidate_clip).abs(),
            image * candidate_clip,
            (reference_clip - candidate_clip).abs(),
            reference_clip * candidate_clip,
        ],
        dim=-1,
    ).float()


def polos_head(
    features: torch.Tensor,
    weights: list[torch.Tensor],
    biases: list[torch.Tensor],
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """Polos's head (SPEC-polos §1.5): Linear + Tanh (+ Dropout) per hidden layer, a last Linear to 1, sigmoid.

    Returns `[N]` scores in (0, 1).
    """
    hidden = features
    for weight, bias in zip(weights[:-1], biases[:-1]):
        hidden = F.dropout(torch.tanh(F.linear(hidden, weight, bias)), p=dropout, training=training)
    return torch.sigmoid(F.linear(hidden, weights[-1], biases[-1])).squeeze(-1)


def max_by_owner(values: torch.Tensor, owner: torch.Tensor, num_owners: int) -> torch.Tensor:
    """`[num_owners]` maxima of `values` grouped by `owner` (Polos: the best reference, SPEC-polos §1.6)."""
    best = torch.full((num_owners,), float("-inf"), dtype=values.dtype, device=values.device)
    return best.scatter_reduce(0, owner, values, reduce="amax")


__all__ = [
    "cosine_similarity",
    "harmonic_mean",
    "max_by_owner",
    "max_reference_similarity",
    "polos_features",
    "polos_head",
    "reference_based_score",
    "reference_free_score",
    "scalar_mix",
]
