"""The sentence-encoder side that COMET-lineage caption metrics share (the ScalarMix over RoBERTa's hidden states
with layer-norm statistics per call, and the Tanh MLP head with a sigmoid), as pure tensor functions and the two
modules that hold their weights. docs/spec/polos.md#scalarmix and docs/spec/polos.md#head give the formulas; the
metrics' own files (`scoring_polos.py`, `scoring_deneb.py`, ...) add their feature vectors.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# `roberta-base` / `princeton-nlp/sup-simcse-roberta-base` where they differ from `RobertaConfig()`'s defaults.
ROBERTA_BASE = {
    "vocab_size": 50265,
    "max_position_embeddings": 514,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}
# What a dropped ScalarMix layer weight becomes in training (the authors' `dropout_fill`).
DROPPED_LAYER_WEIGHT = -1e20


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


def mlp_head(
    features: torch.Tensor,
    weights: list[torch.Tensor],
    biases: list[torch.Tensor],
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """The COMET-style head (docs/spec/polos.md#head): Linear + Tanh (+ Dropout) per hidden layer, a last Linear to 1,
    sigmoid.

    Returns `[N]` scores in (0, 1).
    """
    hidden = features
    for weight, bias in zip(weights[:-1], biases[:-1]):
        hidden = F.dropout(torch.tanh(F.linear(hidden, weight, bias)), p=dropout, training=training)
    return torch.sigmoid(F.linear(hidden, weights[-1], biases[-1])).squeeze(-1)


class ScalarMix(nn.Module):
    """The learned mix of the sentence encoder's hidden states (docs/spec/polos.md#scalarmix); the math is
    `scalar_mix`."""

    def __init__(self, num_layers: int, dropout: float):
        super().__init__()
        self.layer_weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(1))
        self.dropout = dropout

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        return scalar_mix(hidden_states, attention_mask, self.mixing_weights(), self.gamma[0], groups)

    def first_position(self, statistics: SentenceStatistics, groups: torch.Tensor) -> torch.Tensor:
        """`forward(...)[:, 0]` from the sentences' statistics (`scoring_polos.scalar_mix_first_position`)."""
        return scalar_mix_first_position(statistics, self.mixing_weights(), self.gamma[0], groups)

    def mixing_weights(self) -> torch.Tensor:
        weights = self.layer_weights
        if self.training and self.dropout:
            # Each layer is dropped with probability `dropout`, afresh at every call (the official layer dropout).
            dropped = torch.rand_like(weights) < self.dropout
            weights = torch.where(dropped, torch.full_like(weights, DROPPED_LAYER_WEIGHT), weights)
        return weights


class MLPHead(nn.Module):
    """Linear + Tanh + Dropout per hidden size, a last Linear to 1, sigmoid (docs/spec/polos.md#head)."""

    def __init__(self, feature_size: int, hidden_sizes: list[int], dropout: float):
        super().__init__()
        sizes = [feature_size, *hidden_sizes, 1]
        self.layers = nn.ModuleList(nn.Linear(inputs, outputs) for inputs, outputs in zip(sizes[:-1], sizes[1:]))
        self.dropout = dropout

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        weights = [layer.weight for layer in self.layers]
        biases = [layer.bias for layer in self.layers]
        return mlp_head(features, weights, biases, self.dropout, self.training)


class SentenceEncoderConfigMixin:
    """Properties of a config whose `text_config` is the RoBERTa sentence encoder read through a ScalarMix."""

    @property
    def num_mixed_layers(self) -> int:
        """Hidden states mixed by the ScalarMix: the embedding output and one per layer (13 for RoBERTa-base)."""
        return self.text_config.num_hidden_layers + 1

    @property
    def max_text_tokens(self) -> int:
        """Longest RoBERTa input, special tokens included (512 for RoBERTa-base: 514 positions minus padding)."""
        return self.text_config.max_position_embeddings - self.text_config.pad_token_id - 1


__all__ = [
    "SentenceEncoderConfigMixin",
    "DROPPED_LAYER_WEIGHT",
    "MLPHead",
    "ROBERTA_BASE",
    "ScalarMix",
    "SentenceStatistics",
    "mlp_head",
    "scalar_mix",
    "scalar_mix_first_position",
    "sentence_statistics",
]
