"""Toy-task training of the captioner: XE lowers the loss, SCST raises the mean PAC-S++ reward, a resumed SCST run
continues identically, and the visual feature cache stores exactly the frozen encoder's grids."""

import shutil

import datasets
import pytest
import torch
from transformers import Trainer, TrainingArguments

from modeling_pacs.captioning.rewards import PACSReward
from modeling_pacs.captioning.training import (
    CaptioningCollator,
    SCSTTrainer,
    VisualFeatureCache,
    load_caption_dataset,
)
from modeling_pacs.loading import load_model
from modeling_pacs.models.embedding_cache import EmbeddingCache
from modeling_pacs.models.inputs import load_and_preprocess
from modeling_pacs.tokenization import build_clip_tokenizer
from tests.fixtures.helpers import caption_rows
from tests.models.test_captioner import tiny_captioner

CAPTIONS = [["a red dog on grass"], ["a blue cat on a sofa"], ["two birds in the sky"], ["a green car on a road"]]


@pytest.fixture(scope="module")
def tokenizer():
    return build_clip_tokenizer()


@pytest.fixture(scope="module")
def toy_dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy_images")
    rows = caption_rows(folder, CAPTIONS)
    return datasets.Dataset.from_list(rows)


def arguments(output_dir, max_steps, learning_rate, **kwargs) -> TrainingArguments:
    defaults = {
        "per_device_train_batch_size": 4,
        "logging_steps": 1,
        "report_to": [],
        "remove_unused_columns": False,
        "save_strategy": "no",
        "use_cpu": True,
        "weight_decay": 0.0,
        "lr_scheduler_type": "constant",
        "disable_tqdm": True,
        "seed": 0,
        "data_seed": 0,
    }
    defaults.update(kwargs)
    return TrainingArguments(str(output_dir), max_steps=max_steps, learning_rate=learning_rate, **defaults)


def test_visual_feature_cache_is_exact_and_resumable(toy_dataset, tmp_path):
    captioner = tiny_captioner()
    cache = VisualFeatureCache(tmp_path / "features", captioner)
    assert cache.precompute(toy_dataset["image"][:2], batch_size=1) == 2
    assert cache.precompute(toy_dataset["image"], batch_size=3) == 2  # only the two not stored yet
    loaded = cache.load(toy_dataset["image"], range(4))
    pixels = torch.stack([load_and_preprocess(image, 0, 224) for image in toy_dataset["image"]])
    torch.testing.assert_close(loaded, captioner.encoder.visual_features(pixels), rtol=0, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="no cached visual features for image 7"):
        VisualFeatureCache(tmp_path / "other", captioner).load(toy_dataset["image"][:1], [7])
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        cache.precompute(toy_dataset["image"], batch_size=0)


def test_xe_training_lowers_the_loss(toy_dataset, tokenizer, tmp_path):
    captioner = tiny_captioner()
    cache = VisualFeatureCache(tmp_path / "features", captioner)
    cache.precompute(toy_dataset["image"])
    collator = CaptioningCollator(tokenizer, 224, stage="xe", feature_cache=cache)
    trainer = Trainer(
        model=captioner, args=arguments(tmp_path / "xe", 12, 1e-2), train_dataset=toy_dataset, data_collator=collator
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 12
    assert losses[-1] < 0.6 * losses[0], losses


def scst_trainer(toy_dataset, tokenizer, output_dir, max_steps, scorer, cache=True, **kwargs) -> SCSTTrainer:
    torch.manual_seed(0)
    captioner = tiny_captioner(seed=1)
    return SCSTTrainer(
        model=captioner,
        args=arguments(output_dir, max_steps, 3e-3, per_device_train_batch_size=2, **kwargs),
        train_dataset=toy_dataset,
        data_collator=CaptioningCollator(tokenizer, 224, stage="scst"),
        reward_function=PACSReward(scorer, cache=EmbeddingCache() if cache else False),
        tokenizer=tokenizer,
        num_beams=5,
        max_new_tokens=6,
    )


@pytest.fixture(scope="module")
def scorer():
    # The "tiny" alias (seed 1): its random cosines on these images are positive, so the reward is not clipped to 0.
    return load_model("tiny")


def test_scst_raises_the_mean_reward(toy_dataset, tokenizer, scorer, tmp_path):
    trainer = scst_trainer(toy_dataset, tokenizer, tmp_path / "scst", 8, scorer)
    trainer.train()
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    assert len(rewards) == 8
    # Each image is seen every other step (batch 2 of 4): compare the first and last epochs' mean rewards.
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.05, rewards


def test_resumed_scst_run_continues_identically(toy_dataset, tokenizer, scorer, tmp_path):
    # Without the reward's embedding cache: a cold cache (the resumed run) encodes in other batch compositions than a
    # warm one, so rewards agree only to ~1e-7, and Adam turns such noise on parameters whose exact gradient is 0
    # (attention key biases) into lr-sized steps. The cache itself is tested against uncached scores elsewhere.
    full = scst_trainer(
        toy_dataset, tokenizer, tmp_path / "full", 4, scorer, False, save_strategy="steps", save_steps=2
    )
    full.train()
    checkpoint = tmp_path / "resumed" / "checkpoint-2"
    shutil.copytree(tmp_path / "full" / "checkpoint-2", checkpoint)
    resumed = scst_trainer(toy_dataset, tokenizer, tmp_path / "resumed", 4, scorer, False, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(checkpoint))

    def rewards_after_checkpoint(trainer):
        return [
            (entry["step"], entry["reward"])
            for entry in trainer.state.log_history
            if entry.get("step", 0) > 2 and "reward" in entry
        ]

    full_rewards, resumed_rewards = rewards_after_checkpoint(full), rewards_after_checkpoint(resumed)
    assert [step for step, _ in resumed_rewards] == [step for step, _ in full_rewards] == [3, 4]
    for (_, expected), (_, actual) in zip(full_rewards, resumed_rewards):
        assert actual == pytest.approx(expected, abs=1e-6)
    for (name, expected), (_, actual) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6, msg=name)


def test_caption_datasets_group_captions_per_image(tmp_path):
    rows = [
        {"image": "a.jpg", "caption": "one"},
        {"image": "b.jpg", "caption": "two"},
        {"image": "a.jpg", "caption": "three"},
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "flat"))
    loaded = load_caption_dataset(str(tmp_path / "flat"))
    assert loaded.dataset.to_list() == [
        {"image": "a.jpg", "captions": ["one", "three"], "row_index": 0},
        {"image": "b.jpg", "captions": ["two"], "row_index": 1},
    ]
    assert load_caption_dataset(str(tmp_path / "flat"), max_samples=1).dataset["captions"] == [["one", "three"]]
    datasets.Dataset.from_list([{"picture": "a.jpg", "text": "x"}]).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"it needs 'image' and 'captions' \(a list of captions\) or 'caption'"):
        load_caption_dataset(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="split 'test' is not in"):
        datasets.DatasetDict(train=datasets.Dataset.from_list(rows)).save_to_disk(str(tmp_path / "dict"))
        load_caption_dataset(str(tmp_path / "dict"), split="test")
