"""One mapping from the library's errors to a command line's exit (`modeling_pacs/cli/errors.py`): a `PacsError` (or a
`CorruptArtifactError`) raised anywhere inside a command ends it with one `PROG: error: MESSAGE` line and status 1;
anything else is a bug and keeps its traceback."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_pacs.cli import main, score_main
from modeling_pacs.cli.errors import ERROR_STATUS, USAGE_STATUS, error_line, report_error, reports_errors
from modeling_pacs.corpus_scoring import CorpusError
from modeling_pacs.errors import (
    CorruptArtifactError,
    InputError,
    JobStateError,
    MissingExtraError,
    PacsError,
    UnknownModelError,
    UnsupportedOptionError,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

ERRORS = [
    InputError("item 3 ('a.jpg') has no caption: give one"),
    UnsupportedOptionError("PolosModel.score takes no option 'w': leave it out"),
    UnknownModelError("'pacs_pp_vit' is no alias, local folder or Hub id: use one of pac_s_pp, clip_s"),
    JobStateError("shards [2] of 4 are missing: rerun the same command to finish them"),
    MissingExtraError("Pearl needs sentencepiece: pip install 'pacs-pp[pearl]'"),
    CorruptArtifactError("model/config.json", "the file is empty (0 bytes; truncated)", "Download it again"),
    CorpusError("corpus.jsonl: row 4 is not valid JSON"),
]


def test_the_family():
    assert issubclass(InputError, ValueError) and issubclass(UnsupportedOptionError, TypeError)
    assert issubclass(MissingExtraError, ImportError) and not issubclass(JobStateError, ValueError)
    assert all(isinstance(error, PacsError) for error in ERRORS if not isinstance(error, CorruptArtifactError))
    from modeling_pacs import extras, models

    assert extras.MissingExtraError is MissingExtraError
    assert models.artifacts.CorruptArtifactError is CorruptArtifactError


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_an_error_inside_a_command_is_one_line_and_status_1(error, monkeypatch, tmp_path):
    def fails(args):
        raise error

    monkeypatch.setattr(importlib.import_module("modeling_pacs.cli.main"), "run_score", fails)
    with pytest.raises(SystemExit) as raised:
        main(["score", str(tmp_path / "captions.json")])
    assert raised.value.code == f"pacs-pp score: error: {error}"  # the interpreter prints it and exits with 1
    monkeypatch.setattr(importlib.import_module("modeling_pacs.cli.score"), "run_score", fails)
    with pytest.raises(SystemExit) as raised:
        score_main([str(tmp_path / "captions.json")])
    assert raised.value.code == f"pacs-score: error: {error}"


def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    def fails(args):
        raise KeyError("not an input error")

    monkeypatch.setattr(importlib.import_module("modeling_pacs.cli.main"), "run_score", fails)
    with pytest.raises(KeyError):
        main(["score", str(tmp_path / "captions.json")])


def test_the_mapping_as_a_context_manager_and_a_decorator(capsys):
    @reports_errors("tool", OSError)
    def reads():
        raise FileNotFoundError("no such file: 'x.json'")

    with pytest.raises(SystemExit) as raised:
        reads()
    assert raised.value.code == "tool: error: no such file: 'x.json'"
    with pytest.raises(ValueError), reports_errors("tool"):  # not named, not the package's: a traceback
        raise ValueError("a bug")
    assert error_line(InputError("bad row"), None) == "error: bad row"
    # A command that returns its status (the converters, push_to_hub) prints the same line.
    assert report_error(InputError("'x.ckpt': not a checkpoint"), "pacs-pp convert") == USAGE_STATUS == 2
    assert capsys.readouterr().err == "pacs-pp convert: error: 'x.ckpt': not a checkpoint\n"


def test_the_interpreter_prints_the_line_and_exits_with_status_1(tmp_path):
    missing = tmp_path / "captions.json"
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-m", "modeling_pacs.cli", "score", str(missing), "--model", "tiny"],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip
    assert result.returncode == ERROR_STATUS == 1
    assert result.stderr == f"pacs-pp score: error: input file '{missing}' does not exist\n"
