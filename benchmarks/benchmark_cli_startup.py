"""How long `pacs-score` takes before it does anything: `--help`, a missing input file, the README command.

Runs each command as a fresh process (as a user's shell does: `pacs-score` is `modeling_pacs.cli:score_main`), several
times in interleaved rounds, and prints the best and median wall times. The baseline, in the same rounds, is a fresh
process that only does what the README command cannot avoid: import the loader, load the same model and score the
same captions (it also reports the seconds of `load_model` + `score` inside it). The README command's overhead is
its wall time minus the baseline's. Goals (issue 32): `--help` and a bad input file under 0.5 s; the README command
at most 1.5 s more than loading and scoring.

Measured on this project's 2-core machine (shared with other jobs, load average about 1), tiny model, 5 rounds; the
commit before issue 32's lazy imports (`--repo`, 3 rounds) in brackets: `--help` 0.08 s (4.08 s), a missing file
0.08 s (4.16 s), the README command 4.74 s against a 4.88 s baseline of loading and scoring alone, so no overhead
(5.06 s against 5.06 s); of the baseline, 3.0 s are the imports of torch, transformers and the model, 1.0 s
`load_model` + `score`.

Example:
    python benchmarks/benchmark_cli_startup.py                       # this checkout, 5 rounds
    python benchmarks/benchmark_cli_startup.py --repo ../main --rounds 3   # another checkout (a before/after)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarking_utils import load_average

from modeling_pacs.cli.arguments import add_example

REPO_ROOT = Path(__file__).resolve().parents[1]
# What the `pacs-score` console script runs.
PACS_SCORE = "import sys; from modeling_pacs.cli import score_main; sys.argv[0] = 'pacs-score'; sys.exit(score_main())"
# The baseline: load the model and score the README's captions, nothing else; prints the in-process seconds.
LOAD_AND_SCORE = """
import json, sys, time
from pathlib import Path
start = time.perf_counter()
from modeling_pacs.caption_files import attach_references, read_items
from modeling_pacs.loading import load_model
imported = time.perf_counter()
captions, references = Path(sys.argv[1]), Path(sys.argv[2])
items = read_items(captions, captions.parent)
attach_references(items, references, captions.parent)
model = load_model(sys.argv[3], device="cpu")
loaded = time.perf_counter()
model.score([item["image_path"] for item in items], [item["caption"] for item in items],
            references=[item["references"] for item in items], progress=False)
scored = time.perf_counter()
print(json.dumps({"imports": imported - start, "load": loaded - imported, "score": scored - loaded}))
"""


def commands(repo: Path, model: str, output: Path) -> dict[str, list[str]]:
    captions, references = repo / "examples" / "captions.json", repo / "examples" / "references.json"
    readme = [str(captions), "--references", str(references), "--model", model, "--output", str(output)]
    return {
        "pacs-score --help": [sys.executable, "-c", PACS_SCORE, "--help"],
        "pacs-score missing.json": [sys.executable, "-c", PACS_SCORE, "missing.json", "--model", model],
        "README command": [sys.executable, "-c", PACS_SCORE, *readme, "--no-progress"],
        "baseline: load + score": [
            sys.executable,
            "-c",
            LOAD_AND_SCORE,
            str(captions),
            str(references),
            model,
        ],  # fmt: skip
    }


def run(command: list[str], environment: dict, expect_error: bool) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - start
    if (result.returncode != 0) != expect_error:
        raise SystemExit(f"{' '.join(command[:3])}... exited {result.returncode}:\n{result.stderr[-2000:]}")
    return seconds, result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repo", type=Path, default=REPO_ROOT, help="checkout whose modeling_pacs runs (default: this)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each command (after one warm-up)")
    parser.add_argument("--model", default="tiny", help="model of the README command and the baseline")
    add_example(parser, "python benchmarks/benchmark_cli_startup.py --rounds 5")
    args = parser.parse_args()
    repo = args.repo.resolve()
    environment = dict(os.environ, PYTHONPATH=str(repo), HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    with tempfile.TemporaryDirectory() as folder:
        runs = commands(repo, args.model, Path(folder) / "scores.json")
        for name, command in runs.items():  # warm-up: the tiny model's directory, the OS file cache
            run(command, environment, expect_error=name == "pacs-score missing.json")
        times = {name: [] for name in runs}
        inside = []
        for _ in range(args.rounds):  # interleaved: a burst of load from other jobs hits every command alike
            for name, command in runs.items():
                seconds, stdout = run(command, environment, expect_error=name == "pacs-score missing.json")
                times[name].append(seconds)
                if name.startswith("baseline"):
                    inside.append(json.loads(stdout.splitlines()[-1]))

    print(f"checkout {repo}, model {args.model}, {args.rounds} rounds, load average {load_average()}")
    print(f"{'command':<28} {'best s':>8} {'median s':>9}")
    for name, values in times.items():
        print(f"{name:<28} {min(values):>8.2f} {statistics.median(values):>9.2f}")
    load_and_score = min(part["load"] + part["score"] for part in inside)
    imports = min(part["imports"] for part in inside)
    readme, baseline = min(times["README command"]), min(times["baseline: load + score"])
    median_overhead = statistics.median(times["README command"]) - statistics.median(times["baseline: load + score"])
    print(
        f"\nbaseline, inside its process: imports {imports:.2f} s, load_model + score {load_and_score:.2f} s (best)"
        f"\nREADME command overhead: {readme - baseline:+.2f} s over the baseline process (best; medians "
        f"{median_overhead:+.2f} s; goal <= 1.5 s), {readme - load_and_score:.2f} s over load_model + score alone"
    )
    print(
        f"goals: --help {'met' if min(times['pacs-score --help']) < 0.5 else 'NOT met'} (< 0.5 s), "
        f"missing file {'met' if min(times['pacs-score missing.json']) < 0.5 else 'NOT met'} (< 0.5 s), "
        f"README command {'met' if readme - baseline <= 1.5 else 'NOT met'} (<= 1.5 s over loading + scoring)"
    )


if __name__ == "__main__":
    main()
