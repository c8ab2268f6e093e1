"""TRL's GRPOTrainer with PACSReward as reward function (modeling_pacs.captioning.grpo, tiny LLaVA policy): TRL
calls it with its own signature, and the rewards it logs are the engine's scores of the completions it generated."""

import pytest

from modeling_pacs.captioning.grpo import caption_prompts, grpo_trainer
from modeling_pacs.loading import load_model
from modeling_pacs.testing.llava import tiny_llava
from tests.fixtures.helpers import assert_scores_close

pytest.importorskip("trl", reason="TRL is in the 'captioning' extra (scripts/setup.sh installs it)")


def test_grpo_steps_reward_equals_engine_scores(tmp_path):
    policy, processor = tiny_llava()
    trainer, reward = grpo_trainer(policy, processor, load_model("tiny"), caption_prompts(), str(tmp_path / "grpo"), 1)
    calls = []

    def recording_reward(**kwargs):
        rewards = reward(**kwargs)
        calls.append((kwargs, rewards))
        return rewards

    trainer.reward_funcs[0] = recording_reward
    trainer.train()

    assert len(calls) == 1
    kwargs, rewards = calls[0]
    assert len(rewards) == len(kwargs["completions"]) == 4  # 1 prompt x 4 generations
    assert {"prompts", "completions", "completion_ids", "image", "references"} <= set(kwargs)
    texts = [completion[-1]["content"] for completion in kwargs["completions"]]
    expected = load_model("tiny").score(kwargs["image"], texts).scores  # a fresh model: no cache
    assert_scores_close(rewards, expected)
    logged = [entry for entry in trainer.state.log_history if "rewards/pacs_reward/mean" in entry]
    assert len(logged) == 1
    assert logged[0]["rewards/pacs_reward/mean"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
