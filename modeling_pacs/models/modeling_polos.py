"""Polos (Wada et al., CVPR 2024): a supervised, reference-based caption metric, in the pacs-pp engine.

The whole model is in this file: CLIP features through the engine's PAC-S pipelines (`PACSModel.encode_images` /
`encode_texts`: exact image pipeline, prefix "A photo depicts ", raw unnormalised features), SimCSE RoBERTa sentence
embeddings (the CLS position of a 13-layer ScalarMix), the 6144-d feature vector, the MLP head with sigmoid and the
max over references. The formulas are the pure functions of `scoring_polos.py` (the max over references:
`scoring.max_by_owner`); docs/spec/polos.md cites the official code.

Batch dependence (docs/spec/polos.md#official-batching, docs/spec/polos.md#batch-modes). The official `predict`
normalises RoBERTa states with statistics shared by a chunk of items, and cuts every item of a chunk to the chunk's
smallest reference count. Two modes:

- `"per_item"` (default): each sentence is normalised by its own statistics and every reference is used. A score
  depends on its item only (deduplicable, cacheable, equal to the official `batch_size=1`).
- `"official"`: the official chunking reproduced (consecutive chunks of `batch_size`, references cut to the chunk
  minimum, one statistics group for the chunk's candidates and one per reference index); use it to reproduce the
  published numbers (the validation scripts used `batch_size=32`).
"""

import os
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel
from transformers.utils import ModelOutput, logging

from .clip_roberta import (
    ClipRobertaMixin,
    check_required_references,
    check_score_arguments,
    cut_references_to_chunks,
    init_sentence_mix_weights,
    right_padded,
    sentence_labels,
)
from .configuration_polos import POLOS_MODES, PolosConfig
from .fast_clip import FastEncoderSlot
from .fast_polos import FastPolosHead
from .inputs import SHORTEN_FIX, ImageInput, check_captions, check_media_count, check_media_list
from .scoring import max_by_owner, mean_or_nan
from .scoring_polos import (
    SentenceStatistics,
    polos_features,
    sentence_statistics,
)
from .sentence_mix import MLPHead as PolosHead

logger = logging.get_logger(__name__)


@dataclass
class PolosScoreOutput(ModelOutput):
    """
    Scores of [`PolosModel.score`][modeling_pacs.PolosModel.score].

    Args:
        scores (`torch.FloatTensor` of shape `(num_items,)`):
            Polos score of each item, in (0, 1): the best score over its references.
        mean_score (`float`):
            Corpus score: the mean of `scores`.
        reference_scores (`list[list[float]]`):
            Score of each item against each reference it used.
        num_references_used (`torch.LongTensor` of shape `(num_items,)`):
            References each item used (`"official"` mode cuts a chunk to its smallest reference count).
        mode (`str`):
            `"per_item"` or `"official"`.
        truncated_tokens (`torch.LongTensor` of shape `(num_items,)`):
            Tokens of each candidate that CLIP's text encoder did not read (past its 77-token context, the prompt
            prefix and special tokens included; 0 for a caption that fits). RoBERTa reads every token (it refuses
            captions over its 512 positions instead of cutting them).
        truncated_reference_tokens (`torch.LongTensor` of shape `(num_items,)`):
            The same, summed over the references each item used.
    """

    scores: torch.FloatTensor | None = None
    mean_score: float | None = None
    reference_scores: list | None = None
    num_references_used: torch.LongTensor | None = None
    mode: str | None = None
    truncated_tokens: torch.LongTensor | None = None
    truncated_reference_tokens: torch.LongTensor | None = None


class PolosPreTrainedModel(PreTrainedModel):
    config: PolosConfig
    config_class = PolosConfig
    base_model_prefix = "polos"
    main_input_name = "pixel_values"
    input_modalities = ("image", "text")
    _no_split_modules = ["CLIPEncoderLayer", "RobertaLayer"]

    def _init_weights(self, module):
        # CLIP and RoBERTa are PreTrainedModels and initialise their own modules.
        init_sentence_mix_weights(module)


