"""Polos selectable where a metric is chosen: `load_model` (directory and "tiny:polos"), `pacs-score --model`,
and the `evaluate` module's `polos` config; scores equal the engine's."""

import json
from pathlib import Path

import evaluate
import pytest

from modeling_pacs import PolosModel
from modeling_pacs.cli import score_main
from modeling_pacs.loading import load_model
from modeling_pacs.testing.polos import make_tiny_polos_model
from tests.fixtures.helpers import assert_scores_close

METRIC_DIR = str(Path(__file__).resolve().parents[2] / "metric" / "pacs_pp")
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
    with pytest.raises(SystemExit, match="Polos scores a caption against references, and none of the 1 items has any"):
        score_main([str(no_references), "--model", str(polos_dir)])


def test_evaluate_module_polos_config(engine, polos_dir, image_folder, tmp_path):
    images = [str(path) for path in image_folder[:3]]
    metric = evaluate.load(METRIC_DIR, config_name="polos", model=str(polos_dir), cache_dir=str(tmp_path))
    results = metric.compute(predictions=CAPTIONS, images=images, references=REFERENCES)
    expected = engine.score(images, CAPTIONS, REFERENCES)
    assert sorted(results) == ["metric", "num_truncated", "score", "scores", "signature", "truncated_tokens"]
    assert results["metric"] == "Polos"
    assert_scores_close(results["scores"], expected.scores)
    assert results["truncated_tokens"] == expected.truncated_tokens.tolist() == [0] * len(CAPTIONS)
    assert results["num_truncated"] == 0
    with pytest.raises(ValueError, match="config_name 'polos' asks for polos but model .* is a pac_s_pp model"):
        evaluate.load(METRIC_DIR, config_name="polos", model="tiny", cache_dir=str(tmp_path / "other"))


def load_space_app():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "space_app_polos", Path(__file__).resolve().parents[2] / "space/app.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_space_scores_a_local_polos_model_with_references(engine, polos_dir, image_folder, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    app = load_space_app()
    cache = app.ModelCache(app.TINY_CHOICES, local_model=str(polos_dir), allow_typed_paths=False)
    models = cache.get(str(polos_dir))
    assert isinstance(models.pac_s, PolosModel) and models.clip_s is None  # CLIP-S's Hub CLIP is offline here
    image = str(image_folder[0])
    captions = ["a cat on a sofa", "a dog running", "two people"]
    request = app.ScoreRequest(image=image, captions=captions, references=["a cat sleeping", "a cat"])
    table = app.score_request(request, models)
    expected = engine.score([image] * 3, captions, [request.references] * 3).scores.tolist()
    assert list(table.columns) == ["rank", "caption", "Polos"] and table.attrs["ranked_by"] == "Polos"
    by_caption = dict(zip(table["caption"], table["Polos"]))
    assert_scores_close([by_caption[caption] for caption in captions], expected)
    assert table["Polos"].is_monotonic_decreasing
    with pytest.raises(app.gr.Error, match="Polos is a reference-based metric: enter at least one reference"):
        app.score_request(app.ScoreRequest(image=image, captions=captions, references=[]), models)


def test_space_offers_polos_as_a_hub_model_choice():
    app = load_space_app()
    assert app.HUB_CHOICES["Polos (ViT-B/32)"] == ("clip_s_vit_b32", "polos_vit_b32")
    from modeling_pacs.loading import PRETRAINED_MODELS

    assert PRETRAINED_MODELS["polos_vit_b32"] == "pacs-pp/polos-clip-vit-b32"
