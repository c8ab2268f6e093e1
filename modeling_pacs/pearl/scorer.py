"""End-to-end Pearl scoring: images and captions in, Pearl scores out (encoders + PearlModel).

Input policies (documented, logged):
- more than `config.max_refs` references for an item: the first `max_refs` are kept, as Pearl's code does
  (`pearl_estimator.py:517-534`), and a warning names how many items were cut;
- an empty (or blank) candidate: scored as Pearl's extractors score it (BLIP-2 / Stella see "[EMPTY]", CLIP sees the
  prompt alone), with a warning naming the items;
- an item with an empty reference list is scored reference-free (Pearl is reference-flexible);
- a caption longer than an encoder's text context (CLIP 77 tokens, BLIP-2 32, BEiT-3 77, Stella 512) is truncated by
  that encoder, as in Pearl's extractors: `truncated_tokens` counts, per item, the most tokens any encoder dropped
  (`truncated_tokens_by_encoder` gives each encoder's count) and one `LongCaptionWarning` names the fix.
"""

import logging
from pathlib import Path

import torch

from ..models.inputs import (
    SHORTEN_FIX,
    ImageInput,
    check_captions,
    check_media_count,
    check_media_list,
    check_references,
    deduplicate,
    image_key,
)
from ..models.modeling_pacs import PACSScoreOutput, warn_truncation
from ..models.modeling_pearl import PearlModel
from ..models.scoring import mean_or_nan
from .features import assemble_batch

logger = logging.getLogger(__name__)


def cap_references(references: list[list[str]], max_refs: int) -> list[list[str]]:
    """Keep the first `max_refs` references of each item (Pearl's policy), with one warning for all cut items."""
    cut = [index for index, item in enumerate(references) if len(item) > max_refs]
    if cut:
        logger.warning(
            "%d item(s) have more than max_refs=%d references (first: item %d with %d); Pearl keeps the first %d",
            len(cut),
            max_refs,
            cut[0],
            len(references[cut[0]]),
            max_refs,
        )
    return [item[:max_refs] for item in references]


