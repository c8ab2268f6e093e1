"""The worked example of docs/guides/long-captions.md: a ~150-token caption whose last sentence is hallucinated,
scored by truncation, by `long_captions="chunks"` and by a Long-CLIP-style 248-token encoder.

Tiny random weights (built in code, nothing is downloaded): the numbers show the mechanism, not quality.

    python examples/long_captions.py
"""

import copy
import warnings
from pathlib import Path

import torch

from modeling_pacs import PACSConfig, PACSModel
from modeling_pacs.testing.pacs import make_tiny_model

IMAGE = Path(__file__).parent / "images" / "red_circle.png"
GROUNDED = [
    "The image shows a single red circle in the middle of a plain white background.",
    "The circle is filled with a flat, bright red colour and has a smooth, sharp edge.",
    "There is no text, no border and no shadow anywhere in the picture.",
    "The white background is empty and evenly lit from the top to the bottom.",
    "The circle takes up roughly a third of the width of the frame.",
    "Its edge is crisp, and the red does not fade towards the outside.",
    "Nothing else is drawn around it, so the composition is simple and symmetric.",
    "The picture looks like a flat digital graphic rather than a photograph.",
    "The colours are saturated and there is no visible noise or texture.",
]
# Two endings of the same length that start alike: one true of the image, one hallucinated.
CORRECT = "A plain white margin surrounds the red circle on all four of its sides."
HALLUCINATED = "A black dog sleeps under a wooden table in the lower left corner."
LONG_CLIP_CONTEXT = 248


def stretch_positions(table: torch.Tensor, keep: int = 20, ratio: int = 4) -> torch.Tensor:
    """Long-CLIP's knowledge-preserved stretching (Zhang et al., 2024; `load_from_clip` in their code): the first
    `keep` positions are kept, the others interpolated `ratio` times (the last extrapolated): 77 positions -> 248."""
    last = table.shape[0] - 1
    rows = [table[:keep]]
    for position in range(keep, last):
        for step in range(ratio):
            rows.append((table[position] * (ratio - step) + table[position + 1] * step)[None] / ratio)
    for step in range(ratio):
        rows.append((table[last] + (table[last] - table[last - 1]) * step / ratio)[None])
    return torch.cat(rows)


def long_clip_from(model: PACSModel) -> PACSModel:
    """The same towers reading 248 tokens: the text positions stretched as Long-CLIP initialises from CLIP (the
    real Long-CLIP is then fine-tuned on long captions; this one is not)."""
    backbone = copy.deepcopy(model.config.backbone_config)
    backbone.text_config.max_position_embeddings = LONG_CLIP_CONTEXT
    long_model = PACSModel(PACSConfig(backbone_config=backbone, variant=model.config.variant, adapter_path=None))
    state_dict = model.state_dict()
    key = "clip.text_model.embeddings.position_embedding.weight"
    state_dict[key] = stretch_positions(state_dict[key])
    state_dict = {name: value for name, value in state_dict.items() if not name.endswith("position_ids")}
    long_model.load_state_dict(state_dict, strict=False)
    long_model.tokenizer = model.tokenizer
    return long_model.eval()


def main():
    # Truncation's LongCaptionWarning is the point of this example: the counts are printed instead.
    warnings.filterwarnings("ignore", message=r"some .* are longer than the text encoder")
    clip_s = make_tiny_model(variant="clip_s", seed=2)
    long_clip = long_clip_from(clip_s)
    correct = " ".join([*GROUNDED, CORRECT])
    hallucinated = " ".join([*GROUNDED, HALLUCINATED])
    counts = clip_s.count_tokens([correct, hallucinated]).tolist()
    print(f"captions: {counts[0]} and {counts[1]} tokens (CLIP's prompt and special tokens included); 77 fit")
    print(f"truncated_tokens: {clip_s.truncated_tokens([correct, hallucinated]).tolist()}")

    for name, caption in (("correct", correct), ("hallucinated", hallucinated)):
        split = clip_s.split_long_captions([caption])
        piece_scores = clip_s.score([IMAGE] * len(split.texts), split.texts).scores
        total = sum(split.new_tokens)
        print(f"\npieces of the caption with the {name} ending (each read as 'A photo depicts ' + piece):")
        read = clip_s.tokenizer.batch_decode(clip_s.tokenize(split.texts)["input_ids"], skip_special_tokens=True)
        for index, (text, new_tokens, score) in enumerate(zip(read, split.new_tokens, piece_scores.tolist())):
            words = text.split()[3:]  # what the encoder reads, after the prompt's three words
            print(
                f"  piece {index}: '{' '.join(words[:3])} ... {' '.join(words[-3:])}' {new_tokens:2d} new tokens "
                f"(weight {new_tokens / total:.3f}) CLIP-S {score:.4f}"
            )
        weights = torch.tensor(split.new_tokens, dtype=torch.float64) / total
        print(
            f"  aggregated: token-weighted mean {float(weights @ piece_scores.double()):.4f} (the chunk mode), "
            f"plain mean {piece_scores.mean():.4f}, minimum {piece_scores.min():.4f}"
        )

    print(f"\n{'mode':<28}{'correct ending':>15}{'hallucinated':>14}{'change':>10}")
    rows = [
        ("truncate (official)", clip_s, "truncate"),
        ("chunks (token-weighted)", clip_s, "chunks"),
        ("Long-CLIP-style, 248 tokens", long_clip, "truncate"),
    ]
    for name, model, mode in rows:
        before, after = model.score([IMAGE, IMAGE], [correct, hallucinated], long_captions=mode).scores.tolist()
        print(f"{name:<28}{before:>15.4f}{after:>14.4f}{after - before:>+10.4f}")


if __name__ == "__main__":
    main()
