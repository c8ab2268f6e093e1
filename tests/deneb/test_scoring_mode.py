"""The scoring mode (`mode="per_item" | "official"`) of DENEB and Polos through the doors: `pacs-score --mode`, the
evaluate module's `compute(mode=...)` and `pacs-pp evaluate-captions --mode` give `model.score`'s numbers for that
mode, sign it, and a metric without scoring modes refuses it by name."""

import json
import re

import pytest

from modeling_pacs.cli.score import score_main
from modeling_pacs.errors import UnsupportedOptionError
from modeling_pacs.loading import check_scoring_mode, load_model
from modeling_pacs.metric_module import PACSPlusPlus
from modeling_pacs.registry import METRICS
from tests.fixtures.helpers import random_image

CAPTIONS = ["a cat on a sofa", "a dog in the park", "two birds on a wire"]
# Different reference counts: the official mode cuts each chunk to its smallest count, per_item uses them all.
REFERENCES = [["a cat sleeping", "a cat on a couch", "a grey cat"], ["a dog running"], ["birds", "two small birds"]]
REFUSAL = (
    "scoring mode 'official' applies to the metrics Polos, DENEB, not to PAC-S++ (pac_s_pp, pac_s, "
    "clip_s), which has one way of batching: leave it out"
)


@pytest.fixture(scope="module")
def deneb():
    return load_model("tiny:deneb")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mode")
    images = []
    for index in range(len(CAPTIONS)):
        path = folder / f"image{index}.png"
        random_image(seed=index).save(path)
        images.append(str(path))
    rows = [{"image": image, "caption": caption, "references": refs}
            for image, caption, refs in zip(images, CAPTIONS, REFERENCES, strict=True)]  # fmt: skip
    (folder / "captions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return folder, images


def expected(model, images, mode):
    """`model.score`'s numbers; the doors leave the official chunk at the model's own (the authors' 32)."""
    batch_size = model.config.official_batch_size
    return model.score(images, CAPTIONS, REFERENCES, mode=mode, batch_size=batch_size).scores.tolist()


def test_pacs_score_mode_gives_the_models_numbers_for_that_mode(deneb, inputs, tmp_path):
    folder, images = inputs
    output = tmp_path / "official.json"
    score_main([str(folder / "captions.jsonl"), "--model", "tiny:deneb", "--mode", "official", "--output", str(output),
                "--no-progress"])  # fmt: skip
    scores = [item["DENEB"] for item in json.loads(output.read_text(encoding="utf-8"))["items"]]
    assert scores == pytest.approx(expected(deneb, images, "official"), abs=1e-6)
    per_item = expected(deneb, images, "per_item")
    assert max(abs(a - b) for a, b in zip(scores, per_item, strict=True)) > 1e-4


def test_the_evaluate_module_forwards_the_mode_and_signs_it(deneb, inputs):
    _, images = inputs
    module = PACSPlusPlus(model="tiny:deneb")
    result = module.compute(predictions=CAPTIONS, images=images, references=REFERENCES, mode="official")
    assert result["scores"] == pytest.approx(expected(deneb, images, "official"), abs=1e-6)
    assert "|mode:official|" in result["signature"]
    assert result["signature"].replace("|mode:official|", "|mode:per_item|") == module.signature(REFERENCES)


def test_evaluate_captions_forwards_the_mode_and_signs_it(deneb, inputs):
    from modeling_pacs.evaluation.captions import evaluate_captions

    _, images = inputs
    rows = [{"image_id": index, "image": image, "caption": caption, "references": refs}
            for index, (image, caption, refs) in enumerate(zip(images, CAPTIONS, REFERENCES, strict=True))]  # fmt: skip
    evaluation = evaluate_captions(rows, metrics=["tiny:deneb"], mode="official", progress=False)
    scores = [item["tiny:deneb/score"] for item in evaluation.items]
    assert scores == pytest.approx(expected(deneb, images, "official"), abs=1e-6)
    assert "|mode:official|" in evaluation.signatures["tiny:deneb"]


def test_a_metric_without_scoring_modes_refuses_one_by_name(inputs):
    folder, _ = inputs
    with pytest.raises(UnsupportedOptionError) as error:
        check_scoring_mode(METRICS["pac_s_pp"], "official")
    assert str(error.value) == REFUSAL
    with pytest.raises(SystemExit) as exit_:  # before the model loads
        score_main([str(folder / "captions.jsonl"), "--model", "tiny", "--mode", "official", "--no-progress"])
    assert str(exit_.value) == f"pacs-score: error: --mode: {REFUSAL}"


# ---------------------------------------------------------------------------------------------------- more doors
# The harness, the torchmetrics classes, the pycocoevalcap-style scorers and the video doors take the mode too.
NEBULA_ROWS = [  # images out of order and unequal reference counts: the official chunks depend on the file's order
    ("a cat on a sofa", ["a cat sleeping", "a cat on a couch", "a grey cat"], 0.9, "img1.jpg"),
    ("a dog in the park", ["a dog running"], 0.4, "img0.jpg"),
    ("two birds on a wire", ["birds", "two small birds"], 0.7, "img1.jpg"),
    ("a red car", ["a car", "a red vehicle", "a parked car"], 0.2, "img0.jpg"),
    ("a plate of food", ["food on a plate"], 0.5, "img2.jpg"),
]
UNKNOWN_MODE = "DENEB has no scoring mode 'chunked': choose one of per_item, official"


@pytest.fixture(scope="module")
def tiny_pacs():
    return load_model("tiny")


@pytest.fixture(scope="module")
def small_chunks(tmp_path_factory):
    """tiny:deneb's weights with official chunks of 2 items, so that five items make three chunks."""
    from modeling_pacs.testing.deneb import make_tiny_deneb_model

    directory = tmp_path_factory.mktemp("deneb_chunks_of_2")
    make_tiny_deneb_model(directory, seed=1)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "official_batch_size": 2}))
    return directory, load_model(str(directory))


