"""A missing optional dependency names the extra of setup.py that installs it, at every call site and on command lines.

The extras come from setup.py itself: a new extra fails `test_every_extra_has_a_call_site` until a case is added here.
"""

import ast
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from modeling_pacs.errors import PacsError
from modeling_pacs.extras import MissingExtraError, missing_extra_message, require

ROOT = Path(__file__).resolve().parents[1]
# Pip names whose import name differs.
IMPORT_NAMES = {"protobuf": "google.protobuf"}
# Extras that are not features of the package (tools for its developers).
NOT_FEATURES = {"dev"}


def setup_extras() -> dict[str, list[str]]:
    """setup.py's `extras_require`, read from its syntax tree (setup.py cannot be imported: it calls setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            extras = ast.literal_eval(node.value)
            return {
                extra: [re.split(r"[<>=!~\[ ]", package)[0] for package in packages]
                for extra, packages in extras.items()
            }
    raise AssertionError("setup.py has no extras_require")


def import_name(package: str) -> str:
    return IMPORT_NAMES.get(package, package.replace("-", "_"))


EXTRAS = {extra: packages for extra, packages in setup_extras().items() if extra not in NOT_FEATURES}
EXTRA_MODULES = [(extra, import_name(package)) for extra, packages in EXTRAS.items() for package in packages]


def block(monkeypatch, module: str):
    """Make `import module` fail as if it were not installed (also when it was imported already)."""
    monkeypatch.setitem(sys.modules, module, None)


def load_space_app():
    spec = importlib.util.spec_from_file_location("space_app_without_gradio", ROOT / "space" / "app.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


@pytest.mark.parametrize(("extra", "module"), EXTRA_MODULES, ids=[f"{e}-{m}" for e, m in EXTRA_MODULES])
def test_require_names_the_extra_of_every_package(monkeypatch, extra, module):
    block(monkeypatch, module)
    with pytest.raises(MissingExtraError) as raised:
        require(module, extra, "This feature")
    assert str(raised.value) == f"This feature needs {module}: pip install 'pacs-pp[{extra}]'"
    assert isinstance(raised.value, ImportError)


def test_require_returns_the_module_and_keeps_broken_installs_visible(tmp_path, monkeypatch):
    assert require("json", "demo", "JSON") is json
    # An installed module whose own dependency is missing: that error is not hidden behind the extra's message.
    (tmp_path / "installed_but_broken.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as raised:
        require("installed_but_broken", "demo", "This feature")
    assert not isinstance(raised.value, MissingExtraError)
    assert raised.value.name == "a_dependency_that_is_not_installed"


def pearl_cli(tmp_path, monkeypatch):
    """`pacs-pp score captions.json --model tiny:pearl` with an empty tiny-model cache."""
    from modeling_pacs.cli import main

    monkeypatch.setenv("PACS_PP_CACHE", str(tmp_path / "cache"))
    PIL.Image.new("RGB", (8, 8), "red").save(tmp_path / "red.png")
    (tmp_path / "captions.json").write_text(json.dumps({"red.png": "a red square"}))
    main(["score", str(tmp_path / "captions.json"), "--model", "tiny:pearl"])


def siglip_cli(tmp_path, monkeypatch):
    """`pacs-pp make-tiny DIR --backbone siglip` (its tokenizer is a sentencepiece model trained in code)."""
    from modeling_pacs.cli import main

    main(["make-tiny", str(tmp_path / "tiny-siglip"), "--backbone", "siglip"])


def correlations(tmp_path, monkeypatch):
    from modeling_pacs.supervised.correlations import correlation

    correlation(np.arange(3.0), np.arange(3.0), "pearson")


def pascal_mat(tmp_path, monkeypatch):
    from modeling_pacs.evaluation.pascal50s import load_mat

    load_mat(tmp_path / "pair_pascal.mat", "layout", "new_input")


def video_file(tmp_path, monkeypatch):
    from modeling_pacs.models.video import VideoFile

    (tmp_path / "clip.mp4").write_bytes(b"not decoded: PyAV is imported first")
    VideoFile(tmp_path / "clip.mp4")


def stable_diffusion(tmp_path, monkeypatch):
    from modeling_pacs.synthetic.generation import GenerationSettings, StableDiffusionGenerator

    StableDiffusionGenerator(GenerationSettings(), "cpu")


def cider_reward(tmp_path, monkeypatch):
    from modeling_pacs.captioning.rewards import CIDErDReward

    CIDErDReward()


def torchmetrics_metric(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "modeling_pacs.evaluation.torch_metrics", raising=False)
    importlib.import_module("modeling_pacs.evaluation.torch_metrics")


def space(tmp_path, monkeypatch):
    load_space_app()


# extra -> (the module made missing, what fails without it, the message, whether a command line prints it).
CALL_SITES = {
    "train": ("scipy", correlations, "Validation correlations needs scipy: pip install 'pacs-pp[train]'"),
    "video": ("av", video_file, "Reading video files needs av: pip install 'pacs-pp[video]'"),
    "benchmarks": (
        "scipy",
        pascal_mat,
        "Reading PASCAL-50S's .mat files needs scipy: pip install 'pacs-pp[benchmarks]'",
    ),
    "generate": (
        "diffusers",
        stable_diffusion,
        "Generating synthetic images needs diffusers: pip install 'pacs-pp[generate]'",
    ),
    "siglip": (
        "sentencepiece",
        siglip_cli,
        "pacs-pp make-tiny: error: SigLIP needs sentencepiece: pip install 'pacs-pp[siglip]'",
    ),
    "pearl": (
        "sentencepiece",
        pearl_cli,
        "pacs-pp score: error: Pearl needs sentencepiece: pip install 'pacs-pp[pearl]'",
    ),
    "demo": ("gradio", space, "The Space needs gradio: pip install 'pacs-pp[demo]'"),
    "captioning": (
        "pycocoevalcap",
        cider_reward,
        "The CIDEr-D reward needs pycocoevalcap: pip install 'pacs-pp[captioning]'",
    ),
    "torchmetrics": (
        "torchmetrics",
        torchmetrics_metric,
        "ModelMetric (the torchmetrics Metric of every model metric) needs torchmetrics: pip install "
        "'pacs-pp[torchmetrics]'",
    ),
}


def test_every_extra_has_a_call_site():
    assert sorted(CALL_SITES) == sorted(EXTRAS), "add a case for the new extra of setup.py to CALL_SITES"
    for extra, (module, _, _) in CALL_SITES.items():
        assert module in [import_name(package) for package in EXTRAS[extra]], (extra, module)


@pytest.mark.parametrize("extra", sorted(CALL_SITES))
def test_call_site_names_the_extra(tmp_path, monkeypatch, extra):
    module, call, message = CALL_SITES[extra]
    block(monkeypatch, module)
    if ": error: " in message:  # a command line: the message, exit status 1, no traceback
        with pytest.raises(SystemExit) as raised:
            call(tmp_path, monkeypatch)
        assert raised.value.code == message
    else:
        with pytest.raises(ImportError) as raised:
            call(tmp_path, monkeypatch)
        assert str(raised.value) == message
        if extra != "video":  # the remote code (models/video.py) cannot import the package: a plain ImportError
            assert isinstance(raised.value, MissingExtraError) and isinstance(raised.value, PacsError)


def test_message_format():
    assert missing_extra_message("sentencepiece", "pearl", "Pearl") == (
        "Pearl needs sentencepiece: pip install 'pacs-pp[pearl]'"
    )
