"""Issue 36: no traceback reaches a user of any command for any of the hostile inputs. Each main command runs in-process
through its `main(argv)` on each input: it ends with one `PROG: error: ...` line on stderr (besides `warning:` lines)
that names the culprit, a non-zero status, no traceback and no exception left for the interpreter to print.

The inputs are one case of each class the issue lists: a folder given as the input file, an output path that cannot
be created, a corrupt image, a single caption where a file of captions is expected, a broken CSV file, a file that is
not UTF-8.
"""

import json
from pathlib import Path

import pytest

from modeling_pacs.cli import main, score_main
from modeling_pacs.cli.score_corpus import main as score_corpus_main
from tests.fixtures.helpers import random_image


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Good and hostile files side by side: a folder named like a captions file, a plain file (a folder cannot be made
    under it), a corrupt image and files that are not what they say."""
    root = tmp_path_factory.mktemp("hostile")
    random_image(0, (32, 32)).save(root / "cat.png")
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(64)))
    (root / "folder.jsonl").mkdir()
    (root / "notes.txt").write_text("not a folder")
    (root / "good.jsonl").write_text(json.dumps({"image": "cat.png", "caption": "a cat", "references": ["a cat"]}))
    lines = [{"image": "cat.png", "caption": "a cat"}, {"image": "broken.png", "caption": "a broken picture"}]
    (root / "corrupt.jsonl").write_text("".join(json.dumps({**line, "references": ["x"]}) + "\n" for line in lines))
    (root / "single.json").write_text(json.dumps("a dog on the grass"))  # one caption, not {image: caption}
    (root / "single.jsonl").write_text(json.dumps("a dog on the grass") + "\n")
    (root / "bad.csv").write_text("picture,text\ncat.png,a cat\n")  # not the columns a command reads
    (root / "unclosed.csv").write_text('image,caption\ncat.png,"a cat\ncat.png,a dog\n')  # the quote swallows row 1
    (root / "latin1.csv").write_bytes("image,caption\ncat.png,un café\n".encode("latin1"))
    (root / "broken.ckpt").write_bytes(b"PK\x03\x04 not a checkpoint")
    return root


def pacs_score(root: Path, model: Path, captions: str, output: str = "out.json"):
    return score_main([str(root / captions), "--model", str(model), "-o", str(root / output), "--no-progress"])


def evaluate_captions(root: Path, model: Path, captions: str, output: str = "report.json"):
    arguments = ["--results", str(root / captions), "--metrics", str(model), "-o", str(root / output)]
    return main(["evaluate-captions", *arguments, "--output-dir", str(root / f"job-{captions}"), "--no-progress"])


def score_corpus(root: Path, model: Path, captions: str, output: str | None = None):
    output = output or f"corpus-{captions}"
    return score_corpus_main([str(root / captions), "--output-dir", str(root / output), "--model", str(model)])


def convert_polos(root: Path, model: Path, checkpoint: str):
    return main(["convert-polos", "--checkpoint", str(root / checkpoint), "--output-dir", str(root / "converted")])


UNCLOSED = "unclosed.csv: line 2: a quoted cell opens on this line and is never closed"

# (command, input) -> (run, what the one line must contain)
CASES = {
    "pacs-score folder as input": (lambda r, m: pacs_score(r, m, "folder.jsonl"), "is a directory, not a file"),
    "pacs-score uncreatable output": (  # refused before the model loads
        lambda r, m: pacs_score(r, m, "good.jsonl", "notes.txt/out.json"),
        "notes.txt/out.json': Not a directory: a part of the path is a file, not a folder",
    ),
    "pacs-score corrupt image": (lambda r, m: pacs_score(r, m, "corrupt.jsonl"), "could not be decoded"),
    "pacs-score single caption": (lambda r, m: pacs_score(r, m, "single.json"), "a JSON input must be an object"),
    "pacs-score bad CSV": (
        lambda r, m: pacs_score(r, m, "bad.csv"),
        "bad.csv: row 0 (line 2) lacks ['image', 'caption']",
    ),
    "pacs-score unclosed quote": (lambda r, m: pacs_score(r, m, "unclosed.csv"), UNCLOSED),
    "pacs-score not UTF-8": (lambda r, m: pacs_score(r, m, "latin1.csv"), "is not UTF-8 text"),
    "evaluate-captions folder as input": (  # a folder may be a saved `datasets` folder: refused as none
        lambda r, m: evaluate_captions(r, m, "folder.jsonl"),
        "folder.jsonl: not a datasets folder",
    ),
    "evaluate-captions uncreatable output": (
        lambda r, m: evaluate_captions(r, m, "good.jsonl", "notes.txt/report.json"),
        "notes.txt/report.json': Not a directory: a part of the path is a file, not a folder",
    ),
    "evaluate-captions corrupt image": (
        lambda r, m: evaluate_captions(r, m, "corrupt.jsonl"),
        "row 1 (image_id 'broken.png'): image ('",
    ),
    "evaluate-captions single caption": (
        lambda r, m: evaluate_captions(r, m, "single.json"),
        "a JSON input must be an object",
    ),
    "evaluate-captions bad CSV": (
        lambda r, m: evaluate_captions(r, m, "bad.csv"),
        "bad.csv: row 0 (line 2) lacks ['image', 'caption']",
    ),
    "evaluate-captions unclosed quote": (lambda r, m: evaluate_captions(r, m, "unclosed.csv"), UNCLOSED),
    "score_corpus folder as input": (lambda r, m: score_corpus(r, m, "folder.jsonl"), "folder.jsonl"),
    "score_corpus uncreatable output": (
        lambda r, m: score_corpus(r, m, "good.jsonl", "notes.txt/out"),
        "notes.txt/out': Not a directory: a part of the path is a file, not a folder",
    ),
    "score_corpus corrupt image": (lambda r, m: score_corpus(r, m, "corrupt.jsonl"), "row 1 (line 2 of corrupt.jsonl)"),
    "score_corpus single caption": (
        lambda r, m: score_corpus(r, m, "single.jsonl"),
        'row 0 (line 1 of single.jsonl) is "a dog on the grass", not an object',
    ),
    "score_corpus bad CSV": (
        lambda r, m: score_corpus(r, m, "bad.csv"),
        "row 0 (line 2 of bad.csv) lacks ['image', 'caption'] (columns: ['picture', 'text'])",
    ),
    "score_corpus unclosed quote": (lambda r, m: score_corpus(r, m, "unclosed.csv"), UNCLOSED),
    "score_corpus not UTF-8": (lambda r, m: score_corpus(r, m, "latin1.csv"), "is not UTF-8 text"),
    "convert-polos folder as checkpoint": (
        lambda r, m: convert_polos(r, m, "folder.jsonl"),
        "is a directory, not a file",
    ),
    "convert-polos corrupt checkpoint": (
        lambda r, m: convert_polos(r, m, "broken.ckpt"),
        "broken.ckpt': a truncated zip archive",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_input_is_one_error_line(case, hostile, tiny_model_dir, capsys):
    run, named = CASES[case]
    try:
        status = run(hostile, tiny_model_dir)
        line = None
    except SystemExit as exit_:  # `reports_errors`: the interpreter prints a string code and exits with 1
        status, line = (1, exit_.code) if isinstance(exit_.code, str) else (exit_.code, None)
    err = capsys.readouterr().err
    if line is not None:
        err += line + "\n"
    assert "Traceback" not in err
    errors = [text for text in err.splitlines() if text and not text.startswith("warning: ")]
    assert status not in (0, None), errors
    assert len(errors) == 1, errors
    assert errors[0].split(": error: ", 1)[0] in ("pacs-score", "pacs-pp evaluate-captions", "score_corpus",
                                                  "pacs-pp convert-polos"), errors  # fmt: skip
    assert named in errors[0], errors
