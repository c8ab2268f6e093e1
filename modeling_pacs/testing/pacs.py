"""Tiny random PAC-S++ / PAC-S / CLIP-S models (CLIP, SigLIP and SigLIP 2 backbones) saved as real HF directories.

CLIP models carry the real CLIP tokenizer (`modeling_pacs.tokenization`); SigLIP ones tokenizers trained in code on a
small caption vocabulary.
"""

import io
import json
import random
import tempfile
from functools import lru_cache
from pathlib import Path

import torch
from transformers import (
    CLIPConfig,
    PreTrainedConfig,
    PreTrainedTokenizerBase,
    SiglipConfig,
)

from ..extras import require
from ..hub import save_remote_code_model
from ..models.backbones import multihead_attention_projections
from ..models.configuration_pacs import PACSConfig
from ..models.modeling_pacs import PACSModel
from ..tokenization import CLIP_VOCAB_SIZE, build_clip_tokenizer, build_processor

TINY_MODEL_CARD = """---
license: mit
library_name: transformers
base_model: {base_model}
tags:
- pacs-pp
- image-captioning-evaluation
- random-weights
---
# Tiny random {variant} model (tests and offline smoke runs only)

Built by `modeling_pacs.testing.pacs.make_tiny_model(variant="{variant}", seed={seed}, backbone="{backbone}")`:
{towers} towers of width 32 and 2 layers with {tokenizer} and the backbone's image pipeline, and RANDOM weights. Its
scores are meaningless.
"""
# backbone argument of `make_tiny_model` -> (Hub id of the architecture it imitates, card wording).
TINY_BACKBONE_CARDS = {
    "clip": ("openai/clip-vit-base-patch32", "CLIP", "the real CLIP tokenizer"),
    "siglip": ("google/siglip-base-patch16-224", "SigLIP", "a SigLIP sentencepiece tokenizer trained in code"),
    "siglip2": ("google/siglip2-base-patch16-224", "SigLIP 2", "a SigLIP 2 (Gemma BPE) tokenizer trained in code"),
}
# Words of the captions that the tiny SigLIP tokenizers are trained on.
TINY_WORDS = (
    "a an the of on in with and is are at by dog dogs cat cats man woman person people child children boy girl "
    "sitting standing running playing riding eating holding looking walking lying red blue green white black brown "
    "small large young old street park table field water grass beach room kitchen bicycle horse ball car bus train "
    "photo picture image two three group near next to front top sofa couch house tree sky snow road plate pizza"
).split()


def tiny_caption_corpus(num_sentences: int = 2000, seed: int = 0) -> list[str]:
    """Random caption-like sentences over `TINY_WORDS` (training text for the tiny tokenizers)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(TINY_WORDS) for _ in range(rng.randint(3, 12))) for _ in range(num_sentences)]


@lru_cache(maxsize=1)
def tiny_sentencepiece_model() -> bytes:
    """A unigram sentencepiece model with SigLIP's special ids (`<pad>` 0, `</s>` 1, `<unk>` 2), trained in code."""
    sentencepiece = require("sentencepiece", "siglip", "SigLIP")
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(tiny_caption_corpus()),
        model_writer=model,
        vocab_size=200,
        hard_vocab_limit=False,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        pad_piece="<pad>",
        eos_piece="</s>",
        unk_piece="<unk>",
        minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()


def build_siglip_tokenizer(model_max_length: int = 64) -> PreTrainedTokenizerBase:
    """transformers' real `SiglipTokenizer` (sentencepiece, lowercasing, punctuation stripped) on a tiny vocabulary."""
    require("sentencepiece", "siglip", "SigLIP")
    from transformers import SiglipTokenizer

    with tempfile.TemporaryDirectory() as directory:
        vocab_file = Path(directory) / "spiece.model"
        vocab_file.write_bytes(tiny_sentencepiece_model())
        return SiglipTokenizer(vocab_file=str(vocab_file), model_max_length=model_max_length)


@lru_cache(maxsize=1)
def tiny_gemma_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges of a byte-fallback BPE with Gemma's special tokens, trained in code on lowercase text."""
    from tokenizers import Tokenizer, models, normalizers, trainers

    special_tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"] + [f"<0x{byte:02X}>" for byte in range(256)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    bpe.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=special_tokens, show_progress=False)
    bpe.train_from_iterator(tiny_caption_corpus(), trainer)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(merge) if isinstance(merge, list) else tuple(merge.split(" ")) for merge in model["merges"]]
    return model["vocab"], merges


def build_siglip2_tokenizer(model_max_length: int = 64) -> PreTrainedTokenizerBase:
    """transformers' real `Siglip2Tokenizer` (Gemma BPE, lowercasing) on a tiny vocabulary trained in code."""
    from transformers.models.siglip2.tokenization_siglip2 import Siglip2Tokenizer

    vocab, merges = tiny_gemma_bpe()
    return Siglip2Tokenizer(vocab=dict(vocab), merges=list(merges), model_max_length=model_max_length)


