"""A faster fp32 CPU inference path for RoBERTa-style sentence encoders read through a ScalarMix (Polos, DENEB):
the same arithmetic, less work.

The metrics read one thing from their RoBERTa: the ScalarMix of the first (CLS) position, which needs, per layer and
per sentence, the hidden state at that position and the sum and spread of all the sentence's real values
(`sentence_mix.SentenceStatistics`). The path computes exactly those:

- the real tokens of a batch are packed into one `[tokens, width]` matrix: the projections, the MLP and the
  LayerNorms never see padding; attention unpacks the keys and values into the `[batch, length]` layout and packs
  its output again;
- the query, key and value projections are one matrix product; every matrix is packed once for oneDNN
  (`fast_clip.PackedLinear`), with the bias added inside the kernel; the activation is torch's exact `gelu`;
- the hidden states are reduced to their statistics as they are produced, instead of being stacked
  (`[13, batch, length, 768]`) and normalised at every position.

Sentence embeddings equal transformers' forward + `sentence_mix.scalar_mix` within float rounding
(`tests/models/test_fast_polos.py`). The packed matrices are a second copy of RoBERTa's weights, built on the first
call and rebuilt when a weight changes. The path serves fp32 on CPU, post-norm BERT-style encoders with absolute
positions and `gelu`, in eval mode without gradients; everything else runs transformers' forward.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .fast_clip import PackedLinear, PackedTokens, packed_linear_available
from .sentence_mix import SentenceStatistics


class FastPostNormLayer:
    """One `RobertaLayer` (BERT's post-norm attention and MLP) on packed matrices and packed tokens."""

    def __init__(self, layer: nn.Module):
        attention = layer.attention.self
        weight = torch.cat([attention.query.weight, attention.key.weight, attention.value.weight])
        bias = torch.cat([attention.query.bias, attention.key.bias, attention.value.bias])
        self.qkv = PackedLinear(weight, bias)
        self.out = PackedLinear(layer.attention.output.dense.weight, layer.attention.output.dense.bias)
        self.fc1 = PackedLinear(layer.intermediate.dense.weight, layer.intermediate.dense.bias)
        self.fc2 = PackedLinear(layer.output.dense.weight, layer.output.dense.bias)
        self.norm1, self.norm2 = layer.attention.output.LayerNorm, layer.output.LayerNorm
        self.heads = attention.num_attention_heads

    def __call__(self, hidden: torch.Tensor, tokens: PackedTokens) -> torch.Tensor:
        """`[tokens, D]` -> `[tokens, D]`."""
        width = hidden.shape[-1]
        qkv = tokens.unpack(self.qkv(hidden)).view(tokens.batch, tokens.length, 3, self.heads, width // self.heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=tokens.mask[:, None, None, :])
        attended = tokens.pack(attended.transpose(1, 2))
        hidden = self.norm1(hidden + self.out(attended))
        return self.norm2(hidden + self.fc2(torch.ops.aten.gelu_(self.fc1(hidden))))  # in place: no 2nd temporary


def packed_statistics(hidden: torch.Tensor, tokens: PackedTokens) -> tuple[torch.Tensor, torch.Tensor]:
    """`(sums, squares)` `[batch]` of one layer's packed `[tokens, D]` states (as
    `scoring_polos.sentence_statistics`)."""
    zeros = hidden.new_zeros(tokens.batch)
    sums = zeros.index_add(0, tokens.sentence, hidden.sum(dim=1))
    mean = sums / (tokens.lengths.to(hidden.dtype) * hidden.shape[-1])
    squares = zeros.index_add(0, tokens.sentence, ((hidden - mean[tokens.sentence, None]) ** 2).sum(dim=1))
    return sums, squares


class FastRoberta:
    """The ScalarMix inputs of a transformers `RobertaModel` (see module doc)."""

    def __init__(self, roberta: nn.Module):
        self.embeddings = roberta.embeddings
        with torch.no_grad():
            self.layers = [FastPostNormLayer(layer) for layer in roberta.encoder.layer]

    @classmethod
    def build(cls, roberta: nn.Module) -> "FastRoberta | None":
        """The fast encoder of `roberta`, or None where it does not apply (device, dtype, activation, positions,
        a decoder, layers that are not plain `nn.Linear`)."""
        config = roberta.config
        if not packed_linear_available() or config.hidden_act != "gelu" or config.is_decoder:
            return None
        if getattr(config, "position_embedding_type", "absolute") != "absolute":
            return None
        parameter = next(roberta.parameters())
        if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return None
        for layer in roberta.encoder.layer:
            attention = layer.attention.self
            linears = (attention.query, attention.key, attention.value, layer.attention.output.dense)
            linears += (layer.intermediate.dense, layer.output.dense)
            if any(type(linear) is not nn.Linear or linear.bias is None for linear in linears):
                return None
        try:
            return cls(roberta)
        except RuntimeError:  # a oneDNN build that cannot pack these matrices: transformers' forward
            return None

    def statistics(self, input_ids: torch.Tensor, lengths: list[int]) -> SentenceStatistics:
        """[`SentenceStatistics`] of every layer (embedding output first) for right-padded `input_ids` `[B, T]`."""
        tokens = PackedTokens(lengths)
        hidden = tokens.pack(self.embeddings(input_ids=input_ids))
        sums, squares, first = [], [], []
        for layer in [None, *self.layers]:
            if layer is not None:
                hidden = layer(hidden, tokens)
            layer_sums, layer_squares = packed_statistics(hidden, tokens)
            sums.append(layer_sums)
            squares.append(layer_squares)
            first.append(hidden[tokens.first])
        return SentenceStatistics(
            tokens.lengths.to(hidden.dtype), torch.stack(sums), torch.stack(squares), torch.stack(first)
        )


__all__ = ["FastPostNormLayer", "FastRoberta", "packed_statistics"]
