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
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, PreTrainedModel, RobertaModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from .artifacts import check_model_directory, explain_load_errors, warn_if_random_weights
from .configuration_deneb import DENEB_MODES, DenebConfig
from .configuration_pacs import PACSConfig
from .fast_clip import FastEncoderSlot
from .fast_roberta import FastRoberta
from .inputs import (
    SHORTEN_FIX,
    ImageInput,
    check_captions,
    check_media_count,
    check_positive_int,
    check_references,
    deduplicate,
    image_key,
    untruncated_token_ids,
)
from .modeling_pacs import PACSModel, hub_download_kwargs, load_or_explain, make_world_readable
from .scoring import mean_or_nan
from .scoring_deneb import sim_vec_sequences, with_class_token
from .sentence_mix import MLPHead, ScalarMix, sentence_statistics

logger = logging.get_logger(__name__)

CLIP_TOKENIZER_FOLDER = "clip_tokenizer"
TEXT_TOKENIZER_FOLDER = "text_tokenizer"


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
        if isinstance(module, ScalarMix):
            init.zeros_(module.layer_weights)
            init.ones_(module.gamma)
        elif isinstance(module, DenebSequenceEncoder):
            init.normal_(module.class_token, std=1e-6)  # the authors' init of cls_token1 / cls_token2
        elif isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=0.02)
            init.zeros_(module.bias)


