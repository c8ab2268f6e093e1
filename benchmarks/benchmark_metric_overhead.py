"""Overhead of the `evaluate` module over a direct engine call: 500 captions over image paths.

Prints the ratio `(evaluate.load + compute) / (load_model + PACSModel.score)` (target <= 1.5x), and the same ratio
with the model already loaded (`compute` vs `score`). Both sides run in this process, alternately, after a warm-up;
medians of `--repeats` runs.

Example:
    python benchmarks/benchmark_metric_overhead.py                      # tiny random model (CPU)
    python benchmarks/benchmark_metric_overhead.py --model pac_s_pp_vit_b32 --device cuda
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import evaluate
import numpy as np
import PIL.Image

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.loading import load_model

REPO_ROOT = Path(__file__).resolve().parents[1]
METRIC_PATH = str(REPO_ROOT / "metric" / "pacs_pp")
WORDS = "a the red blue green dog cat man woman sits runs on under near table grass street big small photo".split()


def make_images(directory: Path, num_images: int, seed: int = 0) -> list[str]:
    """COCO-like JPEGs (about 480x640) of smooth random content."""
    rng = np.random.default_rng(seed)
    paths = []
    for index in range(num_images):
        coarse = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
        image = PIL.Image.fromarray(coarse).resize((640, 480), PIL.Image.BILINEAR)
        path = directory / f"{index:04d}.jpg"
        image.save(path, quality=90)
        paths.append(str(path))
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="alias, Hub id or local directory (default: tiny)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--captions", type=int, default=500)
    parser.add_argument("--captions-per-image", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    add_example(parser, "python benchmarks/benchmark_metric_overhead.py --model pac_s_pp_vit_b32 --device cuda")
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as directory:
        image_files = make_images(Path(directory), args.captions // args.captions_per_image)
        images = [image_files[index // args.captions_per_image] for index in range(args.captions)]
        captions = [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 12)))) for _ in images]

        def engine_run(model=None):
            start = time.perf_counter()
            model = model or load_model(args.model, device=args.device)
            scores = model.score(images, captions, progress=False).scores.tolist()
            return time.perf_counter() - start, scores

        def metric_run(model=None):
            start = time.perf_counter()
            metric = evaluate.load(METRIC_PATH, model=model or args.model, device=args.device, progress=False)
            scores = metric.compute(predictions=captions, images=images)["scores"]
            return time.perf_counter() - start, scores

        engine_run(), metric_run()  # warm-up: imports, file caches, the tiny model's one-time build
        loaded = load_model(args.model, device=args.device)
        rows = {"with loading": ([], []), "model preloaded": ([], [])}
        for _ in range(args.repeats):
            for label, model in (("with loading", None), ("model preloaded", loaded)):
                engine_seconds, engine_scores = engine_run(model)
                metric_seconds, metric_scores = metric_run(model)
                if metric_scores != engine_scores:
                    raise SystemExit("the metric's scores differ from the engine's")
                rows[label][0].append(engine_seconds)
                rows[label][1].append(metric_seconds)

    print(f"{args.captions} captions over {len(image_files)} image paths, model {args.model}, {args.repeats} repeats")
    for label, (engine_times, metric_times) in rows.items():
        engine_median, metric_median = statistics.median(engine_times), statistics.median(metric_times)
        print(
            f"{label:>16}: engine {engine_median:.3f}s, evaluate {metric_median:.3f}s, "
            f"ratio {metric_median / engine_median:.2f}x (target <= 1.5x)"
        )


if __name__ == "__main__":
    main()
