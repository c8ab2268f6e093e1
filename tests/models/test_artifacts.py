"""Damaged model directories: every file of a PAC-S, PAC-S++ (adapter), Polos and Pearl directory x every damage ->
one `CorruptArtifactError` naming the file, the problem and the fix, from `load_model` and from
`AutoModel.from_pretrained(..., trust_remote_code=True)` (docs/concepts/corrupt-files.md)."""

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from modeling_pacs.models.artifacts import CorruptArtifactError, check_pickle_checkpoint, read_safetensors_header

FIX = "Re-download the model directory"
# The JSON and safetensors files of each tiny directory kind (checked against the built directories below).
DIRECTORY_FILES = {
    "pac_s": ["config.json", "model.safetensors", "processor_config.json", "tokenizer.json", "tokenizer_config.json"],
    "pac_s_pp": [
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "config.json",
        "model.safetensors",
        "processor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ],
    "polos": [
        "clip_tokenizer/tokenizer.json",
        "clip_tokenizer/tokenizer_config.json",
        "config.json",
        "model.safetensors",
        "text_tokenizer/tokenizer.json",
        "text_tokenizer/tokenizer_config.json",
    ],
    "pearl": [
        "config.json",
        *[f"encoders/{name}/{file}" for name in ("beit3", "blip2") for file in (
            "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")],
        "encoders/clip/adapter/adapter_config.json",
        "encoders/clip/adapter/adapter_model.safetensors",
        *[f"encoders/clip/{file}" for file in (
            "config.json", "model.safetensors", "processor_config.json", "tokenizer.json", "tokenizer_config.json")],
        "encoders/stella/2_Dense_768/config.json",
        "encoders/stella/2_Dense_768/model.safetensors",
        *[f"encoders/stella/{file}" for file in (
            "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")],
        "model.safetensors",
    ],
}  # fmt: skip
# Damage -> the words the message must hold about the problem.
DAMAGES = {
    "deleted": "missing",
    "half": "truncated",
    "empty": "empty",
    "garbage": "garbage|not a safetensors file",
    "json_list": "expected a JSON object",
    "unknown_targets": "target_modules",
    "wrong_rank": "'r' is 8",
}
# Files whose loss is a damage (the rest are optional, or have transformers defaults).
REQUIRED = ("config.json", "model.safetensors", "adapter_config.json", "adapter_model.safetensors")


def applicable(file: str, damage: str) -> bool:
    name = Path(file).name
    if damage == "deleted":
        return name in REQUIRED
    if damage == "json_list":
        return name.endswith(".json")
    if damage in ("unknown_targets", "wrong_rank"):
        return name == "adapter_config.json"
    return True


CASES = [
    pytest.param(kind, file, damage, id=f"{kind}-{file}-{damage}")
    for kind, files in DIRECTORY_FILES.items()
    for file in files
    for damage in DAMAGES
    if applicable(file, damage)
]


@pytest.fixture(scope="module")
def directories(tmp_path_factory):
    from modeling_pacs.testing.directories import tiny_model_directory

    return {kind: tiny_model_directory(kind) for kind in DIRECTORY_FILES}


def damaged_copy(source: Path, target: Path, file: str, damage: str) -> Path:
    """A copy of `source` (hard links: cheap) with `file` damaged; the damaged file is a new inode, so the source
    directory is never touched."""
    shutil.copytree(source, target, copy_function=os.link)
    path = target / file
    content = path.read_bytes()
    path.unlink()
    if damage == "deleted":
        return path
    if damage == "half":
        damaged = content[: len(content) // 2]
    elif damage == "empty":
        damaged = b""
    elif damage == "garbage":
        damaged = random.Random(0).randbytes(len(content))
    elif damage == "json_list":
        damaged = b"[1, 2]"
    else:
        config = json.loads(content)
        if damage == "unknown_targets":
            config["target_modules"] = ["attention_projection"]
        else:
            config["r"] = 8
        damaged = json.dumps(config).encode()
    path.write_bytes(damaged)
    return path


def assert_names_the_damage(error: BaseException, file: str, damage: str):
    message = str(error)
    damaged_name = Path(file).name if damage not in ("unknown_targets", "wrong_rank") else "adapter_config.json"
    assert damaged_name in message, message
    assert re.search(DAMAGES[damage], message), message
    assert FIX in message, message


def test_the_file_lists_are_every_json_and_safetensors_file_of_the_directories(directories):
    for kind, directory in directories.items():
        files = [path for path in directory.rglob("*") if path.suffix in (".json", ".safetensors")]
        found = sorted(str(path.relative_to(directory)) for path in files)
        assert found == sorted(DIRECTORY_FILES[kind]), kind


@pytest.mark.parametrize(("kind", "file", "damage"), CASES)
def test_load_model_names_the_damaged_file_the_problem_and_the_fix(directories, tmp_path, kind, file, damage):
    from modeling_pacs.loading import load_model

    damaged_copy(directories[kind], tmp_path / kind, file, damage)
    with pytest.raises(CorruptArtifactError) as error:
        load_model(str(tmp_path / kind), device="cpu")
    assert_names_the_damage(error.value, file, damage)


@pytest.mark.parametrize(("kind", "file", "damage"), [case for case in CASES if case.values[1] != "config.json"])
def test_automodel_with_remote_code_names_the_damaged_file_the_problem_and_the_fix(
    directories, tmp_path, kind, file, damage
):
    from transformers import AutoModel

    damaged_copy(directories[kind], tmp_path / kind, file, damage)
    with pytest.raises(CorruptArtifactError) as error:
        AutoModel.from_pretrained(str(tmp_path / kind), trust_remote_code=True)
    assert_names_the_damage(error.value, file, damage)


@pytest.mark.parametrize("damage", ["deleted", "half", "empty", "garbage", "json_list"])
def test_automodel_reads_the_top_config_before_the_remote_code_exists_and_names_it(directories, tmp_path, damage):
    """transformers parses config.json before it can import our code (the config names the code): its own message
    names the file (load_model gives the project's message, above)."""
    from transformers import AutoModel

    damaged_copy(directories["pac_s"], tmp_path / "model", "config.json", damage)
    with pytest.raises((OSError, ValueError)) as error:
        AutoModel.from_pretrained(str(tmp_path / "model"), trust_remote_code=True)
    assert "config.json" in str(error.value) or "config file" in str(error.value)


def test_weights_that_do_not_fit_the_config_name_both(directories, tmp_path):
    from modeling_pacs.loading import load_model

    shutil.copytree(directories["pac_s"], tmp_path / "model", copy_function=os.link)
    config_path = tmp_path / "model" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.unlink()
    config["backbone_config"]["projection_dim"] *= 2
    config_path.write_text(json.dumps(config))
    with pytest.raises(CorruptArtifactError, match=r"model\.safetensors.*do not fit config\.json.*Re-download"):
        load_model(str(tmp_path / "model"), device="cpu")


# ------------------------------------------------------------------------------------ converters' inputs
def non_checkpoints(folder: Path) -> dict[str, tuple[Path, str]]:
    """Files named like checkpoints that are not: name -> (path, words the message must hold)."""
    import zipfile

    cases = {}
    text = folder / "text.pth"
    text.write_text("this is not a checkpoint\n")
    cases["text"] = (text, "a text file")
    html = folder / "error_page.ckpt"
    html.write_text("<html><body>404 Not Found</body></html>")
    cases["html"] = (html, "a text file")
    pointer = folder / "lfs.pth"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 812\n")
    cases["git_lfs_pointer"] = (pointer, "Git LFS pointer")
    empty = folder / "empty.pth"
    empty.write_bytes(b"")
    cases["empty"] = (empty, "empty")
    archive = folder / "archive.pth"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("readme.txt", "hello")
    cases["zip_without_data_pkl"] = (archive, "no data.pkl")
    garbage = folder / "garbage.pth"
    garbage.write_bytes(random.Random(1).randbytes(4096).replace(b"\x80", b"\x81").replace(b"PK", b"QK"))
    cases["garbage"] = (garbage, "not a PyTorch checkpoint")
    lying = folder / "lying.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}).encode()
    lying.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 16)
    cases["safetensors_header_lies"] = (lying, "truncated")
    return cases


def truncated_torch_checkpoint(folder: Path) -> Path:
    import torch

    whole = folder / "whole.pth"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, whole)
    half = folder / "half.pth"
    half.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return half


