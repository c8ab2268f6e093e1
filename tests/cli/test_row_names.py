"""Issue 36, 3: an error about one row of a corpus names the input row and the line of the file it starts on, not a
shard and an index inside it (`corpus_scoring.name_row`, `name_item_row`). Lines are counted independently here: by
hand-written files whose lines are known."""

import json

import pytest

from modeling_pacs.cli import score_corpus
from modeling_pacs.corpus_scoring import CorpusError, name_item_row, name_row, parse_references, row_lines
from tests.fixtures.helpers import random_image


def test_jsonl_lines_skip_blank_lines(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"a": 0}\n\n{"a": 1}\n   \n\n{"a": 2}\n')  # rows 0, 1, 2 on lines 1, 3, 6
    assert row_lines(path, {0, 1, 2}) == {0: 1, 1: 3, 2: 6}
    assert [name_row(path, row) for row in (0, 2)] == [
        "row 0 (line 1 of corpus.jsonl)",
        "row 2 (line 6 of corpus.jsonl)",
    ]


def test_csv_lines_count_the_header_multiline_cells_and_blank_lines(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text(
        "image,caption\n"  # line 1
        'a.png,"a cat\non two lines"\n'  # row 0: lines 2-3
        "\n"  # line 4: not a row
        "b.png,a dog\n"  # row 1: line 5
        'c.png,"three\nline\ncaption"\n'  # row 2: lines 6-8
        "d.png,a bird\n",  # row 3: line 9
        encoding="utf-8",
    )
    assert row_lines(path, {0, 1, 2, 3}) == {0: 2, 1: 5, 2: 6, 3: 9}
    assert name_row(path, 3) == "row 3 (line 9 of corpus.csv)"
    assert name_row(tmp_path / "corpus.parquet", 3) == "row 3"  # a binary file (or a dataset) has rows only


CORE_MESSAGES = {
    "image": ("image 34 ('a.png') does not exist or is not a file", "image ('a.png') does not exist or is not a file"),
    "video": ("video 34, frame 2 is empty", "video, frame 2 is empty"),
    "item": ("item 34 has an empty reference list", "item has an empty reference list"),
    "reference": ("reference 1 of item 34 is int (3)", "reference 1 is int (3)"),
}


@pytest.mark.parametrize("kind", CORE_MESSAGES)
def test_the_cores_item_index_becomes_the_input_row(kind, tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"i": index}) for index in range(1300)) + "\n")
    message, rest = CORE_MESSAGES[kind]
    assert name_item_row(message, path, 1200) == f"row 1234 (line 1235 of corpus.jsonl): {rest}"
    assert name_item_row("CUDA out of memory", path, 1200) is None  # about no item: the caller names the shard


