"""Reward adapters: PAC-S++ rewards equal the engine's scores (Eq. 4 / Eq. 5 recomputed from the encoders),
with the cache equal to without, TRL's call signature is accepted, and CIDEr-D matches pycocoevalcap's own scorer."""

import pytest
import torch

from modeling_pacs import PACSModel
from modeling_pacs.captioning.rewards import CIDErDReward, PACSReward, make_reward
from modeling_pacs.models.embedding_cache import EmbeddingCache
from tests.fixtures.helpers import assert_scores_close

CANDIDATES = ["a dog on a beach", "a dog", "two cats", "a red car on a road", "a dog on a beach", "a bird"]
REFERENCES = [["a dog at the sea", "a puppy"], ["a dog at the sea", "a puppy"], ["cats"], ["a car"], ["a car"], ["x"]]


@pytest.fixture
def model(tiny_model_dir):
    return PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def images(image_folder):
    return [image_folder[0], image_folder[0], image_folder[1], image_folder[2], image_folder[2], image_folder[3]]


def independent_scores(model, images, candidates, references):
    """Eqs. 4 and 5 in plain torch from one-item encoder calls (no dedup, no batching, no cache)."""
    image_embeds = torch.cat([model.encode_images([image]) for image in images])
    text_embeds = torch.cat([model.encode_texts([caption]) for caption in candidates])
    normalize = torch.nn.functional.normalize
    cosines = (normalize(image_embeds, dim=-1) * normalize(text_embeds, dim=-1)).sum(-1)
    scores = model.config.w * cosines.clamp(min=0)
    ref_scores = []
    for score, text_embed, item_references in zip(scores, text_embeds, references):
        reference_embeds = torch.cat([model.encode_texts([reference]) for reference in item_references])
        similarity = (normalize(reference_embeds, dim=-1) @ normalize(text_embed, dim=0)).max().clamp(min=0)
        total = score + similarity
        ref_scores.append(0.0 if total == 0 else float(2 * score * similarity / total))
    return scores.tolist(), ref_scores


def test_reward_equals_engine_scores_with_and_without_cache(model, images):
    expected_scores, expected_ref_scores = independent_scores(model, images, CANDIDATES, REFERENCES)
    without_cache = PACSReward(model, cache=False)(CANDIDATES, images=images)
    assert model.embedding_cache is None
    assert isinstance(without_cache, list) and all(isinstance(value, float) for value in without_cache)
    assert_scores_close(without_cache, expected_scores)

    reward = PACSReward(model)
    assert isinstance(model.embedding_cache, EmbeddingCache)
    first = reward(CANDIDATES, images=images)
    second = reward(CANDIDATES, images=images)
    assert first == second
    assert_scores_close(first, without_cache)

    ref_reward = PACSReward(model, use_references=True)
    assert_scores_close(ref_reward(CANDIDATES, images=images, references=REFERENCES), expected_ref_scores)


def test_trl_grpo_call_signature(model, images):
    """GRPOTrainer calls `f(prompts=, completions=, completion_ids=, **columns, trainer_state=, log_extra=, ...)`;
    conversational completions are `[[{"role": "assistant", "content": text}], ...]`, images per example lists."""
    reward = PACSReward(model, use_references=True)
    conversational = [[{"role": "assistant", "content": caption}] for caption in CANDIDATES]
    rewards = reward(
        prompts=[[{"role": "user", "content": "Describe the image."}]] * len(CANDIDATES),
        completions=conversational,
        completion_ids=[[1, 2]] * len(CANDIDATES),
        images=[[image] for image in images],
        references=REFERENCES,
        trainer_state=None,
        log_extra=None,
        log_metric=None,
    )
    assert rewards == reward(CANDIDATES, images=images, references=REFERENCES)
    assert reward.__name__ == "ref_pacs_reward"
    # The `image` column (one image per example) works as well.
    assert reward(completions=CANDIDATES, image=images, references=REFERENCES) == rewards


def test_reward_errors_name_the_problem(model, images):
    reward = PACSReward(model)
    with pytest.raises(ValueError, match="got 5 images for 6 completions"):
        reward(CANDIDATES, images=images[:5])
    with pytest.raises(ValueError, match="needs one image per completion"):
        reward(CANDIDATES)
    with pytest.raises(TypeError, match="completion 1 is int"):
        reward(["a", 3], images=images[:2])
    with pytest.raises(ValueError, match="completion 0 has an empty image list"):
        reward(["a"], images=[[]])
    with pytest.raises(ValueError, match="reference-based"):
        PACSReward(model, use_references=True)(CANDIDATES, images=images)
    with pytest.raises(ValueError, match="text_batch_size must be a positive integer, got 0"):
        PACSReward(model, text_batch_size=0)
    with pytest.raises(ValueError, match="reward must be one of"):
        make_reward("bleu", model)


