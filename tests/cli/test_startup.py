"""Commands start fast (issue 32, point 4): `--help`, argument errors and bad input files need no torch, transformers
or model, and `import modeling_pacs` imports none of them; reading a public model name (or `load_model`) still
registers the package's models with the Auto classes. Timings are in `benchmarks/benchmark_cli_startup.py`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "numpy", "PIL")
# `pacs-pp`'s parser reads evaluate-captions' choices from the evaluation package, which brings numpy and PIL (~0.2 s).
PACS_PP_HEAVY = ("torch", "transformers")
# Runs a command in-process and, at exit, prints on stderr which heavy modules it imported.
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('IMPORTED', [m for m in {heavy!r} if m in sys.modules], file=sys.stderr))\n"
    "{body}\n"
)


def run_probe(body: str, tmp_path: Path, heavy: tuple[str, ...] = HEAVY) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy, body=body)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )


def imported(result: subprocess.CompletedProcess) -> list[str]:
    line = next(line for line in result.stderr.splitlines() if line.startswith("IMPORTED"))
    return eval(line.removeprefix("IMPORTED "))  # a list literal printed by the probe


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["missing.json", "--model", "tiny"],
        ["captions.json", "--model", "pacs_pp_b32"],
        ["captions.json", "--model", "tiny:polos"],
        ["captions.json", "--batch-size", "0"],
    ],
)
def test_pacs_score_answers_without_torch(argv, tmp_path):
    (tmp_path / "captions.json").write_text(json.dumps({"a.png": "a caption"}))
    result = run_probe(f"from modeling_pacs.cli import score_main\nscore_main({argv!r})", tmp_path)
    assert imported(result) == [], result.stderr
    if argv != ["--help"]:
        assert result.returncode in (1, 2) and "error: " in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["score", "--help"],
        ["make-tiny", "--help"],
        ["convert", "--help"],
        ["convert-longclip", "--help"],
        ["convert-polos", "--help"],
        ["convert-pearl", "--help"],
        ["convert-beit3", "--help"],
        ["register-metric", "--help"],
        ["nope"],
    ],
)
def test_pacs_pp_help_and_usage_errors_without_torch(argv, tmp_path):
    result = run_probe(f"from modeling_pacs.cli import main\nmain({argv!r})", tmp_path, PACS_PP_HEAVY)
    assert imported(result) == [], result.stderr


def test_import_is_light_and_public_names_register_the_auto_classes(tmp_path):
    result = run_probe(
        "import modeling_pacs\n"
        "light = 'transformers' not in sys.modules\n"
        "from modeling_pacs import PACSConfig\n"
        "from transformers import AutoConfig, AutoModel\n"
        "from modeling_pacs.auto_classes import register_auto_classes\n"
        "print(light, type(AutoConfig.for_model('pac_s_pp')).__name__, type(AutoConfig.for_model('polos')).__name__,"
        " type(AutoConfig.for_model('pacs_captioner')).__name__)",
        tmp_path,
    )
    assert result.stdout.split() == ["True", "PACSConfig", "PolosConfig", "PACSCaptionerConfig"], result.stderr


def test_load_model_registers_the_auto_classes(tmp_path):
    result = run_probe(
        "from modeling_pacs.loading import load_model\n"
        "model = load_model('tiny')\n"
        "from transformers import AutoModel\n"
        "print(type(AutoModel.from_pretrained(model.name_or_path)).__name__)",
        tmp_path,
    )
    assert result.stdout.split() == ["PACSModel"], result.stderr


@pytest.mark.parametrize("argv", [["--help"], ["missing.jsonl", "--output-dir", "out"]])
def test_score_corpus_answers_without_torch(argv, tmp_path):
    result = run_probe(f"from modeling_pacs.cli.score_corpus import main\nmain({argv!r})", tmp_path)
    assert imported(result) == [], result.stderr
