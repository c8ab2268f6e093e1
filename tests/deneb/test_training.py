"""Training DENEB on a tiny Nebula-layout file: the training path scores like `score` (official mode), a few steps
lower the summed Huber loss and train only what comes after the frozen encoders, the recipe is the authors'."""

import pytest
import torch

from modeling_pacs import DenebModel
from modeling_pacs.deneb.training import (
    DenebCollator,
    DenebTrainer,
    deneb_training_arguments,
    prepare_deneb_for_training,
    read_deneb_rows,
)
from modeling_pacs.testing.deneb import make_tiny_deneb_model
from tests.polos.test_training import write_polaris

TRAINED = ["clip_projection", "clip_sequence_encoder", "head", "scalar_mix", "text_projection", "text_sequence_encoder"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nebula")
    # The authors' CSV has Polaris's columns (mt, refs, score, imgid).
    return read_deneb_rows(write_polaris(folder, num_rows=8), layout="polaris_csv", image_root=folder / "images")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_deneb_train")
    make_tiny_deneb_model(directory, seed=2)
    return directory


def make_trainer(model, rows, output_dir):
    settings = {"per_device_train_batch_size": 4, "per_device_eval_batch_size": 4, "learning_rate": 3e-3,
                "max_steps": 2, "warmup_steps": 0, "eval_strategy": "no", "save_strategy": "no",
                "load_best_model_at_end": False, "logging_steps": 1, "disable_tqdm": True, "use_cpu": True}  # fmt: skip
    args, _ = deneb_training_arguments(output_dir, **settings)
    return DenebTrainer(model=model, args=args, train_dataset=rows, data_collator=DenebCollator())


def huber_loss(model, rows) -> float:
    model.eval()
    out = model.score([r["image"] for r in rows], [r["candidate"] for r in rows], [r["references"] for r in rows])
    targets = torch.tensor([r["score"] for r in rows])
    return float(torch.nn.functional.huber_loss(out.scores, targets, reduction="sum", delta=0.5))


def test_the_recipe_is_the_authors():
    args, callback = deneb_training_arguments("unused")
    assert (args.per_device_train_batch_size, args.learning_rate, args.warmup_steps, args.seed) == (16, 3e-6, 1000, 12)
    assert (args.lr_scheduler_type, args.max_grad_norm, args.metric_for_best_model) == ("linear", 1.0, "kendall")
    assert callback.early_stopping_patience == 1


def test_the_training_path_scores_like_the_official_mode(model_dir, rows, tmp_path):
    model = prepare_deneb_for_training(DenebModel.from_pretrained(model_dir, dtype=torch.float32)).eval()
    trainer = make_trainer(model, rows, tmp_path / "run")
    batch = DenebCollator()(rows[:4])
    with torch.no_grad():
        trained_path = trainer.predict_batch(model, batch)
    expected = model.score(batch["images"], batch["candidates"], batch["references"], mode="official", batch_size=4)
    torch.testing.assert_close(trained_path, expected.scores, atol=1e-6, rtol=0)


def test_a_few_steps_lower_the_loss_and_train_only_what_follows_the_encoders(model_dir, rows, tmp_path):
    model = DenebModel.from_pretrained(model_dir, dtype=torch.float32, dropout=0.0, scalar_mix_dropout=0.0,
                                       sequence_dropout=0.0)  # fmt: skip
    model = prepare_deneb_for_training(model)
    before = huber_loss(model, rows)
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    assert sorted({name.split(".")[0] for name, p in model.named_parameters() if p.requires_grad}) == TRAINED
    make_trainer(model, rows, tmp_path / "run").train()
    assert huber_loss(model, rows) < before
    assert all(torch.equal(frozen[name], p) for name, p in model.named_parameters() if name in frozen)