class PolosModel(ClipRobertaMixin, PolosPreTrainedModel):
    r"""
    Polos: scores a candidate caption against its image and its references, in (0, 1).

    `from_pretrained` loads the weights, the CLIP tokenizer (`clip_tokenizer/`) and the RoBERTa tokenizer
    (`text_tokenizer/`). Polos is reference-based only: every item needs at least one reference.

    Example:

    ```python
    >>> from transformers import AutoModel
    >>> model = AutoModel.from_pretrained("path/to/polos", trust_remote_code=True, dtype="float32")
    >>> out = model.score(["cat.jpg"], ["a cat sleeping on a sofa"], [["a cat on a couch", "a sleeping cat"]])
    >>> out.scores, out.mean_score
    ```
    """

    # What the warning and the command lines advise for captions past CLIP's context (Polos has no piecewise mode).
    truncation_fix = SHORTEN_FIX
    metric_name = "Polos"

    def __init__(self, config: PolosConfig):
        super().__init__(config)
        self.build_clip_roberta(config)
        self.head = PolosHead(config.feature_size, config.hidden_sizes, config.dropout)
        # On CPU in fp32, in eval mode without gradients, RoBERTa and the head run `fast_polos` (same scores, less
        # work; the CLIP side follows `clip_encoder.fast_cpu_encoders`). False: transformers' forward.
        self.build_fast_text_encoder()
        self._fast_head = FastEncoderSlot(FastPolosHead.build)
        self.post_init()

    # ------------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Load weights and both tokenizers."""
        name_or_path = os.fspath(pretrained_model_name_or_path)
        return cls.load_with_tokenizers(
            lambda: super(PolosModel, cls).from_pretrained(name_or_path, *model_args, **kwargs),
            name_or_path,
            kwargs,
            missing_polos_message,
            logger,
        )

    # ------------------------------------------------------------------------------------------------ encoding
    def text_hidden_states(self, token_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """All hidden states `[L, B, T, D]` (embedding output first) of right-padded ids, and the `[B, T]` mask."""
        input_ids, lengths = right_padded(token_ids, self.config.text_config.pad_token_id)
        attention_mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
        outputs = self.text_encoder(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            output_hidden_states=True,
        )
        return torch.stack(outputs.hidden_states), attention_mask.to(self.device)

    def fast_head(self) -> FastPolosHead | None:
        """`fast_polos`'s head for the current weights, or None where it does not apply (as `fast_text_encoder`)."""
        if not self.fast_cpu_encoders or self.head.training or torch.is_grad_enabled():
            return None
        return self._fast_head.get(self.head)

    def sentence_statistics(self, token_ids: list[list[int]]) -> SentenceStatistics:
        """What the ScalarMix needs of each sentence (`scoring_polos.SentenceStatistics`), from one RoBERTa call."""
        fast = self.fast_text_encoder()
        if fast is None:
            return sentence_statistics(*self.text_hidden_states(token_ids))
        input_ids, lengths = right_padded(token_ids, self.config.text_config.pad_token_id)
        return fast.statistics(input_ids, lengths)

    def sentence_embeddings(self, token_ids: list[list[int]], groups: list[int]) -> torch.Tensor:
        """The mixed CLS embedding of each sentence; sentences of one group share the ScalarMix statistics, as one
        official RoBERTa call normalises its whole batch together."""
        if not token_ids:
            return torch.zeros(0, self.config.text_config.hidden_size, device=self.device)
        group_tensor = torch.tensor(groups, dtype=torch.long)
        _, local_groups = torch.unique(group_tensor, return_inverse=True)
        return self.scalar_mix.first_position(self.sentence_statistics(token_ids), local_groups.to(self.device))

    def encode_sentences(
        self, token_ids: list[list[int]], batch_size: int = 64, progress: bool | None = None
    ) -> torch.Tensor:
        """Per-item mode: each sentence normalised alone, batched by length (padding does not change a score)."""
        embeds = torch.empty(len(token_ids), self.config.text_config.hidden_size)
        order = sorted(range(len(token_ids)), key=lambda index: -len(token_ids[index]))
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        with torch.inference_mode():
            for batch in self.clip_encoder.progress_bar(batches, "encoding sentences", len(token_ids), progress):
                batch_ids = [token_ids[index] for index in batch]
                embeds[batch] = self.sentence_embeddings(batch_ids, list(range(len(batch)))).float().cpu()
        return embeds

    def pair_scores(
        self,
        reference_text: torch.Tensor,
        candidate_text: torch.Tensor,
        image: torch.Tensor,
        candidate_clip: torch.Tensor,
        reference_clip: torch.Tensor,
    ) -> torch.Tensor:
        """Head score of each aligned (candidate, reference) row, in (0, 1)."""
        features = polos_features(reference_text, candidate_text, image, candidate_clip, reference_clip)
        head = self.fast_head() or self.head
        return head(features.to(self.device, self.head.layers[0].weight.dtype)).float()

    # ------------------------------------------------------------------------------------------------ scoring
    def score(
        self,
        images: list[ImageInput],
        candidates: list[str],
        references: list[list[str]] | None = None,
        mode: str | None = None,
        batch_size: int | None = None,
        image_batch_size: int = 64,
        text_batch_size: int = 256,
        progress: bool | None = None,
    ) -> PolosScoreOutput:
        """Score each candidate against its image and its references (max over references).

        Args:
            images: one image per candidate: paths, bytes, PIL images or arrays (as `PACSModel.score`).
            candidates: one caption per image.
            references: one non-empty list of references per candidate (Polos has no reference-free mode).
            mode: `"per_item"` (default of the config) or `"official"` (see the module docstring).
            batch_size: `"official"` mode: the official chunk size (default `config.official_batch_size`).
            image_batch_size, text_batch_size: encoder batch sizes (do not change per-item scores).

        Returns:
            [`PolosScoreOutput`][modeling_pacs.PolosScoreOutput] with per-item scores and their mean, and the tokens
            CLIP's text encoder dropped from each candidate and its references (`truncated_tokens`,
            `truncated_reference_tokens`; one `LongCaptionWarning` per kind of text when any was cut).
        """
        mode = mode or self.config.mode
        batch_size = self.config.official_batch_size if batch_size is None else batch_size
        check_score_arguments(mode, POLOS_MODES, batch_size, image_batch_size, text_batch_size)
        candidates = check_captions(candidates)
        images = check_media_list(images)
        check_media_count(images, candidates)
        references = check_polos_references(references, len(candidates))
        if mode == "official":
            references = cut_references_to_chunks(references, batch_size)

        image_embeds, clip_embeds, unique_texts, text_index, first_text, flat_references = self.encode_clip_side(
            images, candidates, references, image_batch_size, text_batch_size, progress
        )
        owner = [item for item, item_references in enumerate(references) for _ in item_references]
        candidate_clip, reference_clip = clip_embeds[: len(candidates)], clip_embeds[len(candidates) :]

        labels = sentence_labels(len(candidates), references)
        if mode == "per_item":
            token_ids = self.tokenize_sentences(unique_texts, [labels[position] for position in first_text])
            sentence_embeds = self.encode_sentences(token_ids, text_batch_size, progress)[text_index]
        else:
            token_ids = self.tokenize_sentences(candidates + flat_references, labels)
            sentence_embeds = self.encode_official_chunks(token_ids, references, batch_size, progress)
        candidate_text, reference_text = sentence_embeds[: len(candidates)], sentence_embeds[len(candidates) :]

        owner_tensor = torch.tensor(owner, dtype=torch.long)
        with torch.inference_mode():
            pair = self.pair_scores(
                reference_text,
                candidate_text[owner_tensor],
                image_embeds[owner_tensor],
                candidate_clip[owner_tensor],
                reference_clip,
            ).cpu()
        scores = max_by_owner(pair, owner_tensor, len(candidates))
        counts = torch.tensor([len(item_references) for item_references in references], dtype=torch.long)
        # CLIP's text features read the first 77 tokens; RoBERTa read everything (`tokenize_sentences` refuses more).
        truncated, truncated_references = self.clip_encoder.count_truncation(candidates, references, fix=SHORTEN_FIX)
        return PolosScoreOutput(
            scores=scores,
            mean_score=mean_or_nan(scores),
            reference_scores=[part.tolist() for part in torch.split(pair, counts.tolist())],
            num_references_used=counts,
            mode=mode,
            truncated_tokens=truncated,
            truncated_reference_tokens=truncated_references,
        )

    def encode_official_chunks(
        self, token_ids: list[list[int]], references: list[list[str]], batch_size: int, progress: bool | None
    ) -> torch.Tensor:
        """Official mode: for each chunk, its candidates form one statistics group and the j-th references of its
        items another (references already cut). Returns embeddings in the order candidates, then flat references."""
        num_items = len(references)
        embeds = torch.empty(len(token_ids), self.config.text_config.hidden_size)
        reference_start = [num_items]
        for item_references in references:
            reference_start.append(reference_start[-1] + len(item_references))
        chunks = range(0, num_items, batch_size)
        with torch.inference_mode():
            for start in self.clip_encoder.progress_bar(chunks, "encoding chunks", num_items, progress):
                items = range(start, min(start + batch_size, num_items))
                positions = list(items)
                for index in range(len(references[start])):
                    positions += [reference_start[item] + index for item in items]
                # RoBERTa runs once per distinct sentence of the chunk; only the statistics are shared by groups.
                distinct, slots = {}, []
                for position in positions:
                    slots.append(distinct.setdefault(tuple(token_ids[position]), len(distinct)))
                statistics = self.sentence_statistics([list(ids) for ids in distinct]).select(
                    torch.tensor(slots, device=self.device)
                )
                groups = torch.arange(len(positions)) // len(items)  # the candidates, then each reference index
                embeds[positions] = self.scalar_mix.first_position(statistics, groups.to(self.device)).float().cpu()
        return embeds


def missing_polos_message(name_or_path: str) -> str:
    """How to get Polos weights when `name_or_path` is neither a local directory nor reachable on the Hub."""
    return (
        f"could not load Polos model '{name_or_path}': it is not a local model directory and the Hugging Face Hub "
        "did not provide it (offline, unreachable, or no such repository). To get weights: download a converted "
        "repository on a machine with internet (`hf download REPO_ID --local-dir DIR`) and pass DIR; or convert the "
        "released checkpoint with `pacs-pp convert-polos --checkpoint reprod/reprod.ckpt --output-dir DIR`; or, for an "
        "offline smoke test with random weights, use the model 'tiny:polos'."
    )


def check_polos_references(references, num_candidates: int) -> list[list[str]]:
    """References are required: one non-empty list of strings (or one string) per candidate."""
    return check_required_references(references, num_candidates, "Polos")


__all__ = ["PolosModel", "PolosPreTrainedModel", "PolosScoreOutput", "check_polos_references"]
