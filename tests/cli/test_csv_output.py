"""Issue 36, 1: every CSV the package writes is safe to open in a spreadsheet (`modeling_pacs/csv_output.py`). A text
cell starting with `=`, `+`, `-`, `@`, a tab or a carriage return gets a `'` in front (OWASP's CSV-injection
guidance); numbers and plain-number text stay as they are; `--raw-csv` writes the cells as they are. Every trigger is
tried in every writer: `pacs-score` (images and videos) and `pacs-pp evaluate-captions`. Corpus scoring and the
benchmark harness write no CSV (JSON lines, JSON, Markdown), and a rule below keeps the package to one CSV writer."""

import contextlib
import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from modeling_pacs.cli import main, score_main
from modeling_pacs.csv_output import FORMULA_TRIGGERS, csv_text, escape_cell
from tests.fixtures.helpers import random_image

REPO_ROOT = Path(__file__).resolve().parents[2]

# One caption per trigger (OWASP's examples), and text that must pass unchanged.
HOSTILE = {
    "=": '=HYPERLINK("http://x","y")',
    "+": "+1+cmd|' /C calc'!A0",
    "-": "-2+3+cmd|' /C calc'!A0",
    "@": "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t": "\t=1+1",
    "\r": "\r=1+1",
}
UNCHANGED = ["a dog on a sofa", "-0.5", "+3", "a=b+c", "1e-3"]
CAPTIONS = [*HOSTILE.values(), *UNCHANGED]
WRITERS = ["pacs-score", "pacs-score --video", "evaluate-captions"]


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Images named like formulas, one caption per case; a frame folder (a video) with the same captions."""
    folder = tmp_path_factory.mktemp("csv_injection")
    image_names = [f"{index}.png" for index in range(len(CAPTIONS))]
    image_names[0] = "=1+1.png"  # the image column is a text cell too
    for index, name in enumerate(image_names):
        random_image(index, (64, 48)).save(folder / name)
    items = folder / "items.jsonl"
    items.write_text("".join(json.dumps({"image": n, "caption": c}) + "\n" for n, c in zip(image_names, CAPTIONS)))
    frames = folder / "-frames"
    frames.mkdir()
    for index in range(2):
        Image.fromarray(np.full((32, 32, 3), 40 * index, "uint8")).save(frames / f"{index}.png")
    videos = folder / "videos.json"
    videos.write_text(json.dumps({frames.name: CAPTIONS}))
    return folder, items, videos


@pytest.fixture(scope="module")
def written(inputs, tiny_model_dir):
    """`(writer, raw)` -> the rows of the CSV file that writer wrote (each command runs once)."""
    folder, items, videos = inputs
    cache = {}

    def rows(writer: str, raw: bool) -> list[dict]:
        if (writer, raw) not in cache:
            output = folder / f"{len(cache)}.csv"
            flags = ["--raw-csv"] if raw else []
            with contextlib.redirect_stdout(io.StringIO()):
                if writer == "pacs-score":
                    score_main([str(items), "--model", str(tiny_model_dir), "-o", str(output), "--no-progress", *flags])
                elif writer == "pacs-score --video":
                    arguments = [str(videos), "--video", "--model", str(tiny_model_dir), "--idf", "off"]
                    score_main([*arguments, "-o", str(output), "--no-progress", *flags])
                else:
                    arguments = ["--results", str(items), "--metrics", str(tiny_model_dir), "--device", "cpu"]
                    main(["evaluate-captions", *arguments, "-o", str(output), "--no-progress", *flags])
            cache[writer, raw] = read_csv(output)
        return cache[writer, raw]

    return rows


def text_column(writer: str) -> str:
    return "image_id" if writer == "evaluate-captions" else "video" if "video" in writer else "image"


@pytest.mark.parametrize("trigger", list(HOSTILE), ids=repr)
@pytest.mark.parametrize("writer", WRITERS)
def test_a_caption_starting_with_a_trigger_gets_a_quote(written, writer, trigger):
    rows = written(writer, raw=False)
    assert rows[list(HOSTILE).index(trigger)]["caption"] == "'" + HOSTILE[trigger]


@pytest.mark.parametrize("writer", WRITERS)
def test_other_cells_are_unchanged_and_raw_csv_writes_every_cell_as_it_is(written, writer):
    rows, raw = written(writer, raw=False), written(writer, raw=True)
    assert [row["caption"] for row in rows[: len(CAPTIONS)]] == [*("'" + c for c in HOSTILE.values()), *UNCHANGED]
    assert [row["caption"] for row in raw[: len(CAPTIONS)]] == CAPTIONS
    column = text_column(writer)
    first = "-frames" if "video" in writer else "=1+1.png"
    assert (rows[0][column], raw[0][column]) == ("'" + first, first)
    assert rows[-1][column] in ("MEAN", "CORPUS") and rows[-1]["caption"] == ""
    scores = [name for name in rows[0] if name not in (column, "caption")]
    assert scores
    for row, raw_row in zip(rows, raw):
        for name in scores:  # numbers stay numbers, and are the same with and without --raw-csv
            assert row[name] == raw_row[name] and (row[name] == "" or float(row[name]) == float(raw_row[name]))


@pytest.mark.parametrize("trigger", FORMULA_TRIGGERS, ids=repr)
def test_escape_cell_per_trigger(trigger):
    assert escape_cell(trigger + "cmd") == "'" + trigger + "cmd"
    assert escape_cell("cmd" + trigger) == "cmd" + trigger  # only the first character counts
    for raw, cell in ((False, "'" + trigger + "1+1"), (True, trigger + "1+1")):
        text = csv_text(["caption"], [{"caption": trigger + "1+1"}], raw=raw)
        assert list(csv.reader(io.StringIO(text, newline=""))) == [["caption"], [cell]]


def test_numbers_and_plain_number_text_are_never_escaped():
    assert [escape_cell(value) for value in (-0.5, -1, 0.0, float("-inf"), None, True)] == [
        -0.5, -1, 0.0, float("-inf"), None, True
    ]  # fmt: skip
    plain = ["-0.5", "+0.5", "-1", "-.5", "-1.", "-1e-3", "+2E+10"]
    assert [escape_cell(text) for text in plain] == plain
    not_plain = ["-1+1", "-0.5 ", "-1,5", "-", "+", "-e3", "-1e", "--1", "-0x10", "-inf", "-nan"]
    assert [escape_cell(text) for text in not_plain] == ["'" + text for text in not_plain]
    rows = [{"image": "-1", "score": -0.5}, {"image": "-x", "score": None}]
    assert csv_text(["image", "score"], rows) == "image,score\r\n-1,-0.5\r\n'-x,\r\n"


def test_the_package_has_one_csv_writer():
    """Every CSV the package writes goes through `csv_text`, so no writer can miss the escaping."""
    writers = re.compile(r"csv\.writer\(|csv\.DictWriter\(|\.to_csv\(|\.write_csv\(")
    found = [
        str(path.relative_to(REPO_ROOT))
        for folder in ("modeling_pacs", "metric", "space", "scripts", "benchmarks")
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        if writers.search(path.read_text(encoding="utf-8"))
    ]
    assert found == ["modeling_pacs/csv_output.py"]
