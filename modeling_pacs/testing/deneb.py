"""Tiny random DENEB models built offline (tests, smoke runs, benchmarks), and weights in the authors' checkpoint
layout (`authors_state_dict`) for the converter's parity tests: real CLIP tokenizer, the tiny byte-level BPE RoBERTa
tokenizer of `testing/roberta.py`, random weights."""

from pathlib import Path

import torch

from ..models.configuration_deneb import DenebConfig
from ..models.modeling_deneb import DenebModel
from .pacs import tiny_clip_config
from .roberta import build_tiny_roberta_tokenizer, finish_tiny_model, tiny_roberta_config

TINY_MODEL_CARD = """---
license: mit
library_name: transformers
tags:
- pacs-pp
- deneb
- random-weights
---
# Tiny random DENEB model (tests and offline smoke runs only)

Built by `modeling_pacs.testing.deneb.make_tiny_deneb_model(seed={seed})`: CLIP towers, a RoBERTa and Sim-Vec
transformers of width {width} with RANDOM weights, the real CLIP tokenizer and a small byte-level BPE tokenizer
trained in code. Its scores are meaningless.
"""


def tiny_deneb_config(
    vocab_size: int, width: int = 32, num_layers: int = 2, intermediate_size: int = 64
) -> DenebConfig:
    """A DENEB config of width `width` (CLIP projection = RoBERTa hidden size, as the authors' upsampler needs), with
    OpenCLIP's plain GELU and open_clip's LAION normalisation."""
    return DenebConfig(
        clip_config=tiny_clip_config(hidden_size=width, num_layers=num_layers, act="gelu"),
        text_config=tiny_roberta_config(vocab_size, width, num_layers),
        hidden_sizes=[3 * width // 2, 3 * width // 4],
        sequence_intermediate_size=intermediate_size,
    )


def make_tiny_deneb_model(
    output_dir: str | Path | None = None, seed: int = 0, width: int = 32, num_layers: int = 2
) -> DenebModel:
    """A random DENEB model with both tokenizers; saved as a Hub-ready directory when `output_dir` is given.

    The ScalarMix, the class tokens and the head are randomised visibly, so tests see a non-uniform mix and scores
    that depend on the references."""
    torch.manual_seed(seed)
    text_tokenizer = build_tiny_roberta_tokenizer()
    model = DenebModel(tiny_deneb_config(len(text_tokenizer), width, num_layers)).eval()
    with torch.no_grad():
        model.scalar_mix.layer_weights.copy_(torch.randn(model.config.num_mixed_layers))
        model.scalar_mix.gamma.fill_(1.3)
        for encoder in (model.clip_sequence_encoder, model.text_sequence_encoder):
            encoder.class_token.normal_(0.0, 0.5)
        for layer in model.head.layers:
            layer.weight.normal_(0.0, 0.3)
            layer.bias.normal_(0.0, 0.1)
    return finish_tiny_model(model, text_tokenizer, output_dir, TINY_MODEL_CARD.format(seed=seed, width=width))


def make_tiny(directory: str | Path, variant: str, backbone: str, seed: int) -> None:
    """The registry's tiny builder of DENEB (`TinyModels.builder`): a saved random DENEB model."""
    make_tiny_deneb_model(directory, seed=seed)


__all__ = ["make_tiny", "make_tiny_deneb_model", "tiny_deneb_config"]
