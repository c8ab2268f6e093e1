"""A tiny RoBERTa built offline for the supervised metrics' tests (the sentence encoder of Polos-style metrics): a
small byte-level BPE tokenizer trained in code with RoBERTa's special ids (<s>=0, <pad>=1, </s>=2) and a small
config of RoBERTa's geometry."""

import tempfile
from pathlib import Path

from transformers import RobertaConfig, RobertaTokenizer

# Text the tiny BPE is trained on: enough for common caption words to become single tokens.
TINY_CORPUS = [
    "a cat sleeping on a sofa",
    "a dog running in the park with a ball",
    "two people riding horses on the beach",
    "a man is holding a red umbrella in the rain",
    "a plate of food with vegetables and meat",
    "a group of children playing football on a green field",
    "an airplane flying over the city at night",
    "a woman sitting at a table with a laptop",
]
ROBERTA_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def build_tiny_roberta_tokenizer(vocab_size: int = 400, corpus: list[str] | None = None) -> RobertaTokenizer:
    """A byte-level BPE tokenizer with RoBERTa's special tokens and post-processing, trained on `corpus`
    (default `TINY_CORPUS`)."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        corpus or TINY_CORPUS,
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=ROBERTA_SPECIAL_TOKENS,
        show_progress=False,
    )
    with tempfile.TemporaryDirectory() as directory:
        bpe.save_model(directory)
        return RobertaTokenizer(vocab=f"{directory}/vocab.json", merges=f"{directory}/merges.txt")


def tiny_roberta_config(vocab_size: int, hidden_size: int = 32, num_layers: int = 2) -> RobertaConfig:
    """RoBERTa geometry (514 positions, pad id 1) with small width and depth."""
    return RobertaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        intermediate_size=4 * hidden_size,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )


def finish_tiny_model(model, text_tokenizer, output_dir, card_text: str):
    """Give a tiny CLIP + RoBERTa model its two tokenizers and, with `output_dir`, save it with its model card."""
    from ..hub import save_remote_code_model
    from ..tokenization import build_clip_tokenizer

    model.clip_tokenizer = build_clip_tokenizer(model.config.max_text_length)
    model.text_tokenizer = text_tokenizer
    if output_dir is not None:
        save_remote_code_model(model, output_dir)
        card = Path(output_dir) / "README.md"
        card.write_text(card_text, encoding="utf-8")
        card.chmod(0o644)
    return model


__all__ = [
    "ROBERTA_SPECIAL_TOKENS",
    "TINY_CORPUS",
    "build_tiny_roberta_tokenizer",
    "finish_tiny_model",
    "tiny_roberta_config",
]
