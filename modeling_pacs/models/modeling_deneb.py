"""DENEB (Matsuda et al., ACCV 2024): a supervised, reference-based caption metric robust to hallucinations, in the
pacs-pp engine.

The whole model is in this file: CLIP features through the engine's CLIP pipelines (`PACSModel.encode_images` /
`encode_texts`: open_clip's preprocessing for the authors' tag, prefix "In the image, ", raw unnormalised features),
SimCSE RoBERTa sentence embeddings (the CLS position of a 13-layer ScalarMix, `sentence_mix.py`), the two Sim-Vec
transformers over the image and all references at once, and the MLP head with sigmoid. The formulas are the pure
functions of `scoring_deneb.py`; docs/spec/deneb.md cites the authors' code.

Batch dependence (docs/spec/deneb.md#batching). The authors' `predict` normalises RoBERTa states with statistics
shared by a chunk of items, and cuts every item of a chunk to the chunk's smallest reference count. Two modes:

- `"per_item"` (default): each item alone, every reference used: what the authors' `forward` computes for a
  one-item chunk. A score depends on its item only (deterministic, cacheable, independent of `batch_size`).
- `"official"`: the authors' chunking (consecutive chunks of `batch_size`, references cut to the chunk minimum, one
  statistics group for the chunk's candidates and one per reference index); use it to reproduce published numbers
  (the validation scripts use `batch_size=32`). A last chunk of one item is scored as the authors' `forward`
  computes it (their `predict` crashes there).
"""

import os
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
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
from .configuration_deneb import DENEB_MODES, DenebConfig
from .fast_clip import FastEncoderSlot
from .fast_deneb import FastSimVec
from .inputs import SHORTEN_FIX, ImageInput, check_captions, check_media_count
from .scoring import mean_or_nan
from .scoring_deneb import sim_vec_sequences, with_class_token
from .sentence_mix import MLPHead, sentence_statistics

logger = logging.get_logger(__name__)

# Sequence positions per Sim-Vec call in `"per_item"` mode when no `batch_size` is given: enough rows per matrix
# product to run near the fp32 matmul peak rather than wait on the weights (292 items of 5 references), and a bounded
# memory however many references an item has (docs/concepts/polos-pearl-cost.md#deneb).
PER_ITEM_ROWS = 2048


def sim_vec_items_per_call(reference_count: int) -> int:
    """Items of `reference_count` references per Sim-Vec call in `"per_item"` mode (`PER_ITEM_ROWS` positions)."""
    return max(1, PER_ITEM_ROWS // (reference_count + 2))


@dataclass
class DenebScoreOutput(ModelOutput):
    """
    Scores of [`DenebModel.score`][modeling_pacs.DenebModel.score].

    Args:
        scores (`torch.FloatTensor` of shape `(num_items,)`):
            DENEB score of each item, in (0, 1).
        mean_score (`float`):
            Corpus score: the mean of `scores`.
        num_references_used (`torch.LongTensor` of shape `(num_items,)`):
            References each item used (`"official"` mode cuts a chunk to its smallest reference count).
        mode (`str`):
            `"per_item"` or `"official"`.
        truncated_tokens (`torch.LongTensor` of shape `(num_items,)`):
            Tokens of each candidate that CLIP's text encoder did not read (past its 77-token context, prompt prefix
            and special tokens included). RoBERTa reads every token (longer captions are refused).
        truncated_reference_tokens (`torch.LongTensor` of shape `(num_items,)`):
            The same, summed over the references each item used.
    """

    scores: torch.FloatTensor | None = None
    mean_score: float | None = None
    num_references_used: torch.LongTensor | None = None
    mode: str | None = None
    truncated_tokens: torch.LongTensor | None = None
    truncated_reference_tokens: torch.LongTensor | None = None


class DenebSequenceEncoder(nn.Module):
    """One Sim-Vec transformer: a learned class token, sinusoidal positions, post-norm ReLU encoder layers (PyTorch's
    `TransformerEncoderLayer` defaults, as the authors build it), and the class token's output."""

    def __init__(self, config: DenebConfig):
        super().__init__()
        width = 2 * config.hidden_size
        self.class_token = nn.Parameter(torch.zeros(1, 1, width))
        layer = nn.TransformerEncoderLayer(
            d_model=width,
            nhead=config.num_sequence_heads,
            dim_feedforward=config.sequence_intermediate_size,
            dropout=config.sequence_dropout,
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=config.num_sequence_layers, enable_nested_tensor=False)
        self.dropout = nn.Dropout(config.sequence_dropout)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.dropout(with_class_token(sequence, self.class_token)))[:, 0]


