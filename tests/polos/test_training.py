"""Training Polos on a tiny Polaris-layout fixture (CSV and parquet): the loss goes down, resume continues exactly,
early stopping fires on validation Kendall tau-c, malformed rows are named by row and column."""

import csv

import numpy as np
import pytest
import torch
from scipy import stats

from modeling_pacs import PolosModel
from modeling_pacs.polos.training import (
    PolarisCollator,
    PolosTrainer,
    polos_training_arguments,
    prepare_polos_for_training,
    read_polaris,
    regression_metrics,
)
from modeling_pacs.supervised import RowError
from modeling_pacs.testing.polos import make_tiny_polos_model
from tests.fixtures.helpers import random_image

CANDIDATES = ["a cat on a sofa", "a dog running", "two people riding horses", "a plate of food", "an airplane",
              "a woman with a laptop", "children playing football", "a man with an umbrella"]  # fmt: skip


def write_polaris(folder, num_rows=16, seed=0):
    """A Polaris-layout split: polaris_train.csv (mt, refs, score, imgid) and images/."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(num_rows):
        image_id = f"img_{index % 6}.jpg"
        if not (folder / "images" / image_id).exists():
            random_image(index % 6, (160, 120)).save(folder / "images" / image_id)
        references = [CANDIDATES[(index + 1) % 8], CANDIDATES[(index + 3) % 8]][: 1 + index % 2]
        rows.append({"mt": CANDIDATES[index % 8], "refs": repr(references), "score": f"{rng.uniform():.4f}",
                     "imgid": image_id})  # fmt: skip
    path = folder / "polaris_train.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["mt", "refs", "score", "imgid"])
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def polaris(tmp_path_factory):
    folder = tmp_path_factory.mktemp("polaris")
    return read_polaris(write_polaris(folder)), folder


@pytest.fixture(scope="module")
def tiny_polos_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_polos_train")
    make_tiny_polos_model(directory, seed=1)
    return directory


def fresh_model(directory, dropout: float = 0.0) -> PolosModel:
    model = PolosModel.from_pretrained(directory, dtype=torch.float32, dropout=dropout, scalar_mix_dropout=dropout)
    return prepare_polos_for_training(model)


def make_trainer(model, rows, output_dir, cache=True, callbacks=(), **overrides):
    settings = {"per_device_train_batch_size": 4, "per_device_eval_batch_size": 8, "gradient_accumulation_steps": 1,
                "learning_rate": 3e-3, "max_steps": 8, "eval_strategy": "no", "save_strategy": "no",
                "load_best_model_at_end": False, "logging_steps": 1, "disable_tqdm": True, "use_cpu": True}  # fmt: skip
    settings.update(overrides)
    args, _ = polos_training_arguments(output_dir, **settings)
    return PolosTrainer(model=model, args=args, train_dataset=rows, eval_dataset=rows,
                        data_collator=PolarisCollator(), cache_features=cache, callbacks=list(callbacks))  # fmt: skip


def summed_squared_error(model, rows) -> float:
    model.eval()
    output = model.score([r["image"] for r in rows], [r["candidate"] for r in rows], [r["references"] for r in rows])
    return float(((output.scores.double().numpy() - np.array([r["score"] for r in rows])) ** 2).sum())


def test_recipe_defaults_are_the_codes():
    args, callback = polos_training_arguments("unused")
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (64, 4)
    assert (args.learning_rate, args.weight_decay, args.max_grad_norm, args.seed) == (3e-5, 0.0, 1.0, 42)
    assert args.lr_scheduler_type == "constant" and args.metric_for_best_model == "kendall"
    assert callback.early_stopping_patience == 5
    code_args, code_callback = polos_training_arguments("unused", early_stopping="code")
    assert code_args.metric_for_best_model == "pearson" and code_callback.early_stopping_patience == 1


def test_regression_metrics_match_scipy():
    rng = np.random.default_rng(0)
    predictions, targets = rng.uniform(size=30), rng.uniform(size=30)
    metrics = regression_metrics(predictions, targets)
    assert metrics["kendall"] == pytest.approx(stats.kendalltau(predictions, targets, variant="c")[0], abs=1e-12)
    assert metrics["pearson"] == pytest.approx(np.corrcoef(predictions, targets)[0, 1], abs=1e-12)


def test_a_few_steps_lower_the_loss_and_train_only_head_and_mix(polaris, tiny_polos_dir, tmp_path):
    rows, _ = polaris
    model = fresh_model(tiny_polos_dir)
    before = summed_squared_error(model, rows)
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if name.startswith(("clip_", "text_"))}
    trainer = make_trainer(model, rows, tmp_path / "run")
    assert sorted({n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}) == ["head", "scalar_mix"]
    assert type(trainer.create_optimizer()) is torch.optim.Adam
    trainer.train()
    after = summed_squared_error(model, rows)
    assert after < before
    assert all(torch.equal(frozen[name], p) for name, p in model.named_parameters() if name in frozen)


def test_resume_continues_exactly(polaris, tiny_polos_dir, tmp_path):
    rows, _ = polaris
    straight = fresh_model(tiny_polos_dir)
    make_trainer(straight, rows, tmp_path / "straight", max_steps=6).train()
    interrupted = fresh_model(tiny_polos_dir)
    make_trainer(interrupted, rows, tmp_path / "resumed", max_steps=3, save_strategy="steps", save_steps=3).train()
    resumed = fresh_model(tiny_polos_dir)
    trainer = make_trainer(resumed, rows, tmp_path / "resumed", max_steps=6, save_strategy="steps", save_steps=3)
    trainer.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-3"))
    assert trainer.state.global_step == 6
    for (name, expected), actual in zip(straight.head.named_parameters(), resumed.head.parameters()):
        np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=0, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(resumed.scalar_mix.layer_weights.detach().numpy(),
                               straight.scalar_mix.layer_weights.detach().numpy(), rtol=0, atol=1e-6)  # fmt: skip


def test_early_stopping_fires_on_validation_kendall(polaris, tiny_polos_dir, tmp_path):
    rows, _ = polaris
    args, callback = polos_training_arguments(
        tmp_path / "stop", per_device_train_batch_size=8, per_device_eval_batch_size=16, gradient_accumulation_steps=1,
        learning_rate=0.0, num_train_epochs=20, disable_tqdm=True, use_cpu=True, save_total_limit=1,
    )  # fmt: skip
    trainer = PolosTrainer(model=fresh_model(tiny_polos_dir), args=args, train_dataset=rows, eval_dataset=rows,
                           data_collator=PolarisCollator(), cache_features=True, callbacks=[callback])  # fmt: skip
    trainer.train()
    # lr 0: validation Kendall never improves after epoch 1, so patience 5 stops after epoch 6 of 20.
    assert trainer.state.epoch == pytest.approx(6.0)
    assert trainer.state.global_step == 6 * 2
    kendalls = [entry["eval_kendall"] for entry in trainer.state.log_history if "eval_kendall" in entry]
    assert len(kendalls) == 6


def test_parquet_layout_reads_the_same_rows(polaris, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, folder = polaris
    table = pa.table({
        "refs": [row["references"] for row in rows],
        "cand": [row["candidate"] for row in rows],
        "img": [{"bytes": open(row["image"], "rb").read(), "path": None} for row in rows],
        "human_score": pa.array([row["score"] for row in rows], type=pa.float32()),
    })  # fmt: skip
    pq.write_table(table, tmp_path / "train.parquet")
    parquet_rows = read_polaris(tmp_path / "train.parquet")
    assert [r["candidate"] for r in parquet_rows] == [r["candidate"] for r in rows]
    assert [r["references"] for r in parquet_rows] == [r["references"] for r in rows]
    np.testing.assert_allclose([r["score"] for r in parquet_rows], [r["score"] for r in rows], rtol=0, atol=1e-6)
    # The images stay in the file; the collator reads a batch's rows (and only those).
    source = parquet_rows[3]["image"].source
    assert source.image_bytes_read == 0
    batch = PolarisCollator()([parquet_rows[3], parquet_rows[1]])
    assert batch["images"][0]["bytes"] == open(rows[3]["image"], "rb").read()
    assert batch["images"][1]["bytes"] == open(rows[1]["image"], "rb").read()


def test_malformed_rows_name_row_and_column(tmp_path):
    path = write_polaris(tmp_path, num_rows=4)
    lines = path.read_text().splitlines()
    cases = {
        2: (lambda line: line.replace(line.split(",")[-2], "1.5"), r"row 2 \(line 4\), column 'score': '1.5' is not"),
        1: (lambda line: line.replace("[", "(oops"), r"row 1 \(line 3\), column 'refs': .* is not a Python list"),
        3: (lambda line: line.replace("img_3.jpg", "missing.jpg"), r"row 3 \(line 5\), column 'imgid': image .*miss"),
    }  # fmt: skip
    for row, (edit, message) in cases.items():
        broken = list(lines)
        broken[row + 1] = edit(broken[row + 1])
        path.write_text("\n".join(broken) + "\n")
        with pytest.raises(RowError, match=r"polaris_train.csv: " + message):
            read_polaris(path)
    path.write_text("mt,refs,imgid\n")
    with pytest.raises(RowError, match=r"missing columns \['score'\]"):
        read_polaris(path)


def test_train_script_writes_a_loadable_model(polaris, tmp_path, capsys):
    import json

    from modeling_pacs.cli import train_polos as module

    _, folder = polaris
    csv_path = str(folder / "polaris_train.csv")
    common = [
        "--model_name_or_path",
        "tiny:polos",
        "--train",
        csv_path,
        "--validation",
        csv_path,
        "--output_dir",
        str(tmp_path),
    ]
    with pytest.raises(SystemExit):
        module.main([*common, "--batch_size", "0"])
    assert "--batch_size: must be a positive integer, got 0" in capsys.readouterr().err
    arguments = [*common, "--batch_size", "8", "--gradient_accumulation_steps", "1", "--num_train_epochs", "1"]
    assert module.main([*arguments, "--cache_features"]) == 0
    assert json.loads((tmp_path / "final" / "config.json").read_text())["model_type"] == "polos"
    assert isinstance(PolosModel.from_pretrained(tmp_path / "final"), PolosModel)
    assert "validation: eval_loss" in capsys.readouterr().out
