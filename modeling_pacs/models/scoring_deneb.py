"""DENEB's formulas as pure tensor functions (docs/spec/deneb.md): the pair vectors, the sinusoidal positions and the
two Sim-Vec sequences. The ScalarMix and the head are the shared `sentence_mix.py`'s: the authors'
`ScalarMixWithDropout` and `FeedForward` are the COMET code that file implements.
"""

import math

import torch
import torch.nn.functional as F


def pair_vector(first: torch.Tensor, second: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`[P(|a - b|), P(a * b)]` with the shared linear projection `P` (docs/spec/deneb.md#sim-vec, the authors'
    `upsampler` / `upsampler2`): `[..., 2D]` from two `[..., D]` features."""
    return torch.cat([F.linear((first - second).abs(), weight, bias), F.linear(first * second, weight, bias)], dim=-1)


def sinusoidal_positions(length: int, width: int, device=None) -> torch.Tensor:
    """`[length, width]` positional encodings of "Attention is all you need", computed with the authors'
    `PositionalEncoding` operations (deneb_estimator.py:22), so the values are theirs bit for bit."""
    position = torch.arange(length, device=device).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, width, 2, device=device) * (-math.log(10000.0) / width))
    positions = torch.zeros(length, width, device=device)
    positions[:, 0::2] = torch.sin(position * div_term)
    positions[:, 1::2] = torch.cos(position * div_term)
    return positions


def sim_vec_sequences(
    image: torch.Tensor,
    candidate_clip: torch.Tensor,
    reference_clip: torch.Tensor,
    candidate_text: torch.Tensor,
    reference_text: torch.Tensor,
    clip_weight: torch.Tensor,
    clip_bias: torch.Tensor,
    text_weight: torch.Tensor,
    text_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two Sim-Vec sequences and the image pair vector of `B` items with `R` references each
    (docs/spec/deneb.md#sim-vec).

    Args:
        image, candidate_clip: `[B, D]` raw CLIP features. reference_clip: `[B, R, D]`.
        candidate_text: `[B, D]` mixed sentence embeddings. reference_text: `[B, R, D]`.

    Returns:
        `clip_sequence` `[B, 1 + R, 2D]` (image pair first, then each reference's CLIP pair), `text_sequence`
        `[B, R, 2D]` (each reference's sentence pair) and `image_pair` `[B, 2D]`.
    """
    image_pair = pair_vector(image, candidate_clip, clip_weight, clip_bias)
    reference_pairs = pair_vector(reference_clip, candidate_clip[:, None], clip_weight, clip_bias)
    clip_sequence = torch.cat([image_pair[:, None], reference_pairs], dim=1)
    text_sequence = pair_vector(candidate_text[:, None], reference_text, text_weight, text_bias)
    return clip_sequence, text_sequence, image_pair


def with_class_token(sequence: torch.Tensor, class_token: torch.Tensor) -> torch.Tensor:
    """`[B, 1 + L, W]`: the learned class token prepended, then the sinusoidal positions added (the authors' order)."""
    tokens = torch.cat([class_token.expand(sequence.shape[0], -1, -1), sequence], dim=1)
    return tokens + sinusoidal_positions(tokens.shape[1], tokens.shape[2], tokens.device)[None]


__all__ = ["pair_vector", "sim_vec_sequences", "sinusoidal_positions", "with_class_token"]
