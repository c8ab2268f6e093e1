"""Checkpoint converter: parity with the ORIGINAL CLIP code on tiny checkpoints in the official layouts, safe loading,
layout errors, Hub-ready output, model card and Hub dry run."""

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from modeling_pacs.cli import main as pacs_pp_main
from modeling_pacs.hub import ModelDirectoryError, push_model_directory, validate_model_directory
from modeling_pacs.pacs.convert import CheckpointError, convert_checkpoint, convert_state_dict, load_official_checkpoint
from modeling_pacs.pacs.model_card import render_model_card
from tests.references.original_clip import (
    add_official_lora,
    build_open_clip_towers,
    build_original_clip,
    open_clip_state_dict,
    original_features,
    original_preprocess,
    original_tokenize,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_HEAD_DIM = 8  # tiny checkpoints: width 32, 4 heads (released CLIPs use width // 64)
PREFIX = "A photo depicts "
CAPTIONS = [
    "a red square on a  green field",
    "two dogs playing in the snow",
    "a very long caption " + "with many repeated words " * 20,
]
REFERENCES = [["a red box on grass", "a square"], ["dogs in snow"], ["a long text", "something else entirely"]]
TOLERANCE = 1e-5


def make_images() -> list[Image.Image]:
    generator = np.random.default_rng(0)
    sizes = [(224, 224), (300, 250), (180, 320)]
    return [Image.fromarray(generator.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


def reference_scores(image_features, text_features, reference_features, w):
    """Eqs. 4 and 5 in NumPy on the original code's features (independent of modeling_pacs.models.scoring)."""
    image = image_features.numpy().astype(np.float64)
    text = text_features.numpy().astype(np.float64)
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    scores = w * np.maximum((image * text).sum(axis=1), 0)
    ref_scores = []
    for item, references in enumerate(reference_features):
        refs = references.numpy().astype(np.float64)
        refs /= np.linalg.norm(refs, axis=1, keepdims=True)
        similarity = max(float((refs @ text[item]).max()), 0.0)
        total = scores[item] + similarity
        ref_scores.append(2 * scores[item] * similarity / total if total > 0 else 0.0)
    return scores, np.array(ref_scores)


def original_code(state_dict, lora_mode=None, activation="quick_gelu"):
    """Features from OpenAI's `clip/model.py` loaded with `state_dict` (LoRA deltas applied as in `lora_mode`)."""

    def encode(pixels, token_ids):
        return original_features(state_dict, pixels, token_ids, lora_mode, activation=activation)

    return encode


def assert_parity(model, encode, w):
    """Features (with the original preprocessing and tokenizer) and Eq. 4 / Eq. 5 scores equal the reference's."""
    images = make_images()
    pixels = torch.stack([original_preprocess(image) for image in images])
    texts = [PREFIX + " ".join(caption.split()) for caption in CAPTIONS]
    image_features, text_features = encode(pixels, original_tokenize(texts))
    reference_features = [
        encode(pixels[:1], original_tokenize([PREFIX + reference for reference in references]))[1]
        for references in REFERENCES
    ]
    torch.testing.assert_close(model.encode_images(images), image_features, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(model.encode_texts(CAPTIONS), text_features, atol=TOLERANCE, rtol=0)
    output = model.score(images, CAPTIONS, references=REFERENCES)
    scores, ref_scores = reference_scores(image_features, text_features, reference_features, w)
    cosines = torch.nn.functional.cosine_similarity(image_features.double(), text_features.double()).numpy()
    np.testing.assert_allclose(output.image_text_cosines.numpy(), cosines, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(output.scores.numpy(), scores, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(output.ref_scores.numpy(), ref_scores, atol=TOLERANCE, rtol=0)
    assert output.scores.max() > 0 and output.ref_scores.max() > 0  # clipping did not hide the comparison
    return image_features


@pytest.fixture(scope="module")
def lora_checkpoint(tmp_path_factory):
    """A tiny PAC-S++ checkpoint in the official layout: OpenAI CLIP ViT (QuickGELU) + custom-loralib keys."""
    state_dict = add_official_lora(build_original_clip(activation="quick_gelu", seed=0).state_dict(), seed=1)
    path = tmp_path_factory.mktemp("checkpoints") / "PAC++_clip_tiny.pth"
    torch.save({"state_dict": state_dict, "epoch": 7}, path)
    return path, state_dict


@pytest.fixture(scope="module")
def converted_dirs(lora_checkpoint, tmp_path_factory):
    """`official` through `pacs-pp convert` (with a Hub dry run), `full` through the library."""
    path, _ = lora_checkpoint
    root = tmp_path_factory.mktemp("converted")
    arguments = ["convert", "--checkpoint", str(path), "--variant", "pac_s_pp_vit_b32"]
    arguments += ["--output-dir", str(root / "official"), "--allow-other-geometry", "--head-dim", str(TINY_HEAD_DIM)]
    arguments += ["--push-to-hub", "someone/pac-s-pp-tiny", "--dry-run"]
    assert pacs_pp_main(arguments) == 0
    logs = []
    convert_checkpoint(
        path, "pac_s_pp_vit_b32", root / "full", lora_mode="full", head_dim=TINY_HEAD_DIM,
        allow_other_geometry=True, verify=False, log=logs.append,
    )  # fmt: skip
    return {"official": root / "official", "full": root / "full", "full_log": "\n".join(logs)}


@pytest.mark.parametrize("lora_mode", ["official", "full"])
def test_pac_s_pp_matches_original_code(converted_dirs, lora_checkpoint, lora_mode):
    from transformers import AutoModel

    _, state_dict = lora_checkpoint
    model = AutoModel.from_pretrained(converted_dirs[lora_mode], trust_remote_code=True, dtype=torch.float32).eval()
    assert model.config.variant == "pac_s_pp" and model.config.w == 2.5
    image_features = assert_parity(model, original_code(state_dict, lora_mode), w=2.5)
    # The modes differ, and both differ from the base weights: the comparison is not vacuous.
    other_mode = "full" if lora_mode == "official" else "official"
    pixels = torch.stack([original_preprocess(image) for image in make_images()])
    tokens = original_tokenize(["x"])
    other, _ = original_features(state_dict, pixels, tokens, other_mode)
    base, _ = original_features({k: v for k, v in state_dict.items() if "lora_" not in k}, pixels, tokens)
    assert (other - image_features).abs().max() > 1e-2
    assert (base - image_features).abs().max() > 1e-2


def test_converted_directory_is_hub_ready(converted_dirs):
    directory = converted_dirs["official"]
    adapter_config = json.loads((directory / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == "openai/clip-vit-base-patch32"
    assert sorted(adapter_config["target_modules"]) == ["k_proj", "out_proj", "q_proj", "v_proj"]
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 1.0
    full_config = json.loads((converted_dirs["full"] / "adapter" / "adapter_config.json").read_text())
    assert sorted(full_config["target_modules"]) == ["fc1", "fc2", "k_proj", "out_proj", "q_proj", "v_proj"]
    config = json.loads((directory / "config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_pacs.PACSConfig", "AutoModel": "modeling_pacs.PACSModel"}
    for path in directory.rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    files = validate_model_directory(directory)
    for name in ("model.safetensors", "adapter/adapter_model.safetensors", "README.md", "tokenizer.json"):
        assert name in files
    card = (directory / "README.md").read_text()
    assert "--lora-mode official" in card and "| vision | mlp.c_fc |" in card


def test_printed_delta_norms_match_numpy(converted_dirs, lora_checkpoint):
    _, state_dict = lora_checkpoint
    blocks = [f"visual.transformer.resblocks.{index}." for index in range(2)]
    deltas = [
        (state_dict[f"{block}mlp.c_fc.lora_B"].numpy() @ state_dict[f"{block}mlp.c_fc.lora_A"].numpy()) * 0.25
        for block in blocks
    ]
    expected = np.sqrt(sum((delta.astype(np.float64) ** 2).sum() for delta in deltas))
    line = next(line for line in converted_dirs["full_log"].splitlines() if line.split()[:2] == ["vision", "mlp.c_fc"])
    assert float(line.split()[2]) == pytest.approx(expected, rel=1e-5)
    assert line.split()[4] == "yes"


@pytest.mark.parametrize(
    ("variant", "activation", "w"), [("pac_s_openclip_vit_l14", "gelu", 2.0), ("pac_s_vit_b32", "quick_gelu", 2.0)]
)
def test_pac_s_matches_original_code(variant, activation, w):
    state_dict = build_original_clip(activation=activation, seed=3).state_dict()
    converted = convert_state_dict(state_dict, variant, head_dim=TINY_HEAD_DIM, allow_other_geometry=True)
    model = converted.model.eval()
    assert model.config.backbone_config.text_config.hidden_act == activation
    assert model.config.adapter_path is None and converted.delta_norms == []
    assert_parity(model, original_code(state_dict, None, activation), w)


def test_pac_s_openclip_matches_open_clip_code():
    """The OpenCLIP layout checked against open_clip's own towers (ViT-L-14 laion2b defaults), not only against
    OpenAI's code with GELU."""
    visual, text = build_open_clip_towers(seed=8)  # cosines of both signs: clipped and unclipped items
    converted = convert_state_dict(
        open_clip_state_dict(visual, text), "pac_s_openclip_vit_l14", head_dim=TINY_HEAD_DIM, allow_other_geometry=True
    )

    def encode(pixels, token_ids):
        with torch.no_grad():
            return visual(pixels), text(token_ids.long())

    assert_parity(converted.model.eval(), encode, w=2.0)


def test_fp16_data_parallel_checkpoint_converts_in_fp32(tmp_path):
    """Half-precision weights saved from a DataParallel model: `module.` prefixes, metadata entries, fp16."""
    state_dict = build_original_clip(activation="quick_gelu", seed=4).state_dict()
    half = {f"module.{key}": value.half() for key, value in state_dict.items()}
    half["module.input_resolution"] = torch.tensor(224)
    path = tmp_path / "clip_ViT-B-32.pth"
    torch.save({"state_dict": half, "optimizer": {"lr": 1e-4}}, path)
    converted = convert_state_dict(
        load_official_checkpoint(path), "pac_s_vit_b32", head_dim=TINY_HEAD_DIM, allow_other_geometry=True
    )
    assert converted.source_dtype == "float16"
    assert converted.model.clip.visual_projection.weight.dtype == torch.float32
    upcast = {
        key.removeprefix("module."): value.float() for key, value in half.items() if "input_resolution" not in key
    }
    assert_parity(converted.model.eval(), original_code(upcast), w=2.0)


def test_pickle_with_code_is_refused(tmp_path, capsys):
    marker = tmp_path / "code-ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pth"
    torch.save({"state_dict": {"visual.proj": torch.zeros(2, 2)}, "payload": Exploit()}, path)
    with pytest.raises(CheckpointError, match=r"refused to load .*evil\.pth.*weights_only=True"):
        load_official_checkpoint(path)
    from modeling_pacs.cli import convert as cli

    arguments = ["--checkpoint", str(path), "--variant", "pac_s_vit_b32", "--output-dir", str(tmp_path / "out")]
    assert cli.main(arguments) == 2
    assert "refused to load" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_wrong_layout_names_bad_keys(tmp_path, lora_checkpoint):
    _, lora_state_dict = lora_checkpoint
    state_dict = {key: value for key, value in lora_state_dict.items() if "lora_" not in key}
    broken = dict(state_dict)
    del broken["visual.ln_post.weight"]
    broken["visual.extra_head.weight"] = torch.zeros(3)
    broken["transformer.resblocks.1.mlp.c_fc.bias"] = torch.zeros(5)
    with pytest.raises(CheckpointError) as error:
        convert_state_dict(broken, "pac_s_vit_b32", head_dim=TINY_HEAD_DIM, allow_other_geometry=True)
    message = str(error.value)
    assert "missing keys (1): visual.ln_post.weight" in message
    assert "unexpected keys (1): visual.extra_head.weight" in message
    assert "transformer.resblocks.1.mlp.c_fc.bias (5,) (expected (128,))" in message

    with pytest.raises(CheckpointError, match=r"looks like a PAC-S\+\+ checkpoint"):
        convert_state_dict(lora_state_dict, "pac_s_vit_b32", head_dim=TINY_HEAD_DIM, allow_other_geometry=True)
    with pytest.raises(CheckpointError, match=r"missing keys \(\d+\): .*in_proj_weight_lora_A"):
        convert_state_dict(state_dict, "pac_s_pp_vit_b32", head_dim=TINY_HEAD_DIM, allow_other_geometry=True)
    with pytest.raises(CheckpointError, match=r"vision_width 32 \(expected 768\).*--allow-other-geometry"):
        convert_state_dict(state_dict, "pac_s_vit_b32", head_dim=TINY_HEAD_DIM)

    not_clip = tmp_path / "resnet.pth"
    torch.save({"state_dict": {"conv1.weight": torch.zeros(1), "fc.weight": torch.zeros(1)}}, not_clip)
    with pytest.raises(CheckpointError) as error:
        convert_checkpoint(not_clip, "pac_s_vit_b32", tmp_path / "out")
    assert "not a CLIP ViT checkpoint" in str(error.value)
    assert "missing keys (7): visual.conv1.weight" in str(error.value)
    assert "unexpected keys (2): conv1.weight, fc.weight" in str(error.value)

    no_weights = tmp_path / "optimizer.pth"
    torch.save({"epoch": 3, "optimizer": {"lr": 0.1}}, no_weights)
    with pytest.raises(CheckpointError, match=r"holds no state dict.*\['epoch', 'optimizer'\]"):
        load_official_checkpoint(no_weights)


def test_model_card_file_is_the_rendered_card():
    assert (REPO_ROOT / "MODEL_CARD.md").read_text(encoding="utf-8") == render_model_card("pac_s_pp_vit_b32")


def test_model_card_metadata_marks_reported_results():
    card = render_model_card("pac_s_pp_vit_b32")
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert metadata["base_model"] == "openai/clip-vit-base-patch32" and metadata["library_name"] == "transformers"
    assert {"license", "tags", "model-index"} <= set(metadata)
    results = {result["dataset"]["name"]: result for result in metadata["model-index"][0]["results"]}
    expert = {metric["name"]: metric["value"] for metric in results["Flickr8k-Expert"]["metrics"]}
    assert expert["PAC-S++ Kendall tau-c (reported)"] == 54.5 and expert["RefPAC-S++ Kendall tau-c (reported)"] == 55.7
    for result in results.values():
        assert "not reproduced" in result["source"]["name"]
        assert all(metric["verified"] is False for metric in result["metrics"])
    assert "w = 2.5" in card and "trust_remote_code=True" in card and "evaluate.load" in card
    assert "pacs-score" in card and "@article{sarto2025positive" in card and "## Limitations" in card
    large = render_model_card("pac_s_pp_vit_l14", lora_mode="full")
    assert "w = 3.0" in large and "openai/clip-vit-large-patch14" in large and "`full`" in large
    openclip = render_model_card("pac_s_openclip_vit_l14")
    assert "laion/CLIP-ViT-L-14-laion2B-s32B-b82K" in openclip and "plain GELU" in openclip
    assert "model-index" not in openclip  # no reported numbers for this checkpoint in docs/spec/pacs.md#evaluation
    trained = render_model_card(
        "pac_s_pp_vit_b32", lora_mode=None, provenance="trained with scripts/train.py", include_reported_results=False
    )
    assert "trained with scripts/train.py" in trained and "model-index" not in trained
    assert "patch-embedding" not in trained and "adapter/" in trained


def test_hub_dry_run_lists_files_and_reports_problems(converted_dirs, tmp_path, capsys):
    files = push_model_directory(converted_dirs["official"], "someone/pac-s-pp-tiny", dry_run=True)
    assert "adapter/adapter_config.json" in files and "configuration_pacs.py" in files
    assert "would upload" in capsys.readouterr().out

    broken = tmp_path / "broken"
    shutil.copytree(converted_dirs["official"], broken)
    (broken / "model.safetensors").chmod(0o600)
    (broken / "scoring.py").unlink()
    adapter_config_path = broken / "adapter" / "adapter_config.json"
    adapter_config = json.loads(adapter_config_path.read_text())
    adapter_config["base_model_name_or_path"] = "/tmp/some/local/clip"
    adapter_config_path.write_text(json.dumps(adapter_config))
    (broken / "README.md").write_text("# a card without metadata\n")
    (broken / "pytorch_model.bin").write_bytes(b"pickle")
    (broken / "pytorch_model.bin").chmod(0o644)
    with pytest.raises(ModelDirectoryError) as error:
        push_model_directory(broken, "someone/pac-s-pp-tiny", dry_run=True)
    message = str(error.value)
    assert "model.safetensors: mode 0o600 is not world-readable" in message
    assert "remote code file scoring.py" in message
    assert "base_model_name_or_path is '/tmp/some/local/clip', a local path, not a Hub id" in message
    assert "README.md has no YAML front matter" in message
    assert "pytorch_model.bin: pickle files are not published" in message
    with pytest.raises(ValueError, match="owner/name"):
        push_model_directory(converted_dirs["official"], "/not/a/repo", dry_run=True)


def test_hub_push_creates_repo_then_uploads(converted_dirs, monkeypatch):
    import huggingface_hub

    calls = []

    class RecordingApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))

        def upload_folder(self, **kwargs):
            calls.append(("upload_folder", kwargs))
            return "https://huggingface.co/someone/pac-s-pp-tiny/commit/0"

    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    push_model_directory(converted_dirs["official"], "someone/pac-s-pp-tiny", private=True, log=lambda *args: None)
    expected_options = {"repo_type": "model", "private": True, "exist_ok": True}
    assert calls[1] == ("create_repo", "someone/pac-s-pp-tiny", expected_options)
    assert calls[2][1]["folder_path"] == str(converted_dirs["official"])
    assert calls[2][1]["repo_id"] == "someone/pac-s-pp-tiny"


def test_converted_directory_scores_in_a_fresh_process_through_remote_code(converted_dirs, tmp_path):
    """No `modeling_pacs` import in the child: AutoModel must run the directory's own remote code, offline."""
    import subprocess
    import sys

    image_path = tmp_path / "image.png"
    make_images()[1].save(image_path)
    script = (
        "import json, sys, torch\n"
        "from transformers import AutoModel\n"
        "model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32)\n"
        "assert 'modeling_pacs' not in sys.modules, 'the installed package was imported'\n"
        "out = model.score([sys.argv[2]], [sys.argv[3]], references=[[sys.argv[4]]])\n"
        "print(json.dumps([type(model).__module__, float(out.scores[0]), float(out.ref_scores[0])]))\n"
    )
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH" and not key.startswith("HF_")}
    environment.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    directory = converted_dirs["official"]
    result = subprocess.run(
        [sys.executable, "-c", script, str(directory), str(image_path), CAPTIONS[1], REFERENCES[1][0]],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    module, score, ref_score = json.loads(result.stdout.strip().splitlines()[-1])
    assert module.startswith("transformers_modules.")
    from modeling_pacs import PACSModel

    expected = PACSModel.from_pretrained(directory, dtype=torch.float32).score(
        [str(image_path)], [CAPTIONS[1]], references=[[REFERENCES[1][0]]]
    )
    assert score == pytest.approx(float(expected.scores[0]), abs=1e-6)
    assert ref_score == pytest.approx(float(expected.ref_scores[0]), abs=1e-6)
