"""Model directories survive the package's layout: what today's code writes, and what earlier code wrote.

`tests/fixtures/model_directories/` was written once by the code before the layout change (commit 9145fad):
- `directories.json`: for every tiny model the project writes (PAC-S++ / PAC-S / CLIP-S on CLIP, SigLIP, SigLIP 2;
  Polos; Pearl; the captioner), the SHA-256 of each weight file, the `config.json` and the remote-code file names.
  Rebuilding them now must give the same weights and configs (the remote-code files may be renamed).
- `pre_layout_artifacts.tar.gz`: a tiny SigLIP PAC-S++ directory as that code saved it (its own remote code
  inside), and that version's `evaluate` module (what `pacs-pp register-metric` had copied into evaluate's cache);
  `expected_scores.json`: the scores the directory gave. The directory must still load and score the same; the
  `evaluate` module must fail to load with the advice to re-run `pacs-pp register-metric`.
"""

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import evaluate
import numpy as np
import PIL.Image
import pytest
import torch

from modeling_pacs import PACSModel
from tests.fixtures.helpers import assert_scores_close

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model_directories"
RECORDS = json.loads((FIXTURES / "directories.json").read_text())
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())


def digest(directory: Path) -> dict:
    return {
        "safetensors": {
            str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(directory.rglob("*.safetensors"))
        },
        "config": json.loads((directory / "config.json").read_text()),
    }


def build(name: str, directory: Path):
    """Write the tiny model `name` of directories.json with today's code."""
    from modeling_pacs.captioning import PACSCaptionerConfig, PACSCaptionerForConditionalGeneration
    from modeling_pacs.testing.pacs import make_tiny_model
    from modeling_pacs.testing.pearl import make_tiny_pearl
    from modeling_pacs.testing.polos import make_tiny_polos_model

    if name.startswith("pacs:"):
        _, variant, backbone = name.split(":")
        make_tiny_model(directory, variant=variant, seed=1, backbone=backbone)
    elif name == "polos":
        make_tiny_polos_model(directory, seed=1)
    elif name == "pearl":
        make_tiny_pearl(directory, seed=1)
    else:
        torch.manual_seed(0)
        vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
        config = PACSCaptionerConfig(vision_config=vision, hidden_size=32, encoder_layers=2, decoder_layers=2,
                                     num_attention_heads=4, intermediate_size=64)  # fmt: skip
        captioner = PACSCaptionerForConditionalGeneration(config)
        type(captioner.config).register_for_auto_class()
        type(captioner).register_for_auto_class("AutoModel")
        captioner.save_pretrained(directory)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_today_writes_the_same_weights_and_config(name, tmp_path):
    directory = tmp_path / "model"
    build(name, directory)
    written = digest(directory)
    assert written["safetensors"] == RECORDS[name]["safetensors"]
    assert written["config"] == RECORDS[name]["config"]
    # Self-contained: every remote-code file the config's auto_map names is there.
    for reference in written["config"].get("auto_map", {}).values():
        assert (directory / f"{reference.split('.')[0]}.py").is_file()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pre_layout")
    with tarfile.open(FIXTURES / "pre_layout_artifacts.tar.gz") as archive:
        archive.extractall(folder, filter="data")
    rng = np.random.default_rng(0)
    images = []
    for index in range(3):
        path = folder / f"image{index}.png"
        PIL.Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(path)
        images.append(str(path))
    return {"directory": folder / "tiny-siglip-pac_s_pp", "metric": folder / "metric_module_v0", "images": images}


def test_a_directory_saved_before_scores_the_same(artifacts):
    model = PACSModel.from_pretrained(artifacts["directory"], dtype=torch.float32).eval()
    result = model.score(artifacts["images"], EXPECTED["captions"], references=EXPECTED["references"])
    for field in ("image_text_cosines", "scores", "ref_scores"):
        assert_scores_close(getattr(result, field).numpy(), EXPECTED[field], what=field)


def test_a_directory_saved_before_scores_the_same_through_its_own_remote_code(artifacts, tmp_path):
    script = textwrap.dedent(
        f"""
        import json, torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(artifacts["directory"])!r}, trust_remote_code=True, dtype=torch.float32)
        out = model.score({artifacts["images"]!r}, {EXPECTED["captions"]!r}, references={EXPECTED["references"]!r})
        print(json.dumps({{"module": type(model).__module__, "scores": out.scores.tolist(),
                          "ref_scores": out.ref_scores.tolist()}}))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["module"].startswith("transformers_modules.")
    assert_scores_close(loaded["scores"], EXPECTED["scores"])
    assert_scores_close(loaded["ref_scores"], EXPECTED["ref_scores"])


def test_a_metric_module_registered_before_says_to_register_again(artifacts, tmp_path):
    """`pacs-pp register-metric` used to copy the whole metric script into evaluate's cache; that copy imports module
    paths of its time that are gone, and loading it must say what to do rather than fail on a missing module."""
    with pytest.raises(ImportError, match=r"modeling_pacs\.inputs was removed .* re-run `pacs-pp register-metric`"):
        evaluate.load(
            str(artifacts["metric"] / "pacs_pp.py"), model=str(artifacts["directory"]), cache_dir=str(tmp_path)
        )