def test_a_bad_references_cell_names_its_row_and_line(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text('image,caption,references\na.png,a cat,[]\nb.png,a dog,"[1, 2]"\n')
    with pytest.raises(CorpusError, match=r"^row 1 \(line 3 of corpus\.csv\): references must be a list of strings"):
        parse_references("[1, 2]", 1, path)


def test_score_corpus_names_the_row_and_line_of_a_missing_image(tiny_model_dir, tmp_path):
    """The issue's case: a bad image deep in a shard is named by its input row and its line, here of a CSV file whose
    first caption spans two lines."""
    random_image(0, (32, 32)).save(tmp_path / "cat.png")
    rows = [("cat.png", "a cat\nsitting") if row == 0 else ("cat.png", f"caption {row}") for row in range(13)]
    rows[12] = ("gone.png", "a missing picture")
    lines = ["image,caption"] + [f'{image},"{caption}"' for image, caption in rows]
    (tmp_path / "corpus.csv").write_text("\n".join(lines) + "\n")
    arguments = [str(tmp_path / "corpus.csv"), "--output-dir", str(tmp_path / "out"), "--model", str(tiny_model_dir)]
    with pytest.raises(SystemExit) as raised:
        score_corpus.main([*arguments, "--shard-size", "5"])
    assert raised.value.code == (
        f"score_corpus: error: row 12 (line 15 of corpus.csv): image ('{tmp_path / 'gone.png'}') does not exist or is "
        "not a file. Finished shards are kept: fix the input and rerun the same command to resume"
    )


def test_training_data_rows_name_their_line(tmp_path):
    from modeling_pacs.supervised.data import RowError, read_rows

    path = tmp_path / "spica_train.csv"
    path.write_text("imgid,mt,refs,score\na.jpg,a cat,\"['a',\n'b']\",0.5\n\nb.jpg,a dog,[],1.5\n")
    with pytest.raises(RowError) as raised:
        read_rows(path, "spica")
    assert str(raised.value) == (
        "spica_train.csv: row 1 (line 5), column 'score': '1.5' is not a finite number in [0.0, 1.0] (normalise the "
        "scores first)"
    )


def test_caption_files_name_an_items_line(tmp_path):
    """`pacs-score`'s reader (also the harness's system-level input): the item and the line it starts on."""
    from modeling_pacs.caption_files import read_items

    path = tmp_path / "captions.csv"
    path.write_text('image,caption,references\na.png,"two\nlines",\n\nb.png,a dog,"[oops"\n')
    with pytest.raises(ValueError) as raised:
        read_items(path, tmp_path)
    assert str(raised.value) == (
        f"{path}: row 1 (line 5): the references cell is not a JSON list (Expecting value); write it as "
        '["first reference", "second reference"]'
    )
    path = tmp_path / "captions.jsonl"
    path.write_text('{"image": "a.png", "caption": "a cat"}\n\n{"image": "b.png"}\n')
    with pytest.raises(ValueError) as raised:
        read_items(path, tmp_path)
    assert str(raised.value) == f"{path}: row 1 (line 3) lacks ['caption'] (each item needs 'image' and 'caption')"


def test_rated_benchmark_csv_names_the_row_and_line(tmp_path):
    from modeling_pacs.evaluation.benchmark import read_rated_csv

    path = tmp_path / "polaris_test.csv"
    path.write_text("mt,refs,score,imgid\n\"a\ncat\",['a'],0.5,x.jpg\nb,['unclosed,0.1,y.jpg\n")
    with pytest.raises(ValueError, match=r"polaris_test\.csv: row 1 \(line 4\): unreadable refs or score"):
        read_rated_csv(path, "Polaris")


# pacs-score: the core's "image i" is row i of the captions file, named with its line (CSV: the header is line 1, a
# quoted cell may span lines; JSON lines: blank lines are no rows) or, in a JSON mapping, its key and list index.
SCORE_INPUTS = {
    "captions.csv": (
        'image,caption\ncat.png,"a cat\non two lines"\n\ncat.png,a cat\nbroken.png,a broken picture\n',
        "row 2 (line 6 of captions.csv): image ('{root}/broken.png') could not be decoded: cannot identify image "
        "file '{root}/broken.png'",
    ),
    "captions.jsonl": (
        '{"image": "cat.png", "caption": "a cat"}\n\n{"image": "gone.png", "caption": "a dog"}\n',
        "row 1 (line 3 of captions.jsonl): image ('{root}/gone.png') does not exist or is not a file",
    ),
    "captions.json": (
        json.dumps({"cat.png": "a cat", "gone.png": ["a dog", "a brown dog"]}),
        "row 1 (captions.json[\"gone.png\"][0]): image ('{root}/gone.png') does not exist or is not a file",
    ),
    "references.jsonl": (  # rows 0-1 have references, row 2 none: two calls, the bad reference in the first
        '{"image": "cat.png", "caption": "a cat", "references": ["a cat"]}\n'
        '{"image": "cat.png", "caption": "a cat", "references": ["a cat", 3]}\n'
        '{"image": "gone.png", "caption": "a dog"}\n',
        "row 1 (line 2 of references.jsonl): reference 1 is int (3), expected a string",
    ),
    "no_references.jsonl": (  # row 1, without references, is item 0 of the reference-free call
        '{"image": "cat.png", "caption": "a cat", "references": ["a cat"]}\n'
        '{"image": "gone.png", "caption": "a dog"}\n',
        "row 1 (line 2 of no_references.jsonl): image ('{root}/gone.png') does not exist or is not a file",
    ),
}


@pytest.mark.parametrize("name", SCORE_INPUTS)
def test_pacs_score_names_the_row_and_line_of_a_bad_item(name, tiny_model_dir, tmp_path):
    from modeling_pacs.cli import score_main

    random_image(0, (32, 32)).save(tmp_path / "cat.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a picture")
    text, expected = SCORE_INPUTS[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as raised:
        score_main([str(tmp_path / name), "--model", str(tiny_model_dir), "--no-progress"])
    assert raised.value.code == "pacs-score: error: " + expected.format(root=tmp_path)


def test_a_call_on_part_of_the_items_names_the_item_of_the_whole_call():
    """`results.score_items` scores the items with and without references in two calls: the core's index in a call
    is mapped back to the item (`errors.renumber_item`)."""
    from modeling_pacs.errors import name_item, renumber_item

    assert renumber_item("image 1 ('b.png') does not exist", [4, 7]) == "image 7 ('b.png') does not exist"
    assert renumber_item("video 0, frame 2 is empty", [5]) == "video 5, frame 2 is empty"
    assert renumber_item("reference 1 of item 1 is int (3)", [2, 9]) == "reference 1 of item 9 is int (3)"
    assert renumber_item("candidate 1 is int (5)", [2, 9]) == "candidate 9 is int (5)"
    assert renumber_item("CUDA out of memory", [2, 9]) is None
    assert name_item("candidate 3 is int (5)", lambda row: f"row {row}") == "row 3: candidate is int (5)"
