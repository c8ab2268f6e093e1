"""The tokenizers and processors of saved models, built offline: the real CLIP tokenizer from OpenAI's BPE file.

The BPE vocabulary is OpenAI's `bpe_simple_vocab_16e6.txt.gz` (MIT licence, shipped by the `openai-clip` and
`open_clip_torch` packages and copied into `modeling_pacs/assets/`). `vocab.json` and `merges.txt` are derived from it
exactly as `clip/simple_tokenizer.py` builds its encoder, so ids match OpenAI's tokenizer (49,408 of them). The
converters, training and the captioner write these into the directories they save.
"""

import gzip
import json
import tempfile
from functools import lru_cache
from pathlib import Path

from transformers import (
    CLIPImageProcessorPil,
    CLIPProcessor,
    CLIPTokenizer,
    PreTrainedTokenizerBase,
    SiglipImageProcessorPil,
    SiglipProcessor,
)

from .models.backbones import SIGLIP_MEAN, SIGLIP_STD, backbone_family
from .models.configuration_pacs import PACSConfig
from .models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

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


def build_processor(config: PACSConfig, tokenizer: PreTrainedTokenizerBase):
    """The `AutoProcessor` of a model: CLIP's, or SigLIP's with the backbone's image size."""
    if backbone_family(config.backbone_config) == "clip":
        processor = build_clip_processor()
        processor.tokenizer = tokenizer
        return processor
    size = config.backbone_config.vision_config.image_size
    height, width = (size, size) if isinstance(size, int) else size
    image_processor = SiglipImageProcessorPil(
        size={"height": height, "width": width}, image_mean=list(SIGLIP_MEAN), image_std=list(SIGLIP_STD)
    )
    return SiglipProcessor(image_processor=image_processor, tokenizer=tokenizer)


__all__ = [
    "BPE_VOCAB_PATH",
    "CLIP_VOCAB_SIZE",
    "build_clip_processor",
    "build_clip_tokenizer",
    "build_processor",
    "bytes_to_unicode",
    "clip_vocab_and_merges",
]
