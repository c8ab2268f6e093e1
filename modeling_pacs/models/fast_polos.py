"""A faster fp32 CPU inference path for Polos's sentence encoder and head: the same arithmetic, less work. The
sentence encoder's path is `fast_roberta.py` (shared with the other ScalarMix metrics), re-exported here.

Polos reads one thing from its RoBERTa: the ScalarMix of the first (CLS) position, which needs, per layer and per
sentence, the hidden state at that position and the sum and spread of all the sentence's real values
(`scoring_polos.SentenceStatistics`). The path computes exactly those:

- the real tokens of a batch are packed into one `[tokens, width]` matrix: the projections, the MLP and the
  LayerNorms never see padding; attention unpacks the keys and values into the `[batch, length]` layout and packs
  its output again;
- the query, key and value projections are one matrix product; every matrix is packed once for oneDNN
  (`fast_clip.PackedLinear`), with the bias added inside the kernel; the activation is torch's exact `gelu`;
- the 13 hidden states are reduced to their statistics as they are produced, instead of being stacked
  (`[13, batch, length, 768]`) and normalised at every position;
- the head's three matrices are packed too (`fast_clip.PackedTanhHead`).

Sentence embeddings equal transformers' forward + `scoring_polos.scalar_mix` within float rounding (scores within 1e-6,
`tests/models/test_fast_polos.py`). The packed matrices are a second copy of RoBERTa's and the head's weights (about
470 MB for the released model), built on the first call and rebuilt when a weight changes. The path serves fp32 on
CPU, post-norm BERT-style encoders with absolute positions and `gelu`, in eval mode without gradients; everything else
runs transformers' forward.
"""

import torch
from torch import nn

from .fast_clip import PackedTanhHead, packed_linear_available
from .fast_roberta import FastPostNormLayer, FastRoberta, packed_statistics


class FastPolosHead:
    """`PolosHead` in eval mode on packed matrices: `[N, feature_size] -> [N]`."""

    def __init__(self, head: nn.Module):
        with torch.no_grad():
            self.head = PackedTanhHead(list(head.layers))

    @classmethod
    def build(cls, head: nn.Module) -> "FastPolosHead | None":
        parameter = next(head.parameters())
        if not packed_linear_available() or parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return None
        try:
            return cls(head)
        except RuntimeError:
            return None

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features).squeeze(-1)


__all__ = ["FastPolosHead", "FastPostNormLayer", "FastRoberta", "packed_statistics"]