@pytest.fixture(scope="module")
def nebula(tmp_path_factory):
    from tests.fixtures.benchmark_files import write_rated_csv

    return write_rated_csv(tmp_path_factory.mktemp("nebula"), "nebula_test.csv", NEBULA_ROWS)


def file_order_scores(model, folder, mode):
    images = [str(folder / "images" / row[3]) for row in NEBULA_ROWS]
    candidates, references = [row[0] for row in NEBULA_ROWS], [row[1] for row in NEBULA_ROWS]
    return model.score(images, candidates, references, mode=mode, batch_size=model.config.official_batch_size).scores


def test_the_harness_forwards_the_mode_in_the_benchmarks_order_and_signs_it(small_chunks, nebula, monkeypatch):
    from modeling_pacs.cli import evaluate_benchmarks
    from modeling_pacs.evaluation import harness

    directory, model = small_chunks
    scored = {}
    original = harness.evaluate_columns

    def recording(benchmark, name, columns, meta):
        scored[meta["signature"]] = [columns["score"][f"nebula/{index}"] for index in range(len(NEBULA_ROWS))]
        return original(benchmark, name, columns, meta)

    monkeypatch.setattr(harness, "evaluate_columns", recording)
    for mode in ("official", "per_item"):
        evaluate_benchmarks.main(["--benchmark", "nebula", "--data-dir", str(nebula), "--model", str(directory),
                                  "--mode", mode, "--quiet"])  # fmt: skip
    (official_signature, official), (per_item_signature, per_item) = scored.items()
    assert "|mode:official|" in official_signature and "|mode:per_item|" in per_item_signature
    assert official == pytest.approx(file_order_scores(model, nebula, "official").tolist(), abs=1e-6)
    assert per_item == pytest.approx(file_order_scores(model, nebula, "per_item").tolist(), abs=1e-6)
    assert max(abs(a - b) for a, b in zip(official, per_item, strict=True)) > 1e-4
    # Sorted by image (the harness's order for batch-invariant scoring), the official chunks would differ.
    order = sorted(range(len(NEBULA_ROWS)), key=lambda index: NEBULA_ROWS[index][3])
    sorted_scores = model.score([str(nebula / "images" / NEBULA_ROWS[i][3]) for i in order],
                                [NEBULA_ROWS[i][0] for i in order], [NEBULA_ROWS[i][1] for i in order],
                                mode="official", batch_size=2).scores.tolist()  # fmt: skip
    assert max(abs(sorted_scores[order.index(i)] - official[i]) for i in range(len(NEBULA_ROWS))) > 1e-4


