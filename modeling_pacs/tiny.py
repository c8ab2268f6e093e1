"""The real CLIP tokenizer built offline, and tiny random PAC-S++ models saved as real HF directories.

The BPE vocabulary is OpenAI's `bpe_simple_vocab_16e6.txt.gz` (MIT licence, shipped by the `openai-clip` and
`open_clip_torch` packages and copied into `modeling_pacs/assets/`). `vocab.json` and `merges.txt` are derived from it
exactly as `clip/simple_tokenizer.py` builds its encoder, so ids match OpenAI's tokenizer (49,408 of them).
"""

import gzip
import json
import tempfile
from functools import lru_cache
from pathlib import Path

import torch
from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPProcessor, CLIPTokenizer

from .configuration_pacs import PACSConfig
from .inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from .modeling_pacs import PACSModel

TINY_MODEL_CARD = """---
license: mit
library_name: transformers
base_model: openai/clip-vit-base-patch32
tags:
- pacs-pp
- image-captioning-evaluation
- random-weights
---
# Tiny random {variant} model (tests and offline smoke runs only)

Built by `modeling_pacs.tiny.make_tiny_model(variant="{variant}", seed={seed})`: CLIP towers of width 32 and 2 layers
with the real CLIP tokenizer and image pipeline, and RANDOM weights. Its scores are meaningless.
"""
BPE_VOCAB_PATH = Path(__file__).parent / "assets" / "bpe_simple_vocab_16e6.txt.gz"
CLIP_VOCAB_SIZE = 49408


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP byte -> printable unicode character table (as in `clip/simple_tokenizer.py`)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return dict(zip(printable, [chr(c) for c in characters]))


@lru_cache(maxsize=1)
def clip_vocab_and_merges() -> tuple[dict[str, int], list[str]]:
    """`vocab.json` content and `merges.txt` lines derived from OpenAI's BPE file."""
    lines = gzip.open(BPE_VOCAB_PATH).read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [token + "</w>" for token in vocab]
    vocab += ["".join(merge) for merge in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {token: index for index, token in enumerate(vocab)}, [" ".join(merge) for merge in merges]


def build_clip_tokenizer(model_max_length: int = 77) -> CLIPTokenizer:
    """The real CLIP tokenizer (49,408 ids), built offline from the shipped BPE file."""
    vocab, merges = clip_vocab_and_merges()
    with tempfile.TemporaryDirectory() as directory:
        vocab_file = Path(directory) / "vocab.json"
        merges_file = Path(directory) / "merges.txt"
        vocab_file.write_text(json.dumps(vocab))
        merges_file.write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
        tokenizer = CLIPTokenizer.from_pretrained(directory, model_max_length=model_max_length)
    return tokenizer


def build_clip_processor() -> CLIPProcessor:
    """A `CLIPProcessor` with the real tokenizer and the torchvision-free image processor."""
    image_processor = CLIPImageProcessorPil(image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    return CLIPProcessor(image_processor=image_processor, tokenizer=build_clip_tokenizer())


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


def vit_b32_clip_config() -> CLIPConfig:
    """CLIP ViT-B/32 geometry (OpenAI), for random-weight benchmarks."""
    text_config = {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 8}
    vision_config = {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "patch_size": 32,
    }
    for tower in (text_config, vision_config):
        tower["hidden_act"] = "quick_gelu"
    text_config.update(
        bos_token_id=CLIP_VOCAB_SIZE - 2, eos_token_id=CLIP_VOCAB_SIZE - 1, pad_token_id=CLIP_VOCAB_SIZE - 1
    )
    return CLIPConfig(text_config=text_config, vision_config=vision_config, projection_dim=512)


def add_random_lora(model: PACSModel, seed: int = 0, scale: float = 0.02):
    """Attach a PEFT LoRA adapter (config's rank, alpha, targets) with random, non-zero A and B."""
    from peft import LoraConfig, get_peft_model

    lora_config = LoraConfig(
        r=model.config.lora_rank,
        lora_alpha=model.config.lora_alpha,
        target_modules=list(model.config.lora_target_modules),
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
    clip_config: CLIPConfig | None = None,
) -> PACSModel:
    """A random PAC-S++ (or CLIP-S / PAC-S) model with the real CLIP tokenizer; saved as a complete HF directory
    (config with `auto_map`, remote code, safetensors weights, PEFT adapter, tokenizer and processor) when
    `output_dir` is given. For tests and offline smoke runs: its scores mean nothing.
    """
    torch.manual_seed(seed)
    config = PACSConfig(
        backbone_config=clip_config or tiny_clip_config(),
        variant=variant,
        adapter_path="adapter" if variant == "pac_s_pp" else None,
    )
    model = PACSModel(config).eval()
    model.tokenizer = build_clip_tokenizer(config.max_text_length)
    if variant == "pac_s_pp":
        add_random_lora(model, seed)
    if output_dir is not None:
        save_hub_ready(model, output_dir)
        card = Path(output_dir) / "README.md"
        card.write_text(TINY_MODEL_CARD.format(variant=variant, seed=seed), encoding="utf-8")
        card.chmod(0o644)
    return model


def save_hub_ready(model: PACSModel, output_dir: str | Path):
    """Save a model as a directory that `AutoModel.from_pretrained(dir, trust_remote_code=True)` and
    `AutoProcessor.from_pretrained(dir)` load in a fresh process: remote code, weights, adapter, processor."""
    output_dir = Path(output_dir)
    type(model.config).register_for_auto_class()
    type(model).register_for_auto_class("AutoModel")
    model.save_pretrained(output_dir)
    processor = build_clip_processor()
    processor.tokenizer = model.tokenizer
    processor.save_pretrained(output_dir)
    for path in output_dir.rglob("*"):
        if path.is_file():
            path.chmod(0o644)


__all__ = ["build_clip_processor", "build_clip_tokenizer", "make_tiny_model", "save_hub_ready", "tiny_clip_config"]
