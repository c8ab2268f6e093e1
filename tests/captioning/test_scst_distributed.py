"""Multi-process captioner training on CPU (torchrun, gloo) with tiny models, both stages (XE and SCST): two processes
train like one process on the same global batch, a two-process run resumed from a mid-way checkpoint continues
identically, and only rank 0 writes the run's files.

Tolerance: SCORE_TOLERANCE (1e-6, absolute) on weights, rewards and losses. Measured (2026-11-25, CPU, gloo, torch
2.13, transformers 5.24), max |weight difference| after 4 SGD steps of lr 0.5, 2 processes x 1 image vs 1 process x
2 images: XE 4.5e-8, SCST 4.3e-7 (the weights themselves move by 0.27 and 0.10); resumed from checkpoint-2 vs
uninterrupted (AdamW, 4 steps): 0.0 for both stages, losses and rewards identical. Nothing differs beyond fp32
summation order: the XE loss divides each process's token sum by the step's token count over all processes
(`num_items_in_batch`), so captions of different lengths on the two processes weigh exactly as in one batch (before
that, the captioner ignored `num_items_in_batch` while the Trainer still multiplied the loss by the process count:
2 processes then trained with about twice the gradient, a 2.2e-2 weight difference after the same 4 steps)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
import torch.distributed
from safetensors.torch import load_file

import modeling_pacs.testing.pacs
from modeling_pacs.testing.directories import tiny_model_directory
from modeling_pacs.tokenization import build_clip_tokenizer
from tests.captioning import scst_distributed_worker
from tests.fixtures.helpers import SCORE_TOLERANCE, assert_scores_close, caption_rows
from tests.models.test_captioner import tiny_captioner

REPOSITORY = Path(__file__).resolve().parents[2]
CAPTIONS = [["a red dog on grass", "a dog"], ["a blue cat on a sofa"], ["two birds in the sky"], ["a green car"]]

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="this torch build has no torch.distributed with the gloo backend: multi-process training cannot run",
)


@pytest.fixture(scope="module")
def toy_dataset_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("toy_dataset")
    rows = caption_rows(folder, CAPTIONS)
    splits = datasets.DatasetDict(train=datasets.Dataset.from_list(rows), test=datasets.Dataset.from_list(rows[:2]))
    splits.save_to_disk(str(folder / "dataset"))
    return folder / "dataset"


def torchrun(script: Path, *argv: str, home: Path) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2` on `script`, importing this checkout, one thread per process."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    completed = subprocess.run(
        [*command, *argv], env=environment, cwd=REPOSITORY, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed


def max_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    assert sorted(first) == sorted(second)
    return max(float((first[name] - second[name]).abs().max()) for name in first)


def test_two_processes_train_like_one_process_with_the_same_global_batch(toy_dataset_dir, tmp_path):
    # Two processes x 1 image and one process x 2 images, 4 SGD steps (2 epochs): the same images per step, the same
    # rewards for them, and the same weights, since DDP's average of the per-process Eq. 19 losses' gradients is the
    # gradient of the global batch's loss when each image's baseline is the mean over its own beams. The one-process
    # loss is checked against an independent per-image-baseline computation in test_captioner.py, so equal weights
    # here also mean that no baseline mixes the beams of images held by different processes.
    train_split = str(toy_dataset_dir / "train")
    worker = REPOSITORY / "tests" / "captioning" / "scst_distributed_worker.py"
    (tmp_path / "two").mkdir()
    torchrun(worker, train_split, str(tmp_path / "two"), "1", "4", "0.5", home=tmp_path / "hf")
    (tmp_path / "one").mkdir()
    scst_distributed_worker.run(train_split, str(tmp_path / "one"), 2, 4, 0.5)

    ranks = [json.loads((tmp_path / "two" / f"steps_{rank}.json").read_text()) for rank in (0, 1)]
    single = json.loads((tmp_path / "one" / "steps_0.json").read_text())
    assert len(single) == len(ranks[0]) == len(ranks[1]) == 4
    for step, (on_rank_0, on_rank_1, reference) in enumerate(zip(*ranks, single)):
        # The sampler's batch of 2 is split over the processes in order: rank 0 the first row, rank 1 the second.
        assert on_rank_0["rows"] + on_rank_1["rows"] == reference["rows"], step
        assert_scores_close(on_rank_0["rewards"] + on_rank_1["rewards"], reference["rewards"], what=f"step {step}")
        # The logged reward is the global batch's mean on every process, not rank 0's share.
        for logged in (on_rank_0["logged_reward"], on_rank_1["logged_reward"]):
            assert logged == pytest.approx(reference["logged_reward"], abs=SCORE_TOLERANCE)
    assert sorted(row for step in single for row in step["rows"]) == [0, 0, 1, 1, 2, 2, 3, 3]

    weights = [load_file(str(tmp_path / "two" / f"weights_{rank}.safetensors")) for rank in (0, 1)]
    reference_weights = load_file(str(tmp_path / "one" / "weights_0.safetensors"))
    initial = {name: parameter.detach() for name, parameter in tiny_captioner(seed=1).named_parameters()}
    assert max_difference(weights[0], weights[1]) <= SCORE_TOLERANCE  # the replicas stay in step
    assert max_difference(weights[0], reference_weights) <= SCORE_TOLERANCE
    assert max_difference(reference_weights, initial) > 1e4 * SCORE_TOLERANCE  # the comparison is not vacuous


def test_two_processes_train_xe_like_one_process_with_the_same_global_batch(toy_dataset_dir, tmp_path):
    # The XE stage (Eq. 16, teacher forcing), as the SCST test above: 2 processes x 1 image against 1 process x 2
    # images, 4 plain SGD steps. The two processes' captions have different token counts at some step, so a
    # per-process token mean averaged by DDP would differ from the one-batch token mean; the loss must weigh every
    # token of the global batch alike.
    train_split = str(toy_dataset_dir / "train")
    worker = REPOSITORY / "tests" / "captioning" / "scst_distributed_worker.py"
    (tmp_path / "two").mkdir()
    torchrun(worker, train_split, str(tmp_path / "two"), "1", "4", "0.5", "xe", home=tmp_path / "hf")
    (tmp_path / "one").mkdir()
    scst_distributed_worker.run(train_split, str(tmp_path / "one"), 2, 4, 0.5, "xe")

    ranks = [json.loads((tmp_path / "two" / f"steps_{rank}.json").read_text()) for rank in (0, 1)]
    single = json.loads((tmp_path / "one" / "steps_0.json").read_text())
    assert len(single) == len(ranks[0]) == len(ranks[1]) == 4
    tokenizer = build_clip_tokenizer()
    token_counts = {row: len(tokenizer(captions[0])["input_ids"]) for row, captions in enumerate(CAPTIONS)}
    uneven = 0
    for step, (on_rank_0, on_rank_1, reference) in enumerate(zip(*ranks, single)):
        assert on_rank_0["rows"] + on_rank_1["rows"] == reference["rows"], step
        uneven += token_counts[on_rank_0["rows"][0]] != token_counts[on_rank_1["rows"][0]]
        # The logged loss is the global batch's token mean on every process.
        for logged in (on_rank_0["logged_loss"], on_rank_1["logged_loss"]):
            assert logged == pytest.approx(reference["logged_loss"], abs=SCORE_TOLERANCE), step
    assert uneven > 0  # the comparison exercises unequal token counts

    weights = [load_file(str(tmp_path / "two" / f"weights_{rank}.safetensors")) for rank in (0, 1)]
    reference_weights = load_file(str(tmp_path / "one" / "weights_0.safetensors"))
    initial = {name: parameter.detach() for name, parameter in tiny_captioner(seed=1).named_parameters()}
    assert max_difference(weights[0], weights[1]) <= SCORE_TOLERANCE
    assert max_difference(weights[0], reference_weights) <= SCORE_TOLERANCE
    assert max_difference(reference_weights, initial) > 1e4 * SCORE_TOLERANCE


def test_xe_loss_over_the_steps_tokens_equals_the_one_batch_token_mean():
    # The captioner's loss with transformers' num_items_in_batch: two half-batches, each divided by the token count
    # of the whole batch, sum to the whole batch's token mean (what DDP's average of `world_size x loss` computes).
    captioner = tiny_captioner(seed=1)
    tokenizer = build_clip_tokenizer()
    from modeling_pacs.captioning.training import caption_labels

    labels = caption_labels(tokenizer, [captions[0] for captions in CAPTIONS[:2]], 77)
    pixel_values = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    captioner.requires_grad_(False)
    whole = captioner(pixel_values=pixel_values, labels=labels).loss
    tokens = int((labels != -100).sum())
    assert (labels[0] != -100).sum() != (labels[1] != -100).sum()
    halves = sum(
        captioner(pixel_values=pixel_values[k : k + 1], labels=labels[k : k + 1], num_items_in_batch=tokens).loss
        for k in range(2)
    )
    assert float(halves) == pytest.approx(float(whole), abs=SCORE_TOLERANCE)
    means = sum(captioner(pixel_values=pixel_values[k : k + 1], labels=labels[k : k + 1]).loss for k in range(2)) / 2
    assert abs(float(means) - float(whole)) > 100 * SCORE_TOLERANCE  # the per-half mean would not be the same


def train_captioner(*argv: str, output_dir: Path, home: Path, stage: str = "scst") -> subprocess.CompletedProcess:
    common = [
        "--stage", stage, "--device", "cpu", "--reward", "pac_s_pp", "--reward_model", "tiny",
        "--eval_model", "tiny", "--eval_clip_model", "tiny:clip_s", "--batch_size", "1", "--max_steps", "4",
        "--save_steps", "2", "--logging_steps", "1", "--learning_rate", "1e-3", "--max_new_tokens", "5",
        "--num_beams", "3", "--no_reward_cache",
    ]  # fmt: skip
    if stage == "xe":  # the paper's warm-up / constant / decay schedule, compressed into the 4 steps
        common += ["--warmup_steps", "1", "--constant_until", "3", "--decay_until", "4"]
    script = REPOSITORY / "scripts" / "train_captioner.py"
    return torchrun(script, *common, "--output_dir", str(output_dir), *argv, home=home)


@pytest.fixture(scope="module")
def two_process_run(toy_dataset_dir, tmp_path_factory) -> tuple[Path, Path, str]:
    """An uninterrupted 2-process run of scripts/train_captioner.py: 4 steps, checkpoints at 2 and 4, report."""
    folder = tmp_path_factory.mktemp("two_process_run")
    # --model_name_or_path: loading must leave the CLIP tower frozen
    tiny_captioner(seed=1).save_pretrained(folder / "init")
    features = folder / "features"
    completed = train_captioner(
        "--model_name_or_path", str(folder / "init"), "--dataset", str(toy_dataset_dir),
        "--feature_cache", str(features),
        "--test_split", "test", output_dir=folder / "run", home=folder / "hf",
    )  # fmt: skip
    return folder / "run", features, completed.stderr


def test_only_rank_zero_writes_checkpoints_and_the_report(two_process_run):
    run, features, stderr = two_process_run
    assert sorted(path.name for path in run.iterdir()) == [
        "checkpoint-2",
        "checkpoint-4",
        "eval_report.json",
        "final",
        "test_captions.jsonl",
        "training-data",
    ]
    # Every rank prepares the same row tables (content-addressed, written atomically): one file per split remains.
    assert sorted(path.name.split("-")[0] for path in (run / "training-data").iterdir()) == ["captions", "captions"]
    assert not list((run / "training-data").glob(".*"))
    for checkpoint in ("checkpoint-2", "checkpoint-4"):
        names = sorted(path.name for path in (run / checkpoint).iterdir())
        assert [name for name in names if name.startswith("rng_state")] == ["rng_state_0.pth", "rng_state_1.pth"]
        assert names.count("model.safetensors") == names.count("trainer_state.json") == 1
    assert not [path for path in [*run.rglob("*"), *features.rglob("*")] if path.name.startswith(".tmp")]
    assert len(list(features.rglob("*.safetensors"))) == len(CAPTIONS)
    # Rank 0 computed the features before the others read them; only the main process logs.
    assert stderr.count("visual features: 4 computed, 0 already cached") == 1
    assert "visual features: 0 computed" not in stderr

    report = json.loads((run / "eval_report.json").read_text())
    assert (report["num_captions"], report["stage"], report["reward"]) == (2, "scst", "pac_s_pp")
    rows = [json.loads(line) for line in (run / "test_captions.jsonl").read_text().splitlines()]
    assert [row["row_index"] for row in rows] == [0, 1]
    history = json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    assert [entry["step"] for entry in history if "reward" in entry] == [1, 2, 3, 4]


@pytest.fixture(scope="module")
def two_process_xe_run(toy_dataset_dir, tmp_path_factory) -> tuple[Path, Path, str]:
    """An uninterrupted 2-process XE run of scripts/train_captioner.py: 4 steps, checkpoints at 2 and 4."""
    folder = tmp_path_factory.mktemp("two_process_xe_run")
    tiny_captioner(seed=1).save_pretrained(folder / "init")
    features = folder / "features"
    completed = train_captioner(
        "--model_name_or_path", str(folder / "init"), "--dataset", str(toy_dataset_dir),
        "--feature_cache", str(features),
        "--test_split", "none", output_dir=folder / "run", home=folder / "hf", stage="xe",
    )  # fmt: skip
    return folder / "run", features, completed.stderr


@pytest.mark.parametrize("stage", ["xe", "scst"])
def test_resumed_two_process_run_continues_identically(stage, request, toy_dataset_dir, tmp_path):
    run, features, _ = request.getfixturevalue("two_process_xe_run" if stage == "xe" else "two_process_run")
    resumed = tmp_path / "resumed"
    shutil.copytree(run / "checkpoint-2", resumed / "checkpoint-2")
    train_captioner(
        "--model_name_or_path", str(run.parent / "init"), "--dataset", str(toy_dataset_dir),
        "--feature_cache", str(features),
        "--test_split", "none", "--resume_from_checkpoint", "last", output_dir=resumed, home=tmp_path / "hf",
        stage=stage,
    )  # fmt: skip
    logged = ("loss", "reward") if stage == "scst" else ("loss", "learning_rate")

    def after_checkpoint(folder: Path) -> list[tuple[float, ...]]:
        history = json.loads((folder / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
        return [
            (entry["step"], *(entry[key] for key in logged))
            for entry in history
            if entry["step"] > 2 and "loss" in entry
        ]

    expected, actual = after_checkpoint(run), after_checkpoint(resumed)
    assert [values[0] for values in actual] == [values[0] for values in expected] == [3, 4]
    assert_scores_close([values[1:] for values in actual], [values[1:] for values in expected], what=str(logged))
    final = load_file(str(run / "final" / "model.safetensors"))
    assert max_difference(load_file(str(resumed / "final" / "model.safetensors")), final) <= SCORE_TOLERANCE
    halfway = load_file(str(run / "checkpoint-2" / "model.safetensors"))
    assert max_difference(final, halfway) > 100 * SCORE_TOLERANCE  # steps 3 and 4 did move the weights


def test_a_half_saved_tiny_model_is_never_published(monkeypatch, tmp_path):
    # What save_pretrained leaves on a rank other than 0 of a started process group: no config, no weights.
    def save_like_rank_1(directory, **kwargs):
        (Path(directory) / "README.md").write_text("card")

    monkeypatch.setenv("PACS_PP_CACHE", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(modeling_pacs.testing.pacs, "make_tiny_model", save_like_rank_1)
    with pytest.raises(
        RuntimeError, match="could not be saved on process 1: transformers writes weights only on rank 0"
    ):
        tiny_model_directory()
    assert list(tmp_path.iterdir()) == []
