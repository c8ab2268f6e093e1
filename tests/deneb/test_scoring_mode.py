"""The scoring mode (`mode="per_item" | "official"`) of DENEB and Polos through the doors: `pacs-score --mode`, the
evaluate module's `compute(mode=...)` and `pacs-pp evaluate-captions --mode` give `model.score`'s numbers for that
mode, sign it, and a metric without scoring modes refuses it by name."""

import json

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
    "scoring mode 'official' applies to the metrics Polos, DENEB, not to PAC-S++, which has one way of batching: "
    "leave it out"
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


def test_a_metric_without_scoring_modes_refuses_one_by_name(inputs):
    folder, _ = inputs
    with pytest.raises(UnsupportedOptionError) as error:
        check_scoring_mode(METRICS["pac_s_pp"], "official")
    assert str(error.value) == REFUSAL
    with pytest.raises(SystemExit) as exit_:  # before the model loads
        score_main([str(folder / "captions.jsonl"), "--model", "tiny", "--mode", "official", "--no-progress"])
    assert str(exit_.value) == f"pacs-score: error: --mode: {REFUSAL}"
