"""Issue 36, 3: a path that is not what a command needs is one line that says what it is and what to do.

- A folder given where a file is expected is refused as a folder, naming what to pass (`input_paths.check_input_file`),
  in `pacs-score`, `evaluate-captions`, every converter and the data readers; never "does not exist".
- Any `OSError` that reaches a command's boundary (`cli/errors.py`, `reports_errors` / `report_error`) is one line
  naming the path, the system's reason and the fix (`os_error_message`), never a traceback.
"""

import errno
import json
import sys
from pathlib import Path

import pytest

from modeling_pacs.cli import main, score_main
from modeling_pacs.cli.errors import OS_ERROR_FIXES, error_line, os_error_message
from modeling_pacs.cli.evaluate_benchmarks import main as evaluate_benchmarks_main
from modeling_pacs.cli.score_corpus import main as score_corpus_main
from modeling_pacs.errors import InputError
from modeling_pacs.input_paths import check_input_file
from modeling_pacs.lightning_checkpoints import read_hparams
from modeling_pacs.supervised.data import read_rows

NOT_A_FOLDER = "Not a directory: a part of the path is a file, not a folder: check the path"


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A folder named like a file, a plain file, and a captions file (the current directory is `tmp_path`)."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "model.ckpt"
    folder.mkdir()
    plain = tmp_path / "notes.txt"
    plain.write_text("not a folder")
    captions = tmp_path / "captions.jsonl"
    captions.write_text(json.dumps({"image": "a.png", "caption": "a cat"}) + "\n")
    return folder, plain, captions


# ------------------------------------------------------------------------------------- a folder given as a file
CONVERTERS = {
    "convert": (["--variant", "pac_s_pp_vit_b32"], "the official .pth file itself (e.g. PAC++_clip_ViT-B-32.pth)"),
    "convert-longclip": ([], "the Long-CLIP .pt file itself (longclip-B.pt)"),
    "convert-polos": ([], "the Polos Lightning checkpoint (.ckpt) itself"),
    "convert-pearl": ([], "the Pearl Lightning checkpoint (.ckpt) itself"),
}


@pytest.mark.parametrize("command", CONVERTERS)
def test_a_converter_names_a_folder_given_as_its_checkpoint(command, places, capsys):
    folder, _, _ = places
    extra, expected = CONVERTERS[command]
    status = main([command, "--checkpoint", str(folder), *extra, "--output-dir", "out"])
    assert status == 2
    assert capsys.readouterr().err == (
        f"pacs-pp {command}: error: checkpoint '{folder}' is a directory, not a file: pass {expected}, not its folder\n"
    )
    assert not Path("out").exists()


def test_convert_beit3_names_a_folder_given_as_either_input(places, capsys):
    folder, plain, _ = places
    assert main(["convert-beit3", "--checkpoint", str(folder), "--sentencepiece", str(plain), "--output-dir", "o"]) == 2
    assert capsys.readouterr().err == (
        f"pacs-pp convert-beit3: error: --checkpoint '{folder}' is a directory, not a file: pass the .pth file itself "
        "(beit3_base_itc_patch16_224.pth), not its folder\n"
    )
    assert main(["convert-beit3", "--checkpoint", str(plain), "--sentencepiece", str(folder), "--output-dir", "o"]) == 2
    assert capsys.readouterr().err == (
        f"pacs-pp convert-beit3: error: --sentencepiece '{folder}' is a directory, not a file: pass the beit3.spm file "
        "itself\n"
    )


def test_the_scoring_commands_name_a_folder_given_as_a_file(places):
    folder, _, captions = places
    with pytest.raises(SystemExit) as raised:
        score_main([str(captions), "--references", str(folder), "--model", "tiny"])
    assert raised.value.code == (
        f"pacs-score: error: references file '{folder}' is a directory, not a file: pass the references file itself, "
        "a JSON object {image_path: [reference, ...]}"
    )
    results = Path("results.json")
    results.write_text(json.dumps([{"image_id": 1, "caption": "a cat"}]))
    with pytest.raises(SystemExit) as raised:
        main(["evaluate-captions", "--results", str(results), "--annotations", str(folder), "--metrics", "bleu"])
    assert raised.value.code == (
        f"pacs-pp evaluate-captions: error: --annotations file '{folder}' is a directory, not a file: pass the COCO "
        "captions file itself (.json)"
    )


