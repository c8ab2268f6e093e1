"""Issue 10: bad input, dangerous outputs and faults get a clear error naming the item and the fix, or a documented
policy; nothing returns a silent wrong number or destroys data."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch

from modeling_pacs import CorruptArtifactError, PACSConfig, PACSModel
from modeling_pacs.cli import main as pacs_pp_main
from modeling_pacs.cli import score_main
from modeling_pacs.loading import resolve_device
from modeling_pacs.models.inputs import MAX_ASPECT_RATIO
from modeling_pacs.output_paths import strict_json
from modeling_pacs.pacs.convert import CheckpointError, load_official_checkpoint
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.helpers import random_image
from tests.references.original_clip import add_official_lora, build_original_clip

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoint_folder(tmp_path_factory):
    """A folder holding a tiny official-layout PAC-S++ checkpoint and a file of the user's beside it."""
    folder = tmp_path_factory.mktemp("user_folder")
    state_dict = add_official_lora(build_original_clip(activation="quick_gelu", seed=0).state_dict(), seed=1)
    torch.save({"state_dict": state_dict}, folder / "PAC++_clip_tiny.pth")
    (folder / "notes.txt").write_text("the user's notes")
    return folder


def convert_arguments(folder: Path, output: str) -> list[str]:
    return [
        "convert", "--checkpoint", str(folder / "PAC++_clip_tiny.pth"), "--variant", "pac_s_pp_vit_b32",
        "--output-dir", output, "--allow-other-geometry", "--head-dim", "8", "--no-verify",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------- 1: data loss
def test_convert_refuses_the_current_directory_and_the_checkpoint_folder(checkpoint_folder, monkeypatch, capsys):
    before = sorted(path.name for path in checkpoint_folder.iterdir())
    monkeypatch.chdir(checkpoint_folder)
    assert pacs_pp_main([*convert_arguments(checkpoint_folder, "."), "--overwrite"]) == 2
    assert "is the current directory or one of its parents" in capsys.readouterr().err
    assert pacs_pp_main([*convert_arguments(checkpoint_folder, ".."), "--overwrite"]) == 2
    assert "is the current directory or one of its parents" in capsys.readouterr().err
    monkeypatch.chdir(checkpoint_folder.parent)
    assert pacs_pp_main([*convert_arguments(checkpoint_folder, str(checkpoint_folder)), "--overwrite"]) == 2
    assert "contains the input" in capsys.readouterr().err
    assert sorted(path.name for path in checkpoint_folder.iterdir()) == before  # nothing was deleted


def test_overwrite_replaces_only_a_model_directory(checkpoint_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"not really a photo")
    assert pacs_pp_main([*convert_arguments(checkpoint_folder, str(foreign)), "--overwrite"]) == 2
    error = capsys.readouterr().err
    assert "is not a model directory" in error and "holiday.jpg" in error
    assert (foreign / "holiday.jpg").read_bytes() == b"not really a photo"
    assert pacs_pp_main(convert_arguments(checkpoint_folder, "model")) == 0
    assert pacs_pp_main(convert_arguments(checkpoint_folder, "model")) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert pacs_pp_main([*convert_arguments(checkpoint_folder, "model"), "--overwrite"]) == 0  # a model directory


def test_make_tiny_refuses_a_non_empty_folder(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "data.csv").write_text("a,b\n")
    with pytest.raises(SystemExit, match="exists and is not empty: choose another, or pass --overwrite"):
        pacs_pp_main(["make-tiny", str(tmp_path / "mine")])
    with pytest.raises(SystemExit, match="is not a model directory"):
        pacs_pp_main(["make-tiny", str(tmp_path / "mine"), "--overwrite"])
    assert (tmp_path / "mine" / "data.csv").read_text() == "a,b\n"
    pacs_pp_main(["make-tiny", str(tmp_path / "model")])
    pacs_pp_main(["make-tiny", str(tmp_path / "model"), "--overwrite", "--seed", "3"])
    assert (tmp_path / "model" / "config.json").is_file()


# ---------------------------------------------------------------------------------------------- 3: memory
def test_extreme_aspect_ratio_is_refused_before_the_resize(tiny_model, tmp_path):
    path = tmp_path / "line.png"
    PIL.Image.new("RGB", (1, 15000), (200, 10, 10)).save(path)
    assert path.stat().st_size < 100_000
    with pytest.raises(ValueError) as error:
        tiny_model.score([random_image(0), str(path)], ["a", "b"])
    message = str(error.value)
    assert f"image 1 ('{path}') is 1x15000" in message and f"exceeds the limit of {MAX_ASPECT_RATIO}:1" in message
    at_limit = PIL.Image.new("RGB", (3, 3 * MAX_ASPECT_RATIO), (10, 200, 10))
    assert tiny_model.score([at_limit], ["a green line"]).scores.shape == (1,)


# ---------------------------------------------------------------------------------------------- 4, 5: loading
def test_adapter_is_never_taken_from_the_current_directory(tiny_model_dir, tmp_path, monkeypatch, image_folder):
    other = tmp_path / "other_model"
    make_tiny_model(other, variant="pac_s_pp", seed=5)  # its own, different adapter in other/adapter
    expected = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).score(image_folder[:3], ["a", "b", "c"])
    monkeypatch.chdir(other)
    from_inside_other = PACSModel.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    scores = from_inside_other.score(image_folder[:3], ["a", "b", "c"]).scores
    torch.testing.assert_close(scores, expected.scores, rtol=0, atol=1e-6)
    other_scores = PACSModel.from_pretrained(str(other), dtype=torch.float32).score(image_folder[:3], ["a", "b", "c"])
    assert (other_scores.scores - expected.scores).abs().max() > 1e-3  # the two adapters really differ


