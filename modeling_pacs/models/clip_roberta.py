"""What the supervised CLIP + RoBERTa estimators share: a CLIP encoder through the engine's pipelines, a SimCSE RoBERTa
sentence encoder read through a ScalarMix, two tokenizers in `clip_tokenizer/` and `text_tokenizer/`, and the
argument, reference and official-chunking rules of their `score`.

A model class mixes `ClipRobertaMixin` in before its `PreTrainedModel` base, sets `metric_name` (the name its
messages use) and calls `build_clip_roberta(config)` in `__init__`; its config has `clip_config`, `text_config`,
`prompt_prefix`, `max_text_length`, `max_text_tokens`, `num_mixed_layers` and `scalar_mix_dropout`.
"""

import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, RobertaModel
from transformers import initialization as init

from .artifacts import check_model_directory, explain_load_errors, warn_if_random_weights
from .configuration_pacs import PACSConfig
from .fast_clip import FastEncoderSlot
from .fast_roberta import FastRoberta
from .inputs import check_positive_int, check_references, deduplicate, image_key, untruncated_token_ids
from .modeling_pacs import PACSModel, hub_download_kwargs, load_or_explain, make_world_readable
from .sentence_mix import ScalarMix

CLIP_TOKENIZER_FOLDER = "clip_tokenizer"
TEXT_TOKENIZER_FOLDER = "text_tokenizer"


def init_sentence_mix_weights(module) -> bool:
    """The shared part of `_init_weights`: ScalarMix weights zero and gamma one, Linear layers N(0, 0.02) with zero
    bias. Returns whether `module` was one of those."""
    if isinstance(module, ScalarMix):
        init.zeros_(module.layer_weights)
        init.ones_(module.gamma)
    elif isinstance(module, nn.Linear):
        init.normal_(module.weight, mean=0.0, std=0.02)
        init.zeros_(module.bias)
    else:
        return False
    return True


def right_padded(token_ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, list[int]]:
    """`[B, T]` ids right-padded with `pad_id`, and the length of each row."""
    lengths = [len(ids) for ids in token_ids]
    input_ids = torch.full((len(token_ids), max(lengths)), pad_id, dtype=torch.long)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return input_ids, lengths


def check_score_arguments(mode: str, modes, batch_size: int, image_batch_size: int, text_batch_size: int) -> None:
    """`mode` one of `modes`, and every batch size a positive int."""
    if mode not in modes:
        raise ValueError(f"mode must be one of {list(modes)}, got {mode!r}")
    for name, value in (
        ("batch_size", batch_size),
        ("image_batch_size", image_batch_size),
        ("text_batch_size", text_batch_size),
    ):
        check_positive_int(value, name)


def check_required_references(references, num_candidates: int, metric_name: str) -> list[list[str]]:
    """References are required: one non-empty list of strings (or one string) per candidate."""
    if references is None:
        raise ValueError(
            f"{metric_name} is a reference-based metric and has no reference-free mode: pass references, one "
            "non-empty list of reference captions per candidate (or use PAC-S++ / CLIP-S for reference-free scoring)"
        )
    return check_references(
        references,
        num_candidates,
        empty_fix=f"{metric_name} has no reference-free mode: drop the item or add its references",
    )


def cut_references_to_chunks(references: list[list[str]], batch_size: int) -> list[list[str]]:
    """The official `collate_tensors` transposes references: each chunk keeps its items' first `min(count)`."""
    cut = []
    for start in range(0, len(references), batch_size):
        chunk = references[start : start + batch_size]
        keep = min(len(item_references) for item_references in chunk)
        cut.extend(item_references[:keep] for item_references in chunk)
    return cut


def sentence_labels(num_candidates: int, references: list[list[str]]) -> list[str]:
    """How messages name each text: the candidates, then each reference of each item."""
    labels = [f"candidate {item}" for item in range(num_candidates)]
    labels += [
        f"reference {position} of item {item}"
        for item, item_references in enumerate(references)
        for position in range(len(item_references))
    ]
    return labels