def test_the_harness_refuses_a_mode_before_loading_naming_the_valid_ones(nebula):
    from modeling_pacs.cli import evaluate_benchmarks

    common = ["--benchmark", "nebula", "--data-dir", str(nebula), "--quiet"]
    with pytest.raises(SystemExit) as exit_:
        evaluate_benchmarks.main([*common, "--model", "tiny:deneb", "--model", "tiny", "--mode", "official"])
    assert str(exit_.value) == f"evaluate_benchmarks: error: --mode: --model tiny: {REFUSAL}"
    with pytest.raises(SystemExit):  # argparse: only the modes any metric has
        evaluate_benchmarks.main([*common, "--model", "tiny:deneb", "--mode", "chunked"])


def test_the_torchmetrics_class_forwards_the_mode_and_signs_it(deneb, tiny_pacs, inputs):
    from modeling_pacs.evaluation.torch_metrics import ModelMetric

    _, images = inputs
    for mode in ("official", "per_item"):
        metric = ModelMetric(deneb, mode=mode)
        metric.update(images, CAPTIONS, REFERENCES)
        expected_scores = expected(deneb, images, mode)
        assert metric.scores[0].tolist() == pytest.approx(expected_scores, abs=1e-6)
        assert float(metric.compute()) == pytest.approx(sum(expected_scores) / len(expected_scores), abs=1e-6)
        assert f"|mode:{mode}|" in metric.signature()
    with pytest.raises(UnsupportedOptionError, match=f"^{re.escape(REFUSAL)}$"):
        ModelMetric(tiny_pacs, mode="official")
    with pytest.raises(ValueError, match=f"^{UNKNOWN_MODE}$"):
        ModelMetric(deneb, mode="chunked")


def test_the_coco_scorer_forwards_the_mode_and_signs_it(deneb, tiny_pacs, inputs):
    from modeling_pacs.evaluation.coco_scorers import ModelScorer

    _, images = inputs
    gts = {index: references for index, references in enumerate(REFERENCES)}
    res = {index: [caption] for index, caption in enumerate(CAPTIONS)}
    for mode in ("official", "per_item"):
        scorer = ModelScorer(deneb, images=dict(enumerate(images)), mode=mode)
        corpus, per_item = scorer.compute_score(gts, res)
        assert per_item == pytest.approx(expected(deneb, images, mode), abs=1e-6)
        assert corpus == pytest.approx(sum(per_item) / len(per_item), abs=1e-6)
        assert f"|mode:{mode}|" in scorer.signature
    with pytest.raises(UnsupportedOptionError, match=f"^{re.escape(REFUSAL)}$"):
        ModelScorer(tiny_pacs, images=dict(enumerate(images)), mode="official")
    with pytest.raises(ValueError, match=f"^{UNKNOWN_MODE}$"):
        ModelScorer(deneb, images=dict(enumerate(images)), mode="chunked")


def test_a_metric_of_images_is_refused_at_the_video_doors(deneb, inputs):
    from modeling_pacs.loading import check_media
    from modeling_pacs.metric_module.video import compute_video_results

    folder, images = inputs
    message = "DENEB scores images only, not videos: score videos with one of the metrics pac_s_pp, pac_s, clip_s"
    with pytest.raises(UnsupportedOptionError, match=f"^{message}$"):
        check_media(METRICS["deneb"], "video")
    with pytest.raises(SystemExit) as exit_:  # pacs-score --video: before the model loads
        score_main([str(folder / "captions.jsonl"), "--model", "tiny:deneb", "--video", "--mode", "official",
                    "--no-progress"])  # fmt: skip
    assert str(exit_.value) == f"pacs-score: error: {message}"
    with pytest.raises(UnsupportedOptionError, match=f"^{message}$"):  # the evaluate module's videos=
        compute_video_results(deneb, CAPTIONS, images, REFERENCES, True, {"mode": "official"}, {})