def test_missing_adapter_folder_names_the_path(tiny_model_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    shutil.rmtree(copy / "adapter")
    with pytest.raises(
        CorruptArtifactError, match=r"copy/adapter': the LoRA adapter folder that config.json names .* is missing"
    ):
        PACSModel.from_pretrained(copy, dtype=torch.float32)


def test_model_folder_without_tokenizer_files_is_refused(tiny_model_dir, tmp_path):
    copy = tmp_path / "no_tokenizer"
    shutil.copytree(tiny_model_dir, copy)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(OSError) as error:
        PACSModel.from_pretrained(copy, dtype=torch.float32)
    message = str(error.value)
    assert "has 2 tokens but the model's vocabulary has 49408" in message or "tokens but the model's" in message
    assert "tokenizer.json" in message


# ---------------------------------------------------------------------------------------------- 7, 10: CLI files
@pytest.fixture()
def cli_inputs(image_folder, tmp_path):
    mapping = {str(path): [f"caption {index}"] for index, path in enumerate(image_folder[:3])}
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps(mapping))
    return captions, mapping


def run_cli(arguments: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        score_main(arguments)
    return str(exit_info.value)


def test_output_that_is_an_input_or_has_an_unknown_suffix_is_refused(cli_inputs, tiny_model_dir, tmp_path):
    captions, _ = cli_inputs
    original = captions.read_text()
    message = run_cli([str(captions), "--model", str(tiny_model_dir), "-o", str(captions)])
    assert "is also an input: writing it would destroy the input" in message
    assert captions.read_text() == original
    message = run_cli([str(captions), "--model", str(tiny_model_dir), "-o", str(tmp_path / "scores.xlsx")])
    assert "has the suffix '.xlsx', which this command cannot write: use one of .json, .jsonl, .csv" in message
    assert not (tmp_path / "scores.xlsx").exists()


def test_jsonl_output_is_one_json_object_per_line(cli_inputs, tiny_model_dir, tiny_model, tmp_path):
    captions, mapping = cli_inputs
    score_main([str(captions), "--model", str(tiny_model_dir), "-o", str(tmp_path / "scores.jsonl")])
    rows = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert [row["caption"] for row in rows] == ["caption 0", "caption 1", "caption 2"]
    expected = tiny_model.score(list(mapping), [row["caption"] for row in rows]).scores
    np.testing.assert_allclose([row["PAC-S++"] for row in rows], expected.numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("dup.json", '{"a.png": "one caption", "a.png": "another"}', "the key 'a.png' appears twice"),
        ("object.json", '{"a.png": {"text": "a cat"}}', 'the captions of \'a.png\' are {"text": "a cat"}'),
        (
            "broken.json",
            '{"a.png": "x",\n "b.png" "y"}',
            "broken.json: not valid JSON at line 2, column 10: Expecting ':' delimiter",
        ),
        ("empty.json", "{}", "empty.json holds no captions: nothing to score"),
        ("lines.jsonl", '{"image": "a.png", "caption": "x"}\n[1, 2]\n', "line 2 is not a JSON object"),
        ("badline.jsonl", '{"image": "a.png", "caption": "x"}\n{"image": \n', "badline.jsonl: line 2 is not valid"),
        ("refs.csv", 'image,caption,references\na.png,x,"[""r""]"\nb.png,y,[oops\n', "row 1 (line 3): the references"),
    ],
)
def test_malformed_inputs_name_the_file_and_the_place(tmp_path, tiny_model_dir, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert message in run_cli([str(path), "--model", str(tiny_model_dir)])


def test_bom_csv_keeps_its_first_column_and_empty_references_leave_empty_cells(image_folder, tiny_model_dir, tmp_path):
    path = tmp_path / "excel.csv"
    with path.open("w", encoding="utf-8-sig", newline="") as handle:  # Excel's UTF-8 with a byte-order mark
        writer = csv.writer(handle)
        writer.writerow(["image", "caption"])
        writer.writerow([str(image_folder[0]), "a caption"])
    score_main([str(path), "--model", str(tiny_model_dir), "-o", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text())["num_items"] == 1
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps({str(image_folder[0]): []}))
    score_main([str(path), "--model", str(tiny_model_dir), "--references", str(refs), "-o", str(tmp_path / "r.json")])
    result = json.loads((tmp_path / "r.json").read_text())  # the references policy: an empty cell, counted
    assert result["num_without_references"] == 1 and result["items"][0]["RefPAC-S++"] is None


# ---------------------------------------------------------------------------------------------- 8: non-finite
def test_checkpoint_with_nan_weights_is_refused(tmp_path):
    state_dict = build_original_clip(activation="quick_gelu", seed=0).state_dict()
    state_dict["visual.proj"][0, 0] = float("nan")
    torch.save({"state_dict": state_dict}, tmp_path / "nan.pth")
    with pytest.raises(CheckpointError, match=r"1 tensor\(s\) hold NaN or infinite values \(visual.proj\)"):
        load_official_checkpoint(tmp_path / "nan.pth")


def test_a_model_with_nan_weights_raises_instead_of_scoring(tiny_model_dir, image_folder):
    model = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.clip.visual_projection.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite embedding for image 0: its weights contain NaN/Inf"):
        model.score(image_folder[:2], ["a", "b"])


def test_json_never_holds_nan_or_infinity():
    text = strict_json({"mean": float("nan"), "items": [1.5, float("inf")]})
    assert json.loads(text) == {"mean": None, "items": [1.5, None]}
    assert "NaN" not in text and "Infinity" not in text


# ---------------------------------------------------------------------------------------------- 9: parameters
@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [
        ("image_batch_size", -1, "image_batch_size must be a positive integer, got -1"),
        ("image_batch_size", 0, "image_batch_size must be a positive integer, got 0"),
        ("text_batch_size", 2.5, "text_batch_size must be a positive integer, got 2.5"),
    ],
)
def test_batch_sizes_are_validated(tiny_model, image_folder, keyword, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_model.score(image_folder[:2], ["a", "b"], **{keyword: value})


def test_encoder_parameters_are_validated(tiny_model, image_folder):
    with pytest.raises(ValueError, match="num_workers must be a positive integer, got 0"):
        tiny_model.encode_images(image_folder[:1], num_workers=0)
    with pytest.raises(ValueError, match="text batch_size must be a positive integer, got 0"):
        tiny_model.encode_texts(["a"], batch_size=0)


@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [
        ("w", float("nan"), "w must be a finite number > 0, got nan"),
        ("w", -2.5, "w must be a finite number > 0, got -2.5"),
        ("lora_alpha", 0, "lora_alpha must be a finite number > 0, got 0"),
        ("max_text_length", 1, "max_text_length must be an integer >= 2, got 1"),
        ("lora_rank", 0, "lora_rank must be an integer >= 1, got 0"),
    ],
)
def test_config_values_are_validated(keyword, value, message):
    with pytest.raises(ValueError, match=message):
        PACSConfig(**{keyword: value})


