"""A faster fp32 CPU inference path for CLIP encoders: the same arithmetic as transformers' `CLIPModel`, less work.

The pooled embedding of a CLIP tower reads one position of the last layer (the class token of an image, the
end-of-text token of a caption). The engine's default CPU path computes it as follows:

- the query, key and value projections of each layer are one matrix product;
- `quick_gelu(x) = x * sigmoid(1.702 x) = silu(1.702 x) / 1.702`: the 1.702 is folded into the first MLP matrix
  and its inverse into the second, so the activation is one `silu` pass instead of three elementwise passes;
- the matrices are packed once for oneDNN (`torch.ops.mkldnn._linear_pointwise`, the kernels `torch.compile` uses
  on CPU), with the bias added inside the kernel;
- the last layer computes its attention query, output projection and MLP for the pooled position only (keys and
  values still cover every position);
- texts use the causal mask alone: the end-of-text position never sees the padding after it, so the padding mask
  changes nothing there.

Embeddings equal transformers' within float rounding (scores within 1e-6, `tests/models/test_fast_clip.py`). The packed
matrices are a second copy of the encoders' linear weights (about 490 MB for ViT-B/32, 1.5 GB for ViT-L/14), built
on the first call and rebuilt when a weight changes. The path serves fp32 on CPU, `quick_gelu` or `gelu` towers with
`nn.Linear` layers and no gradients; everything else runs transformers' forward.

An unmerged PEFT LoRA adapter on those layers (vanilla LoRA, no bias on B, adapters enabled) runs here too:
`x W^T + b + s (x A^T) B^T`, with the base matrices packed as above and the low-rank term added, as PEFT computes it
(scores within float rounding of the merged model's). `FastCLIPEncoders.build(clip, base=...)` reuses the packed base
matrices of another model whose layers hold the very same weight tensors (PAC-S++'s adapter unmerged on CLIP-S's
backbone in `pacs-pp evaluate-captions`): the adapter then costs its low-rank matrices only, not a second packed copy.

Example:

```python
>>> from modeling_pacs.models.fast_clip import FastCLIPEncoders
>>> fast = FastCLIPEncoders.build(clip_model)  # None where the path does not apply
>>> fast.encode_images(pixel_values).shape
torch.Size([64, 512])
```
"""

import copy
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import logging

from .embedding_cache import model_weights_stamp

logger = logging.get_logger(__name__)

QUICK_GELU_SCALE = 1.702
# transformers' activation name -> (torch function applied after the first MLP matrix, scale folded into that matrix).
# torch's own `silu` / `gelu`, not oneDNN's fused post-ops: those approximate exp/erf differently and moved scores
# by up to 1.04e-6 from transformers' path in one benchmark run (7.9e-7 with torch's). In place, on the matrix
# product's fresh output: no second MLP-wide temporary to allocate and fault in.
ACTIVATIONS = {"quick_gelu": (partial(F.silu, inplace=True), QUICK_GELU_SCALE), "gelu": (torch.ops.aten.gelu_, 1.0)}
# A packed layer's activation function -> the scale folded into its MLP matrices (LoRA terms get the same).
ACTIVATIONS_BY_FUNCTION = {function: scale for function, scale in ACTIVATIONS.values()}


def packed_linear_available() -> bool:
    """True where this torch build has the oneDNN packed linear kernels (x86-64 and aarch64 CPU builds)."""
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


