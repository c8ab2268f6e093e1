"""A faster fp32 CPU inference path for DENEB's Sim-Vec transformers and head: the same arithmetic as the modules in
eval mode, less work.

- every matrix is packed once for oneDNN (`fast_clip.PackedLinear`), with the bias added inside the kernel and the
  ReLU fused into the first MLP matrix's kernel (exact: it only clamps); the query, key and value projections are
  one product and attention is torch's fused `scaled_dot_product_attention` (`fast_clip.FastEncoderLayer`);
- the last layer of each Sim-Vec transformer computes the class token's output only, the one position DENEB reads
  (keys and values still cover every position);
- the head's three matrices are packed too (`fast_clip.PackedTanhHead`).

Items of one reference count go through in one call (`DenebModel.score` groups them), so each matrix product has
`items x (references + 2)` rows. Scores equal the modules' within 1e-6 (`tests/models/test_fast_deneb.py`). The
packed matrices are a second copy of these weights (about 410 MB at the authors' sizes), built on the first call and
rebuilt when a weight changes. The path serves fp32 on CPU in eval mode without gradients; everything else runs the
modules (`model.fast_cpu_encoders = False` turns it off, with the RoBERTa path).
"""

import torch
from torch import nn

from .fast_clip import FastEncoderLayer, PackedTanhHead, packed_linear_available
from .scoring_deneb import with_class_token


class FastSequenceEncoder:
    """A `DenebSequenceEncoder` in eval mode: class token and positions, the layers, the class token's output."""

    def __init__(self, encoder: nn.Module):
        layers = list(encoder.encoder.layers)
        self.class_token = encoder.class_token
        last = len(layers) - 1
        self.layers = [FastEncoderLayer(layer, first_only=index == last) for index, layer in enumerate(layers)]

    def __call__(self, sequence: torch.Tensor) -> torch.Tensor:
        """`[B, L, W]` -> `[B, W]`."""
        hidden = with_class_token(sequence, self.class_token)
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden[:, 0]


class FastSimVec:
    """Both Sim-Vec transformers and the head of a `DenebModel`, from `nn.ModuleList([clip_sequence_encoder,
    text_sequence_encoder, head])`."""

    def __init__(self, modules: nn.ModuleList):
        clip_sequence_encoder, text_sequence_encoder, head = modules
        with torch.no_grad():
            self.clip_sequence_encoder = FastSequenceEncoder(clip_sequence_encoder)
            self.text_sequence_encoder = FastSequenceEncoder(text_sequence_encoder)
            self.head = PackedTanhHead(list(head.layers))

    @classmethod
    def build(cls, modules: nn.ModuleList) -> "FastSimVec | None":
        """The fast path of these modules, or None where it does not apply (device, dtype, a layer other than
        post-norm ReLU, a final norm)."""
        if not packed_linear_available():
            return None
        parameter = next(modules.parameters())
        if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return None
        for encoder in list(modules)[:2]:
            if encoder.encoder.norm is not None or not all(map(FastEncoderLayer.applies, encoder.encoder.layers)):
                return None
        try:
            return cls(modules)
        except RuntimeError:  # a oneDNN build that cannot pack these matrices: the modules
            return None

    def __call__(self, clip_sequence: torch.Tensor, text_sequence: torch.Tensor, image_pair: torch.Tensor):
        """Scores `[B]` from the two Sim-Vec sequences and the image pair vector (`scoring_deneb.sim_vec_sequences`)."""
        summary = torch.cat(
            [self.clip_sequence_encoder(clip_sequence), self.text_sequence_encoder(text_sequence), image_pair], dim=-1
        )
        return self.head(summary).squeeze(-1)


__all__ = ["FastSequenceEncoder", "FastSimVec"]