class DenebPreTrainedModel(PreTrainedModel):
    config: DenebConfig
    config_class = DenebConfig
    base_model_prefix = "deneb"
    main_input_name = "pixel_values"
    input_modalities = ("image", "text")
    _no_split_modules = ["CLIPEncoderLayer", "RobertaLayer", "TransformerEncoderLayer"]

    def _init_weights(self, module):
        # CLIP and RoBERTa are PreTrainedModels and initialise their own modules.
        if isinstance(module, DenebSequenceEncoder):
            init.normal_(module.class_token, std=1e-6)  # the authors' init of cls_token1 / cls_token2
        else:
            init_sentence_mix_weights(module)


class DenebModel(ClipRobertaMixin, DenebPreTrainedModel):
    r"""
    DENEB: scores a candidate caption against its image and all its references at once, in (0, 1).

    `from_pretrained` loads the weights, the CLIP tokenizer (`clip_tokenizer/`) and the RoBERTa tokenizer
    (`text_tokenizer/`). DENEB is reference-based only: every item needs at least one reference.

    Example:

    ```python
    >>> from transformers import AutoModel
    >>> model = AutoModel.from_pretrained("path/to/deneb", trust_remote_code=True, dtype="float32")
    >>> out = model.score(["cat.jpg"], ["a cat sleeping on a sofa"], [["a cat on a couch", "a sleeping cat"]])
    >>> out.scores, out.mean_score
    ```
    """

    truncation_fix = SHORTEN_FIX
    metric_name = "DENEB"

    def __init__(self, config: DenebConfig):
        super().__init__(config)
        self.build_clip_roberta(config)
        self.clip_encoder.image_normalisation = (tuple(config.image_mean), tuple(config.image_std))
        # The authors' `upsampler` (CLIP pairs) and `upsampler2` (sentence pairs).
        self.clip_projection = nn.Linear(config.hidden_size, config.hidden_size)
        self.text_projection = nn.Linear(config.hidden_size, config.hidden_size)
        # The authors' `transformer` + `cls_token1` + `pos_encoder`, and `transformer2` + `cls_token2` + `pos_encoder2`.
        self.clip_sequence_encoder = DenebSequenceEncoder(config)
        self.text_sequence_encoder = DenebSequenceEncoder(config)
        self.head = MLPHead(config.feature_size, config.hidden_sizes, config.dropout)
        # On CPU in fp32, in eval mode without gradients, RoBERTa runs `fast_roberta` and the Sim-Vec transformers and
        # head `fast_deneb` (same scores, less work). `fast_cpu_encoders = False`: the modules.
        self.build_fast_text_encoder()
        self._fast_sim_vec = FastEncoderSlot(FastSimVec.build)
        self.post_init()

    # ------------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Load weights and both tokenizers (from the sub-folders `clip_tokenizer/` and `text_tokenizer/`)."""
        name_or_path = os.fspath(pretrained_model_name_or_path)
        return cls.load_with_tokenizers(
            lambda: super(DenebModel, cls).from_pretrained(name_or_path, *model_args, **kwargs),
            name_or_path,
            kwargs,
            missing_deneb_message,
            logger,
        )

    # ------------------------------------------------------------------------------------------------ encoding
    def sentence_embeddings(self, token_ids: list[list[int]], groups: list[int]) -> torch.Tensor:
        """The mixed CLS embedding of each sentence; sentences of one group share the ScalarMix statistics, as one of
        the authors' RoBERTa calls normalises its whole batch together."""
        if not token_ids:
            return torch.zeros(0, self.config.hidden_size)
        # RoBERTa runs once per distinct sentence (an official chunk repeats an image's shared references); only the
        # statistics are shared by groups.
        distinct: dict[tuple[int, ...], int] = {}
        slots = [distinct.setdefault(tuple(ids), len(distinct)) for ids in token_ids]
        input_ids, lengths = right_padded([list(ids) for ids in distinct], self.config.text_config.pad_token_id)
        fast = self.fast_text_encoder()
        if fast is not None:
            statistics = fast.statistics(input_ids, lengths)
        else:
            attention_mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
            outputs = self.text_encoder(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                output_hidden_states=True,
            )
            statistics = sentence_statistics(torch.stack(outputs.hidden_states), attention_mask.to(self.device))
        statistics = statistics.select(torch.tensor(slots, device=self.device))
        group_tensor = torch.unique(torch.tensor(groups), return_inverse=True)[1].to(self.device)
        return self.scalar_mix.first_position(statistics, group_tensor).float()

    def encode_sentences(self, token_ids: list[list[int]], batch_size: int) -> torch.Tensor:
        """Per-item mode: each sentence's embedding with its own statistics, batched by length (padding does not
        change a result)."""
        embeds = torch.empty(len(token_ids), self.config.hidden_size)
        order = sorted(range(len(token_ids)), key=lambda index: -len(token_ids[index]))
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                ids = [token_ids[index] for index in batch]
                embeds[batch] = self.sentence_embeddings(ids, list(range(len(batch)))).cpu()
        return embeds

    def fast_sim_vec(self) -> FastSimVec | None:
        """`fast_deneb`'s Sim-Vec transformers and head for the current weights, or None where the path does not
        apply (off, training, gradients, device, dtype)."""
        modules = nn.ModuleList([self.clip_sequence_encoder, self.text_sequence_encoder, self.head])
        if not self.fast_cpu_encoders or torch.is_grad_enabled() or any(module.training for module in modules):
            return None
        return self._fast_sim_vec.get(modules)

    def item_scores(
        self,
        image: torch.Tensor,
        candidate_clip: torch.Tensor,
        reference_clip: torch.Tensor,
        candidate_text: torch.Tensor,
        reference_text: torch.Tensor,
    ) -> torch.Tensor:
        """Scores `[B]` of `B` items with `R` references each (docs/spec/deneb.md#head): features `[B, D]` and
        `[B, R, D]` as `scoring_deneb.sim_vec_sequences` takes them."""
        dtype = self.head.layers[0].weight.dtype
        features = [
            tensor.to(self.device, dtype)
            for tensor in (image, candidate_clip, reference_clip, candidate_text, reference_text)
        ]
        clip_sequence, text_sequence, image_pair = sim_vec_sequences(
            *features,
            self.clip_projection.weight,
            self.clip_projection.bias,
            self.text_projection.weight,
            self.text_projection.bias,
        )
        fast = self.fast_sim_vec()
        if fast is not None:
            return fast(clip_sequence, text_sequence, image_pair).float()
        summary = torch.cat(
            [self.clip_sequence_encoder(clip_sequence), self.text_sequence_encoder(text_sequence), image_pair], dim=-1
        )
        return self.head(summary).float()

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
    ) -> DenebScoreOutput:
        """Score each candidate against its image and all its references.

        Args:
            images: one image per candidate: paths, bytes, PIL images or arrays (as `PACSModel.score`).
            candidates: one caption per image (an empty caption is scored, as the authors' code scores it).
            references: one non-empty list of references per candidate (DENEB has no reference-free mode).
            mode: `"per_item"` (default of the config) or `"official"` (see the module docstring).
            batch_size: items per batch; in `"official"` mode the authors' chunk size (default
                `config.official_batch_size`), which changes the scores; in `"per_item"` mode it does not (default:
                `sim_vec_items_per_call`, items of one reference count through the Sim-Vec transformers at once).
            image_batch_size, text_batch_size: CLIP encoder batch sizes (do not change scores).

        Returns:
            [`DenebScoreOutput`][modeling_pacs.DenebScoreOutput] with per-item scores and their mean, and the tokens
            CLIP's text encoder dropped (`truncated_tokens`, `truncated_reference_tokens`).
        """
        mode = mode or self.config.mode
        per_item_batch_size = batch_size
        batch_size = self.config.official_batch_size if batch_size is None else batch_size
        check_score_arguments(mode, DENEB_MODES, batch_size, image_batch_size, text_batch_size)
        candidates = check_captions(candidates)
        images = list(images) if not isinstance(images, (str, bytes)) else [images]
        check_media_count(images, candidates)
        references = check_deneb_references(references, len(candidates), self.config.max_references)
        if mode == "official":
            references = cut_references_to_chunks(references, batch_size)

        image_embeds, clip_embeds, unique_texts, text_index, first_text, _ = self.encode_clip_side(
            images, candidates, references, image_batch_size, text_batch_size, progress
        )
        labels = sentence_labels(len(candidates), references)
        unique_ids = self.tokenize_sentences(unique_texts, [labels[position] for position in first_text])
        token_ids = [unique_ids[index] for index in text_index.tolist()]
        if mode == "per_item":
            # Each sentence is its own statistics group: one embedding per distinct text serves every item.
            text_embeds = self.encode_sentences(unique_ids, text_batch_size)[text_index]

        starts = [0]
        for item_references in references:
            starts.append(starts[-1] + len(item_references))
        if mode == "per_item":
            # Items of one reference count form a batch; each sentence is its own statistics group.
            by_count: dict[int, list[int]] = {}
            for item, item_references in enumerate(references):
                by_count.setdefault(len(item_references), []).append(item)
            batches = []
            for count, items in by_count.items():
                size = per_item_batch_size or sim_vec_items_per_call(count)
                batches += [items[start : start + size] for start in range(0, len(items), size)]
        else:
            batches = [
                list(range(start, min(start + batch_size, len(candidates))))
                for start in range(0, len(candidates), batch_size)
            ]

        scores = torch.empty(len(candidates))
        num_candidates = len(candidates)
        with torch.inference_mode():
            for items in self.clip_encoder.progress_bar(batches, "scoring", len(candidates), progress):
                count = len(references[items[0]])
                # Candidates first, then the j-th references of the batch's items for each j (the authors' order).
                positions = list(items) + [
                    num_candidates + starts[item] + index for index in range(count) for item in items
                ]
                if mode == "per_item":
                    sentence = text_embeds[positions]
                else:
                    groups = [position // len(items) for position in range(len(positions))]
                    sentence = self.sentence_embeddings([token_ids[position] for position in positions], groups).cpu()
                candidate_text = sentence[: len(items)]
                reference_text = sentence[len(items) :].view(count, len(items), -1).transpose(0, 1)
                reference_rows = torch.tensor(
                    [[num_candidates + starts[item] + index for index in range(count)] for item in items]
                )
                scores[items] = self.item_scores(
                    image_embeds[items],
                    clip_embeds[items],
                    clip_embeds[reference_rows],
                    candidate_text,
                    reference_text,
                ).cpu()
        counts = torch.tensor([len(item_references) for item_references in references], dtype=torch.long)
        truncated, truncated_references = self.clip_encoder.count_truncation(candidates, references, fix=SHORTEN_FIX)
        return DenebScoreOutput(
            scores=scores,
            mean_score=mean_or_nan(scores),
            num_references_used=counts,
            mode=mode,
            truncated_tokens=truncated,
            truncated_reference_tokens=truncated_references,
        )


def missing_deneb_message(name_or_path: str) -> str:
    """How to get DENEB weights when `name_or_path` is neither a local directory nor reachable on the Hub."""
    return (
        f"could not load DENEB model '{name_or_path}': it is not a local model directory and the Hugging Face Hub "
        "did not provide it (offline, unreachable, or no such repository). The authors release no weights: train "
        "DENEB with their code and convert the checkpoint with `pacs-pp convert-deneb --checkpoint CKPT "
        "--text-encoder ROBERTA_DIR --output-dir DIR`, then pass DIR; or, for an offline smoke test with random "
        "weights, use the model 'tiny:deneb'."
    )


def check_deneb_references(references, num_candidates: int, max_references: int) -> list[list[str]]:
    """References are required: one non-empty list of strings per candidate, at most `max_references` each."""
    references = check_required_references(references, num_candidates, "DENEB")
    for item, item_references in enumerate(references):
        if len(item_references) > max_references:
            raise ValueError(
                f"item {item} has {len(item_references)} references, more than the {max_references} DENEB's "
                "positional encodings cover: keep at most that many"
            )
    return references


__all__ = ["DenebModel", "DenebPreTrainedModel", "DenebScoreOutput", "check_deneb_references"]