class PackedLinear:
    """`x @ weight.T + bias` with the weight packed for oneDNN (the bias is added inside the kernel)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)
        self.bias = None if bias is None else bias.detach().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(flat, self.weight, self.bias, "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])


class LoraPackedLinear:
    """A packed base matrix plus the low-rank terms of LoRA adapters: `base(x) + (x down^T) up^T`, where `down`
    stacks the adapters' A matrices and `up` their B matrices times their scaling (block-diagonal for a fused q/k/v
    product: each projection's rows read its own adapters' columns only)."""

    def __init__(self, base: PackedLinear, down: torch.Tensor, up: torch.Tensor):
        self.base, self.down, self.up = base, down.contiguous(), up.contiguous()

    @classmethod
    def fused(cls, base, terms: list, widths: list[int] | None = None, up_scale: float = 1.0,
              down_scale: float = 1.0):  # fmt: skip
        """`base` with the terms of the projections fused in it (`terms[i]`: `(down, up)` or None, for rows
        `widths[i]` of the output), or `base` itself when none has an adapter."""
        if all(term is None for term in terms):
            return base
        widths = widths or [next(term[1].shape[0] for term in terms if term is not None)]
        rank = sum(term[0].shape[0] for term in terms if term is not None)
        reference = next(term[0] for term in terms if term is not None)
        down = reference.new_zeros(rank, reference.shape[1])
        up = reference.new_zeros(sum(widths), rank)
        row = column = 0
        for term, width in zip(terms, widths, strict=True):
            if term is not None:
                r = term[0].shape[0]
                down[column : column + r] = term[0] * down_scale
                up[row : row + width, column : column + r] = term[1] * up_scale
                column += r
            row += width
        return cls(base, down, up)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        low = torch.matmul(torch.matmul(x, self.down.T), self.up.T)
        return out.add_(low)


def layer_linears(layer: nn.Module) -> list[nn.Module]:
    """q, k, v, out, fc1, fc2 of a CLIP encoder layer (plain `nn.Linear` or PEFT LoRA layers around one)."""
    attention, mlp = layer.self_attn, layer.mlp
    return [attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj, mlp.fc1, mlp.fc2]


def base_linear(linear: nn.Module) -> nn.Module:
    """The `nn.Linear` under a PEFT LoRA layer (`base_layer`), or the layer itself."""
    return getattr(linear, "base_layer", linear)


def lora_supported(linear: nn.Module) -> bool:
    """Whether the fast path computes this linear as transformers and PEFT do: a plain `nn.Linear` with a bias, or a
    PEFT LoRA layer around one with its adapters enabled and unmerged, vanilla LoRA (no variant such as DoRA), no bias
    on B. Reads no weights."""
    base = base_linear(linear)
    if type(base) is not nn.Linear or base.bias is None:
        return False
    if linear is base:
        return True
    if getattr(linear, "disable_adapters", True) or getattr(linear, "merged", True):
        return False
    return not any(
        adapter in getattr(linear, "lora_variant", {}) or linear.lora_B[adapter].bias is not None
        for adapter in linear.active_adapters
        if adapter in linear.lora_A
    )


def lora_terms(linear: nn.Module):
    """`(down [r, in], up [out, r] * scaling)` of a supported PEFT LoRA linear's active adapters (stacked), None for a
    plain `nn.Linear` or a layer without an active adapter (`lora_supported` says which layers the path takes)."""
    if linear is base_linear(linear):
        return None
    adapters = [adapter for adapter in linear.active_adapters if adapter in linear.lora_A]
    if not adapters:
        return None
    downs = [linear.lora_A[adapter].weight.detach() for adapter in adapters]
    ups = [linear.lora_B[adapter].weight.detach() * linear.scaling[adapter] for adapter in adapters]
    return torch.cat(downs), torch.cat(ups, dim=1)


def has_lora(clip: nn.Module) -> bool:
    """True when a CLIP model's encoder layers carry PEFT LoRA layers."""
    towers = (clip.vision_model, clip.text_model)
    return any(base_linear(linear) is not linear for tower in towers for layer in tower.encoder.layers
               for linear in layer_linears(layer))  # fmt: skip


class PackedLinearForward:
    """The `forward` of one `nn.Linear` (see `use_packed_linears`): oneDNN's packed kernel on CPU in fp32 without
    gradients, `F.linear` otherwise. The packed copy is rebuilt when the weight or bias is replaced or changed."""

    enabled = True  # False: every instance runs F.linear (`plain_linears()`)

    def __init__(self, linear: nn.Linear):
        self.linear = linear
        self.stamp: tuple | None = None
        self.packed: PackedLinear | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.linear.weight, self.linear.bias
        if (
            not PackedLinearForward.enabled
            or torch.is_grad_enabled()
            or weight.device.type != "cpu"
            or weight.dtype != torch.float32
            or x.dtype != torch.float32
        ):
            return F.linear(x, weight, bias)
        stamp = (weight.data_ptr(), weight._version, None if bias is None else (bias.data_ptr(), bias._version))
        if stamp != self.stamp:
            self.stamp, self.packed = stamp, PackedLinear(weight, bias)
        return self.packed(x)

    def __deepcopy__(self, memo) -> "PackedLinearForward":
        return PackedLinearForward(copy.deepcopy(self.linear, memo))  # packed oneDNN tensors cannot be copied

    def __reduce__(self):
        return (PackedLinearForward, (self.linear,))


