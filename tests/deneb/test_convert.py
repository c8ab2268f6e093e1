"""DENEB's converter on tiny weights in the authors' checkpoint layout: convert-then-score equals what the authors'
own code (`deneb_estimator.py` + `predict`, run by tests/references/deneb_authors.py) recorded in
tests/fixtures/deneb_parity.json, in several batchings, within 1e-5; bad files are refused by name."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from modeling_pacs.cli import main as pacs_pp_main
from modeling_pacs.deneb.convert import convert_deneb_checkpoint
from modeling_pacs.models.modeling_deneb import DenebModel
from modeling_pacs.pacs.convert import CheckpointError
from modeling_pacs.testing.roberta import build_tiny_roberta_tokenizer, tiny_roberta_config
from tests.fixtures.helpers import random_image
from tests.polos.test_convert import fake_lightning
from tests.references.deneb_authors import CANDIDATES, NUM_IMAGES, REFERENCES, WIDTH, authors_state_dict

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "deneb_parity.json").read_text(encoding="utf-8"))
# The authors' fp32 CPU scores against ours: other kernels and batch shapes, so not bit for bit.
PARITY_TOLERANCE = 1e-5


def write_checkpoint(path: Path, state: dict, hparams: dict):
    """A Lightning 1.2 checkpoint as DENEB's trainer writes it (callback states keyed by class), hparams.yaml beside."""
    with fake_lightning() as callbacks:
        torch.save(
            {
                "epoch": 3,
                "global_step": 640,
                "pytorch-lightning_version": "1.2.10",
                "state_dict": state,
                "callbacks": {
                    callbacks["EarlyStopping"]: {"wait_count": 0, "stopped_epoch": 0, "best_score": torch.tensor(0.5)},
                    callbacks["ModelCheckpoint"]: {"monitor": "kendall", "best_model_score": torch.tensor(0.5)},
                },
                "optimizer_states": [{"state": {}, "param_groups": [{"lr": 3e-6, "params": [0, 1]}]}],
                "lr_schedulers": [],
                "hparams_name": "hparams",
                "hyper_parameters": dict(hparams),
            },
            path,
        )
    (path.parent / "hparams.yaml").write_text(yaml.safe_dump(hparams), encoding="utf-8")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deneb-run")
    tokenizer = build_tiny_roberta_tokenizer()
    encoder_dir = folder / "sup-simcse-roberta-base"
    tiny_roberta_config(len(tokenizer), WIDTH, 2).save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    state = authors_state_dict(FIXTURE["shapes"])
    hparams = dict(FIXTURE["hparams"], pretrained_model="princeton-nlp/sup-simcse-roberta-base")
    write_checkpoint(folder / "epoch=3.ckpt", state, hparams)
    output = folder / "converted"
    lines = []
    convert_deneb_checkpoint(
        folder / "epoch=3.ckpt", output, text_encoder=str(encoder_dir), head_dim=8, log=lines.append
    )
    model = DenebModel.from_pretrained(output)
    images = [random_image(index) for index in range(NUM_IMAGES)]
    return {"folder": folder, "state": state, "hparams": hparams, "encoder": encoder_dir, "model": model,
            "images": images, "log": lines}  # fmt: skip


@pytest.fixture
def authors_inputs(monkeypatch):
    """The recorded items include an empty candidate (item 4), which the authors' code scores and `score` refuses:
    the parity checks run with that input check off (the numbers are the model's)."""
    from modeling_pacs.models import modeling_deneb

    monkeypatch.setattr(modeling_deneb, "check_no_empty_captions", lambda candidates, references: None)


def test_the_recorded_empty_candidate_is_refused_with_the_check_on(converted):
    with pytest.raises(ValueError, match=r"^item 4: the candidate is empty \(''\): DENEB cannot score an empty"):
        converted["model"].score(converted["images"], CANDIDATES, REFERENCES, mode="per_item")


@pytest.mark.usefixtures("authors_inputs")
def test_per_item_mode_equals_the_authors_forward_on_one_item_chunks(converted):
    out = converted["model"].score(converted["images"], CANDIDATES, REFERENCES, mode="per_item", batch_size=4)
    torch.testing.assert_close(out.scores, torch.tensor(FIXTURE["one_item_chunks"]), atol=PARITY_TOLERANCE, rtol=0)
    assert out.num_references_used.tolist() == [len(references) for references in REFERENCES]


