"""Speed of the benchmark harness on a Flickr8k-CF-shaped workload with ViT-B/32-sized random weights.

Writes `crowdflower_flickr8k.json` for N images x P judged captions (each candidate is a reference caption of another
image, as in Flickr8k-CF, so texts repeat across images) plus N JPEGs, scores it through the harness's batch path and
reports items/s and the image/text encodings actually run against scoring item by item. Random weights: the
correlations mean nothing; only the timing and the counts do.

    python benchmarks/benchmark_harness_speed.py --images 1000 --pairs 48
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchmarking_utils import vit_b32_clip_config
from PIL import Image

from modeling_pacs.cli.arguments import add_device_arguments, add_example
from modeling_pacs.evaluation import load_benchmark
from modeling_pacs.evaluation.runner import score_image_items
from modeling_pacs.loading import DTYPES, resolve_device
from modeling_pacs.testing.pacs import make_tiny_model


def write_crowdflower_workload(folder: Path, num_images: int, num_pairs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    words = "a the red blue dog cat man woman child sits runs on under near table grass street beach ball".split()
    references = {
        image: [" ".join(rng.choice(words, rng.integers(5, 12))) + " ." for _ in range(5)]
        for image in range(num_images)
    }
    pool = [caption for captions in references.values() for caption in captions]
    index = {}
    (folder / "images").mkdir(parents=True)
    for image in range(num_images):
        pixels = rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / "images" / f"{image}.jpg", quality=90)
        candidates = [pool[k] for k in rng.choice(len(pool), num_pairs, replace=False)]
        index[f"{image}.jpg"] = {
            "image_path": f"Flicker8k_Dataset/{image}.jpg",
            "ground_truth": references[image],
            "human_judgement": [{"caption": c, "rating": float(rng.integers(0, 4)) / 3} for c in candidates],
        }
    (folder / "crowdflower_flickr8k.json").write_text(json.dumps(index))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=48, help="judged captions per image")
    add_device_arguments(parser)
    parser.add_argument("--image-batch-size", type=int, default=64)
    parser.add_argument("--text-batch-size", type=int, default=256)
    add_example(parser, "python benchmarks/benchmark_harness_speed.py --images 1000 --pairs 48")
    args = parser.parse_args()
    for name in ("images", "pairs", "image_batch_size", "text_batch_size"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    device = resolve_device(args.device)
    print("building a ViT-B/32-sized random PAC-S++ (LoRA merged); real weights are not downloadable here")
    model = make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config())
    model.clip = model.peft_model.merge_and_unload()
    model._peft_model = None
    model = model.to(device=device, dtype=DTYPES[args.dtype]).eval()
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        write_crowdflower_workload(folder, args.images, args.pairs)
        benchmark = load_benchmark("flickr8k_cf", folder)
        items = benchmark.items
        started = time.perf_counter()
        columns, counts = score_image_items(
            model, items, None, len(items), args.image_batch_size, args.text_batch_size, progress=False
        )
        statistics = benchmark.evaluate(columns["score"])
        seconds = time.perf_counter() - started
    naive_texts = sum(1 + len(item["references"]) for item in items)
    print(f"device {device}, dtype {args.dtype}, torch threads {torch.get_num_threads()}")
    print(f"items: {len(items)} ({args.images} images x {args.pairs} pairs)")
    print(f"wall time: {seconds:.1f} s  ->  {len(items) / seconds:.1f} items/s (scoring + protocol)")
    print(f"image encodings: {counts.images} run vs {len(items)} naive (one per item)")
    print(f"text encodings: {counts.texts} run vs {naive_texts} naive (candidate + references per item)")
    print(f"tau_b on random weights (meaningless): {statistics['kendall_tau_b']:.2f}")


if __name__ == "__main__":
    main()