class ClipRobertaMixin:
    """Construction, loading, saving, tokenisation and CLIP encoding shared by the CLIP + RoBERTa estimators."""

    metric_name = "this metric"

    def build_clip_roberta(self, config) -> None:
        """The CLIP encoder (CLIP-S variant of the engine, the config's prompt prefix), RoBERTa without pooler and
        the ScalarMix, created in this order."""
        clip_config = PACSConfig(
            backbone_config=config.clip_config,
            variant="clip_s",
            adapter_path=None,
            prompt_prefix=config.prompt_prefix,
            max_text_length=config.max_text_length,
        )
        self.clip_encoder = PACSModel(clip_config)
        self.text_encoder = RobertaModel(config.text_config, add_pooling_layer=False)
        self.scalar_mix = ScalarMix(config.num_mixed_layers, config.scalar_mix_dropout)

    def build_fast_text_encoder(self) -> None:
        """The CPU fast path's slot for RoBERTa (`fast_roberta`), on by default."""
        self.text_tokenizer = None
        self.fast_cpu_encoders = True
        self._fast_text_encoder = FastEncoderSlot(FastRoberta.build)

    # ------------------------------------------------------------------------------------------------ loading
    @classmethod
    def load_with_tokenizers(cls, load, name_or_path, kwargs, missing_message, logger):
        """Run `load()` (the `PreTrainedModel.from_pretrained` call) with the engine's checks and messages, then load
        both tokenizers from their sub-folders."""
        name_or_path = os.fspath(name_or_path)
        hub_kwargs = hub_download_kwargs(kwargs)
        check_model_directory(name_or_path)
        with explain_load_errors(name_or_path):
            model = load_or_explain(load, name_or_path, missing_message)
        model.clip_tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, subfolder=CLIP_TOKENIZER_FOLDER, config=model.config.clip_config, **hub_kwargs
        )
        model.text_tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, subfolder=TEXT_TOKENIZER_FOLDER, config=model.config.text_config, **hub_kwargs
        )
        warn_if_random_weights(model.config, name_or_path, logger)
        return model

    @property
    def clip_tokenizer(self):
        """The CLIP tokenizer (held by the engine's CLIP encoder)."""
        return self.clip_encoder.tokenizer

    @clip_tokenizer.setter
    def clip_tokenizer(self, tokenizer):
        self.clip_encoder.tokenizer = tokenizer

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
        """RoBERTa ids of each raw text (no prefix, no whitespace normalisation), each encoded alone as the official
        code does. A text longer than the encoder's positions (512 tokens for RoBERTa-base) is refused, naming it:
        the official code crashes on it, and cutting it silently would score a different caption."""
        if self.text_tokenizer is None:
            raise ValueError(
                f"this {type(self).__name__} has no RoBERTa tokenizer: load it with from_pretrained, or set "
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
                    f"sentence encoder accepts: shorten it ({self.metric_name} refuses such captions instead of "
                    "cutting them)"
                )
        return ids

    def fast_text_encoder(self) -> FastRoberta | None:
        """`fast_roberta`'s encoder for the current weights, or None where it does not apply (`fast_cpu_encoders`
        off, training mode, gradients enabled, not fp32 on CPU)."""
        if not self.fast_cpu_encoders or self.text_encoder.training or torch.is_grad_enabled():
            return None
        return self._fast_text_encoder.get(self.text_encoder)

    def encode_clip_side(self, images, candidates, references, image_batch_size, text_batch_size, progress):
        """CLIP features of each item's image (deduplicated) and of the candidates then the flat references (each
        distinct text once). Returns `(image_embeds, clip_embeds, unique_texts, text_index, first_text,
        flat_references)`: `clip_embeds[i]` is text `i` of `candidates + flat_references`, `unique_texts[text_index[i]]`
        its text, and `first_text[u]` the first position of unique text `u`."""
        unique_images, image_index, first_items = deduplicate(images, image_key)
        image_embeds = self.clip_encoder.encode_images(
            unique_images, image_batch_size, progress, item_indices=first_items
        )[image_index]
        flat_references = [reference for item_references in references for reference in item_references]
        unique_texts, text_index, first_text = deduplicate(candidates + flat_references, lambda text: text)
        clip_embeds = self.clip_encoder.encode_texts(unique_texts, text_batch_size, progress=progress)[text_index]
        return image_embeds, clip_embeds, unique_texts, text_index, first_text, flat_references
