"""The references policy (issue 32, point 2), the same for every metric and door: with references given, an item
without any gets empty reference-based cells (None / null / an empty CSV cell), counted, and the means are over the
others; a metric without a reference-free score (Polos) leaves all of that item's cells empty and refuses only input
in which no item has references. Checked for PAC-S++, Polos and Pearl through `pacs-score`, corpus scoring and the
`evaluate` module, against independent calls of the model on the items with references."""

import csv
import json
from pathlib import Path

import pytest

from modeling_pacs.cli import score_main
from modeling_pacs.cli.score_corpus import main as score_corpus_main
from modeling_pacs.loading import load_model
from modeling_pacs.metric_module import PACSPlusPlus
from modeling_pacs.results import result_columns
from tests.fixtures.helpers import assert_scores_close

IMAGES = Path(__file__).resolve().parents[2] / "examples" / "images"
ITEMS = [
    {"image": str(IMAGES / "red_circle.png"), "caption": "a red circle", "references": ["a red disc"]},
    {"image": str(IMAGES / "blue_square.png"), "caption": "a blue square", "references": []},
    {"image": str(IMAGES / "green_triangle.png"), "caption": "a triangle", "references": ["a green shape", "a shape"]},
]
WITH_REFERENCES = [0, 2]
# model -> (its reference-free column or None, its reference-based column)
MODELS = {"tiny": ("PAC-S++", "RefPAC-S++"), "tiny:polos": (None, "Polos"), "tiny:pearl": ("Pearl-img", "Pearl")}


@pytest.fixture(scope="module", params=sorted(MODELS))
def expected(request):
    """Per model: its columns, and the scores of independent calls (items with references; all items without)."""
    model = load_model(request.param)
    subset = [ITEMS[index] for index in WITH_REFERENCES]
    with_references = {
        column.label: column.values
        for column in result_columns(model, model.score([item["image"] for item in subset],
                                                        [item["caption"] for item in subset],
                                                        references=[item["references"] for item in subset]))
    }  # fmt: skip
    free, based = MODELS[request.param]
    reference_free = None
    if free is not None:
        output = model.score([item["image"] for item in ITEMS], [item["caption"] for item in ITEMS])
        reference_free = next(column.values for column in result_columns(model, output) if column.label == free)
    return request.param, free, based, with_references[based], reference_free


def check_columns(rows: list[dict], expected):
    name, free, based, with_references, reference_free = expected
    assert rows[1][based] is None
    assert_scores_close([rows[index][based] for index in WITH_REFERENCES], with_references, what=name)
    if free is not None:
        assert_scores_close([row[free] for row in rows], reference_free, what=name)


def test_pacs_score_leaves_empty_cells_with_a_count(expected, tmp_path, capsys):
    name, free, based, with_references, _ = expected
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    score_main([str(source), "--model", name, "--output", str(tmp_path / "scores.json"), "--no-progress"])
    result = json.loads((tmp_path / "scores.json").read_text())
    assert result["num_without_references"] == 1
    check_columns(result["items"], expected)
    assert result["mean"][based] == pytest.approx(sum(with_references) / 2, abs=1e-6)
    assert f"1 of 3 items has no references: its {based} cell is empty" in capsys.readouterr().out
    score_main([str(source), "--model", name, "--output", str(tmp_path / "scores.csv"), "--no-progress"])
    with (tmp_path / "scores.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1][based] == "" and rows[0][based] != ""


def test_corpus_scoring_writes_null_with_a_count(expected, tmp_path, capsys):
    name, free, based, with_references, _ = expected
    source = tmp_path / "corpus.csv"
    with source.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "caption", "references"])
        for item in ITEMS:  # the item without references has an empty cell
            writer.writerow(
                [item["image"], item["caption"], json.dumps(item["references"]) if item["references"] else ""]
            )
    output = tmp_path / "out"
    summary = score_corpus_main(
        [
            str(source),
            "--output-dir",
            str(output),
            "--model",
            name,
            "--references-column",
            "references",
            "--no-progress",
        ]
    )
    assert summary["num_without_references"] == 1
    rows = [json.loads(line) for line in (output / "scores.jsonl").read_text().splitlines()]
    check_columns(rows, expected)
    assert summary["mean"][based] == pytest.approx(sum(with_references) / 2, abs=1e-6)
    assert f"1 of 3 rows has no references: its {based} cell is null in scores.jsonl" in capsys.readouterr().out


def test_the_evaluate_module_gives_none_with_a_count(expected):
    name, free, based, with_references, reference_free = expected
    metric = PACSPlusPlus(model=name)
    results = metric.compute(
        predictions=[item["caption"] for item in ITEMS],
        images=[item["image"] for item in ITEMS],
        references=[item["references"] for item in ITEMS],
    )
    key = "scores" if free is None else "ref_scores"
    assert results["num_without_references"] == 1
    assert results[key][1] is None
    assert_scores_close([results[key][index] for index in WITH_REFERENCES], with_references, what=name)
    assert results[key.removesuffix("s")] == pytest.approx(sum(with_references) / 2, abs=1e-6)
    if free is not None:
        assert_scores_close(results["scores"], reference_free, what=name)


def test_polos_refuses_only_input_without_any_references(tmp_path):
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps({**item, "references": []}) + "\n" for item in ITEMS))
    with pytest.raises(SystemExit) as exit_info:
        score_main([str(source), "--model", "tiny:polos"])
    assert "Polos scores a caption against references, and none of the 3 items has any" in str(exit_info.value)
