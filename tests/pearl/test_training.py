"""Pearl end to end on tiny encoders: feature extraction and its cache, data layouts, training, resume, reloading."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import EarlyStoppingCallback

from modeling_pacs import PearlModel
from modeling_pacs.encoders import load_encoder
from modeling_pacs.hub import save_remote_code_model
from modeling_pacs.pearl.features import FeatureCache, extract_features
from modeling_pacs.pearl.scorer import PearlScorer
from modeling_pacs.pearl.training import (
    PearlDataCollator,
    PearlTrainer,
    compute_pearl_metrics,
    pearl_training_arguments,
)
from modeling_pacs.supervised.data import check_references, read_rows, rows_from_records
from modeling_pacs.testing.directories import tiny_model_directory
from tests.fixtures.helpers import assert_scores_close
from tests.fixtures.pearl import one_torch_thread, write_spica_fixture  # noqa: F401 (autouse fixture)

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_pearl_dir():
    return tiny_model_directory("pearl")  # built once per test session (read-only here)


@pytest.fixture(scope="module")
def encoders(tiny_pearl_dir):
    config = PearlModel.config_class.from_pretrained(tiny_pearl_dir)
    return {name: load_encoder(name, config.encoder_specs[name], tiny_pearl_dir) for name in config.encoder_names}


@pytest.fixture(scope="module")
def spica(tmp_path_factory, encoders):
    paths = write_spica_fixture(tmp_path_factory.mktemp("spica"))
    rows = read_rows(paths["data"] / "spica_train.csv") + read_rows(paths["data"] / "spica_val.csv")
    texts = [row["candidate"] for row in rows] + [ref for row in rows for ref in row["references"]]
    cache = paths["data"] / "cache"
    extract_features(
        encoders,
        [row["image"] for row in rows],
        texts,
        cache,
        lambda key: str(paths["images"] / key),
        shard_size=4,
        progress=False,
    )
    return {**paths, "cache": cache, "texts": texts, "rows": rows}


def test_spica_rows_parse_with_and_without_references(spica):
    rows = read_rows(spica["data"] / "spica_train.csv")
    assert len(rows) == 12
    assert rows[0] == {
        "row": 0,
        "image": "img_0.jpg",
        "candidate": "a dog running on the grass",
        "references": ["a dog running in a field", "a brown dog on grass"],
        "score": 0.9,
    }
    assert rows[1]["references"] == []
    assert sum(1 for row in rows if not row["references"]) == 6


def test_nebula_and_polaris_layouts_map_their_columns():
    nebula = rows_from_records([{"file_name": "a.jpg", "mt": "x", "refs": ["r"], "human_score": 0.25}], "nebula", "n")
    polaris = rows_from_records([{"img": "b.jpg", "cand": "y", "refs": "[]", "human_score": "1"}], "polaris", "p")
    assert nebula == [{"row": 0, "image": "a.jpg", "candidate": "x", "references": ["r"], "score": 0.25}]
    assert polaris == [{"row": 0, "image": "b.jpg", "candidate": "y", "references": [], "score": 1.0}]


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("['a dog', 'a cat'", "spica_train.csv: row 3, column 'refs': \"['a dog', 'a cat'\" is not a Python list"),
        ("['a dog', 3]", "spica_train.csv: row 3, column 'refs': \"['a dog', 3]\" must be a list of strings"),
        ("'a dog'", "spica_train.csv: row 3, column 'refs': \"'a dog'\" must be a list of strings"),
    ],
)
def test_malformed_refs_cell_names_the_row(cell, message):
    with pytest.raises(ValueError) as error:
        check_references(cell, "spica_train.csv", 3, required=False)
    assert str(error.value).startswith(message)


def test_bad_score_names_the_row():
    with pytest.raises(ValueError, match=r"s.csv: row 0, column 'score': '1.5' is not a finite number in \[0.0, 1.0\]"):
        rows_from_records([{"imgid": "a.jpg", "mt": "x", "refs": "[]", "score": "1.5"}], "spica", "s.csv")
    with pytest.raises(ValueError, match=r"s.csv: row 0: missing columns \['refs'\]"):
        rows_from_records([{"imgid": "a.jpg", "mt": "x", "score": "0.5"}], "spica", "s.csv")


def test_encoders_give_the_documented_shapes(encoders, spica):
    images = [str(spica["images"] / "img_0.jpg"), str(spica["images"] / "img_1.jpg")]
    assert encoders["clip"].encode_image(images).shape == (2, 1, 32)
    assert encoders["clip"].encode_text(["a dog", "a cat"]).shape == (2, 32)
    assert encoders["beit3"].encode_image(images).shape == (2, 1, 20)
    assert encoders["beit3"].encode_text(["a dog", "a cat"]).shape == (2, 20)
    blip2_images = encoders["blip2"].encode_image(images)
    assert blip2_images.shape == (2, 4, 16)
    np.testing.assert_allclose(blip2_images.norm(dim=-1).numpy(), np.ones((2, 4)), atol=1e-5)  # L2-normalised
    blip2_texts = encoders["blip2"].encode_text(["A dog.", "a dog"])
    assert blip2_texts.shape == (2, 16)
    # LAVIS normalisation: case and the listed punctuation do not change the feature.
    np.testing.assert_allclose(blip2_texts[0].numpy(), blip2_texts[1].numpy(), atol=1e-6)
    stella = encoders["stella"].encode_text(["a dog", ""])
    assert stella.shape == (2, 24)
    np.testing.assert_allclose(stella.norm(dim=-1).numpy(), [1.0, 1.0], atol=1e-5)
    np.testing.assert_allclose(stella[1].numpy(), encoders["stella"].encode_text(["[EMPTY]"])[0].numpy(), atol=1e-6)


def test_stella_pooling_and_projection_match_numpy(encoders):
    stella = encoders["stella"]
    tokens = stella.tokenizer(["a dog on the sofa"], return_tensors="pt")
    with torch.no_grad():
        hidden = stella.model(**tokens).last_hidden_state[0].numpy()
    pooled = hidden.mean(axis=0)
    projected = stella.projection.weight.detach().numpy() @ pooled + stella.projection.bias.detach().numpy()
    expected = projected / np.linalg.norm(projected)
    np.testing.assert_allclose(stella.encode_text(["a dog on the sofa"])[0].numpy(), expected, atol=1e-5)


def test_feature_cache_holds_each_key_once_and_resumes(spica, encoders):
    cache = FeatureCache(spica["cache"])
    assert sorted(cache.image_index) == [f"img_{index}.jpg" for index in range(6)]
    assert sorted(cache.text_index) == sorted(set(spica["texts"]))
    assert cache.image_features["blip2"].shape == (6, 4, 16)
    assert "stella" not in cache.image_features
    direct = encoders["blip2"].encode_text(["a cat on the sofa"])
    np.testing.assert_allclose(cache.texts("blip2", ["a cat on the sofa"]).numpy(), direct.numpy(), atol=1e-6)
    # Remove one shard (an interrupted run): the rerun computes exactly that shard.
    removed = spica["cache"] / "stella" / "texts-00001.safetensors"
    before = FeatureCache(spica["cache"]).text_features["stella"]
    removed.unlink()
    counts = extract_features(
        encoders,
        [row["image"] for row in spica["rows"]],
        spica["texts"],
        spica["cache"],
        lambda key: str(spica["images"] / key),
        shard_size=4,
        progress=False,
    )
    assert counts["computed"] == 1
    np.testing.assert_allclose(FeatureCache(spica["cache"]).text_features["stella"].numpy(), before.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="was built for other data or encoders"):
        extract_features(encoders, ["other.jpg"], ["x"], spica["cache"], shard_size=4, progress=False)
    with pytest.raises(KeyError, match="text 'never seen' is not in the feature cache"):
        cache.texts("blip2", ["never seen"])


def make_trainer(directory, spica, output, early_stopping=True, **overrides):
    config = PearlModel.config_class.from_pretrained(directory)
    torch.manual_seed(0)
    model = PearlModel(config)
    settings = dict(
        learning_rate=1e-3,
        warmup_steps=0,
        per_device_train_batch_size=4,
        num_train_epochs=2,
        save_total_limit=None,
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_cpu=True,
    )
    settings.update(overrides)
    rows = spica["rows"]
    return PearlTrainer(
        model=model,
        args=pearl_training_arguments(str(output), **settings),
        train_dataset=rows[:12],
        eval_dataset=rows[12:],
        data_collator=PearlDataCollator(FeatureCache(spica["cache"]), config),
        early_stopping=early_stopping,
    )


def test_collator_mixes_reference_free_and_reference_based_rows(tiny_pearl_dir, spica):
    config = PearlModel.config_class.from_pretrained(tiny_pearl_dir)
    batch = PearlDataCollator(FeatureCache(spica["cache"]), config)(spica["rows"][:5])
    assert batch["reference_mask"].tolist() == [
        [True, True, False],
        [False, False, False],
        [True, False, False],
        [False, False, False],
        [True, True, True],
    ]
    assert batch["reference_features"]["stella"].shape == (5, 3, 24)
    assert batch["labels"].tolist() == pytest.approx([0.9, 0.7, 0.6, 0.2, 0.8])


def test_training_lowers_loss_resumes_and_reloads_in_a_fresh_process(tiny_pearl_dir, spica, tmp_path):
    trainer = make_trainer(tiny_pearl_dir, spica, tmp_path / "run", early_stopping=False)
    batch = trainer.data_collator(spica["rows"][:12])

    def loss_of(model):
        model.eval()
        with torch.no_grad():
            return float(model(**batch).loss)

    before = loss_of(trainer.model)
    trainer.train()
    after = loss_of(trainer.model)
    assert after < before
    assert sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    # Resume from the epoch-1 checkpoint: the second epoch is replayed and reaches the same weights.
    resumed = make_trainer(tiny_pearl_dir, spica, tmp_path / "run", early_stopping=False)
    (tmp_path / "run" / "checkpoint-6").rename(tmp_path / "checkpoint-6-moved")
    resumed.args.load_best_model_at_end = False  # compare the last state, not the best one
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3"))
    last = PearlModel.from_pretrained(tmp_path / "checkpoint-6-moved", dtype=torch.float32).state_dict()
    for key, value in resumed.model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), last[key].numpy(), atol=1e-6, err_msg=key)
    # The trained model, saved with its encoders, scores identically through `pacs-score` in a fresh offline process.
    saved = tmp_path / "trained"
    save_remote_code_model(trainer.model, saved)
    shutil.copytree(tiny_pearl_dir / "encoders", saved / "encoders")
    items = [
        {"image": str(spica["images"] / row["image"]), "caption": row["candidate"], "references": row["references"]}
        for row in spica["rows"][:5]
        if row["references"]
    ]
    scorer = PearlScorer(trainer.model, load_scorer_encoders(saved))
    expected = scorer.score(
        [item["image"] for item in items],
        [item["caption"] for item in items],
        [item["references"] for item in items],
    )
    with (tmp_path / "items.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["image", "caption", "references"])
        writer.writeheader()
        writer.writerows([{**item, "references": json.dumps(item["references"])} for item in items])
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPOSITORY)}
    command = [sys.executable, "-m", "modeling_pacs.cli", "score", str(tmp_path / "items.csv"), "--model", str(saved)]
    command += ["--output", str(tmp_path / "scores.json"), "--device", "cpu"]
    subprocess.run(command, check=True, env=environment, capture_output=True, timeout=300)
    result = json.loads((tmp_path / "scores.json").read_text())
    assert [row["caption"] for row in result["items"]] == [item["caption"] for item in items]
    assert_scores_close([row["Pearl"] for row in result["items"]], expected.ref_scores.tolist())
    assert_scores_close([row["Pearl-img"] for row in result["items"]], expected.scores.tolist())


def load_scorer_encoders(directory):
    config = PearlModel.config_class.from_pretrained(directory)
    return {name: load_encoder(name, config.encoder_specs[name], directory) for name in config.encoder_names}


def test_validation_metric_is_kendall_tau_c_and_early_stopping_has_patience_one(tiny_pearl_dir, spica, tmp_path):
    predictions = np.array([0.1, 0.4, 0.35, 0.8, 0.7, 0.2])
    human = np.array([0.0, 0.5, 0.5, 1.0, 0.75, 0.25])
    # Stuart's tau-c by hand: 2 (P - Q) / (n^2 (m - 1) / m), m = min(distinct predictions, distinct scores).
    concordant = discordant = 0
    for i in range(6):
        for j in range(i + 1, 6):
            product = np.sign(predictions[i] - predictions[j]) * np.sign(human[i] - human[j])
            concordant += product > 0
            discordant += product < 0
    m = min(len(set(predictions)), len(set(human)))
    expected = 100 * 2 * (concordant - discordant) / (36 * (m - 1) / m)
    metrics = compute_pearl_metrics(SimpleNamespace(predictions=predictions, label_ids=human))
    assert metrics["kendall_c"] == pytest.approx(expected, abs=1e-9)
    trainer = make_trainer(tiny_pearl_dir, spica, tmp_path / "run")
    stoppers = [
        callback for callback in trainer.callback_handler.callbacks if isinstance(callback, EarlyStoppingCallback)
    ]
    assert [stopper.early_stopping_patience for stopper in stoppers] == [1]
    assert (trainer.args.metric_for_best_model, trainer.args.greater_is_better) == ("kendall_c", True)
    assert trainer.args.load_best_model_at_end
    with pytest.raises(ValueError, match="learning_rate must be > 0, got 0"):
        pearl_training_arguments(str(tmp_path / "bad"), learning_rate=0)


def test_extraction_and_training_scripts(tiny_pearl_dir, spica, tmp_path, capsys):
    from modeling_pacs.cli import extract_pearl_features, train_pearl

    common = ["--data", str(spica["data"])]
    extract = [
        *common,
        "--images",
        str(spica["images"]),
        "--model",
        str(tiny_pearl_dir),
        "--cache",
        str(tmp_path / "f"),
    ]
    assert extract_pearl_features.main([*extract, "--shard-size", "8", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "16 rows: " in printed
    # Stella features are L2-normalised 24-d vectors: no value can leave [-1, 1].
    assert "stella: 0.000 % of feature values outside [-1.0, 1.0]" in printed
    # The script's cache holds the same features as the fixture's (built by the library call).
    np.testing.assert_allclose(
        FeatureCache(tmp_path / "f").texts("stella", ["a blue bus"]).numpy(),
        FeatureCache(spica["cache"]).texts("stella", ["a blue bus"]).numpy(),
        atol=1e-6,
    )
    train = [*common, "--cache", str(tmp_path / "f"), "--model_name_or_path", str(tiny_pearl_dir),
             "--output_dir", str(tmp_path / "run")]  # fmt: skip
    assert train_pearl.main([*train, "--num_train_epochs", "1", "--batch_size", "4", "--warmup_steps", "0"]) == 0
    assert "validation Kendall tau-c" in capsys.readouterr().out
    best = PearlModel.from_pretrained(tmp_path / "run" / "best", dtype=torch.float32)
    assert best.config.encoder_names == ["clip", "beit3", "blip2", "stella"]
    assert (tmp_path / "run" / "best" / "encoders" / "stella" / "2_Dense_768" / "config.json").is_file()
    with pytest.raises(SystemExit):
        train_pearl.main([*train, "--num_train_epochs", "1"])
    assert "is not empty: pass --resume_from_checkpoint last to continue, or --overwrite" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        extract_pearl_features.main([*extract, "--shard-size", "0"])
    assert "--shard-size must be > 0" in capsys.readouterr().err


def test_blip2_features_match_the_retrieval_model_itc_path(encoders, tiny_pearl_dir, spica):
    from transformers import Blip2ForImageTextRetrieval

    from modeling_pacs.encoders import blip_caption_normalise
    from modeling_pacs.encoders.base import load_square_batch

    assert blip_caption_normalise('A Dog (running)!  on: the "grass".') == "a dog running on the grass"
    assert blip_caption_normalise(" ".join(["dog"] * 60)) == " ".join(["dog"] * 50)
    peer = Blip2ForImageTextRetrieval.from_pretrained(tiny_pearl_dir / "encoders" / "blip2", dtype=torch.float32).eval()
    encoder = encoders["blip2"]
    image = str(spica["images"] / "img_2.jpg")
    pixels = load_square_batch([image], [0], encoder.image_size, encoder.image_mean, encoder.image_std)
    tokens = encoder.tokenizer(["a dog on the grass"], return_tensors="pt")
    with torch.no_grad():
        itc = peer(pixel_values=pixels, input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
    np.testing.assert_allclose(encoder.encode_image([image])[0].numpy(), itc.image_embeds[0].numpy(), atol=1e-5)
    np.testing.assert_allclose(
        encoder.encode_text(["A dog on the grass."])[0].numpy(), itc.text_embeds[0].numpy(), atol=1e-5
    )
