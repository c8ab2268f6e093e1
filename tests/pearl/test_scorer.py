"""End-to-end Pearl scoring on tiny encoders: settings, input policies, and `load_model` / `pacs-score` selection."""

import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from modeling_pacs.loading import load_model
from modeling_pacs.pearl.scorer import PearlScorer
from modeling_pacs.testing.directories import tiny_model_directory
from tests.fixtures.helpers import assert_scores_close, random_image
from tests.fixtures.pearl import one_torch_thread  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def scorer():
    return PearlScorer.from_pretrained(tiny_model_directory("pearl"))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pearl_images")
    paths = []
    for index in range(3):
        paths.append(str(folder / f"image_{index}.png"))
        random_image(index, (60 + 10 * index, 50)).save(paths[-1])
    return paths


def test_reference_free_and_reference_based_scores(scorer, images):
    candidates = ["a dog on the grass", "a cat on a sofa", "a red car"]
    references = [["a dog running"], [], ["a car on the street", "a red car parked"]]
    free = scorer.score(images, candidates)
    based = scorer.score(images, candidates, references)
    assert free.ref_scores is None and free.scores.shape == (3,)
    assert ((based.ref_scores > 0) & (based.ref_scores < 1)).all()
    # Pearl-img does not depend on references; an item without references gets Pearl = Pearl-img.
    assert_scores_close(based.scores, free.scores)
    assert_scores_close(based.ref_scores[1:2], free.scores[1:2])
    # Eq. 3 by hand from the head's own outputs for item 0 (one reference).
    encoded = scorer.encode(images[:1], candidates[:1], references[:1])
    from modeling_pacs.pearl.features import assemble_batch

    batch = assemble_batch(
        scorer.config,
        encoded["candidate_features"],
        encoded["image_features"],
        encoded["reference_lists"],
        encoded["text_features"],
    )
    with torch.no_grad():
        output = scorer.model(**batch)
    expected = 0.5 * float(output.img_score[0]) + 0.5 * float(output.ref_scores[0, 0])
    np.testing.assert_allclose(float(based.ref_scores[0]), expected, atol=1e-6)


def test_scores_do_not_depend_on_batch_composition(scorer, images):
    candidates = ["a dog on the grass", "a cat on a sofa", "a red car"]
    references = [["a dog running"], ["a cat"], ["a car on the street"]]
    together = scorer.score(images, candidates, references)
    alone = [scorer.score([image], [caption], [refs]) for image, caption, refs in zip(images, candidates, references)]
    assert_scores_close(together.ref_scores, [float(out.ref_scores[0]) for out in alone])


def test_more_references_than_max_refs_keeps_the_first_and_warns(scorer, images, caplog):
    references = [f"a dog number {index}" for index in range(7)]
    with caplog.at_level(logging.WARNING, logger="modeling_pacs.pearl.scorer"):
        many = scorer.score(images[:1], ["a dog"], [references])
    first_five = scorer.score(images[:1], ["a dog"], [references[:5]])
    assert_scores_close(many.ref_scores, first_five.ref_scores)
    assert (
        "1 item(s) have more than max_refs=5 references (first: item 0 with 7); Pearl keeps the first 5" in caplog.text
    )


def test_empty_candidate_is_scored_with_a_warning(scorer, images, caplog):
    with caplog.at_level(logging.WARNING, logger="modeling_pacs.pearl.scorer"):
        output = scorer.score(images[:2], ["a dog", "  "])
    assert re.search(r"candidate\(s\) \[1\] are empty", caplog.text)
    assert np.isfinite(output.scores.numpy()).all()


