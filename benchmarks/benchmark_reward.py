#!/usr/bin/env python3
"""Reward throughput of PAC-S++ / RefPAC-S++ for SCST, with and without the embedding cache, and the share of an
SCST step spent in the reward (docs/spec/pacs.md#scst). ViT-B/32-sized RANDOM weights: timings only, the scores mean
nothing.

Workload (the paper's SCST batch): 32 images x 5 beams = 160 candidate captions, 5 references per image.
- no cache: every call encodes the 32 images, 160 candidates and 160 references;
- cache, SCST steady state: images and references recur every epoch (cached), the candidates are new;
- cache, all hits: the same call again.

    python scripts/benchmark_reward.py                  # prints a JSON report
    python scripts/benchmark_reward.py --repeats 5 --scst_steps 2 --output reward_benchmark.json
"""

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import datasets
import torch
from benchmarking_utils import vit_b32_clip_config
from transformers import TrainingArguments

from modeling_pacs.captioning import PACSCaptionerConfig, PACSCaptionerForConditionalGeneration
from modeling_pacs.captioning.rewards import PACSReward
from modeling_pacs.captioning.training import CaptioningCollator, SCSTTrainer
from modeling_pacs.jobs import write_text_atomically
from modeling_pacs.models.embedding_cache import EmbeddingCache
from modeling_pacs.testing.pacs import make_tiny_model
from modeling_pacs.tokenization import build_clip_tokenizer

WORDS = "a an the dog cat man woman red blue green sitting standing on in next to with table beach street grass".split


def random_captions(count: int, seed: int) -> list[str]:
    generator = random.Random(seed)
    return [" ".join(generator.choice(WORDS) for _ in range(generator.randint(6, 14))) for _ in range(count)]


def random_images(count: int) -> list:
    import numpy as np
    import PIL.Image

    return [
        PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (240, 320, 3), dtype=np.uint8))
        for seed in range(count)
    ]


def median_seconds(reward, candidate_sets: list[list[str]], images: list, references: list[list[str]]) -> float:
    """Median seconds of one reward call per candidate set."""
    seconds = []
    for candidates in candidate_sets:
        started = time.perf_counter()
        reward(candidates, images=images, references=references)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def reward_throughput(model, images, references, num_beams: int, repeats: int) -> dict:
    num_candidates = len(images) * num_beams
    beam_images = [image for image in images for _ in range(num_beams)]
    beam_references = [item for item in references for _ in range(num_beams)]
    same = [random_captions(num_candidates, 0)] * repeats
    fresh = [random_captions(num_candidates, 1 + repeat) for repeat in range(repeats)]
    report = {"num_candidates": num_candidates}
    for name, use_references in (("pac_s_pp", False), ("ref_pac_s_pp", True)):
        uncached = PACSReward(model, use_references=use_references, cache=False)
        seconds = median_seconds(uncached, same, beam_images, beam_references)
        report[f"{name}_no_cache_candidates_per_s"] = num_candidates / seconds
        cached = PACSReward(model, use_references=use_references, cache=EmbeddingCache())
        cached(same[0], images=beam_images, references=beam_references)  # the first epoch fills the cache
        seconds = median_seconds(cached, fresh, beam_images, beam_references)
        report[f"{name}_cache_new_candidates_per_s"] = num_candidates / seconds
        seconds = median_seconds(cached, same, beam_images, beam_references)
        report[f"{name}_cache_all_hits_candidates_per_s"] = num_candidates / seconds
    model.embedding_cache = None
    return report


def scst_step_share(model, images, references, num_beams: int, steps: int, cache: bool, output_dir: Path) -> dict:
    """Seconds per SCST step of the paper's captioner (3+3 layers, d=512, ViT-B/32 grid) and the reward's share."""
    torch.manual_seed(0)
    vision_config = vit_b32_clip_config().vision_config
    captioner = PACSCaptionerForConditionalGeneration(PACSCaptionerConfig(vision_config=vision_config.to_dict()))
    dataset = datasets.Dataset.from_list(
        [{"image": image, "captions": item, "row_index": i} for i, (image, item) in enumerate(zip(images, references))]
    )
    tokenizer = build_clip_tokenizer()
    args = TrainingArguments(
        str(output_dir),
        per_device_train_batch_size=len(images),
        max_steps=steps,
        learning_rate=1e-6,
        report_to=[],
        remove_unused_columns=False,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=steps,
    )
    reward = PACSReward(model, use_references=True, cache=EmbeddingCache() if cache else False)
    trainer = SCSTTrainer(
        model=captioner,
        args=args,
        train_dataset=dataset,
        data_collator=CaptioningCollator(tokenizer, 224, stage="scst"),
        reward_function=reward,
        tokenizer=tokenizer,
        num_beams=num_beams,
        max_new_tokens=20,
    )
    started = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - started
    model.embedding_cache = None
    return {
        "seconds_per_step": total / steps,
        "reward_seconds_per_step": trainer.reward_seconds / steps,
        "reward_share": trainer.reward_seconds / total,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_images", type=int, default=32)
    parser.add_argument("--num_beams", type=int, default=5)
    parser.add_argument("--num_references", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scst_steps", type=int, default=2, help="0 skips the SCST step measurement")
    parser.add_argument("--output", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    for name in ("num_images", "num_beams", "num_references", "repeats"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.scst_steps < 0:
        parser.error(f"--scst_steps must be >= 0, got {args.scst_steps}")

    model = make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config())
    model.clip = model.peft_model.merge_and_unload()  # released models are merged at load time
    model._peft_model = None
    model.eval()
    images = random_images(args.num_images)
    references = [random_captions(args.num_references, 1000 + i) for i in range(args.num_images)]
    report = {
        "machine": f"{torch.get_num_threads()} torch threads, CPU",
        "weights": "random, CLIP ViT-B/32 geometry",
        "num_images": args.num_images,
        "num_beams": args.num_beams,
        "num_references": args.num_references,
        **reward_throughput(model, images, references, args.num_beams, args.repeats),
    }
    if args.scst_steps:
        import tempfile

        with tempfile.TemporaryDirectory() as directory:
            for cache in (False, True):
                measured = scst_step_share(
                    model, images, references, args.num_beams, args.scst_steps, cache, Path(directory)
                )
                report[f"scst_{'cache' if cache else 'no_cache'}"] = measured
    text = json.dumps(report, indent=2, allow_nan=False) + "\n"
    print(text, end="")
    if args.output:
        write_text_atomically(args.output, [text])
    return 0


if __name__ == "__main__":
    sys.exit(main())