def test_cli_numbers_and_devices_are_validated(cli_inputs, tiny_model_dir, capsys):
    captions, _ = cli_inputs
    with pytest.raises(SystemExit):
        score_main([str(captions), "--model", str(tiny_model_dir), "--batch-size", "0"])
    assert "--batch-size: must be a positive integer, got 0" in capsys.readouterr().err
    if not torch.cuda.is_available():
        message = run_cli([str(captions), "--model", str(tiny_model_dir), "--device", "cuda"])
        assert "device 'cuda' was asked for, but CUDA is not available here" in message
    with pytest.raises(ValueError, match="device 'gpu0' is not a device: use 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device("gpu0")


# ---------------------------------------------------------------------------------------------- quiet CLI
def test_cli_prints_its_result_not_library_noise(cli_inputs, tiny_model_dir, tmp_path):
    captions, _ = cli_inputs
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HOME=str(tmp_path / "hf"))
    command = [sys.executable, "-m", "modeling_pacs.cli", "score", str(captions), "--model", str(tiny_model_dir)]
    quiet = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert quiet.stdout.startswith("3 captions scored with ")
    assert quiet.stderr == "", quiet.stderr  # no weight-loading bars, no deprecation warnings
    verbose = subprocess.run([*command, "--verbose"], capture_output=True, text=True, env=environment, timeout=300)
    assert verbose.returncode == 0 and verbose.stdout.startswith("3 captions scored with ")


