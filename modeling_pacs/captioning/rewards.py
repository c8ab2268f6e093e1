"""Caption rewards for reinforcement learning: PAC-S++ / RefPAC-S++ / CLIP-S (Eqs. 4, 5, 18) and CIDEr-D.

[`PACSReward`][modeling_pacs.captioning.rewards.PACSReward] is a plain callable
`(completions, images, references) -> list[float]`, batched through [`PACSModel.score`][modeling_pacs.PACSModel.score]
(so through the formulas of `scoring.py` and the model's embedding cache). It also has the signature TRL's `GRPOTrainer`
calls reward functions with: `reward(prompts=..., completions=..., completion_ids=...,
**dataset_columns)`, where completions are strings or, for conversational (vision-language) prompts, lists of
messages whose last one is the assistant's answer, and images come in the dataset's `image` or `images` column.
"""

from collections.abc import Sequence
from typing import Any

from transformers.utils import logging

from ..models.embedding_cache import EmbeddingCache
from ..models.inputs import check_references
from ..models.modeling_pacs import PACSModel

logger = logging.get_logger(__name__)

REWARD_KINDS = ("pac_s_pp", "ref_pac_s_pp", "clip_s", "ref_clip_s", "cider_d")


def completion_text(completion: Any, index: int) -> str:
    """The caption of one completion: a string, or the text of the last message of a conversational completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return " ".join(part["text"] for part in content if isinstance(part, dict) and part.get("type") == "text")
    raise TypeError(
        f"completion {index} is {type(completion).__name__} ({completion!r:.80}): expected a string or a list of "
        "chat messages ending with {'role': 'assistant', 'content': ...}"
    )


def completion_image(image: Any, index: int) -> Any:
    """The image of one completion: TRL's `images` column holds a list per example; the first one is scored."""
    if isinstance(image, (list, tuple)):
        if len(image) == 0:
            raise ValueError(f"completion {index} has an empty image list: every completion needs its image")
        return image[0]
    if image is None:
        raise ValueError(f"completion {index} has no image: every completion needs its image")
    return image