def test_non_checkpoints_are_refused_by_the_sniffer(tmp_path):
    for name, (path, words) in non_checkpoints(tmp_path).items():
        with pytest.raises(CorruptArtifactError) as error:
            check_pickle_checkpoint(path)
        assert path.name in str(error.value) and words in str(error.value), name
        assert "download it again" in str(error.value)
    with pytest.raises(CorruptArtifactError, match=r"half\.pth.*truncated"):
        check_pickle_checkpoint(truncated_torch_checkpoint(tmp_path))


def test_a_sound_safetensors_file_and_a_torch_checkpoint_pass(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(3, 2)}, tmp_path / "a.safetensors")
    assert read_safetensors_header(tmp_path / "a.safetensors")["w"]["shape"] == [3, 2]
    torch.save({"w": torch.zeros(2)}, tmp_path / "a.pth")
    check_pickle_checkpoint(tmp_path / "a.pth")
    torch.save({"w": torch.zeros(2)}, tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    check_pickle_checkpoint(tmp_path / "legacy.pth")


CONVERTERS = {
    "convert": ["--checkpoint", "{input}", "--variant", "pac_s_pp_vit_b32"],
    "convert-polos": ["--checkpoint", "{input}"],
    "convert-pearl": ["--checkpoint", "{input}"],
    "convert-longclip": ["--checkpoint", "{input}"],
    "convert-beit3": ["--checkpoint", "{input}", "--sentencepiece", "{input}"],
}


@pytest.mark.parametrize("command", sorted(CONVERTERS))
def test_every_converter_refuses_non_checkpoints_with_one_message_naming_the_file(command, tmp_path, capsys):
    from modeling_pacs.cli.main import main

    cases = non_checkpoints(tmp_path)
    cases["truncated"] = (truncated_torch_checkpoint(tmp_path), "truncated")
    for name, (path, words) in cases.items():
        arguments = [part.replace("{input}", str(path)) for part in CONVERTERS[command]]
        output = tmp_path / f"out-{command}-{name}"
        try:
            code = main([command, *arguments, "--output-dir", str(output)])
        except SystemExit as exit:
            code = exit.code
        error = capsys.readouterr().err
        assert code not in (0, None), (command, name)
        assert path.name in error and words in error, (command, name, error)
        assert "Traceback" not in error
        assert not output.exists()
