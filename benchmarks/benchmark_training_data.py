#!/usr/bin/env python3
"""Peak memory and data-preparation time of `train_pacs.py` on the paper's data layout, at growing corpus sizes.

For each size it builds, once (kept in `--work-dir`, reused by later runs):
- a COCO-shaped Karpathy `dataset_coco.json` (Karpathy's split proportions, 5 captions per image and a few with 6 or
  7, `filepath`/`filename` as COCO names them, tokens included) and the real images by path (hard links to a few
  640x480 JPEGs: only the batch's images are ever decoded);
- a synthetic folder exactly as `generate_synthetic.py` writes it: `manifest.json`, `shards/shard-NNNNN.parquet`
  written by the job engine with the generator's own `write_parquet` (its 23 `shard_features()` columns, one row per
  human caption of the splits train, restval and val, 64 images a shard), and `summary.json`. Synthetic images are
  incompressible PNGs (random noise, stored uncompressed) of 24-48 KiB; a few rows are safety-flagged (no image).

Then it runs the real training command, one optimisation step on the tiny model and its final validation on the
first 256 validation rows, in a fresh process per size, and prints its peak RSS (from `wait4`), the
data-preparation time the script logs, and the peak RSS ratio between the largest and the smallest size (goal: at
most 1.2x).

Variants:
    python benchmarks/benchmark_training_data.py                          # 1k, 10k and 50k images (~9 GiB of shards)
    python benchmarks/benchmark_training_data.py --images 1000 --repo ../old-checkout   # an older train_pacs.py
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import PIL.Image
from benchmarking_utils import positive_int

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.jobs import ShardedJob, write_text_atomically
from modeling_pacs.synthetic.generation import item_seed, write_parquet

REPO = Path(__file__).resolve().parent.parent
WORDS = "a the red blue green dog cat man woman sits runs on under near table grass street big small photo".split()
SHARD_SIZE = 64  # generate_synthetic.py's default --shard-size
POOL_SIZE = 16  # distinct real JPEGs; every COCO file name is a hard link to one of them
PROVENANCE = {
    "captioner": "Salesforce/blip-image-captioning-large",
    "captioner_revision": "main",
    "caption_decoding": json.dumps({"max_length": 20, "min_length": 5, "num_beams": 3, "prompt": "a picture of "}),
    "generator": "stable-diffusion-v1-5/stable-diffusion-v1-5",
    "generator_revision": "main",
    "scheduler": "default",
    "steps": 50,
    "guidance_scale": 7.5,
    "height": 512,
    "width": 512,
    "dtype": "fp16",
    "global_seed": 0,
}
# The final validation of train_pacs.py reads this many rows at every size, so each run does the same work and only
# the data size differs (the whole `val` split is 4% of the images: 2,000 at 50k, whose decoding loop alone grows
# the allocator's working set by ~100 MiB before it levels off).
EVAL_ROWS = 256
PREPARATION_LINE = re.compile(r"training data prepared in ([0-9.]+) s")


# ---------------------------------------------------------------------------------------------------- the corpus
def karpathy_split(index: int, num_images: int) -> str:
    """Karpathy's proportions on COCO (5k val, 5k test, 30k restval of 123k): 4%, 4%, 25%, the rest train."""
    position = index / num_images
    return "val" if position < 0.04 else "test" if position < 0.08 else "restval" if position < 0.33 else "train"


