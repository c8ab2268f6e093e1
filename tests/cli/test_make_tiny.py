"""`pacs-pp make-tiny` (issue 32, point 3): the default seed scores the examples above 0, and a saved tiny directory
warns that its weights are random on every path that loads it."""

import json
import logging
import shutil
from pathlib import Path

import pytest
from transformers import AutoModel, AutoProcessor

from modeling_pacs.cli import main
from modeling_pacs.cli.main import build_parser
from modeling_pacs.loading import load_model
from modeling_pacs.models.artifacts import RANDOM_WEIGHTS_FIELD
from modeling_pacs.registry import TINY_SEED
from modeling_pacs.results import result_columns, score_columns

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def tiny_directory(tmp_path_factory):
    directory = tmp_path_factory.mktemp("make_tiny") / "tiny-model"
    main(["make-tiny", str(directory)])
    return directory


def random_weights_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if "has RANDOM weights" in record.getMessage()]


def test_the_default_seed_is_the_tiny_aliases_one_and_scores_the_examples_above_zero(tiny_directory):
    assert build_parser().parse_args(["make-tiny", "out"]).seed == TINY_SEED
    captions = json.loads((EXAMPLES / "captions.json").read_text())
    references = json.loads((EXAMPLES / "references.json").read_text())
    pairs = [(image, caption) for image, value in captions.items() for caption in value]
    model = load_model(str(tiny_directory))
    output = model.score(
        [str(EXAMPLES / image) for image, _ in pairs],
        [caption for _, caption in pairs],
        references=[references[image] for image, _ in pairs],
    )
    columns = score_columns(result_columns(model, output))
    assert [column.label for column in columns] == ["PAC-S++", "RefPAC-S++"]
    for column in columns:
        assert all(value > 0.05 for value in column.values), (column.label, column.values)  # not clipped to 0


def test_a_saved_tiny_directory_warns_through_every_loader(tiny_directory, caplog):
    assert json.loads((tiny_directory / "config.json").read_text())[RANDOM_WEIGHTS_FIELD] is True
    caplog.set_level(logging.WARNING)
    AutoModel.from_pretrained(tiny_directory, trust_remote_code=True)
    assert random_weights_warnings(caplog) == [
        f"model '{tiny_directory}' has RANDOM weights (a tiny model for tests and smoke runs): its scores are "
        "meaningless; score real captions with a released model"
    ]
    caplog.clear()
    load_model(str(tiny_directory))
    assert len(random_weights_warnings(caplog)) == 1
    caplog.clear()
    processor = AutoProcessor.from_pretrained(tiny_directory, trust_remote_code=True)
    assert type(processor).__name__ == "CLIPProcessor"
    assert random_weights_warnings(caplog) == [
        f"the processor's model '{tiny_directory}' has RANDOM weights (a tiny model for tests and smoke runs): its "
        "scores are meaningless; score real captions with a released model"
    ]


@pytest.mark.parametrize("alias", ["tiny", "tiny:polos", "tiny:pearl"])
def test_the_tiny_aliases_warn_once(alias, caplog):
    caplog.set_level(logging.WARNING)
    load_model(alias)
    assert len(random_weights_warnings(caplog)) == 1


def test_a_tiny_alias_cache_written_before_the_marker_gets_it(tiny_directory, tmp_path, monkeypatch):
    from modeling_pacs.testing.directories import tiny_model_directory

    monkeypatch.setenv("PACS_PP_CACHE", str(tmp_path))
    cached = tmp_path / f"tiny-pac_s_pp-seed{TINY_SEED}"
    shutil.copytree(tiny_directory, cached)
    # as the cache was written before the marker existed
    config = json.loads((cached / "config.json").read_text())
    del config[RANDOM_WEIGHTS_FIELD]
    (cached / "config.json").write_text(json.dumps(config))
    processor = json.loads((cached / "processor_config.json").read_text())
    del processor["auto_map"]
    (cached / "processor_config.json").write_text(json.dumps(processor))
    assert tiny_model_directory() == cached
    assert json.loads((cached / "config.json").read_text())[RANDOM_WEIGHTS_FIELD] is True
    assert "AutoProcessor" in json.loads((cached / "processor_config.json").read_text())["auto_map"]