def use_packed_linears(module: nn.Module) -> int:
    """Run every plain `nn.Linear` of `module` on packed oneDNN matrices in inference on CPU in fp32 (MKL, behind
    `F.linear`, runs AVX2 code on AMD CPUs; oneDNN AVX-512). For encoders whose forward is not ours (BEiT-3, Stella,
    BLIP-2's Q-Former): the weights are packed on first use, a second copy. Returns the number of layers."""
    if not packed_linear_available():
        return 0
    linears = [layer for layer in module.modules() if type(layer) is nn.Linear]
    for linear in linears:
        if not isinstance(linear.__dict__.get("forward"), PackedLinearForward):
            linear.forward = PackedLinearForward(linear)
    return len(linears)


@contextmanager
def plain_linears():
    """Inside the block, layers set up by `use_packed_linears` run `F.linear` (to compare, or to count FLOPs)."""
    PackedLinearForward.enabled = False
    try:
        yield
    finally:
        PackedLinearForward.enabled = True


class PackedReLULinear(PackedLinear):
    """`relu(x @ weight.T + bias)`, the ReLU fused into the oneDNN kernel (exact: it only clamps)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(flat, self.weight, self.bias, "relu", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])


class PackedTanhHead:
    """Linear + tanh blocks, a last Linear and a sigmoid (the heads of Polos and Pearl) on packed matrices, with
    torch's own `tanh` and `sigmoid`: `[N, in] -> [N, 1]`."""

    def __init__(self, linears: list[nn.Linear]):
        self.linears = [PackedLinear(linear.weight, linear.bias) for linear in linears]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        for linear in self.linears[:-1]:
            hidden = torch.tanh(linear(hidden))
        return torch.sigmoid(self.linears[-1](hidden))


class PackedTokens:
    """Where the real tokens of a right-padded `[batch, length]` batch sit, for layers that run on them alone:
    `index` of each in the flattened batch, the `sentence` it belongs to, and the rows of each sentence's `first` and
    `last` token in the packed `[tokens, width]` matrix."""

    def __init__(self, lengths: list[int]):
        self.batch, self.length = len(lengths), max(lengths)
        self.lengths = torch.tensor(lengths)
        self.mask = torch.arange(self.length)[None, :] < self.lengths[:, None]
        self.index = self.mask.flatten().nonzero().squeeze(1)
        self.sentence = torch.repeat_interleave(torch.arange(self.batch), self.lengths)
        self.first = torch.cumsum(self.lengths, 0) - self.lengths
        self.last = self.first + self.lengths - 1

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """`[batch, length or more, W]` -> `[tokens, W]`."""
        return padded[:, : self.length].reshape(self.batch * self.length, -1)[self.index]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """`[tokens, W]` -> `[batch, length, W]`, zeros on padding."""
        padded = packed.new_zeros(self.batch * self.length, packed.shape[-1])
        padded[self.index] = packed
        return padded.view(self.batch, self.length, -1)


