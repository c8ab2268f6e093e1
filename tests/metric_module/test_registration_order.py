"""Issue 36, 3: `evaluate.load("pacs_pp")` before `pacs-pp register-metric` is evaluate's own error, which the package
cannot replace (evaluate 0.4 reads no entry points and imports nothing of an installed package: the reasons are in
docs/guides/evaluate-module.md#why-register). So the docs make the order impossible to miss: on every page, the first
example that loads the module by name comes after the registration step."""

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/get-started.md", "docs/guides/evaluate-module.md"]


def test_loading_by_name_before_registering_is_evaluates_file_not_found(tmp_path, monkeypatch):
    import evaluate

    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "modules")  # a fresh cache: nothing registered
    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as raised:
        evaluate.load("pacs_pp")
    assert str(raised.value) == (  # the message the guide shows
        f"Couldn't find a module script at {tmp_path}/pacs_pp/pacs_pp.py. Module 'pacs_pp' doesn't exist on the "
        "Hugging Face Hub either."
    )


def test_every_first_load_by_name_comes_after_the_registration_step():
    blocks = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.M | re.S)
    by_name = re.compile(r"""evaluate\.load\(["']pacs_pp["']""")
    for page in PAGES:
        found = [(language, code) for language, code in blocks.findall((REPO_ROOT / page).read_text(encoding="utf-8"))]
        first_load = next(
            index for index, (language, code) in enumerate(found) if language == "python" and by_name.search(code)
        )
        registration = [
            index for index, (language, code) in enumerate(found) if code.startswith("pacs-pp register-metric")
        ]
        assert registration and registration[0] == first_load - 1, page  # the block just before it