class DenebModel(DenebPreTrainedModel):
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

    def __init__(self, config: DenebConfig):
        super().__init__(config)
        clip_config = PACSConfig(
            backbone_config=config.clip_config,
            variant="clip_s",
            adapter_path=None,
            prompt_prefix=config.prompt_prefix,
            max_text_length=config.max_text_length,
        )
        self.clip_encoder = PACSModel(clip_config)
        self.clip_encoder.image_normalisation = (tuple(config.image_mean), tuple(config.image_std))
        self.text_encoder = RobertaModel(config.text_config, add_pooling_layer=False)
        self.scalar_mix = ScalarMix(config.num_mixed_layers, config.scalar_mix_dropout)
        # The authors' `upsampler` (CLIP pairs) and `upsampler2` (sentence pairs).
        self.clip_projection = nn.Linear(config.hidden_size, config.hidden_size)
        self.text_projection = nn.Linear(config.hidden_size, config.hidden_size)
        # The authors' `transformer` + `cls_token1` + `pos_encoder`, and `transformer2` + `cls_token2` + `pos_encoder2`.
        self.clip_sequence_encoder = DenebSequenceEncoder(config)
        self.text_sequence_encoder = DenebSequenceEncoder(config)
        self.head = MLPHead(config.feature_size, config.hidden_sizes, config.dropout)
        self.text_tokenizer = None
        # On CPU in fp32, in eval mode without gradients, RoBERTa runs `fast_roberta` (same embeddings, less work).
        self.fast_cpu_encoders = True
        self._fast_text_encoder = FastEncoderSlot(FastRoberta.build)
        self.post_init()

    @property
    def clip_tokenizer(self):
        """The CLIP tokenizer (held by the engine's CLIP encoder)."""
        return self.clip_encoder.tokenizer

    @clip_tokenizer.setter
    def clip_tokenizer(self, tokenizer):
        self.clip_encoder.tokenizer = tokenizer

    # ------------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Load weights and both tokenizers (from the sub-folders `clip_tokenizer/` and `text_tokenizer/`)."""
        name_or_path = os.fspath(pretrained_model_name_or_path)
        hub_kwargs = hub_download_kwargs(kwargs)
        check_model_directory(name_or_path)
        with explain_load_errors(name_or_path):
            model = load_or_explain(
                lambda: super(DenebModel, cls).from_pretrained(name_or_path, *model_args, **kwargs),
                name_or_path,
                missing_deneb_message,
            )
        model.clip_tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, subfolder=CLIP_TOKENIZER_FOLDER, config=model.config.clip_config, **hub_kwargs
        )
        model.text_tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, subfolder=TEXT_TOKENIZER_FOLDER, config=model.config.text_config, **hub_kwargs
        )
        warn_if_random_weights(model.config, name_or_path, logger)
        return model

    def save_pretrained(self, save_directory, **kwargs):
        """Save config, weights and both tokenizers (in `clip_tokenizer/` and `text_tokenizer/`)."""
        save_directory = Path(save_directory)
        super().save_pretrained(save_directory, **kwargs)
        if self.clip_tokenizer is not None:
            self.clip_tokenizer.save_pretrained(save_directory / CLIP_TOKENIZER_FOLDER)
        if self.text_tokenizer is not None:
            self.text_tokenizer.save_pretrained(save_directory / TEXT_TOKENIZER_FOLDER)
        make_world_readable(save_directory)

    # ------------------------------------------------------------------------------------------------ encoding
    def tokenize_sentences(self, texts: list[str], labels: list[str]) -> list[list[int]]:
        """RoBERTa ids of each raw text (no prefix), as the authors' `HFTextEncoder.encode`. A text longer than the
        encoder's positions (512 tokens for RoBERTa-base) is refused, naming it (the authors' code crashes on it)."""
        if self.text_tokenizer is None:
            raise ValueError(
                "this DenebModel has no RoBERTa tokenizer: load it with from_pretrained, or set "
                "model.text_tokenizer = AutoTokenizer.from_pretrained('princeton-nlp/sup-simcse-roberta-base')"
            )
        if not texts:
            return []
        ids = untruncated_token_ids(self.text_tokenizer, texts)
        limit = self.config.max_text_tokens
        for label, text, token_ids in zip(labels, texts, ids):
            if len(token_ids) > limit:
                raise ValueError(
                    f"{label} ({text[:40]!r}...) has {len(token_ids)} RoBERTa tokens, more than the {limit} the "
                    "sentence encoder accepts: shorten it (DENEB refuses such captions instead of cutting them)"
                )
        return ids

    def fast_text_encoder(self) -> FastRoberta | None:
        """`fast_roberta`'s encoder for the current weights, or None where it does not apply (`fast_cpu_encoders`
        off, training mode, gradients enabled, not fp32 on CPU)."""
        if not self.fast_cpu_encoders or self.text_encoder.training or torch.is_grad_enabled():
            return None
        return self._fast_text_encoder.get(self.text_encoder)

    def sentence_embeddings(self, token_ids: list[list[int]], groups: list[int]) -> torch.Tensor:
        """The mixed CLS embedding of each sentence; sentences of one group share the ScalarMix statistics, as one of
        the authors' RoBERTa calls normalises its whole batch together."""
        if not token_ids:
            return torch.zeros(0, self.config.hidden_size)
        lengths = [len(ids) for ids in token_ids]
        input_ids = torch.full((len(token_ids), max(lengths)), self.config.text_config.pad_token_id, dtype=torch.long)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
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
                `config.official_batch_size`), which changes the scores; in `"per_item"` mode it does not.
            image_batch_size, text_batch_size: CLIP encoder batch sizes (do not change scores).

        Returns:
            [`DenebScoreOutput`][modeling_pacs.DenebScoreOutput] with per-item scores and their mean, and the tokens
            CLIP's text encoder dropped (`truncated_tokens`, `truncated_reference_tokens`).
        """
        mode = mode or self.config.mode
        if mode not in DENEB_MODES:
            raise ValueError(f"mode must be one of {list(DENEB_MODES)}, got {mode!r}")
        batch_size = self.config.official_batch_size if batch_size is None else batch_size
        for name, value in (
            ("batch_size", batch_size),
            ("image_batch_size", image_batch_size),
            ("text_batch_size", text_batch_size),
        ):
            check_positive_int(value, name)
        candidates = check_captions(candidates)
        images = list(images) if not isinstance(images, (str, bytes)) else [images]
        check_media_count(images, candidates)
        references = check_deneb_references(references, len(candidates), self.config.max_references)
        if mode == "official":
            references = cut_references_to_chunks(references, batch_size)

        unique_images, image_index, first_items = deduplicate(images, image_key)
        image_embeds = self.clip_encoder.encode_images(
            unique_images, image_batch_size, progress, item_indices=first_items
        )[image_index]
        flat_references = [reference for item_references in references for reference in item_references]
        unique_texts, text_index, first_text = deduplicate(candidates + flat_references, lambda text: text)
        clip_embeds = self.clip_encoder.encode_texts(unique_texts, text_batch_size, progress=progress)[text_index]
        labels = [f"candidate {item}" for item in range(len(candidates))]
        labels += [
            f"reference {position} of item {item}"
            for item, item_references in enumerate(references)
            for position in range(len(item_references))
        ]
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
            batches = [
                items[start : start + batch_size]
                for items in by_count.values()
                for start in range(0, len(items), batch_size)
            ]
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
    if references is None:
        raise ValueError(
            "DENEB is a reference-based metric and has no reference-free mode: pass references, one non-empty list "
            "of reference captions per candidate (or use PAC-S++ / CLIP-S for reference-free scoring)"
        )
    references = check_references(
        references, num_candidates, empty_fix="DENEB has no reference-free mode: drop the item or add its references"
    )
    for item, item_references in enumerate(references):
        if len(item_references) > max_references:
            raise ValueError(
                f"item {item} has {len(item_references)} references, more than the {max_references} DENEB's "
                "positional encodings cover: keep at most that many"
            )
    return references


def cut_references_to_chunks(references: list[list[str]], batch_size: int) -> list[list[str]]:
    """The authors' `collate_tensors` transposes references: each chunk keeps its items' first `min(count)`."""
    cut = []
    for start in range(0, len(references), batch_size):
        chunk = references[start : start + batch_size]
        keep = min(len(item_references) for item_references in chunk)
        cut.extend(item_references[:keep] for item_references in chunk)
    return cut


__all__ = ["DenebModel", "DenebPreTrainedModel", "DenebScoreOutput", "check_deneb_references"]