@pytest.mark.usefixtures("authors_inputs")
@pytest.mark.parametrize("batch_size", sorted(FIXTURE["predict"], key=int))
def test_official_mode_equals_the_authors_predict(converted, batch_size):
    out = converted["model"].score(
        converted["images"], CANDIDATES, REFERENCES, mode="official", batch_size=int(batch_size)
    )
    torch.testing.assert_close(out.scores, torch.tensor(FIXTURE["predict"][batch_size]), atol=PARITY_TOLERANCE, rtol=0)


@pytest.mark.usefixtures("authors_inputs")
def test_official_mode_scores_a_one_item_chunk_where_the_authors_predict_crashes(converted):
    """The authors' `predict` fails on a last chunk of one item (`len()` of the squeezed 0-d score); ours scores it as
    their `forward` does."""
    assert set(FIXTURE["predict_crashes"]) == {"1", "5"}
    assert all("has no len()" in message for message in FIXTURE["predict_crashes"].values())
    out = converted["model"].score(converted["images"], CANDIDATES, REFERENCES, mode="official", batch_size=5)
    assert abs(float(out.scores[5]) - FIXTURE["one_item_chunks"][5]) <= PARITY_TOLERANCE


def test_the_converted_directory_holds_the_authors_tensors(converted):
    weights = converted["model"].state_dict()
    state = converted["state"]
    assert torch.equal(weights["clip_projection.weight"], state["upsampler.weight"])
    assert torch.equal(weights["text_sequence_encoder.class_token"], state["cls_token2"])
    assert torch.equal(
        weights["clip_sequence_encoder.encoder.layers.1.linear1.weight"], state["transformer.layers.1.linear1.weight"]
    )
    config = converted["model"].config
    assert (config.num_sequence_layers, config.sequence_intermediate_size, config.hidden_sizes) == (3, 2048, [48, 24])
    assert config.max_references == 998 and config.image_mean == [0.5, 0.5, 0.5]


def test_unused_keys_are_reported_by_group(converted):
    assert converted["log"][-1].endswith("(reloaded: every tensor equal to the conversion)")
    unused = [line for line in converted["log"] if line.startswith("unused:")]
    assert len(unused) == 3
    assert any("RoBERTa pooler" in line and "2 tensor(s)" in line for line in unused)
    assert any("positional encodings" in line and "pos_encoder.pe, pos_encoder2.pe" in line for line in unused)


def convert_state(converted, tmp_path, state, hparams=None):
    path = tmp_path / "bad" / "epoch=0.ckpt"
    path.parent.mkdir()
    write_checkpoint(path, state, hparams or converted["hparams"])
    return convert_deneb_checkpoint(
        path, tmp_path / "out", text_encoder=str(converted["encoder"]), head_dim=8, log=lambda line: None
    )


def test_a_wrong_shape_is_named(converted, tmp_path):
    state = dict(converted["state"])
    state["transformer2.layers.0.norm1.weight"] = torch.ones(3)
    with pytest.raises(CheckpointError, match=r"transformer2\.layers\.0\.norm1\.weight \(3,\) \(expected \(64,\)\)"):
        convert_state(converted, tmp_path, state)


def test_a_polos_checkpoint_is_refused_as_foreign(converted, tmp_path):
    state = {key.replace("pacs_clip.", "clip."): value for key, value in converted["state"].items()
             if not key.startswith(("transformer", "cls_token", "upsampler", "pos_encoder"))}  # fmt: skip
    with pytest.raises(CheckpointError, match=r"is not a DENEB checkpoint(.|\n)*a Polos checkpoint\?"):
        convert_state(converted, tmp_path, state)


def test_other_hparams_are_refused(converted, tmp_path):
    with pytest.raises(CheckpointError, match="hparams 'pool' is 'avg'"):
        convert_state(converted, tmp_path, converted["state"], dict(converted["hparams"], pool="avg"))


def test_a_corrupt_positional_encoding_is_refused(converted, tmp_path):
    state = dict(converted["state"])
    state["pos_encoder.pe"] = state["pos_encoder.pe"] + 0.5
    with pytest.raises(CheckpointError, match="'pos_encoder.pe' is not the authors' sinusoidal encoding"):
        convert_state(converted, tmp_path, state)


def test_the_command_refuses_a_pickle_that_needs_code_in_one_line(tmp_path, capsys):
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": CheckpointError("x")}, path)
    code = pacs_pp_main(["convert-deneb", "--checkpoint", str(path), "--output-dir", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip()
    assert code != 0 and len(error.splitlines()) == 1
    assert "refused to load" in error and "modeling_pacs.pacs.convert.CheckpointError" in error
    assert not (tmp_path / "out").exists()