LIBRARY_NOISE = ("Loading weights", "Writing model shards", "LOAD REPORT", "FutureWarning", "WARNING", "Retrying")


def test_make_tiny_and_the_python_api_are_as_quiet(tmp_path):
    """Issue 32: every entry point as clean as pacs-score; our warnings take one form, `warning: ...` on stderr."""
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HOME=str(tmp_path / "hf"))
    for command in (
        [sys.executable, "-m", "modeling_pacs.cli", "make-tiny", str(tmp_path / "tiny"), "--variant", "pearl"],
        [sys.executable, "-c", "from modeling_pacs.loading import load_model; load_model('tiny:pearl', device='cpu')"],
    ):
        result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert not any(noise in result.stderr + result.stdout for noise in LIBRARY_NOISE), result.stderr[-2000:]
        if command[1] == "-m":  # a command: each line of stderr is one of our warnings
            assert all(line.startswith("warning: ") for line in result.stderr.splitlines()), result.stderr


# ---------------------------------------------------------------------------------------------- 32: model names
def test_unknown_model_name_is_refused_before_any_network_access(cli_inputs, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda *a, **k: pytest.fail("the Hub was asked"))
    captions, _ = cli_inputs
    with pytest.raises(
        SystemExit, match=r"unknown model 'pacs_pp_b32' \(did you mean 'pac_s_pp_vit_b32'\?\): a model "
    ):
        score_main([str(captions), "--model", "pacs_pp_b32"])