def write_karpathy(directory: Path, num_images: int, rng: np.random.Generator) -> list[dict]:
    images, sentid = [], 0
    for index in range(num_images):
        split = karpathy_split(index, num_images)
        folder = "val2014" if split in ("val", "test", "restval") else "train2014"
        cocoid = 100_000 + 7 * index  # COCO ids are sparse
        sentences = []
        for _ in range(7 if index % 397 == 0 else 6 if index % 151 == 0 else 5):
            tokens = [str(word) for word in rng.choice(WORDS, size=int(rng.integers(8, 16)))]
            sentences.append({"tokens": tokens, "raw": " ".join(tokens).capitalize() + ".", "imgid": index,
                              "sentid": sentid})  # fmt: skip
            sentid += 1
        images.append(
            {
                "filepath": folder,
                "sentids": [sentence["sentid"] for sentence in sentences],
                "filename": f"COCO_{folder}_{cocoid:012d}.jpg",
                "imgid": index,
                "split": split,
                "sentences": sentences,
                "cocoid": cocoid,
            }
        )
    write_text_atomically(directory / "dataset_coco.json", [json.dumps({"images": images, "dataset": "coco"})])
    return images


def link_real_images(directory: Path, images: list[dict], rng: np.random.Generator):
    pool = directory / "pool"
    pool.mkdir(exist_ok=True)
    for index in range(POOL_SIZE):
        PIL.Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)).save(pool / f"{index}.jpg", quality=90)
    for folder in ("train2014", "val2014"):
        (directory / "coco" / folder).mkdir(parents=True, exist_ok=True)
    for index, image in enumerate(images):
        target = directory / "coco" / image["filepath"] / image["filename"]
        if not target.exists():
            os.link(pool / f"{index % POOL_SIZE}.jpg", target)


def incompressible_png(rng: np.random.Generator) -> bytes:
    """A valid RGB PNG of random noise stored without compression: 24-48 KiB, the same size as its pixels."""
    size = int(rng.integers(24 * 1024, 48 * 1024))
    width = 96
    height = size // (width * 3 + 1)
    pixels = rng.integers(0, 256, (height, width * 3), dtype=np.uint8)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), pixels], axis=1).tobytes()  # filter byte 0 per line

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 0)) + chunk(b"IEND", b"")


def write_synthetic(directory: Path, images: list[dict], image_root: Path, rng: np.random.Generator) -> int:
    """The generator's output folder for the splits train, restval and val; returns the shards' size in bytes."""
    sources = [image for image in images if image["split"] in ("train", "restval", "val")]
    manifest = {"input": "benchmark", "splits": "train,restval,val", **PROVENANCE}
    job = ShardedJob(directory, manifest, shard_size=SHARD_SIZE, shard_suffix=".parquet")
    wanted = job.start()
    row = 0
    for shard in range(job.num_shards(len(sources))):
        rows = []
        for image in sources[shard * SHARD_SIZE : (shard + 1) * SHARD_SIZE]:
            synthetic_caption = " ".join(rng.choice(WORDS, size=8))
            path = str((image_root / image["filepath"] / image["filename"]).resolve())
            for sentence in image["sentences"]:
                flagged = sentence["sentid"] % 211 == 0  # the safety checker's share: the row keeps no image
                rows.append(
                    {
                        "row": row,
                        "sentid": sentence["sentid"],
                        "cocoid": image["cocoid"],
                        "image": {"bytes": None, "path": path},
                        "caption": sentence["raw"],
                        "synthetic_image": None if flagged else {"bytes": incompressible_png(rng), "path": None},
                        "synthetic_caption": synthetic_caption,
                        "split": image["split"],
                        "seed": item_seed(0, sentence["sentid"]),
                        "safety_flagged": flagged,
                        "error": None,
                        **PROVENANCE,
                    }
                )
                row += 1
        if wanted(shard):
            job.write_shard(shard, lambda path, rows=rows: write_parquet(rows, path))
    summary = {"num_rows": row, "num_images": len(sources), "num_shards": job.num_shards(len(sources))}
    write_text_atomically(directory / "summary.json", [json.dumps(summary, indent=2) + "\n"])
    return sum(path.stat().st_size for path in job.shard_dir.glob("*.parquet"))


