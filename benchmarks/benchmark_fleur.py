"""FLEUR + RefFLEUR: batched scoring against the authors' per-caption loop, on the same random LLaVA, at equal scores.

The baseline is the loop of Yebin46/FLEUR's fleur.py / reffleur.py on the same code and weights: one caption at a
time, its image decoded and encoded for it, one `generate` call per prompt (batch 1). The engine scores all prompts
(FLEUR and RefFLEUR of every caption) `--batch-size` at a time, left-padded with the KV cache, each distinct image
encoded once. Both stop at `</s>`. The judge is a random LLaVA-1.5 in the original layout, converted with
`convert-fleur`, whose language model is shaped to answer `0.85</s>` (`modeling_pacs.testing.fleur`); `--width` and
`--layers` size it. The vision tower stays tiny: on a 13B judge the language model dominates.

Measured (2-core CPU shared with other jobs, load average about 10, width 512, 4 layers, 24 captions on 6 images):
the authors' loop 170.8 s, batched (batch 24) 19.0 s: 8.99x, scores equal (the shaped judge's digit probabilities
saturate at this width, so the equality is a weak check; tests/fleur/test_parity.py checks the batching at 1e-4).
"""

import argparse
import logging
import tempfile
from pathlib import Path

import torch
from benchmarking_utils import best_times, load_average

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.fleur.convert import convert_llava
from modeling_pacs.loading import load_model
from modeling_pacs.testing.fleur import make_tiny_original_llava

REPO_ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ["a red circle", "a blue square on white", "a green triangle", "a dog runs on the grass", "two cats"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=512, help="the language model's hidden size (default 512)")
    parser.add_argument("--layers", type=int, default=4, help="its decoder layers (default 4)")
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--captions-per-image", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    add_example(parser, "python benchmarks/benchmark_fleur.py --width 1024 --layers 8 --batch-size 16")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    names = ("red_circle.png", "blue_square.png", "green_triangle.png")
    images, captions, references = [], [], []
    for index in range(args.images):
        for caption in range(args.captions_per_image):
            images.append(str(REPO_ROOT / "examples" / "images" / names[index % 3]))
            captions.append(f"{CAPTIONS[caption % len(CAPTIONS)]} {index}")
            references.append([f"{CAPTIONS[(caption + 1) % len(CAPTIONS)]}", "an image"])
    with tempfile.TemporaryDirectory() as folder:
        make_tiny_original_llava(Path(folder) / "llava", width=args.width, layers=args.layers)
        convert_llava(Path(folder) / "llava", Path(folder) / "fleur")
        judge = load_model(str(Path(folder) / "fleur"))

        def authors_loop():
            outputs = [judge.score([image], [caption], references=[refs], batch_size=1)
                       for image, caption, refs in zip(images, captions, references, strict=True)]  # fmt: skip
            return (torch.cat([output.scores for output in outputs]),
                    torch.cat([output.ref_scores for output in outputs]))  # fmt: skip

        def batched():
            output = judge.score(images, captions, references=references, batch_size=args.batch_size)
            return output.scores, output.ref_scores

        times = best_times({"authors' loop": authors_loop, "batched": batched}, rounds=args.rounds)
    (loop_time, loop_scores), (batched_time, batched_scores) = times["authors' loop"], times["batched"]
    difference = max(float((a - b).abs().max()) for a, b in zip(loop_scores, batched_scores, strict=True))
    count = len(captions)
    print(f"random LLaVA: width {args.width}, {args.layers} layers; {count} captions on {args.images} images, "
          f"FLEUR + RefFLEUR; torch threads {torch.get_num_threads()}; load average {load_average()}")  # fmt: skip
    print(f"authors' loop: {loop_time:.2f} s ({1000 * loop_time / count:.0f} ms/caption)")
    print(f"batched (batch {args.batch_size}): {batched_time:.2f} s ({1000 * batched_time / count:.0f} ms/caption)")
    print(f"speed-up: {loop_time / batched_time:.2f}x; max |score difference|: {difference:.2e}")


if __name__ == "__main__":
    main()