def test_offline_hub_id_fails_after_one_attempt(cli_inputs, tmp_path):
    """A Hub that refuses connections (a closed local port): one request, one error line, no retries."""
    captions, _ = cli_inputs
    environment = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="0",
        HF_ENDPOINT="http://127.0.0.1:9",
    )  # fmt: skip
    command = [sys.executable, "-m", "modeling_pacs.cli", "score", str(captions), "--model", "someone/model"]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("pacs-pp score: error: model someone/model is not in the local Hugging Face cache, and the ")
    assert "HF_HUB_OFFLINE=1" in line and "pacs-pp convert" in line and "converting-checkpoints.md" in line


# ---------------------------------------------------------------------------------------------- 10: corpus files
def load_score_corpus():
    from modeling_pacs.cli import score_corpus

    return score_corpus


@pytest.mark.parametrize(
    ("cell", "extra", "message"),
    [
        ("[1, 2]", [], "row 1 (line 3 of corpus.csv): references must be a list of strings, got [1, 2]"),
        (
            '["fine"]',
            ["--keep-columns", "idd"],
            "--keep-columns names ['idd'], which row 0 (line 2 of corpus.csv) does",
        ),
    ],
)
def test_corpus_rows_that_would_drop_data_are_refused(image_folder, tiny_model_dir, tmp_path, cell, extra, message):
    path = tmp_path / "corpus.csv"
    with path.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "caption", "references", "id"])
        writer.writerow([str(image_folder[0]), "a caption", '["a reference"]', "first"])
        writer.writerow([str(image_folder[1]), "another", cell, "second"])
    arguments = [str(path), "--output-dir", str(tmp_path / "out"), "--model", str(tiny_model_dir)]
    with pytest.raises(SystemExit) as exit_info:
        load_score_corpus().main([*arguments, "--references-column", "references", *extra])
    assert message in str(exit_info.value)
    assert not (tmp_path / "out" / "scores.jsonl").exists()


def test_corpus_output_dir_may_not_contain_the_input(image_folder, tiny_model_dir, tmp_path, monkeypatch):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"image": str(image_folder[0]), "caption": "a"}) + "\n")
    monkeypatch.chdir(tmp_path)
    for output in (".", str(tmp_path)):
        with pytest.raises(SystemExit) as exit_info:
            load_score_corpus().main([str(path), "--output-dir", output, "--model", str(tiny_model_dir)])
        assert "--output-dir: output directory" in str(exit_info.value)


def test_every_directory_writer_follows_the_same_output_rules(tmp_path, monkeypatch):
    """The benchmark script (which deletes its --output-dir with --overwrite) and the Polos converter use the same
    check as `pacs-pp convert`: never the current directory, never a folder that is not theirs."""

    from modeling_pacs.cli import evaluate_benchmarks
    from modeling_pacs.polos.convert import convert_polos_checkpoint

    data = tmp_path / "data"
    data.mkdir()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    monkeypatch.chdir(tmp_path)
    base = ["--benchmark", "flickr8k_cf", "--data-dir", str(data), "--scores", f"x={tmp_path / 's.jsonl'}"]
    for output, message in ((".", "is the current directory or one of its parents"), ("mine", "is not an earlier")):
        with pytest.raises(SystemExit, match=message):
            evaluate_benchmarks.main([*base, "--output-dir", output, "--overwrite"])
    assert (mine / "thesis.tex").read_text() == "years of work"
    with pytest.raises(ValueError, match="is the current directory or one of its parents"):
        convert_polos_checkpoint(tmp_path / "reprod.ckpt", ".", overwrite=True)
    with pytest.raises(ValueError, match="is not a model directory"):
        convert_polos_checkpoint(tmp_path / "reprod.ckpt", mine, overwrite=True)