class PACSReward:
    r"""
    PAC-S++ (or RefPAC-S++, CLIP-S, RefCLIP-S: the same code on another model) as a reward function.

    Calls [`PACSModel.score`][modeling_pacs.PACSModel.score] once per batch and returns `scores` (Eq. 4) or, with
    `use_references=True`, `ref_scores` (Eq. 5), as a list of Python floats in the order of `completions`. An
    `EmbeddingCache` is attached to the model unless it has one (pass `cache=False` to score without), so images and
    references that recur across steps (the beams of one image, the same references every epoch) are encoded once.

    Args:
        model ([`PACSModel`][modeling_pacs.PACSModel]): the scoring model (CLIP-S when it wraps plain CLIP).
        use_references (`bool`, defaults to `False`): reward with the reference-based score; every call then needs
            `references`.
        cache (`bool` or `EmbeddingCache`, defaults to `True`): attach a new cache, a given one, or none.
        image_batch_size, text_batch_size (`int`): encoder batch sizes.

    Example:

    ```python
    >>> from modeling_pacs.captioning.rewards import PACSReward
    >>> from modeling_pacs.loading import load_model
    >>> reward = PACSReward(load_model("tiny"))
    >>> reward(["a dog on a beach", "a dog"], images=["dog.jpg", "dog.jpg"])  # one float per completion
    >>> # As a TRL GRPOTrainer reward: the dataset's `image` (or `images`) and `references` columns are passed in.
    >>> # GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, ...)
    ```
    """

    def __init__(
        self,
        model: PACSModel,
        use_references: bool = False,
        cache: bool | EmbeddingCache = True,
        image_batch_size: int = 64,
        text_batch_size: int = 256,
    ):
        for name, value in (("image_batch_size", image_batch_size), ("text_batch_size", text_batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.model = model
        self.use_references = use_references
        self.image_batch_size = image_batch_size
        self.text_batch_size = text_batch_size
        if isinstance(cache, EmbeddingCache):
            model.embedding_cache = cache
        elif cache and model.embedding_cache is None:
            model.embedding_cache = EmbeddingCache()
        elif not cache:
            model.embedding_cache = None
        # TRL logs each reward under its function's name.
        self.__name__ = "ref_pacs_reward" if use_references else "pacs_reward"

    def __call__(
        self,
        completions: Sequence[Any],
        images: Sequence[Any] | None = None,
        references: Sequence[Sequence[str]] | None = None,
        image: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """One reward per completion. `image` is accepted as an alias of `images` (TRL passes the dataset column by
        its name); other keyword arguments (`prompts`, `completion_ids`, TRL's trainer state...) are ignored."""
        if images is None:
            images = image
        captions = [completion_text(completion, index) for index, completion in enumerate(completions)]
        if images is None:
            raise ValueError("the reward needs one image per completion: pass images=[...] (or an `image` column)")
        images = [completion_image(item, index) for index, item in enumerate(images)]
        if len(images) != len(captions):
            raise ValueError(f"got {len(images)} images for {len(captions)} completions: pass one per completion")
        if self.use_references:
            if references is None:
                raise ValueError(
                    "this reward is reference-based (use_references=True): pass references=[[...], ...] with one "
                    "list per completion (a `references` dataset column for TRL)"
                )
            references = check_references(references, len(captions))
        output = self.model.score(
            images,
            captions,
            references if self.use_references else None,
            image_batch_size=self.image_batch_size,
            text_batch_size=self.text_batch_size,
            progress=False,
        )
        scores = output.ref_scores if self.use_references else output.scores
        return scores.tolist()


class CIDErDReward:
    r"""
    CIDEr-D (pycocoevalcap) as a reward: `(completions, references) -> list[float]`, document frequencies from the
    references of the call (as in SCST's batch-level use) unless a corpus is given once at construction.

    Captions are lower-cased and split on whitespace after stripping punctuation (no Java PTB tokenizer).

    Example:

    ```python
    >>> from modeling_pacs.captioning.rewards import CIDErDReward
    >>> CIDErDReward()(["a dog runs"], references=[["a dog runs on grass", "a running dog"]])
    ```
    """

    def __init__(self):
        try:
            from pycocoevalcap.cider.cider_scorer import CiderScorer
        except ImportError as error:
            raise ImportError(
                "the CIDEr-D reward needs pycocoevalcap: pip install 'pacs-pp[captioning]' (or pycocoevalcap)"
            ) from error
        self.scorer_class = CiderScorer
        self.__name__ = "cider_d_reward"

    def __call__(
        self, completions: Sequence[Any], references: Sequence[Sequence[str]] | None = None, **kwargs: Any
    ) -> list[float]:
        """One CIDEr-D value per completion (x10 scale of the COCO evaluation, as SCST papers use it)."""
        captions = [completion_text(completion, index) for index, completion in enumerate(completions)]
        if references is None:
            raise ValueError("CIDEr-D needs references: pass references=[[...], ...] with one list per completion")
        references = check_references(references, len(captions))
        scorer = self.scorer_class(n=4, sigma=6.0)
        for caption, item_references in zip(captions, references):
            scorer += (simple_tokenize(caption), [simple_tokenize(reference) for reference in item_references])
        _, scores = scorer.compute_score()
        return [float(score) for score in scores]


def simple_tokenize(text: str) -> str:
    """Lower-case, drop punctuation, collapse whitespace (an approximation of the COCO PTB tokenizer)."""
    return " ".join("".join(character if character.isalnum() else " " for character in text.lower()).split())


def make_reward(kind: str, model: PACSModel | None = None, cache: bool | EmbeddingCache = True):
    """The reward function named `kind` (one of `REWARD_KINDS`); CLIP-S kinds expect a CLIP-S model."""
    if kind not in REWARD_KINDS:
        raise ValueError(f"reward must be one of {', '.join(REWARD_KINDS)}, got {kind!r}")
    if kind == "cider_d":
        return CIDErDReward()
    if model is None:
        raise ValueError(f"reward {kind!r} needs a scoring model (--reward-model)")
    return PACSReward(model, use_references=kind.startswith("ref_"), cache=cache)


__all__ = ["REWARD_KINDS", "CIDErDReward", "PACSReward", "completion_text", "make_reward", "simple_tokenize"]