def tiny_siglip_config(
    tokenizer: PreTrainedTokenizerBase,
    hidden_size: int = 32,
    num_layers: int = 2,
    image_size: int = 224,
    patch_size: int = 32,
) -> SiglipConfig:
    """A SigLIP config for `tokenizer` with 224 px images and 32 px patches but 32-dim, 2-layer towers and a 64-token
    context."""
    if min(hidden_size, num_layers, image_size, patch_size) <= 0 or hidden_size % 4 or image_size % patch_size:
        raise ValueError(
            f"tiny SigLIP sizes must be positive, hidden_size a multiple of 4 (heads) and image_size of patch_size: "
            f"got hidden_size={hidden_size}, num_layers={num_layers}, image_size={image_size}, patch_size={patch_size}"
        )
    tower = {
        "hidden_size": hidden_size,
        "intermediate_size": 4 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
    }
    text_config = dict(
        tower,
        vocab_size=len(tokenizer),
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    vision_config = dict(tower, image_size=image_size, patch_size=patch_size)
    return SiglipConfig(text_config=text_config, vision_config=vision_config)


def build_tokenizer(backbone: str, model_max_length: int) -> PreTrainedTokenizerBase:
    """The tokenizer of a tiny model of `backbone` ("clip", "siglip" or "siglip2")."""
    builders = {"clip": build_clip_tokenizer, "siglip": build_siglip_tokenizer, "siglip2": build_siglip2_tokenizer}
    if backbone not in builders:
        raise ValueError(f"backbone must be one of {sorted(builders)}, got {backbone!r}")
    return builders[backbone](model_max_length)


def tiny_clip_config(
    hidden_size: int = 32, num_layers: int = 2, image_size: int = 224, patch_size: int = 32, act: str = "quick_gelu"
) -> CLIPConfig:
    """A CLIP config with ViT-B/32 geometry (224 px, 32 px patches) but 32-dim, 2-layer towers."""
    text_config = {
        "vocab_size": CLIP_VOCAB_SIZE,
        "hidden_size": hidden_size,
        "intermediate_size": 4 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "max_position_embeddings": 77,
        "hidden_act": act,
        "bos_token_id": CLIP_VOCAB_SIZE - 2,
        "eos_token_id": CLIP_VOCAB_SIZE - 1,
        "pad_token_id": CLIP_VOCAB_SIZE - 1,
    }
    vision_config = {
        "hidden_size": hidden_size,
        "intermediate_size": 4 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "image_size": image_size,
        "patch_size": patch_size,
        "hidden_act": act,
    }
    return CLIPConfig(text_config=text_config, vision_config=vision_config, projection_dim=hidden_size)


def add_random_lora(model: PACSModel, seed: int = 0, scale: float = 0.02):
    """Attach a PEFT LoRA adapter (config's rank, alpha, targets) with random, non-zero A and B."""
    from peft import LoraConfig, get_peft_model

    lora_config = LoraConfig(
        r=model.config.lora_rank,
        lora_alpha=model.config.lora_alpha,
        target_modules=list(model.config.lora_target_modules),
        exclude_modules=multihead_attention_projections(model.clip) or None,
        lora_dropout=0.0,
        init_lora_weights=False,
    )
    peft_model = get_peft_model(model.clip, lora_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale * 10)
    model._peft_model = peft_model
    return peft_model


def make_tiny_model(
    output_dir: str | Path | None = None,
    variant: str = "pac_s_pp",
    seed: int = 0,
    clip_config: PreTrainedConfig | None = None,
    backbone: str = "clip",
) -> PACSModel:
    """A random PAC-S++ (or CLIP-S / PAC-S) model with a real tokenizer; saved as a complete HF directory
    (config with `auto_map`, remote code, safetensors weights, PEFT adapter, tokenizer and processor) when
    `output_dir` is given. For tests and offline smoke runs: its scores mean nothing.

    `backbone` is `"clip"` (the real CLIP tokenizer), `"siglip"` (SigLIP towers, `SiglipTokenizer`) or `"siglip2"`
    (SigLIP towers, as SigLIP 2's fixed-resolution checkpoints, with `Siglip2Tokenizer`); `clip_config` replaces the
    tiny backbone config (its vocabulary must fit the tokenizer).
    """
    tokenizer = build_tokenizer(backbone, 77 if backbone == "clip" else 64)
    if clip_config is None:
        clip_config = tiny_clip_config() if backbone == "clip" else tiny_siglip_config(tokenizer)
    torch.manual_seed(seed)
    config = PACSConfig(
        backbone_config=clip_config,
        variant=variant,
        adapter_path="adapter" if variant == "pac_s_pp" else None,
        base_model_id=TINY_BACKBONE_CARDS[backbone][0],
    )
    model = PACSModel(config).eval()
    model.tokenizer = tokenizer
    if variant == "pac_s_pp":
        add_random_lora(model, seed)
    if output_dir is not None:
        save_remote_code_model(model, output_dir, processor=build_processor(model.config, model.tokenizer))
        card = Path(output_dir) / "README.md"
        base_model, towers, tokenizer_words = TINY_BACKBONE_CARDS[backbone]
        card.write_text(
            TINY_MODEL_CARD.format(
                variant=variant,
                seed=seed,
                backbone=backbone,
                base_model=base_model,
                towers=towers,
                tokenizer=tokenizer_words,
            ),
            encoding="utf-8",
        )
        card.chmod(0o644)
    return model


def make_tiny(directory: str | Path, variant: str, backbone: str, seed: int) -> None:
    """The registry's tiny builder of the PAC-S family (`TinyModels.builder`): a saved random model."""
    make_tiny_model(directory, variant=variant, seed=seed, backbone=backbone)


__all__ = [
    "make_tiny",
    "build_siglip2_tokenizer",
    "build_siglip_tokenizer",
    "build_tokenizer",
    "make_tiny_model",
    "tiny_clip_config",
    "tiny_siglip_config",
]