def build_corpus(directory: Path, num_images: int) -> int:
    """Build (or reuse) the corpus of one size; returns the synthetic shards' size in bytes."""
    done = directory / "complete.json"
    if done.is_file():
        return json.loads(done.read_text())["shard_bytes"]
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(num_images)
    started = time.perf_counter()
    images = write_karpathy(directory, num_images, rng)
    link_real_images(directory, images, rng)
    shard_bytes = write_synthetic(directory / "synthetic", images, directory / "coco", rng)
    write_text_atomically(done, [json.dumps({"shard_bytes": shard_bytes})])
    print(
        f"built {num_images} images ({shard_bytes / 2**30:.2f} GiB of shards) in {time.perf_counter() - started:.0f} s"
    )
    return shard_bytes


# ---------------------------------------------------------------------------------------------------- the run
def run_training(repo: Path, corpus: Path, output_dir: Path) -> dict:
    """One step of train_pacs.py in a fresh process: peak RSS (MiB), wall time and the logged preparation time."""
    shutil.rmtree(output_dir, ignore_errors=True)
    command = [
        sys.executable, str(repo / "scripts" / "train_pacs.py"), "--model_name_or_path", "tiny",
        "--karpathy_json", str(corpus / "dataset_coco.json"), "--image_root", str(corpus / "coco"),
        "--synthetic_data", str(corpus / "synthetic"), "--output_dir", str(output_dir), "--max_steps", "1",
        "--per_device_train_batch_size", "8", "--report_to", "none", "--use_cpu", "--save_strategy", "no",
        "--eval_strategy", "no", "--disable_tqdm", "true", "--max_eval_samples", str(EVAL_ROWS),
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(repo)}
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment)
    output = process.stdout.read().decode(errors="replace")
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)  # this child's own rusage (RUSAGE_CHILDREN would mix the runs)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    tail = output.strip().splitlines()[-1] if output.strip() else ""
    preparation = PREPARATION_LINE.search(output)
    return {
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "seconds": seconds,
        "preparation_s": float(preparation.group(1)) if preparation else None,
        "ok": code == 0,
        "error": None if code == 0 else tail[-300:],
    }


def free_disk_bytes(path: Path) -> int:
    path.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(path).free


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--images", type=positive_int, nargs="+", default=[1000, 10_000, 50_000])
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/pacs-pp-training-data-benchmark"))
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose scripts/train_pacs.py runs")
    parser.add_argument("--json", type=Path, help="also write the results here")
    add_example(parser, "python benchmarks/benchmark_training_data.py --images 1000 10000 --work-dir /data/bench")
    args = parser.parse_args(argv)

    results = []
    for num_images in sorted(args.images):
        corpus = args.work_dir / f"images-{num_images}"
        needed = num_images * 5.05 * 0.96 * 37 * 1024 * 1.1  # rows x mean PNG size, 10% spare
        if not (corpus / "complete.json").is_file() and free_disk_bytes(args.work_dir) < needed:
            print(f"{num_images:>7} images: skipped, {needed / 2**30:.1f} GiB of disk needed in {args.work_dir}")
            continue
        shard_bytes = build_corpus(corpus, num_images)
        result = run_training(args.repo.resolve(), corpus, args.work_dir / "run")
        result.update(images=num_images, shard_gib=shard_bytes / 2**30)
        results.append(result)
        preparation = "n/a" if result["preparation_s"] is None else f"{result['preparation_s']:.1f} s"
        status = "trains" if result["ok"] else f"FAILED: {result['error']}"
        print(
            f"{num_images:>7} images ({result['shard_gib']:.2f} GiB of shards): peak RSS "
            f"{result['peak_rss_mib']:.0f} MiB, data preparation {preparation}, whole run {result['seconds']:.0f} s: "
            f"{status}",
            flush=True,
        )
    finished = [result for result in results if result["ok"]]
    if len(finished) >= 2:
        small, large = finished[0], finished[-1]
        ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
        print(
            f"peak RSS ratio {large['images']} / {small['images']} images: {ratio:.3f} (goal: at most 1.2)",
            flush=True,
        )
    if args.json:
        write_text_atomically(args.json, [json.dumps(results, indent=2) + "\n"])


if __name__ == "__main__":
    main()