@pytest.mark.parametrize(
    ("candidates", "references", "error", "message"),
    [
        (["a", "b"], None, ValueError, "got 3 images and 2 candidates"),
        (["a", "b", None], None, TypeError, "candidate 2 is NoneType (None), expected a string"),
        (["a", "b", "c"], [["x"], ["y"]], ValueError, "got 2 reference lists for 3 candidates"),
        (["a", "b", "c"], [["x"], [3], []], TypeError, "reference 0 of item 1 is int (3), expected a string"),
    ],
)
def test_bad_input_names_the_item(scorer, images, candidates, references, error, message):
    with pytest.raises(error, match=re.escape(message)):
        scorer.score(images, candidates, references)


def test_load_model_selects_pearl_by_model_type(scorer, images, tmp_path):
    loaded = load_model("tiny:pearl", device="cpu")
    assert isinstance(loaded, PearlScorer)
    assert loaded.config.score_names == ("Pearl-img", "Pearl")
    with pytest.raises(ValueError, match="Pearl models run in fp32 only"):
        load_model("tiny:pearl", device="cpu", dtype="fp16")


def test_evaluate_module_scores_with_a_pearl_directory(scorer, images, tmp_path):
    import evaluate

    metric_dir = str(Path(__file__).resolve().parents[2] / "metric" / "pacs_pp")
    pearl_dir = tiny_model_directory("pearl")
    metric = evaluate.load(metric_dir, model=str(pearl_dir), cache_dir=str(tmp_path / "evaluate"))
    candidates = ["a dog on the grass", "a cat on a sofa", "a red car"]
    references = [["a dog running"], ["a cat"], ["a car on the street"]]
    result = metric.compute(predictions=candidates, images=images, references=references)
    expected = load_model(str(pearl_dir), device="cpu").score(images, candidates, references)
    assert (result["metric"], result["ref_metric"]) == ("Pearl-img", "Pearl")
    assert_scores_close(result["scores"], expected.scores)
    assert_scores_close(result["ref_scores"], expected.ref_scores)


def test_space_scores_a_pearl_directory(images, monkeypatch, tmp_path):
    import importlib.util

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    specification = importlib.util.spec_from_file_location(
        "pacs_space_app_pearl", Path(__file__).resolve().parents[2] / "space" / "app.py"
    )
    app = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(app)
    pearl_dir = str(tiny_model_directory("pearl"))
    models = app.ModelCache(app.TINY_CHOICES, local_model=pearl_dir, allow_typed_paths=False).get(pearl_dir)
    assert models.clip_s is None
    captions = ["a dog on the grass", "a red car"]
    request = app.ScoreRequest(image=images[0], captions=captions, references=["a dog running"])
    table = app.score_request(request, models)
    expected = load_model(pearl_dir, device="cpu").score([images[0]] * 2, captions, [["a dog running"]] * 2)
    by_caption = table.set_index("caption")
    assert_scores_close(by_caption.loc[captions, "Pearl"].tolist(), expected.ref_scores)
    assert_scores_close(by_caption.loc[captions, "Pearl-img"].tolist(), expected.scores)
    assert table.attrs["ranked_by"] == "Pearl"


def test_corpus_scorer_scores_with_a_pearl_directory(images, tmp_path):
    import json

    from modeling_pacs.cli import score_corpus

    rows = [
        {"image": images[index % 3], "caption": caption, "references": [f"a reference {index}", "a dog"]}
        for index, caption in enumerate(["a dog", "a cat on a sofa", "a red car", "two people", "a ball"])
    ]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pearl_dir = str(tiny_model_directory("pearl"))
    arguments = [str(tmp_path / "corpus.jsonl"), "--output-dir", str(tmp_path / "out"), "--model", pearl_dir]
    score_corpus.main([*arguments, "--shard-size", "2", "--references-column", "references"])
    results = [json.loads(line) for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert [result["row"] for result in results] == [0, 1, 2, 3, 4]
    expected = load_model(pearl_dir, device="cpu").score(
        [row["image"] for row in rows], [row["caption"] for row in rows], [row["references"] for row in rows]
    )
    assert_scores_close([result["Pearl"] for result in results], expected.ref_scores)
    assert_scores_close([result["Pearl-img"] for result in results], expected.scores)
