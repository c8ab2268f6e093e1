"""A faster fp32 CPU inference path for the Pearl head: the same arithmetic as `PearlModel` in eval mode, less work.

Almost all of the head's work is HadamardNet: a 2 -> 128 -> ... -> 1024 -> ... -> 128 -> 1 network applied to every
coordinate of every token (about 1.36 M multiply-adds per coordinate). The path computes it as follows:

- only on real coordinates: a feature narrower than `feature_dim` is zero-padded, and on a padded coordinate
  HadamardNet sees `(0, 0)` and gives one constant `f(0, 0)` in eval mode, computed once (BLIP-2's 32 tokens of 256
  dimensions are two-thirds padding at `feature_dim` 768);
- each 1x1 convolution is a matrix product over the coordinates, with the eval-mode BatchNorm after it folded into
  its weight and bias and the ReLU fused into the oneDNN kernel (`fast_clip.PackedLinear`: packed once);
- the coordinates go through the whole network a chunk at a time (`HADAMARD_CHUNK_ROWS`), so the largest
  temporary is 16 MB instead of `tokens x 768 x 1024` floats (1.7 GB for a batch of 16), which the allocator would
  map and unmap at every call.

The adapters, the VSS transformer (post-norm, ReLU), its cross-attention (the learnable queries' projection is a
constant, computed once) and both heads run on packed matrices too. Scores equal the module path's within 1e-6
(`tests/models/test_fast_pearl.py`). The packed matrices are a second copy of the head's weights (about 410 MB at the
default size), built on the first call and rebuilt when a weight changes. The path serves fp32 on CPU in eval mode
without gradients; everything else runs the modules.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .fast_clip import FastEncoderLayer, PackedLinear, PackedReLULinear, PackedTanhHead, packed_linear_available

# Coordinates per pass through HadamardNet: temporaries of HADAMARD_CHUNK_ROWS x 1024 floats (16 MB) stay allocated
# from one chunk to the next; larger chunks ran at 79% of one core's peak against 100% for 256 to 4096 rows.
HADAMARD_CHUNK_ROWS = 4096


def folded_batch_norm(weight: torch.Tensor, bias: torch.Tensor, norm: nn.BatchNorm2d):
    """`norm(x @ weight.T + bias)` in eval mode as one affine map: `(weight * s, (bias - mean) * s + beta)`."""
    scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
    return weight * scale[:, None], (bias - norm.running_mean) * scale + norm.bias


class FastHadamardNet:
    """A `PearlHadamardNet` in eval mode: `f(u_k, c_k)` for every coordinate, on packed matrices."""

    def __init__(self, network: nn.Sequential):
        convolutions = [module for module in network if isinstance(module, nn.Conv2d)]
        norms = [module for module in network if isinstance(module, nn.BatchNorm2d)]
        self.hidden = [
            PackedReLULinear(*folded_batch_norm(convolution.weight.flatten(1), convolution.bias, norm))
            for convolution, norm in zip(convolutions[:-1], norms)
        ]
        self.last_weight = convolutions[-1].weight.detach().flatten().contiguous()
        self.last_bias = convolutions[-1].bias.detach().contiguous()
        self.padding_value = self(torch.zeros(1, 1), torch.zeros(1, 1))[0, 0].item()

    def __call__(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """`u`, `c`: `[N, D]` -> `[N, D]`."""
        pairs = torch.stack((u, c), dim=-1).reshape(-1, 2)
        out = torch.empty(pairs.shape[0], dtype=u.dtype)
        for start in range(0, pairs.shape[0], HADAMARD_CHUNK_ROWS):
            hidden = pairs[start : start + HADAMARD_CHUNK_ROWS]
            for layer in self.hidden:
                hidden = layer(hidden)
            torch.addmv(self.last_bias, hidden, self.last_weight, out=out[start : start + HADAMARD_CHUNK_ROWS])
        return out.view(u.shape)


class FastARSM:
    """A `PearlARSM` in eval mode: `[adapter(DiffNet(u, c)); adapter(HadamardNet(u, c))]`, HadamardNet on the
    real coordinates only and both adapter inputs in one batch."""

    def __init__(self, arsm: nn.Module):
        projection = arsm.input_projection
        self.projection = None if projection is None else PackedLinear(projection.weight, projection.bias)
        self.feature_dim = arsm.feature_dim
        self.diff_net = arsm.diff_net
        self.hadamard_net = FastHadamardNet(arsm.hadamard_net.network)
        self.padding_value = self.hadamard_net.padding_value
        first, last = arsm.adapter[0], arsm.adapter[3]
        self.adapter_in = PackedReLULinear(first.weight, first.bias)
        self.adapter_out = PackedLinear(last.weight, last.bias)

    def __call__(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """`u`, `c`: `[N, input_dim]` -> `[N, 2 * feature_dim]`."""
        if self.projection is not None:
            u, c = self.projection(u), self.projection(c)
        rows, dim = u.shape
        both = torch.empty(2, rows, self.feature_dim, dtype=u.dtype)
        padding = (0, self.feature_dim - dim)
        both[0] = self.diff_net(F.pad(u, padding), F.pad(c, padding))
        both[1, :, :dim] = self.hadamard_net(u, c)
        both[1, :, dim:] = self.padding_value
        adapted = self.adapter_out(self.adapter_in(both))
        return torch.cat((adapted[0], adapted[1]), dim=-1)


class FastVSS:
    """`PearlVSS` in eval mode: positions, the transformer, then the cross-attention of the learnable queries, whose
    projection is the same for every input and computed once."""

    def __init__(self, vss: nn.Module):
        self.positions = vss.positions
        self.layers = [FastEncoderLayer(layer) for layer in vss.transformer.layers]
        attention = vss.cross_attention
        width, self.heads = attention.embed_dim, attention.num_heads
        weight, bias = attention.in_proj_weight, attention.in_proj_bias
        queries = F.linear(vss.queries[0], weight[:width], bias[:width])
        self.queries = queries.view(1, -1, self.heads, width // self.heads).transpose(1, 2).contiguous()
        self.key_value = PackedLinear(weight[width:], bias[width:])
        self.out = PackedLinear(attention.out_proj.weight, attention.out_proj.bias)

    def transformer(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = tokens + self.positions[: tokens.shape[1]]
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden

    def cross_attention(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, length, width = hidden.shape
        key_value = self.key_value(hidden).view(batch, length, 2, self.heads, width // self.heads)
        key, value = key_value.permute(2, 0, 3, 1, 4)
        queries = self.queries.expand(batch, -1, -1, -1)
        attended = F.scaled_dot_product_attention(queries, key, value).transpose(1, 2).reshape(batch, -1, width)
        return self.out(attended).flatten(1)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """`[N, L, token_dim]` -> `[N, num_queries * token_dim]`."""
        return self.cross_attention(self.transformer(tokens))


class FastPearlHead:
    """The parts of a `PearlModel` on packed matrices, named as the model names them (see module doc)."""

    def __init__(self, model: nn.Module):
        with torch.no_grad():
            self.image_arsms = {name: FastARSM(arsm) for name, arsm in model.image_arsms.items()}
            self.reference_arsms = {name: FastARSM(arsm) for name, arsm in model.reference_arsms.items()}
            self.vss = FastVSS(model.vss)
            self.image_head = PackedTanhHead([m for m in model.image_head if isinstance(m, nn.Linear)])
            self.reference_head = PackedTanhHead([m for m in model.reference_head if isinstance(m, nn.Linear)])

    @classmethod
    def build(cls, model: nn.Module) -> "FastPearlHead | None":
        """The fast head of `model`, or None where it does not apply (device, dtype, a BatchNorm without running
        statistics, a transformer layer other than post-norm ReLU)."""
        if not packed_linear_available():
            return None
        parameter = next(model.parameters())
        if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return None
        norms = [module for module in model.modules() if isinstance(module, nn.BatchNorm2d)]
        if any(norm.running_mean is None for norm in norms):
            return None
        for layer in model.vss.transformer.layers:
            if not FastEncoderLayer.applies(layer):
                return None
        try:
            return cls(model)
        except RuntimeError:  # a oneDNN build that cannot pack these matrices: the modules
            return None


__all__ = ["FastPearlHead", "HADAMARD_CHUNK_ROWS"]
