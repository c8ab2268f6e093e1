"""Saving and loading: a fresh offline process with trust_remote_code reproduces scores; merged == unmerged LoRA."""

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import torch

from modeling_pacs import PACSModel
from tests.fixtures.helpers import assert_scores_close, random_image

CAPTIONS = ["a dog on the grass", "a cat", "", "a red car parked in front of a house"]
REFERENCES = [["a dog lying on a lawn", "grass and a dog"], ["a kitten"], ["a photo"], ["a car", "a red vehicle"]]


@pytest.fixture(scope="module")
def image_paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("io_images")
    paths = []
    for seed in range(4):
        path = folder / f"{seed}.png"
        random_image(seed, (300 + 10 * seed, 240)).save(path)
        paths.append(str(path))
    return paths


def test_fresh_offline_process_with_remote_code_gives_identical_scores(
    tiny_model, tiny_model_dir, image_paths, tmp_path
):
    expected = tiny_model.score(image_paths, CAPTIONS, references=REFERENCES)
    script = textwrap.dedent(
        f"""
        import json, torch
        from transformers import AutoModel, AutoProcessor
        model = AutoModel.from_pretrained({str(tiny_model_dir)!r}, trust_remote_code=True, dtype=torch.float32)
        processor = AutoProcessor.from_pretrained({str(tiny_model_dir)!r}, trust_remote_code=True)
        out = model.score({image_paths!r}, {CAPTIONS!r}, references={REFERENCES!r})
        print(json.dumps({{"module": type(model).__module__, "processor": type(processor).__name__,
                          "scores": out.scores.tolist(), "ref_scores": out.ref_scores.tolist(),
                          "cosines": out.image_text_cosines.tolist()}}))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["module"].startswith("transformers_modules.")  # the copied remote code, not our package
    assert loaded["processor"] == "CLIPProcessor"
    assert_scores_close(loaded["cosines"], expected.image_text_cosines.numpy())  # another process: tolerance
    assert_scores_close(loaded["scores"], expected.scores.numpy())
    assert_scores_close(loaded["ref_scores"], expected.ref_scores.numpy())


def test_merged_and_unmerged_lora_agree(tiny_model_dir, image_paths):
    merged = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32)
    unmerged = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32, merge_adapter=False)
    base = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32, load_adapter=False)
    assert unmerged.peft_model is not None and merged.peft_model is None
    a = merged.score(image_paths, CAPTIONS, references=REFERENCES)
    b = unmerged.score(image_paths, CAPTIONS, references=REFERENCES)
    c = base.score(image_paths, CAPTIONS, references=REFERENCES)
    assert torch.allclose(a.image_text_cosines, b.image_text_cosines, atol=1e-5, rtol=0)
    assert torch.allclose(a.reference_similarities, b.reference_similarities, atol=1e-5, rtol=0)
    # the adapter really changes the model (otherwise the comparison above would prove nothing)
    assert (a.image_text_cosines - c.image_text_cosines).abs().max() > 1e-3


def test_saved_directory_is_hub_ready(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_pacs.PACSConfig",
        "AutoModel": "modeling_pacs.PACSModel",
    }
    assert config["model_type"] == "pac_s_pp" and config["adapter_path"] == "adapter"
    for name in (
        "configuration_pacs.py",
        "modeling_pacs.py",
        "inputs.py",
        "scoring.py",
        "model.safetensors",
        "tokenizer.json",
        "processor_config.json",
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
    ):
        path = tiny_model_dir / name
        assert path.is_file(), name
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, name
    from modeling_pacs.hub import validate_model_directory

    assert "README.md" in validate_model_directory(tiny_model_dir)  # raises, listing problems, if not Hub-ready
    adapter_config = json.loads((tiny_model_dir / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == "openai/clip-vit-base-patch32"
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 1


def test_remote_code_imports_only_allowed_packages(tiny_model_dir):
    import ast

    allowed = set(sys.stdlib_module_names) | {"torch", "transformers", "peft", "numpy", "PIL"}
    for name in ("configuration_pacs.py", "modeling_pacs.py", "inputs.py", "scoring.py"):
        tree = ast.parse((tiny_model_dir / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            # ftfy is imported only when installed, as transformers 4's CLIP tokenizer did
            assert set(roots) <= allowed | {"ftfy"}, (name, roots)


def test_merged_model_saves_without_adapter_and_reloads_identically(tiny_model, image_paths, tmp_path):
    from modeling_pacs.hub import save_remote_code_model
    from modeling_pacs.tokenization import build_processor

    save_remote_code_model(
        tiny_model, tmp_path / "merged", processor=build_processor(tiny_model.config, tiny_model.tokenizer)
    )
    assert not (tmp_path / "merged" / "adapter").exists()
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["adapter_path"] is None
    reloaded = PACSModel.from_pretrained(tmp_path / "merged", dtype=torch.float32)
    assert torch.equal(
        reloaded.score(image_paths, CAPTIONS).image_text_cosines,
        tiny_model.score(image_paths, CAPTIONS).image_text_cosines,
    )


def test_unmerged_model_saves_base_and_adapter_and_reloads_identically(tiny_model_dir, image_paths, tmp_path):
    from modeling_pacs.hub import save_remote_code_model
    from modeling_pacs.tokenization import build_processor

    unmerged = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32, merge_adapter=False)
    save_remote_code_model(
        unmerged, tmp_path / "unmerged", processor=build_processor(unmerged.config, unmerged.tokenizer)
    )
    assert (tmp_path / "unmerged" / "adapter" / "adapter_model.safetensors").is_file()
    reloaded = PACSModel.from_pretrained(tmp_path / "unmerged", dtype=torch.float32)
    a = reloaded.score(image_paths, CAPTIONS).image_text_cosines
    b = unmerged.score(image_paths, CAPTIONS).image_text_cosines
    assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_merge_adapter_is_a_keyword_of_one_load_and_merge_adapter_merges_later(image_paths):
    """`load_model(..., merge_adapter=False)` keeps this load's adapter unmerged (`merge_deferred`); a load after it
    merges as the config says; `merge_adapter()` then merges, with the merged load's scores."""
    import dataclasses

    from modeling_pacs.loading import load_model
    from modeling_pacs.registry import METRICS

    unmerged = load_model("tiny", device="cpu", merge_adapter=False)
    merged = load_model("tiny", device="cpu")
    assert merged.peft_model is None and not merged.merge_deferred and merged.config.adapter_path is None
    assert unmerged.peft_model is not None and unmerged.merge_deferred and unmerged.config.merge_adapter
    images = image_paths[:2]
    expected = merged.score(images, CAPTIONS[:2], references=REFERENCES[:2])
    kept = unmerged.score(images, CAPTIONS[:2], references=REFERENCES[:2])
    assert torch.allclose(kept.image_text_cosines, expected.image_text_cosines, atol=1e-6, rtol=0)
    unmerged.merge_adapter()
    assert unmerged.peft_model is None and not unmerged.merge_deferred and unmerged.config.adapter_path is None
    now = unmerged.score(images, CAPTIONS[:2], references=REFERENCES[:2])
    assert torch.allclose(now.image_text_cosines, expected.image_text_cosines, atol=1e-6, rtol=0)
    assert torch.allclose(now.reference_similarities, expected.reference_similarities, atol=1e-6, rtol=0)
    assert not hasattr(PACSModel, "defer_adapter_merge")  # no class-level switch that two loads could share
    # a family without adapters does not declare the option: its loader never sees it
    polos = dataclasses.replace(METRICS["polos"], loader="tests.models.test_model_io:recording_loader")
    polos.load("a/b", device="cpu", merge_adapter=False)
    assert RECORDED == [("a/b", {"device": "cpu", "dtype": None})]


RECORDED = []


def recording_loader(name_or_path, **options):
    RECORDED.append((name_or_path, options))
