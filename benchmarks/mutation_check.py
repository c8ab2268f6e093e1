"""A small mutation check: change the package by one line at a time where a formula or a rule lives, run the tests
that guard that spot, and count the mutants they kill (fail on) and those that survive (still pass).

Each mutant is one exact text replacement in one file of a temporary copy of the repository (the checkout itself is
never touched); its test selection is narrow, so the whole check runs in minutes on a laptop. A baseline run of every
selection on the unchanged copy comes first: a selection that fails without a mutant would "kill" everything.

Example:

```bash
python benchmarks/mutation_check.py            # all mutants, with the baseline
python benchmarks/mutation_check.py --only eq4-no-clip pearl-lambda-swap --no-baseline
```
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
COPIED = ("modeling_pacs", "tests", "docs", "examples", "metric", "scripts", "space", "pyproject.toml", "setup.py",
          "mkdocs.yml", "README.md", "MODEL_CARD.md", "constraints.txt")  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest arguments: files and -k selections
    what: str


SCORING = "modeling_pacs/models/scoring.py"
MUTANTS = (
    Mutant("eq4-no-clip", SCORING, "cosine_similarity(image_embeds, text_embeds).clamp(min=0)",
           "cosine_similarity(image_embeds, text_embeds)", ("tests/models/test_scoring.py",),
           "Eq. 4 without max(cos, 0)"),
    Mutant("eq4-no-w", SCORING, "return w * cosine_similarity(image_embeds", "return cosine_similarity(image_embeds",
           ("tests/models/test_scoring.py",), "Eq. 4 without the scale w"),
    Mutant("eq5-arithmetic-mean", SCORING, "2 * first * second / safe_total", "(first + second) / 2",
           ("tests/models/test_scoring.py",), "Eq. 5 with the arithmetic instead of the harmonic mean"),
    Mutant("eq5-mean-reference", SCORING, 'reference_owner, similarities, reduce="amax")',
           'reference_owner, similarities, reduce="mean")', ("tests/models/test_scoring.py",),
           "Eq. 5 with the mean instead of the best reference"),
    Mutant("eq5-no-clip", SCORING, "    return best.clamp(min=0)", "    return best", ("tests/models/test_scoring.py",),
           "Eq. 5 without clipping the best reference cosine at 0"),
    Mutant("pearl-lambda-swap", "modeling_pacs/models/scoring_pearl.py",
           "lambda_img * img_score + (1 - lambda_img) * ref_score",
           "(1 - lambda_img) * img_score + lambda_img * ref_score",
           ("tests/pearl/test_convert.py", "-k", "lambda_other or authors_forward_in_numpy"),
           "Pearl Eq. 3 with lambda and 1 - lambda swapped"),
    Mutant("chunks-quarter-window", "modeling_pacs/models/inputs.py", "<= capacity // 2:", "<= capacity // 4:",
           ("tests/models/test_long_captions.py", "-k", "half or numpy_on"),
           "long captions: re-read at most a quarter window instead of half"),
    Mutant("truncation-count-off-by-one", "modeling_pacs/models/modeling_pacs.py",
           "- self.config.max_text_length).clamp(min=0)", "- self.config.max_text_length + 1).clamp(min=0)",
           ("tests/models/test_truncation_counts.py",), "the truncation count one token too high"),
    Mutant("polos-references-not-cut", "modeling_pacs/models/modeling_polos.py",
           "keep = min(len(item_references) for item_references in chunk)",
           "keep = max(len(item_references) for item_references in chunk)",
           ("tests/models/test_polos.py", "-k", "official"),
           "Polos official mode: references not cut to the chunk's shortest list (the padding of collate_tensors)"),
    Mutant("deneb-references-not-cut", "modeling_pacs/models/modeling_deneb.py",
           "keep = min(len(item_references) for item_references in chunk)",
           "keep = max(len(item_references) for item_references in chunk)",
           ("tests/deneb/test_convert.py", "tests/models/test_deneb.py"),
           "DENEB official mode: references not cut to the chunk's shortest list (the authors' collate_tensors)"),
)  # fmt: skip


def copy_repository(target: Path) -> Path:
    for name in COPIED:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif source.is_file():
            shutil.copy2(source, target / name)
    return target


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, float, str]:
    """(passed, seconds, last lines) of pytest on `tests`, importing the package from `copy`."""
    env = {**os.environ, "PYTHONPATH": str(copy), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - start, "timed out"
    tail = (completed.stdout + completed.stderr).strip().splitlines()[-1:] or [""]
    return completed.returncode == 0, time.perf_counter() - start, tail[0]


def apply(copy: Path, mutant: Mutant) -> str:
    path = copy / mutant.path
    original = path.read_text(encoding="utf-8")
    count = original.count(mutant.old)
    if count != 1:
        raise SystemExit(f"mutant {mutant.name}: {mutant.old!r} occurs {count} times in {mutant.path}, not once")
    path.write_text(original.replace(mutant.old, mutant.new), encoding="utf-8")
    return original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Example: python benchmarks/mutation_check.py --only eq4-no-clip",
    )
    parser.add_argument("--only", nargs="+", choices=[mutant.name for mutant in MUTANTS], help="these mutants only")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of each selection without a mutant")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per test run (default 900)")
    args = parser.parse_args(argv)
    mutants = [mutant for mutant in MUTANTS if not args.only or mutant.name in args.only]
    with tempfile.TemporaryDirectory(prefix="pacs_mutants_") as folder:
        copy = copy_repository(Path(folder))
        if not args.no_baseline:
            for tests in dict.fromkeys(mutant.tests for mutant in mutants):
                passed, seconds, tail = run_tests(copy, tests, args.timeout)
                print(f"baseline {' '.join(tests)}: {'passed' if passed else 'FAILED'} in {seconds:.0f} s ({tail})")
                if not passed:
                    return 2
        killed = 0
        for mutant in mutants:
            original = apply(copy, mutant)
            try:
                passed, seconds, tail = run_tests(copy, mutant.tests, args.timeout)
            finally:
                (copy / mutant.path).write_text(original, encoding="utf-8")
            killed += not passed
            print(f"{'survived' if passed else 'killed  '} {mutant.name:30} {seconds:5.0f} s  {mutant.what} ({tail})")
    print(f"{killed} of {len(mutants)} mutants killed, {len(mutants) - killed} survived")
    return 0 if killed == len(mutants) else 1


if __name__ == "__main__":
    sys.exit(main())