class PearlScorer:
    """A [`PearlModel`][modeling_pacs.PearlModel] with its frozen encoders:
    `score(images, candidates, references=None)`.

    Example:

    ```python
    >>> from modeling_pacs.pearl.scorer import PearlScorer
    >>> from modeling_pacs.testing.pearl import make_tiny_pearl
    >>> scorer = PearlScorer.from_pretrained(make_tiny_pearl("/tmp/tiny-pearl"))  # random weights
    >>> out = scorer.score(["cat.jpg"], ["a cat on a sofa"], references=[["a cat sleeping"]])
    >>> out.scores, out.ref_scores  # Pearl-img (reference-free) and Pearl (Eq. 3)
    ```
    """

    # What the warning and the command lines advise for captions past an encoder's context (no piecewise mode).
    truncation_fix = SHORTEN_FIX

    def __init__(self, model: PearlModel, encoders: dict, batch_size: int = 64):
        missing = [name for name in model.config.encoder_names if name not in encoders]
        if missing:
            raise ValueError(f"Pearl needs encoders {model.config.encoder_names}; missing {missing}")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.model = model.eval()
        self.encoders = encoders
        self.batch_size = batch_size

    @property
    def dtype(self) -> torch.dtype:
        """Precision of the Pearl head (fp32)."""
        return next(self.model.parameters()).dtype

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        return self.model.device

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, device: str | None = None, **kwargs) -> "PearlScorer":
        """Load the Pearl head and the encoders named by `config.encoder_specs` (paths relative to the model folder),
        without the libraries' loading chatter."""
        from ..encoders import load_encoder
        from ..logs import quiet_library_loading

        with quiet_library_loading():
            model = PearlModel.from_pretrained(name_or_path, dtype=torch.float32).to(device or "cpu")
        base = Path(name_or_path) if Path(name_or_path).is_dir() else None
        encoders = {
            name: load_encoder(name, model.config.encoder_specs[name], base, device)
            for name in model.config.encoder_names
        }
        return cls(model, encoders, **kwargs)

    def encode(self, images: list[ImageInput], candidates: list[str], references: list[list[str]] | None) -> dict:
        """Encode distinct images and texts once per encoder; return the per-item model inputs (all items)."""
        unique_images, image_index, first_items = deduplicate(images, image_key)
        texts = list(candidates) + [reference for item in references or [] for reference in item]
        unique_texts, text_index, _ = deduplicate(texts, lambda text: text)
        text_features = {name: encoder.encode_text(unique_texts)[text_index] for name, encoder in self.encoders.items()}
        image_features = {}
        for encoder in self.config.image_encoders:
            name = encoder["name"]
            encoded = self.encoders[name].encode_image(unique_images, item_indices=first_items)
            image_features[name] = encoded[image_index]
        candidate_features = {name: features[: len(candidates)] for name, features in text_features.items()}
        reference_lists = None
        if references is not None:
            reference_lists, position = [], len(candidates)
            for item in references:
                reference_lists.append(list(range(position, position + len(item))))
                position += len(item)
        return {
            "candidate_features": candidate_features,
            "image_features": image_features,
            "reference_lists": reference_lists,
            "text_features": text_features,
        }

    def truncated_tokens_by_encoder(self, texts: list[str]) -> dict[str, torch.LongTensor]:
        """For each encoder (by name), the tokens of each text its `encode_text` does not read (past its context; 0
        when the text fits). Encoders without a `truncated_tokens` method are left out."""
        unique, index, _ = deduplicate(list(texts), lambda text: text)
        return {
            name: encoder.truncated_tokens(unique)[index]
            for name, encoder in self.encoders.items()
            if hasattr(encoder, "truncated_tokens")
        }

    def truncated_tokens(self, texts: list[str]) -> torch.LongTensor:
        """Per text, the most tokens any encoder drops (the maximum of `truncated_tokens_by_encoder`)."""
        by_encoder = self.truncated_tokens_by_encoder(texts)
        if not by_encoder:
            return torch.zeros(len(texts), dtype=torch.long)
        return torch.stack(list(by_encoder.values())).amax(dim=0)

    def count_truncation(
        self, candidates: list[str], references: list[list[str]] | None
    ) -> tuple[torch.LongTensor, torch.LongTensor | None]:
        """Per item, the most tokens of the candidate any encoder drops, and the same for its references, summed over
        them (`None` without references); one `LongCaptionWarning` for each kind of text that lost any, naming the
        encoders that cut and their contexts."""
        flat_references = [text for item in references or [] for text in item]
        by_encoder = self.truncated_tokens_by_encoder(list(candidates) + flat_references)
        if by_encoder:
            per_text = torch.stack(list(by_encoder.values())).amax(dim=0)
        else:
            per_text = torch.zeros(len(candidates) + len(flat_references), dtype=torch.long)
        parts = {"captions": slice(0, len(candidates)), "references": slice(len(candidates), None)}
        for what, rows in parts.items():
            cutting = [name for name, counts in by_encoder.items() if bool((counts[rows] > 0).any())]
            contexts = ", ".join(context_of(name, self.encoders[name]) for name in cutting)
            context = f"the text encoders' contexts ({contexts})"
            warn_truncation(per_text[rows], context, what, fix=SHORTEN_FIX)
        truncated = per_text[: len(candidates)]
        if references is None:
            return truncated, None
        owner = torch.tensor([item for item, texts in enumerate(references) for _ in texts], dtype=torch.long)
        per_item = torch.zeros(len(candidates), dtype=torch.long).index_add(0, owner, per_text[len(candidates) :])
        return truncated, per_item

    def score_features(self, encoded: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """`(img_score, score)` for every item, run through the model `batch_size` items at a time."""
        num_items = next(iter(encoded["candidate_features"].values())).shape[0]
        img_scores, scores = [], []
        with torch.inference_mode():
            for start in range(0, num_items, self.batch_size):
                rows = slice(start, start + self.batch_size)
                lists = encoded["reference_lists"][rows] if encoded["reference_lists"] is not None else None
                batch = assemble_batch(
                    self.config,
                    {name: value[rows] for name, value in encoded["candidate_features"].items()},
                    {name: value[rows] for name, value in encoded["image_features"].items()},
                    lists,
                    encoded["text_features"],
                )
                batch = move_to(batch, self.device)
                output = self.model(**batch)
                img_scores.append(output.img_score.float().cpu())
                scores.append(output.score.float().cpu())
        return torch.cat(img_scores), torch.cat(scores)

    def score(
        self,
        images: list[ImageInput],
        candidates: list[str],
        references: list[list[str]] | None = None,
    ) -> PACSScoreOutput:
        """Pearl scores: `scores` is the reference-free Pearl (the image head), `ref_scores` Eq. 3 with references.

        Pearl takes no score options (its encoder batch size is `batch_size` of the constructor): an option of
        another metric (`long_captions`, `image_batch_size`, ...) is a `TypeError` naming it. `truncated_tokens` and
        `truncated_reference_tokens` count the caption tokens the encoders dropped (`count_truncation`).
        """
        candidates = check_captions(candidates)
        images = check_media_list(images)
        check_media_count(images, candidates)
        empty = [index for index, candidate in enumerate(candidates) if not candidate.strip()]
        if empty:
            logger.warning(
                "candidate(s) %s are empty: scored as Pearl does ('[EMPTY]' for BLIP-2/Stella, the prompt for CLIP)",
                empty[:10],
            )
        if references is not None:
            references = check_references(references, len(candidates), allow_empty=True)
            references = cap_references(references, self.config.max_refs)
        img_scores, scores = self.score_features(self.encode(images, candidates, references))
        output = PACSScoreOutput(scores=img_scores, mean_score=mean_or_nan(img_scores))
        if references is not None:
            output.ref_scores = scores
            output.mean_ref_score = mean_or_nan(scores)
        output.truncated_tokens, output.truncated_reference_tokens = self.count_truncation(candidates, references)
        return output


def load_pearl_scorer(name_or_path: str, device: str | None = None, dtype: str | None = None) -> PearlScorer:
    """The registry's loader for model_type `pearl`: the head and its frozen encoders, as a `PearlScorer` (fp32)."""
    from ..extras import require
    from ..pacs.loading import resolve_device

    require("sentencepiece", "pearl", "Pearl")  # the XLM-R tokenizer of BEiT-3
    return PearlScorer.from_pretrained(name_or_path, device=str(resolve_device(device)))


def context_of(name: str, encoder) -> str:
    """`"blip2 32 tokens"`: an encoder's name and text context, for the truncation warning (the name alone for an
    encoder that does not state its context)."""
    length = getattr(encoder, "max_text_length", None)
    return name if length is None else f"{name} {length} tokens"


def move_to(batch, device):
    if isinstance(batch, dict):
        return {key: move_to(value, device) for key, value in batch.items()}
    return batch.to(device)
