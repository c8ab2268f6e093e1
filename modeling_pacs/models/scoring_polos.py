"""Polos's formulas as pure tensor functions (docs/spec/polos.md#scalarmix, docs/spec/polos.md#features,
docs/spec/polos.md#head): the feature vector; the ScalarMix, its per-sentence statistics and the head are the shared
`sentence_mix.py`'s (re-exported here under Polos's names).

`modeling_polos.py` and `fast_polos.py` call these; the best reference (docs/spec/polos.md#references) is
`scoring.max_by_owner`.
"""

import torch

from .sentence_mix import (
    SentenceStatistics,
    scalar_mix,
    scalar_mix_first_position,
    sentence_statistics,
)
from .sentence_mix import mlp_head as polos_head


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


__all__ = [
    "SentenceStatistics",
    "polos_features",
    "polos_head",
    "scalar_mix",
    "scalar_mix_first_position",
    "sentence_statistics",
]
