"""One form for warnings, on one stream, and no library chatter (issue 32, point 5; `modeling_pacs/logs.py`)."""

import logging
import warnings

import pytest
import transformers

from modeling_pacs import logs
from modeling_pacs.loading import load_model


@pytest.fixture(autouse=True)
def api_mode(monkeypatch):
    monkeypatch.setattr(logs, "_command_mode", None)


def test_a_command_warning_is_one_line_on_stderr(capsys):
    logs.setup_command_logging()
    logs.setup_command_logging()  # a second command in the same process adds no second handler
    logging.getLogger("modeling_pacs.loading").warning("model 'tiny' has RANDOM weights")
    logging.getLogger("pacs_pp.score_corpus").info("a progress note")
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err == "warning: model 'tiny' has RANDOM weights\na progress note\n"


def test_a_quiet_command_hides_info_notes(capsys):
    logs.setup_command_logging(level=logging.WARNING)
    logging.getLogger("pacs_pp").info("hidden")
    logging.getLogger("pacs_pp").error("shown")
    assert capsys.readouterr().err == "error: shown\n"


def test_the_python_api_loads_without_library_chatter(capfd, caplog):
    verbosity = transformers.utils.logging.get_verbosity()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model("tiny:pearl", device="cpu")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "LOAD REPORT" not in err
    assert not [warning for warning in caught if issubclass(warning.category, FutureWarning)]
    assert "has RANDOM weights" in caplog.text  # our own warning is never hidden
    assert transformers.utils.logging.get_verbosity() == verbosity  # the caller's settings come back


def test_verbose_brings_the_libraries_back(monkeypatch):
    calls = []
    monkeypatch.setattr(transformers.utils.logging, "disable_progress_bar", lambda: calls.append("disabled"))
    logs.setup_command_logging(verbose=True)
    with logs.quiet_library_loading():
        pass
    assert calls == []
