#!/usr/bin/env python3
"""Training throughput of PAC-S++ (LoRA) against full fine-tuning, on CLIP ViT-B/32-sized random weights.

One optimisation step = encode a batch of (real image, caption, synthetic image, synthetic caption) tuples, the loss
of Eq. 3, backward, AdamW. Inputs are already-preprocessed tensors (the data pipeline is timed separately, per
tuple, with the real collator on generated 640x480 JPEGs). Both modes run in this process, alternating over
`--rounds` rounds (the best round of each counts, so a burst of load on a shared machine hurts neither mode more);
a sampling thread records the peak resident memory while each mode runs.

    python benchmarks/benchmark_training.py --batch-size 32 --steps 3
"""

import argparse
import io
import time

import numpy as np
import PIL.Image
import torch
from benchmarking_utils import PeakMemory, current_rss_mib, vit_b32_clip_config

from modeling_pacs import PACSConfig, PACSModel
from modeling_pacs.cli.arguments import add_example
from modeling_pacs.pacs.training import (
    RECIPES,
    PACSDataCollator,
    PACSEncoderForTraining,
    pacs_contrastive_loss,
    prepare_model_for_training,
)
from modeling_pacs.tokenization import build_clip_tokenizer

CAPTION = "a man riding a wave on top of a surfboard in the ocean"


def build_model(mode: str) -> PACSModel:
    torch.manual_seed(0)
    model = PACSModel(PACSConfig(backbone_config=vit_b32_clip_config(), variant="clip_s", adapter_path=None))
    model.tokenizer = build_clip_tokenizer()
    if mode == "lora":
        return prepare_model_for_training(model, RECIPES["pac_s_pp"]).train()
    return model.requires_grad_(True).train()


def random_batch(model: PACSModel, batch_size: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tokens = model.tokenize([CAPTION] * (2 * batch_size))
    return {
        "pixel_values": torch.randn(2 * batch_size, 3, 224, 224, generator=generator),
        "input_ids": tokens["input_ids"],
        "attention_mask": tokens["attention_mask"],
    }


def time_training(mode: str, batch_size: int, steps: int) -> tuple[float, int]:
    """Tuples per second over `steps` timed steps (after one warm-up step), and the number of trained parameters."""
    model = build_model(mode)
    encoder = PACSEncoderForTraining(model)
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    batch = random_batch(model, batch_size)
    recipe = RECIPES["pac_s_pp"]

    def step():
        images, texts, logit_scale = encoder(**batch)
        loss = pacs_contrastive_loss(
            images[:batch_size],
            texts[:batch_size],
            images[batch_size:],
            texts[batch_size:],
            logit_scale=logit_scale,
            lambda_v=recipe.lambda_v,
            lambda_t=recipe.lambda_t,
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - start
    return batch_size * steps / elapsed, sum(parameter.numel() for parameter in trainable)


def time_collator(batch_size: int) -> float:
    """Tuples per second of PACSDataCollator (decode + official preprocessing of 2 JPEGs, tokenise 2 captions)."""
    model = build_model("full")
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(batch_size):
        encoded = []
        for _kind in ("real", "synthetic"):
            buffer = io.BytesIO()
            PIL.Image.fromarray((rng.random((480, 640, 3)) * 255).astype(np.uint8)).save(buffer, format="JPEG")
            encoded.append(buffer.getvalue())
        rows.append(
            {"image": encoded[0], "synthetic_image": encoded[1], "caption": CAPTION, "synthetic_caption": CAPTION}
        )
    collator = PACSDataCollator(model)
    collator(rows)
    start = time.perf_counter()
    collator(rows)
    return batch_size / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per round (after one warm-up step)")
    parser.add_argument("--rounds", type=int, default=2)
    add_example(parser, "python benchmarks/benchmark_training.py --batch-size 32 --steps 3")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch_size}, {args.steps} steps")
    print(f"resident memory at start: {current_rss_mib():.0f} MiB")
    results = {"lora": [], "full": []}
    for round_index in range(args.rounds):
        for mode in results:
            with PeakMemory() as memory:
                speed, parameters = time_training(mode, args.batch_size, args.steps)
            results[mode].append((speed, parameters, memory.peak))
            print(f"round {round_index + 1} {mode:4s}: {speed:6.2f} tuples/s, peak RSS {memory.peak:.0f} MiB")
    best = {mode: max(runs) for mode, runs in results.items()}
    for mode, label in (("lora", "LoRA (PAC-S++)  "), ("full", "full fine-tuning")):
        speed, parameters, _ = best[mode]
        peak = max(run[2] for run in results[mode])
        print(f"{label}: {speed:6.2f} tuples/s, {parameters:>11,} trained parameters, peak RSS {peak:.0f} MiB")
    print(f"LoRA / full fine-tuning speed: {best['lora'][0] / best['full'][0]:.2f}x")
    collator_speed = time_collator(args.batch_size)
    print(f"collator (640x480 JPEGs, 1 process): {collator_speed:7.2f} tuples/s")


if __name__ == "__main__":
    main()