class FastLayer:
    """One pre-norm transformer layer (attention and MLP, residuals) on packed matrices: `CLIPEncoderLayer`, and
    BLIP-2's vision layer (`from_parts`)."""

    def __init__(self, qkv, out, fc1, fc2, activation, norm1: nn.Module, norm2: nn.Module, heads: int, scale: float):
        self.qkv, self.out, self.fc1, self.fc2, self.activation = qkv, out, fc1, fc2, activation
        self.norm1, self.norm2 = norm1, norm2
        self.heads, self.scale = heads, scale

    @classmethod
    def from_clip(cls, layer: nn.Module, activation: str) -> "FastLayer":
        attention = layer.self_attn
        scale = ACTIVATIONS[activation][1]
        q, k, v, out, fc1, fc2 = (base_linear(linear) for linear in layer_linears(layer))
        weight = torch.cat([q.weight, k.weight, v.weight])
        bias = torch.cat([q.bias, k.bias, v.bias])
        return cls(
            PackedLinear(weight, bias),
            PackedLinear(out.weight, out.bias),
            PackedLinear(fc1.weight * scale, fc1.bias * scale),
            PackedLinear(fc2.weight / scale, fc2.bias),
            ACTIVATIONS[activation][0],
            layer.layer_norm1,
            layer.layer_norm2,
            attention.num_heads,
            attention.scale,
        )

    def with_lora(self, layer: nn.Module) -> "FastLayer":
        """This layer (packed from `layer`'s base weights) plus the low-rank terms of `layer`'s LoRA adapters: the
        packed base matrices are shared, not copied. The activation's folded scale applies to the terms as to the
        matrices: the first MLP term is scaled by it, the second's input divided by it."""
        q, k, v, out, fc1, fc2 = (lora_terms(linear) for linear in layer_linears(layer))
        scale = ACTIVATIONS_BY_FUNCTION[self.activation]
        return FastLayer(
            LoraPackedLinear.fused(
                self.qkv, [q, k, v], [base_linear(linear).out_features for linear in layer_linears(layer)[:3]]
            ),  # fmt: skip
            LoraPackedLinear.fused(self.out, [out]),
            LoraPackedLinear.fused(self.fc1, [fc1], up_scale=scale),
            LoraPackedLinear.fused(self.fc2, [fc2], down_scale=1 / scale),
            self.activation,
            layer.layer_norm1,
            layer.layer_norm2,
            self.heads,
            self.scale,
        )

    @classmethod
    def from_parts(cls, qkv, out, fc1, fc2, activation: str, norm1, norm2, heads: int, scale: float) -> "FastLayer":
        """A layer whose q, k and v are already one `nn.Linear` (BLIP-2's vision layers); `activation` "gelu"."""
        packed = [PackedLinear(linear.weight, linear.bias) for linear in (qkv, out, fc1, fc2)]
        return cls(*packed, ACTIVATIONS[activation][0], norm1, norm2, heads, scale)

    def __call__(self, hidden: torch.Tensor, causal: bool, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """`[B, T, D]` -> `[B, T, D]`; with `pooled` (`[B]` positions), only those positions: `[B, 1, D]`."""
        batch, length, width = hidden.shape
        qkv = self.qkv(self.norm1(hidden)).view(batch, length, 3, self.heads, width // self.heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        if pooled is None:
            attended = F.scaled_dot_product_attention(query, key, value, is_causal=causal, scale=self.scale)
            attended = attended.transpose(1, 2).reshape(batch, length, width)
        else:
            rows = torch.arange(batch, device=hidden.device)
            query = query[rows, :, pooled].unsqueeze(2)
            mask = None
            if causal:
                mask = (torch.arange(length, device=hidden.device) <= pooled[:, None])[:, None, None, :]
            attended = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.scale)
            attended = attended.transpose(1, 2).reshape(batch, 1, width)
            hidden = hidden[rows, pooled].unsqueeze(1)
        hidden = hidden + self.out(attended)
        return hidden + self.fc2(self.activation(self.fc1(self.norm2(hidden))))

    def causal_packed(self, hidden: torch.Tensor, tokens: PackedTokens, last: bool = False) -> torch.Tensor:
        """A causal layer on real tokens only: `[tokens, D]` -> `[tokens, D]`; with `last`, each sentence's last
        token only: `[B, D]`. The padding after a sentence is never attended (causal), so it is never computed."""
        width = hidden.shape[-1]
        qkv = tokens.unpack(self.qkv(self.norm1(hidden))).view(tokens.batch, tokens.length, 3, self.heads, -1)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        if last:
            query = query[torch.arange(tokens.batch), :, tokens.lengths - 1].unsqueeze(2)
            mask = tokens.mask[:, None, None, :]
            attended = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.scale)
            attended = attended.reshape(tokens.batch, width)
            hidden = hidden[tokens.last]
        else:
            attended = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=self.scale)
            attended = tokens.pack(attended.transpose(1, 2))
        hidden = hidden + self.out(attended)
        return hidden + self.fc2(self.activation(self.fc1(self.norm2(hidden))))


