"""Polos selectable where a metric is chosen: `load_model` (directory and "tiny:polos"), `pacs-score --model`,
and the `evaluate` module's `polos` config; scores equal the engine's."""

import json
from pathlib import Path

import evaluate
import pytest

from modeling_pacs import PolosModel
from modeling_pacs.cli import score_main
from modeling_pacs.loading import load_model
from modeling_pacs.polos.tiny import make_tiny_polos_model
from tests.helpers import assert_scores_close

METRIC_DIR = str(Path(__file__).resolve().parents[1] / "metric" / "pacs_pp")
CAPTIONS = ["a cat on a sofa", "a dog running", "a cat on a sofa"]
REFERENCES = [["a cat sleeping", "a cat"], ["a dog in the park"], ["a sofa"]]


@pytest.fixture(scope="module")
def polos_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("polos_model")
    make_tiny_polos_model(directory, seed=3)
    return directory


@pytest.fixture(scope="module")
def engine(polos_dir):
    return load_model(str(polos_dir))


def test_load_model_detects_polos_and_tiny_alias(engine):
    assert isinstance(engine, PolosModel) and not engine.training
    tiny = load_model("tiny:polos")
    assert isinstance(tiny, PolosModel) and tiny.config.variant == "polos"


def test_pacs_score_with_a_polos_directory(engine, polos_dir, image_folder, tmp_path, capsys):
    images = [str(path) for path in image_folder[:3]]
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps({"image": i, "caption": c, "references": r}) + "\n"
                              for i, c, r in zip(images, CAPTIONS, REFERENCES)))  # fmt: skip
    output = tmp_path / "scores.json"
    score_main([str(source), "--model", str(polos_dir), "--output", str(output), "--no-progress"])
    result = json.loads(output.read_text())
    expected = engine.score(images, CAPTIONS, REFERENCES)
    assert [item["caption"] for item in result["items"]] == CAPTIONS
    assert_scores_close([item["Polos"] for item in result["items"]], expected.scores)
    assert result["mean"]["Polos"] == pytest.approx(expected.mean_score, abs=1e-6)
    assert result["w"] is None
    assert "3 captions scored with" in capsys.readouterr().out

    no_references = tmp_path / "plain.jsonl"
    no_references.write_text(json.dumps({"image": images[0], "caption": "a cat"}) + "\n")
    with pytest.raises(SystemExit, match="Polos is a reference-based metric and has no reference-free mode"):
        score_main([str(no_references), "--model", str(polos_dir)])


def test_evaluate_module_polos_config(engine, polos_dir, image_folder, tmp_path):
    images = [str(path) for path in image_folder[:3]]
    metric = evaluate.load(METRIC_DIR, config_name="polos", model=str(polos_dir), cache_dir=str(tmp_path))
    results = metric.compute(predictions=CAPTIONS, images=images, references=REFERENCES)
    expected = engine.score(images, CAPTIONS, REFERENCES)
    assert sorted(results) == ["metric", "score", "scores"] and results["metric"] == "Polos"
    assert_scores_close(results["scores"], expected.scores)
    with pytest.raises(ValueError, match="config_name 'polos' asks for polos but model .* is a pac_s_pp model"):
        evaluate.load(METRIC_DIR, config_name="polos", model="tiny", cache_dir=str(tmp_path / "other"))