def test_cider_d_reward_matches_pycocoevalcap():
    pytest.importorskip("pycocoevalcap", reason="pycocoevalcap is an optional extra (pacs-pp[captioning])")
    from pycocoevalcap.cider.cider import Cider

    candidates = ["A dog runs.", "a cat sleeps on a sofa", "a car"]
    references = [["a dog running on grass", "the dog runs"], ["a cat sleeping on a couch"], ["a red car", "car"]]
    expected_mean, expected = Cider().compute_score(
        {i: references[i] for i in range(3)}, {i: [["a dog runs", candidates[1], candidates[2]][i]] for i in range(3)}
    )
    rewards = CIDErDReward()(candidates, references=[[r.lower() for r in refs] for refs in references])
    assert_scores_close(rewards, expected)
    assert rewards[0] > 0


def test_recurring_images_and_references_are_encoded_once(model, images):
    """An SCST epoch after the first: the images and references recur, only the new candidates are encoded."""
    reward = PACSReward(model, use_references=True, cache=EmbeddingCache())
    reward(CANDIDATES, images=images, references=REFERENCES)
    cache = model.embedding_cache
    misses_before, hits_before = cache.misses, cache.hits
    new_candidates = ["a brown dog", "a small dog", "three cats", "a blue car", "a green car", "a parrot"]
    reward(new_candidates, images=images, references=REFERENCES)
    # 4 distinct images and 5 distinct references are hits; the 6 new candidates are the only misses.
    assert (cache.misses - misses_before, cache.hits - hits_before) == (6, 4 + 5)


# ---------------------------------------------------------------------------------------------------- after failures
def broken_image(folder) -> str:
    path = folder / "broken.jpg"
    path.write_bytes(b"not an image")
    return str(path)


FAILING_REWARD_CALLS = {  # a reward call that fails on bad input, part-way through a batch with valid items
    "undecodable image": lambda images, tmp: dict(completions=CANDIDATES[:2], images=[images[0], broken_image(tmp)]),
    "missing image": lambda images, tmp: dict(completions=CANDIDATES[:2], images=[images[0], str(tmp / "none.jpg")]),
    "completion of a wrong type": lambda images, tmp: dict(completions=["a dog", 7], images=images[:2]),
    "empty image list": lambda images, tmp: dict(completions=["a dog", "a cat"], images=[[images[0]], []]),
    "mismatched counts": lambda images, tmp: dict(completions=CANDIDATES[:3], images=images[:2]),
    "empty reference list": lambda images, tmp: dict(completions=CANDIDATES[:2], images=images[:2], references=[[]]),
    "references of a wrong type": lambda images, tmp: dict(
        completions=CANDIDATES[:2], images=images[:2], references=[["a dog"], [3]]
    ),
}


REWARD_CASES = [  # a reference-free reward ignores references: their failures apply to the reference-based one
    (failure, use_references)
    for failure in FAILING_REWARD_CALLS
    for use_references in ((True,) if "reference" in failure else (False, True))
]


@pytest.mark.parametrize("failure, use_references", REWARD_CASES)
def test_a_failed_reward_call_leaves_the_next_call_equal_to_a_fresh_rewards(
    tiny_model_dir, images, tmp_path, failure, use_references
):
    def fresh_reward() -> PACSReward:
        model = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
        return PACSReward(model, use_references=use_references)

    reward = fresh_reward()
    reward(CANDIDATES[:2], images=images[:2], references=REFERENCES[:2])  # a warm cache
    cache = reward.model.embedding_cache
    before = (len(cache), cache.hits, cache.misses)
    arguments = FAILING_REWARD_CALLS[failure](images, tmp_path)
    if use_references and "references" not in arguments:
        arguments["references"] = REFERENCES[: len(arguments["completions"])]
    with pytest.raises((ValueError, TypeError, OSError)):
        reward(**arguments)
    assert (len(cache), cache.hits, cache.misses) == before and not cache.is_filling()
    assert not reward.model.training
    after_failure = reward(CANDIDATES, images=images, references=REFERENCES)
    assert_scores_close(after_failure, fresh_reward()(CANDIDATES, images=images, references=REFERENCES))


FAILING_CIDER_CALLS = {
    "completion of a wrong type": dict(completions=["a dog", None], references=[["a dog"], ["a cat"]]),
    "no references": dict(completions=["a dog"]),
    "empty reference list": dict(completions=["a dog", "a cat"], references=[["a dog"], []]),
    "too few reference lists": dict(completions=["a dog", "a cat"], references=[["a dog"]]),
}


@pytest.mark.parametrize("failure", FAILING_CIDER_CALLS)
def test_a_failed_cider_d_call_leaves_the_next_call_equal_to_a_fresh_rewards(failure):
    pytest.importorskip("pycocoevalcap", reason="pip install pycocoevalcap")
    reward = CIDErDReward()
    with pytest.raises((ValueError, TypeError)):
        reward(**FAILING_CIDER_CALLS[failure])
    after_failure = reward(CANDIDATES, references=REFERENCES)
    assert_scores_close(after_failure, CIDErDReward()(CANDIDATES, references=REFERENCES))
