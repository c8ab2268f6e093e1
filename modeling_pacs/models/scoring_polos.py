"""Polos's formulas as pure tensor functions (docs/spec/polos.md#scalarmix, docs/spec/polos.md#features,
docs/spec/polos.md#head): the ScalarMix and its per-sentence statistics, the feature vector and the head.

`modeling_polos.py` and `fast_polos.py` call these; the best reference (docs/spec/polos.md#references) is
`scoring.max_by_owner`.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F


def scalar_mix(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    layer_weights: torch.Tensor,
    gamma: torch.Tensor,
    groups: torch.Tensor,
) -> torch.Tensor:
    """Polos's ScalarMix with layer norm (docs/spec/polos.md#scalarmix): `gamma * sum_k softmax(w)_k * norm_g(H_k)`.

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


class SentenceStatistics(NamedTuple):
    """What the ScalarMix needs of each sentence's hidden states, per layer (`L` layers, `N` sentences, width `D`).

    tokens: `[N]` real tokens. sums: `[L, N]` sum over the real tokens and features. squares: `[L, N]` sum of squared
    deviations from the sentence's own mean. first: `[L, N, D]` the first position (the CLS token Polos reads).
    """

    tokens: torch.Tensor
    sums: torch.Tensor
    squares: torch.Tensor
    first: torch.Tensor

    def select(self, index: torch.Tensor) -> "SentenceStatistics":
        """The statistics of sentences `index` (repeats allowed), in that order."""
        return SentenceStatistics(self.tokens[index], self.sums[:, index], self.squares[:, index], self.first[:, index])


def sentence_statistics(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> SentenceStatistics:
    """[`SentenceStatistics`] of `[L, B, T, D]` right-padded hidden states with their `[B, T]` mask (as `scalar_mix`
    computes them for a sentence alone)."""
    hidden_states = hidden_states.float()
    mask = attention_mask.to(hidden_states.dtype)
    tokens = mask.sum(dim=1)
    masked = hidden_states * mask[None, :, :, None]
    sums = masked.sum(dim=(2, 3))
    mean = (sums / (tokens * hidden_states.shape[-1]))[:, :, None, None]
    squares = (((masked - mean) * mask[None, :, :, None]) ** 2).sum(dim=(2, 3))
    return SentenceStatistics(tokens, sums, squares, hidden_states[:, :, 0])


def scalar_mix_first_position(
    statistics: SentenceStatistics, layer_weights: torch.Tensor, gamma: torch.Tensor, groups: torch.Tensor
) -> torch.Tensor:
    """`scalar_mix(...)[:, 0]` from per-sentence statistics: `[N, D]`, each sentence normalised with its group's
    mean and standard deviation. A group's squared deviations combine its sentences' own (Chan et al.'s pairwise
    update, exact in real arithmetic); for a sentence alone the result is `scalar_mix`'s, operation for operation."""
    tokens, sums, squares, first = statistics
    width = first.shape[-1]
    num_groups = int(groups.max()) + 1 if groups.numel() else 0
    count = torch.zeros(num_groups, dtype=sums.dtype, device=sums.device).index_add(0, groups, tokens) * width
    zeros = torch.zeros(sums.shape[0], num_groups, dtype=sums.dtype, device=sums.device)
    mean = zeros.index_add(1, groups, sums) / count
    sentence_mean = mean[:, groups]
    squares = squares + tokens * width * (sums / (tokens * width) - sentence_mean) ** 2
    variance = zeros.index_add(1, groups, squares) / count
    normed = (first - sentence_mean[:, :, None]) / torch.sqrt(variance[:, groups][:, :, None] + 1e-12)
    weights = torch.softmax(layer_weights.float(), dim=0)
    return gamma * (weights[:, None, None] * normed).sum(dim=0)


def polos_features(
    reference_text: torch.Tensor,
    candidate_text: torch.Tensor,
    image: torch.Tensor,
    candidate_clip: torch.Tensor,
    reference_clip: torch.Tensor,
) -> torch.Tensor:
    """Polos's feature vector (docs/spec/polos.md#features), in the code's order, for aligned rows of raw features:
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
    """Polos's head (docs/spec/polos.md#head): Linear + Tanh (+ Dropout) per hidden layer, a last Linear to 1, sigmoid.

    Returns `[N]` scores in (0, 1).
    """
    hidden = features
    for weight, bias in zip(weights[:-1], biases[:-1]):
        hidden = F.dropout(torch.tanh(F.linear(hidden, weight, bias)), p=dropout, training=training)
    return torch.sigmoid(F.linear(hidden, weights[-1], biases[-1])).squeeze(-1)


__all__ = [
    "SentenceStatistics",
    "polos_features",
    "polos_head",
    "scalar_mix",
    "scalar_mix_first_position",
    "sentence_statistics",
]