def test_the_data_readers_name_a_folder_given_as_a_file(places):
    folder, _, _ = places
    with pytest.raises(InputError, match=r"^data file '.*model\.ckpt' is a directory, not a file: pass the data file "
                       r"itself \(\.csv, \.jsonl, \.parquet\)$"):  # fmt: skip
        read_rows(folder, "spica")
    with pytest.raises(InputError, match=r"^hparams file '.*model\.ckpt' is a directory, not a file: pass the "
                       r"hparams\.yaml file itself$"):  # fmt: skip
        read_hparams(Path("x.ckpt"), folder, {})
    with pytest.raises(FileNotFoundError, match=r"^checkpoint 'gone\.pth' does not exist$"):  # its API's type
        check_input_file("gone.pth", "checkpoint", "the file", missing=FileNotFoundError)


# ------------------------------------------------------------------------------------ OSErrors at the boundary
def test_an_uncreatable_path_is_one_line_in_every_command(places):
    """The issue's case (`register-metric --modules-cache` under a file), and the same fault in other commands."""
    _, plain, captions = places
    target = f"'{plain}/sub'"
    runs = {
        "pacs-pp register-metric": lambda: main(["register-metric", "--modules-cache", f"{plain}/sub"]),
        "pacs-pp make-tiny": lambda: main(["make-tiny", f"{plain}/sub"]),
        "score_corpus": lambda: score_corpus_main([str(captions), "--output-dir", f"{plain}/sub", "--model", "tiny"]),
        "evaluate_benchmarks": lambda: evaluate_benchmarks_main(
            ["--benchmark", "flickr8k_expert", "--data-dir", ".", "--model", "tiny", "--output-dir", f"{plain}/sub"]
        ),
    }
    for prog, run in runs.items():
        with pytest.raises(SystemExit) as raised:
            run()
        assert raised.value.code == f"{prog}: error: {target}: {NOT_A_FOLDER}", prog


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc refuses new folders on Linux")
def test_register_metric_under_a_missing_folder_is_one_line(places, tmp_path):
    with pytest.raises(SystemExit) as raised:
        main(["register-metric", "--modules-cache", "/proc/pacs-pp-nowhere/cache"])
    assert raised.value.code == (
        "pacs-pp register-metric: error: '/proc/pacs-pp-nowhere': No such file or directory: check the path (a "
        f"relative path starts from {tmp_path}); a folder to create needs an existing parent"
    )


@pytest.mark.parametrize("code", sorted(OS_ERROR_FIXES), ids=errno.errorcode.get)
def test_each_os_error_names_the_path_the_reason_and_the_fix(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    error = OSError(code, "REASON", "out/scores.json")
    fix = OS_ERROR_FIXES[code].format(cwd=tmp_path)
    assert os_error_message(error) == f"'out/scores.json': REASON: {fix}"
    assert error_line(error, "pacs-score") == f"pacs-score: error: 'out/scores.json': REASON: {fix}"


def test_os_errors_without_a_path_or_with_two():
    renamed = OSError(errno.EXDEV, "Invalid cross-device link", "a.tmp", None, "b.json")
    assert os_error_message(renamed) == (
        "'a.tmp' -> 'b.json': Invalid cross-device link: check the path and its permissions"
    )
    assert os_error_message(OSError(errno.ENOSPC, "No space left on device")) == (
        "No space left on device: the disk is full: free some space, or choose a path on another disk"
    )
    assert os_error_message(FileNotFoundError("checkpoint 'x.pth' does not exist")) == (
        "checkpoint 'x.pth' does not exist"  # the package's own message is kept
    )
