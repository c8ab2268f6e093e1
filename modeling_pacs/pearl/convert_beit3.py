"""Pearl's BEiT-3 encoder from unilm's release: `beit3_base_itc_patch16_224.pth` + `beit3.spm` -> a transformers
directory that `encoders.beit3.BEiT3RetrievalEncoder` loads (`pacs-pp convert-beit3`)."""

import shutil
import tempfile
from pathlib import Path

import torch

from ..encoders.beit3 import BEIT3_MAX_TEXT_LENGTH, BEiT3Config, BEiT3ForRetrieval
from ..extras import require
from ..input_paths import check_input_file
from ..models.artifacts import check_pickle_checkpoint
from ..models.modeling_pacs import make_world_readable

BEIT3_CHECKPOINT_FILE = "the .pth file itself (beit3_base_itc_patch16_224.pth), not its folder"


def config_from_state_dict(state_dict: dict[str, torch.Tensor]) -> BEiT3Config:
    """Read the sizes of a BEiT-3 retrieval checkpoint from its tensor shapes."""
    vocab_size, hidden_size = state_dict["beit3.text_embed.weight"].shape
    patch_size = state_dict["beit3.vision_embed.proj.weight"].shape[-1]
    patches = state_dict["beit3.encoder.embed_positions.A.weight"].shape[0] - 3
    layers = 1 + max(int(key.split(".")[3]) for key in state_dict if key.startswith("beit3.encoder.layers."))
    return BEiT3Config(
        hidden_size=hidden_size,
        num_attention_heads=max(1, hidden_size // 64),
        intermediate_size=state_dict["beit3.encoder.layers.0.ffn.A.fc1.weight"].shape[0],
        num_hidden_layers=layers,
        vocab_size=vocab_size,
        image_size=int(round(patches**0.5)) * patch_size,
        patch_size=patch_size,
        max_text_positions=state_dict["beit3.encoder.embed_positions.B.weight"].shape[0],
    )


def convert_beit3_checkpoint(
    checkpoint_path: str | Path, output_dir: str | Path, sentencepiece_path: str | Path, num_attention_heads: int = 12
) -> BEiT3ForRetrieval:
    """Convert unilm's `beit3_base_itc_patch16_224.pth` (+ `beit3.spm`) into a transformers directory.

    The checkpoint is read with `weights_only=True`. Every checkpoint key must be used and every shape must match,
    otherwise a ValueError lists the offending keys.
    """
    require("sentencepiece", "pearl", "Converting BEiT-3 (its XLM-R tokenizer)")
    from transformers import XLMRobertaTokenizer

    check_input_file(checkpoint_path, "checkpoint", BEIT3_CHECKPOINT_FILE, missing=FileNotFoundError)
    check_pickle_checkpoint(checkpoint_path)  # a text file, an empty or truncated file: named, not an IndexError
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    for wrapper in ("model", "module"):
        if isinstance(checkpoint, dict) and wrapper in checkpoint and isinstance(checkpoint[wrapper], dict):
            checkpoint = checkpoint[wrapper]
            break
    config = config_from_state_dict(checkpoint)
    config.num_attention_heads = num_attention_heads
    model = BEiT3ForRetrieval(config)
    expected = model.state_dict()
    unused = sorted(set(checkpoint) - set(expected))
    missing = sorted(set(expected) - set(checkpoint))
    mismatched = [
        f"{key}: {tuple(checkpoint[key].shape)} vs {tuple(value.shape)}"
        for key, value in expected.items()
        if key in checkpoint and checkpoint[key].shape != value.shape
    ]
    if unused or missing or mismatched:
        raise ValueError(
            f"{checkpoint_path} is not a BEiT-3 retrieval checkpoint of the expected layout: unused keys {unused[:5]}, "
            f"missing keys {missing[:5]}, shape mismatches {mismatched[:5]}"
        )
    model.load_state_dict({key: checkpoint[key].float() for key in expected}, strict=True)
    model.eval().save_pretrained(output_dir)
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(sentencepiece_path, Path(folder) / "sentencepiece.bpe.model")
        tokenizer = XLMRobertaTokenizer.from_pretrained(folder, model_max_length=BEIT3_MAX_TEXT_LENGTH)
    tokenizer.save_pretrained(output_dir)
    make_world_readable(Path(output_dir))
    return model


__all__ = ["config_from_state_dict", "convert_beit3_checkpoint"]
