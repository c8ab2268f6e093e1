"""Tiny random Polos models built offline (tests, smoke runs, benchmarks): real CLIP tokenizer, a small byte-level BPE
RoBERTa tokenizer trained in code (RoBERTa's special ids: <s>=0, <pad>=1, </s>=2), random weights."""

from pathlib import Path

import torch

from ..models.configuration_polos import PolosConfig
from ..models.modeling_polos import PolosModel
from .pacs import tiny_clip_config
from .roberta import build_tiny_roberta_tokenizer, finish_tiny_model, tiny_roberta_config

TINY_MODEL_CARD = """---
license: mit
library_name: transformers
tags:
- pacs-pp
- polos
- random-weights
---
# Tiny random Polos model (tests and offline smoke runs only)

Built by `modeling_pacs.testing.polos.make_tiny_polos_model(seed={seed})`: CLIP towers and a RoBERTa of width
{width} with RANDOM weights, the real CLIP tokenizer and a small byte-level BPE tokenizer trained in code. Its scores
are meaningless.
"""


def make_tiny_polos_model(
    output_dir: str | Path | None = None,
    seed: int = 0,
    width: int = 32,
    num_layers: int = 2,
    hidden_sizes: list[int] | None = None,
) -> PolosModel:
    """A random Polos model with both tokenizers; saved as a Hub-ready directory when `output_dir` is given.

    The ScalarMix weights and gamma are randomised too, so tests see a non-uniform mix.
    """
    torch.manual_seed(seed)
    text_tokenizer = build_tiny_roberta_tokenizer()
    config = PolosConfig(
        clip_config=tiny_clip_config(hidden_size=width, num_layers=num_layers),
        text_config=tiny_roberta_config(len(text_tokenizer), width, num_layers),
        hidden_sizes=hidden_sizes or [3 * width // 2, 3 * width // 4],
    )
    model = PolosModel(config).eval()
    with torch.no_grad():
        model.scalar_mix.layer_weights.copy_(torch.randn(config.num_mixed_layers))
        model.scalar_mix.gamma.fill_(1.3)
        for layer in model.head.layers:
            layer.weight.normal_(0.0, 0.3)
            layer.bias.normal_(0.0, 0.1)
    return finish_tiny_model(model, text_tokenizer, output_dir, TINY_MODEL_CARD.format(seed=seed, width=width))


def make_tiny(directory: str | Path, variant: str, backbone: str, seed: int) -> None:
    """The registry's tiny builder of Polos (`TinyModels.builder`): a saved random Polos model."""
    make_tiny_polos_model(directory, seed=seed)


__all__ = ["make_tiny", "build_tiny_roberta_tokenizer", "make_tiny_polos_model", "tiny_roberta_config"]