class FastEncoderLayer:
    """One post-norm `nn.TransformerEncoderLayer` (ReLU, batch first, no mask) on packed matrices: Pearl's VSS and
    DENEB's Sim-Vec transformers. With `first_only`, the layer computes the first position's output only (a class
    token read from the last layer): keys and values for every position, the query, output projection and MLP for
    that position alone."""

    def __init__(self, layer: nn.TransformerEncoderLayer, first_only: bool = False):
        attention = layer.self_attn
        width = attention.embed_dim
        weight, bias = attention.in_proj_weight, attention.in_proj_bias
        self.first_only = first_only
        if first_only:
            self.query = PackedLinear(weight[:width], bias[:width])
            self.key_value = PackedLinear(weight[width:], bias[width:])
        else:
            self.qkv = PackedLinear(weight, bias)
        self.out = PackedLinear(attention.out_proj.weight, attention.out_proj.bias)
        self.fc1 = PackedReLULinear(layer.linear1.weight, layer.linear1.bias)
        self.fc2 = PackedLinear(layer.linear2.weight, layer.linear2.bias)
        self.norm1, self.norm2 = layer.norm1, layer.norm2
        self.heads = attention.num_heads

    @staticmethod
    def applies(layer: nn.Module) -> bool:
        """True for the layers this class runs: post-norm, ReLU, batch first, with biases."""
        return (
            isinstance(layer, nn.TransformerEncoderLayer)
            and not layer.norm_first
            and layer.activation is F.relu
            and layer.self_attn.batch_first
            and layer.self_attn.in_proj_bias is not None
            and layer.linear1.bias is not None
        )

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """`[B, T, D]` -> `[B, T, D]`; with `first_only`, `[B, 1, D]`."""
        batch, length, width = hidden.shape
        if self.first_only:
            query = self.query(hidden[:, :1]).view(batch, 1, self.heads, width // self.heads).transpose(1, 2)
            key, value = self.key_value(hidden).view(batch, length, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
            hidden, length = hidden[:, :1], 1
        else:
            qkv = self.qkv(hidden).view(batch, length, 3, self.heads, width // self.heads)
            query, key, value = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(query, key, value).transpose(1, 2).reshape(batch, length, width)
        hidden = self.norm1(hidden + self.out(attended))
        return self.norm2(hidden + self.fc2(self.fc1(hidden)))


def same_base_weights(first: nn.Module, second: nn.Module) -> bool:
    """True when every encoder linear of two CLIP models (plain or under LoRA) holds the very same weight and bias
    tensors: packed matrices made from one serve the other."""
    pairs = []
    for tower in ("vision_model", "text_model"):
        one, other = getattr(first, tower).encoder.layers, getattr(second, tower).encoder.layers
        if len(one) != len(other):
            return False
        for a, b in zip(one, other, strict=True):
            pairs += zip(layer_linears(a), layer_linears(b), strict=True)
    return all(base_linear(a).weight is base_linear(b).weight and base_linear(a).bias is base_linear(b).bias
               for a, b in pairs)  # fmt: skip


def tower_activation(tower: nn.Module) -> str | None:
    """The tower's activation if the fast path supports it and every layer is plain `nn.Linear`, else None."""
    activation = getattr(tower.config, "hidden_act", None)
    if activation not in ACTIVATIONS:
        return None
    for layer in tower.encoder.layers:
        if not all(lora_supported(linear) for linear in layer_linears(layer)):
            return None
    return activation


class FastCLIPEncoders:
    """Pooled, projected CLIP embeddings on packed matrices, built from a transformers `CLIPModel` (see module doc)."""

    def __init__(self, clip: nn.Module, vision_activation: str, text_activation: str):
        self.clip = clip
        with torch.no_grad():
            vision_layers, text_layers = clip.vision_model.encoder.layers, clip.text_model.encoder.layers
            self.vision_layers = [FastLayer.from_clip(layer, vision_activation) for layer in vision_layers]
            self.text_layers = [FastLayer.from_clip(layer, text_activation) for layer in text_layers]

    @classmethod
    def build(cls, clip: nn.Module, base=None) -> "FastCLIPEncoders | None":
        """The fast encoders of `clip`, or None where they do not apply (device, dtype, layers, activation, build).

        With LoRA layers in `clip`'s encoders, `base()` may give the fast encoders of a model whose layers hold the
        very same base weight tensors: their packed matrices are reused (checked tensor by tensor), else packed."""
        if not packed_linear_available() or not hasattr(clip, "visual_projection"):
            return None
        parameter = next(clip.parameters())
        if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return None
        vision, text = tower_activation(clip.vision_model), tower_activation(clip.text_model)
        if vision is None or text is None:
            return None
        try:
            if not has_lora(clip):
                return cls(clip, vision, text)
            shared = base() if base is not None else None
            packed = shared if shared is not None and same_base_weights(shared.clip, clip) else cls(clip, vision, text)
            return packed.with_lora(clip)
        except RuntimeError as error:  # a oneDNN build that cannot pack these matrices: transformers' forward
            logger.warning("fast_clip: packing the encoder weights failed (%s); using transformers' forward", error)
            return None

    def with_lora(self, clip: nn.Module) -> "FastCLIPEncoders":
        """Fast encoders for `clip` (LoRA layers over these encoders' base weights): these packed matrices plus
        `clip`'s low-rank terms; embeddings, norms and projections are `clip`'s own modules."""
        fast = copy.copy(self)
        fast.clip = clip
        with torch.no_grad():
            fast.vision_layers = [packed.with_lora(layer) for packed, layer in
                                  zip(self.vision_layers, clip.vision_model.encoder.layers, strict=True)]  # fmt: skip
            fast.text_layers = [packed.with_lora(layer) for packed, layer in
                                zip(self.text_layers, clip.text_model.encoder.layers, strict=True)]  # fmt: skip
        return fast

    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """`visual_projection(post_layernorm(class token))`, as `CLIPModel.get_image_features`."""
        vision = self.clip.vision_model
        hidden = vision.pre_layrnorm(vision.embeddings(pixel_values))
        first = torch.zeros(hidden.shape[0], dtype=torch.long, device=hidden.device)
        hidden = self.run_layers(self.vision_layers, hidden, causal=False, pooled=first)
        return self.clip.visual_projection(vision.post_layernorm(hidden[:, 0]))

    def encode_texts(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`text_projection(final_layer_norm(end-of-text token))`, as `CLIPModel.get_text_features`."""
        text = self.clip.text_model
        # Positions after the end-of-text token never reach it (causal attention): the layers skip them.
        tokens = PackedTokens((end_of_text_positions(text, input_ids) + 1).tolist())
        hidden = tokens.pack(text.embeddings(input_ids=input_ids))
        for layer in self.text_layers[:-1]:
            hidden = layer.causal_packed(hidden, tokens)
        hidden = self.text_layers[-1].causal_packed(hidden, tokens, last=True)
        return self.clip.text_projection(text.final_layer_norm(hidden))

    @staticmethod
    def run_layers(layers: list[FastLayer], hidden: torch.Tensor, causal: bool, pooled: torch.Tensor) -> torch.Tensor:
        for layer in layers[:-1]:
            hidden = layer(hidden, causal)
        return layers[-1](hidden, causal, pooled)


class FastEncoderSlot:
    """The fast encoders built for a model's current weights, rebuilt when a weight is replaced or changed in place.

    `build(module)` makes them (default: `FastCLIPEncoders.build`; None where the path does not apply). Copies and
    pickles of the slot start empty: packed oneDNN tensors cannot be copied (`copy.deepcopy(model)`).
    """

    def __init__(self, build=None):
        self.build = build or FastCLIPEncoders.build
        self.stamp: tuple | None = None
        self.encoders = None

    def get(self, module: nn.Module):
        stamp = model_weights_stamp(module)
        if self.stamp != stamp:
            self.stamp, self.encoders = stamp, self.build(module)
        return self.encoders

    def clear(self):
        self.stamp = self.encoders = None

    def __deepcopy__(self, memo) -> "FastEncoderSlot":
        return FastEncoderSlot(self.build)

    def __reduce__(self):
        return (FastEncoderSlot, (self.build,))


def end_of_text_positions(text_model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """The position transformers' `CLIPTextTransformer` pools: the first `eos_token_id` (the largest id for configs
    with the pre-2023 `eos_token_id == 2`)."""
    ids = input_ids.to(torch.int)
    if text_model.eos_token_id == 2:
        return ids.argmax(dim=-1)
    return (ids == text_model.eos_token_id).int().argmax(dim=-1)


__all__ = [
    "FastCLIPEncoders",
    "FastEncoderLayer",
    "FastEncoderSlot",
    "PackedLinear",
    "PackedLinearForward",
    "PackedReLULinear",
    "PackedTokens",
    "PackedTanhHead",
    "end_of_text_positions",
    "packed_linear_available",
    "plain_linears",
    "use_packed_linears",
]
