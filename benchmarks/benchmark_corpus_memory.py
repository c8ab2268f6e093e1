"""Peak memory of scripts/score_corpus.py on a small and a 10x larger corpus: streaming means they match.

Writes two JSONL corpora (default 20k and 200k rows: a few images repeated by path, random captions), scores each
with `score_corpus.py` in a fresh process, and prints each run's peak RSS (from `wait4`) and their ratio
(target: the large run within 20% of the small one).

Example:
    python benchmarks/benchmark_corpus_memory.py                    # tiny random model, 20k vs 200k rows
    python benchmarks/benchmark_corpus_memory.py --rows 20000 200000 --shard-size 2048
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL.Image

from modeling_pacs.cli.arguments import add_example

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "score_corpus.py"
WORDS = "a the red blue green dog cat man woman sits runs on under near table grass street big small photo".split()


def write_corpus(directory: Path, num_rows: int, num_images: int = 8, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    for index in range(num_images):
        PIL.Image.fromarray(rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)).save(directory / f"images/{index}.png")
    path = directory / f"corpus_{num_rows}.jsonl"
    with path.open("w") as handle:
        for row in range(num_rows):
            caption = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 14))))
            handle.write(json.dumps({"image": f"images/{row % num_images}.png", "caption": caption}) + "\n")
    return path


def peak_rss_of_run(command: list[str]) -> tuple[float, float]:
    """(peak resident memory in MiB, seconds) of one child process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # wait4 gives this child's own rusage; RUSAGE_CHILDREN would mix the runs.
    _, status, usage = os.wait4(process.pid, 0)
    stderr = process.stderr.read().decode()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs=2, default=[20_000, 200_000])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--shard-size", type=int, default=2048)
    add_example(parser, "python benchmarks/benchmark_corpus_memory.py --rows 20000 200000 --shard-size 2048")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as directory:
        for num_rows in args.rows:
            corpus = write_corpus(Path(directory), num_rows)
            output_dir = Path(directory) / f"scores_{num_rows}"
            command = [
                sys.executable,
                str(SCRIPT),
                str(corpus),
                "--output-dir",
                str(output_dir),
                "--model",
                args.model,
                "--shard-size",
                str(args.shard_size),
            ]
            peak_mib, seconds = peak_rss_of_run(command)
            scored = sum(1 for _ in (output_dir / "scores.jsonl").open())
            if scored != num_rows:
                raise SystemExit(f"{scored} rows scored out of {num_rows}")
            results.append(peak_mib)
            print(f"{num_rows:>8} rows: peak RSS {peak_mib:.0f} MiB ({seconds:.0f}s, {num_rows / seconds:.0f} rows/s)")
    small, large = results
    print(f"peak RSS ratio {args.rows[1]} / {args.rows[0]} rows: {large / small:.3f} (target: within 20%, < 1.2)")


if __name__ == "__main__":
    main()