# ---------------------------------------------------------------------------------------------- issue 32: encodings
LATIN1_INPUTS = {
    # name -> (Latin-1 bytes, where the message says the first undecodable byte is)
    "latin1.csv": (
        b'image,caption\na.png,a red circle\nb.png,"un caf\xe9\nover two lines"\nc.png,fine\n',
        "row 1 (line 3)",
    ),
    "latin1.jsonl": (b'{"image": "a.png", "caption": "x"}\n\n{"image": "b.png", "caption": "caf\xe9"}\n', "line 3"),
    "latin1.json": (b'{\n  "a.png": "x",\n  "b.png": "caf\xe9"\n}\n', "line 3"),
}


@pytest.mark.parametrize("name", sorted(LATIN1_INPUTS))
def test_non_utf8_input_names_the_file_the_row_and_the_fix(tmp_path, name):
    content, where = LATIN1_INPUTS[name]
    path = tmp_path / name
    path.write_bytes(content)
    message = run_cli([str(path), "--model", "tiny"])  # refused before any model loads
    assert f"{path}: {where} is not UTF-8 text (byte 0xe9" in message
    assert f"iconv -f latin1 -t utf-8 '{path}' > '{path.with_name(path.stem + '.utf8' + path.suffix)}'" in message


def test_windows_1252_input_is_named_as_such(tmp_path):
    path = tmp_path / "quotes.csv"
    path.write_bytes(b"image,caption\na.png,\x93a quoted caption\x94\n")
    message = run_cli([str(path), "--model", "tiny"])
    assert "row 0 (line 2) is not UTF-8 text (byte 0x93" in message and "iconv -f cp1252 -t utf-8" in message


def test_a_directory_as_input_gets_its_own_message(tmp_path):
    folder = tmp_path / "captions.json"
    folder.mkdir()
    assert f"input file '{folder}' is a directory, not a file" in run_cli([str(folder), "--model", "tiny"])
    refs = tmp_path / "refs"
    refs.mkdir()
    captions = tmp_path / "captions.jsonl"
    captions.write_text(json.dumps({"image": "a.png", "caption": "x"}) + "\n")
    message = run_cli([str(captions), "--references", str(refs), "--model", "tiny"])
    assert f"references file '{refs}' is a directory, not a file" in message
    corpus = tmp_path / "corpus.csv"
    corpus.mkdir()
    with pytest.raises(SystemExit, match=f"input file '{corpus}' is a directory, not a file"):
        load_score_corpus().main([str(corpus), "--output-dir", str(tmp_path / "out"), "--model", "tiny"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_corpus_refuses_non_utf8_before_its_manifest_and_accepts_the_corrected_file(
    image_folder, tiny_model_dir, tmp_path, suffix
):
    path = tmp_path / f"corpus{suffix}"
    captions = ["a first caption", "un caf\u00e9 cr\u00e8me"]
    if suffix == ".csv":
        text = "image,caption\n" + "".join(f"{image},{caption}\n" for image, caption in zip(image_folder, captions))
    else:
        text = "".join(json.dumps({"image": str(image), "caption": caption}, ensure_ascii=False) + "\n"
                       for image, caption in zip(image_folder, captions))  # fmt: skip
    path.write_bytes(text.encode("latin-1"))
    output = tmp_path / "out"
    arguments = [str(path), "--output-dir", str(output), "--model", str(tiny_model_dir), "--no-progress"]
    with pytest.raises(SystemExit) as exit_info:
        load_score_corpus().main(arguments)
    where = "row 1 (line 3)" if suffix == ".csv" else "line 2"
    assert f"{path}: {where} is not UTF-8 text (byte 0xe9" in str(exit_info.value)
    assert not (output / "manifest.json").exists()  # nothing pins the bad file
    path.write_text(text, encoding="utf-8")  # what `iconv -f latin1 -t utf-8` gives
    summary = load_score_corpus().main(arguments)
    assert summary["num_items"] == 2
    rows = [json.loads(line) for line in (output / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["row"] for row in rows] == [0, 1]
