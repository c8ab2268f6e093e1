"""Tiny random Pearl models with tiny real-architecture encoders, built in code (tests, offline smoke runs only).

The encoders are the real transformers classes at width 32: PAC-S++ (the engine's tiny model), BLIP-2 (vision + Q-Former
with ITM projections) and a Stella stand-in. Stella's real class ("new" architecture, `Alibaba-NLP/new-impl`) is Hub
remote code that this repository does not carry, so the stand-in is a tiny BERT encoder with the same interface
(AutoModel -> last_hidden_state) and a real sentence-transformers `2_Dense_768` folder; tests/encoders/test_stella.py
runs the encoder on the real class where its code is at hand. All scores of these models are meaningless.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    BertConfig,
    BertModel,
    BertTokenizer,
    Blip2Config,
    Blip2ForImageTextRetrieval,
)

from ..hub import save_remote_code_model
from ..models.configuration_pearl import PearlConfig
from ..models.modeling_pearl import PearlModel

# A word-piece vocabulary big enough for the captions the tests write.
TINY_WORDS = (
    "a an the of on in with and is are to at two one three red blue green white black small big dog dogs cat cats "
    "man woman person people child boy girl car bus bike tree trees grass field street sofa table ball frisbee water "
    "sitting standing running playing riding eating sleeping walking jumping photo picture image depicts empty"
).split()
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", *TINY_WORDS, *"abcdefghijklmnopqrstuvwxyz.,!?"]
TINY_ENCODER_DIMS = {"clip": 32, "beit3": 20, "blip2": 16, "stella": 24}
TINY_BLIP2_QUERIES = 4


def write_bert_tokenizer(directory: Path) -> BertTokenizer:
    directory.mkdir(parents=True, exist_ok=True)
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(vocab_file), do_lower_case=True, model_max_length=512)
    tokenizer.save_pretrained(directory)
    return tokenizer


def make_tiny_blip2(directory: str | Path, seed: int = 0) -> Path:
    """A tiny random `Blip2ForImageTextRetrieval` checkpoint (the layout of `Salesforce/blip2-itm-vit-g`)."""
    torch.manual_seed(seed)
    directory = Path(directory)
    config = Blip2Config(
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        qformer_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "encoder_hidden_size": 32,
            "vocab_size": len(TINY_VOCAB),
            "max_position_embeddings": 64,
            "use_qformer_text_input": True,
        },
        num_query_tokens=TINY_BLIP2_QUERIES,
        image_text_hidden_size=TINY_ENCODER_DIMS["blip2"],
    )
    Blip2ForImageTextRetrieval(config).eval().save_pretrained(directory)
    write_bert_tokenizer(directory)
    return directory


def make_tiny_stella(directory: str | Path, seed: int = 0) -> Path:
    """A tiny Stella stand-in: a BERT encoder plus a sentence-transformers `2_Dense_768` folder (32 -> 24)."""
    torch.manual_seed(seed)
    directory = Path(directory)
    config = BertConfig(
        vocab_size=len(TINY_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(config).eval().save_pretrained(directory)
    write_bert_tokenizer(directory)
    dense = directory / "2_Dense_768"
    dense.mkdir(exist_ok=True)
    out_features = TINY_ENCODER_DIMS["stella"]
    settings = {
        "in_features": 32,
        "out_features": out_features,
        "bias": True,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    (dense / "config.json").write_text(json.dumps(settings))
    linear = torch.nn.Linear(32, out_features)
    save_file(
        {"linear.weight": linear.weight.detach(), "linear.bias": linear.bias.detach()}, dense / "model.safetensors"
    )
    return directory


def make_tiny_beit3(directory: str | Path, seed: int = 0) -> Path:
    """A tiny random BEiT-3 retrieval model with an XLM-R tokenizer over a sentencepiece model trained here."""
    import io
    import tempfile

    from transformers import XLMRobertaTokenizer

    from ..encoders.beit3 import BEiT3Config, BEiT3ForRetrieval
    from ..extras import require

    sentencepiece = require("sentencepiece", "pearl", "Pearl")

    torch.manual_seed(seed)
    directory = Path(directory)
    model_file = io.BytesIO()
    sentences = [" ".join(TINY_WORDS[index:] + TINY_WORDS[:index]) for index in range(len(TINY_WORDS))]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model_file,
        vocab_size=80,
        minloglevel=2,
    )
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "sentencepiece.bpe.model").write_bytes(model_file.getvalue())
        tokenizer = XLMRobertaTokenizer.from_pretrained(folder, model_max_length=77)
    config = BEiT3Config(
        hidden_size=TINY_ENCODER_DIMS["beit3"],
        num_attention_heads=2,
        intermediate_size=40,
        num_hidden_layers=2,
        vocab_size=len(tokenizer),
        image_size=32,
        patch_size=16,
        max_text_positions=80,
    )
    BEiT3ForRetrieval(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_pearl_model_config() -> PearlConfig:
    """Pearl at feature size 24 over the tiny encoders, in the default layout: CLIP 32-d is projected (A8), the rest
    zero-padded."""
    dims = TINY_ENCODER_DIMS
    return PearlConfig(
        image_encoders=[
            {"name": "clip", "dim": dims["clip"], "tokens": 1},
            {"name": "beit3", "dim": dims["beit3"], "tokens": 1},
            {"name": "blip2", "dim": dims["blip2"], "tokens": TINY_BLIP2_QUERIES},
        ],
        reference_encoders=[
            {"name": "blip2", "dim": dims["blip2"]},
            {"name": "beit3", "dim": dims["beit3"]},
            {"name": "stella", "dim": dims["stella"]},
        ],
        encoder_specs={
            "clip": {"type": "pacs", "path": "encoders/clip"},
            "beit3": {"type": "beit3", "path": "encoders/beit3", "empty_text": "[EMPTY]"},
            "blip2": {"type": "blip2", "path": "encoders/blip2", "empty_text": "[EMPTY]"},
            "stella": {"type": "stella", "path": "encoders/stella", "empty_text": "[EMPTY]"},
        },
        feature_dim=24,
        num_heads=2,
        ffn_dim=32,
        num_queries=2,
        head_hidden_sizes=[24, 12],
        hadamard_channels=[8, 8],
    )


def make_tiny_pearl(directory: str | Path, seed: int = 0) -> Path:
    """Save a complete tiny Pearl directory: the model plus `encoders/{clip,beit3,blip2,stella}`."""
    from ..extras import require
    from .pacs import make_tiny_model

    require("sentencepiece", "pearl", "Pearl")  # before any encoder is built: BEiT-3's tokenizer needs it
    directory = Path(directory)
    make_tiny_model(directory / "encoders" / "clip", variant="pac_s_pp", seed=seed)
    make_tiny_blip2(directory / "encoders" / "blip2", seed=seed)
    make_tiny_beit3(directory / "encoders" / "beit3", seed=seed)
    make_tiny_stella(directory / "encoders" / "stella", seed=seed)
    torch.manual_seed(seed)
    model = PearlModel(tiny_pearl_model_config()).eval()
    save_remote_code_model(model, directory)
    return directory


def make_tiny(directory: str | Path, variant: str, backbone: str, seed: int) -> None:
    """The registry's tiny builder of Pearl (`TinyModels.builder`): a saved random Pearl with its encoders."""
    make_tiny_pearl(directory, seed=seed)


__all__ = [
    "make_tiny",
    "make_tiny_beit3",
    "make_tiny_blip2",
    "make_tiny_pearl",
    "make_tiny_stella",
    "tiny_pearl_model_config",
]
