"""Video captions (docs/spec/pacs.md#video): the EMScore-style PAC-S++ video metric as methods of `PACSModel`.

`PACSModel.score_videos` gathers inputs (videos, captions, references, the IDF corpus), encodes each distinct video
and text once, and calls the pure functions of `scoring.py` (Eqs. 7, 9-14). `encode_videos` and `build_idf_table`
are the lower-level API: encode a video's frames once and score captions against slices of them by passing
`(T, D)` frame embeddings back to `score_videos`.
"""

import itertools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from transformers.utils import ModelOutput, logging

from .backbones import embedding_dim, image_preprocessor
from .inputs import (
    check_captions,
    check_long_captions,
    check_media_count,
    check_media_list,
    check_positive_int,
    check_references,
    deduplicate,
)
from .scoring import (
    IDFTable,
    VideoMatchScores,
    combined_video_scores,
    idf_table,
    mean_or_nan,
    reference_video_scores,
    token_weighted_mean,
    video_scores,
)
from .video import (
    VideoInput,
    check_num_frames,
    check_video,
    describe_video,
    is_frame_embeddings,
    iter_video_frames,
    sample_frame_indices,
    video_key,
)

logger = logging.get_logger(__name__)


@dataclass
class PACSVideoScoreOutput(ModelOutput):
    """
    Scores of [`PACSModel.score_videos`][modeling_pacs.PACSModel.score_videos], per item and for the corpus.

    Args:
        scores (`torch.FloatTensor` of shape `(num_items,)`):
            The final score of each item: Eq. 13 `(coarse + F) / 2` against the video alone, or, with references,
            Eq. 14 (P, R, F and coarse averaged over the video part and the reference part, then Eq. 13).
        mean_score (`float`):
            Corpus score: the mean of `scores`.
        video_precision, video_recall, video_f (`torch.FloatTensor` of shape `(num_items,)`):
            Fine-grained caption-frame matching (Eqs. 10-12).
        video_coarse (`torch.FloatTensor` of shape `(num_items,)`):
            Cosine of the mean frame embedding and the caption embedding (Eq. 9).
        video_scores (`torch.FloatTensor` of shape `(num_items,)`):
            Reference-free score, Eq. 13. Equal to `scores` without references.
        mean_video_score (`float`):
            The mean of `video_scores`.
        reference_precision, reference_recall, reference_f, reference_coarse (`torch.FloatTensor`, *optional*):
            The same against the references' tokens, each maximised over the references separately.
        reference_scores (`torch.FloatTensor` of shape `(num_items,)`, *optional*):
            `(reference_coarse + reference_f) / 2`.
        mean_reference_score (`float`, *optional*):
            The mean of `reference_scores`.
        num_frames (`torch.LongTensor` of shape `(num_items,)`):
            How many frames each item was scored against (repeats of a short video's sampled frames included).
        truncated_tokens (`torch.LongTensor` of shape `(num_items,)`):
            Tokens of each candidate the text encoder did not read (0 for a caption that fits).
        truncated_reference_tokens (`torch.LongTensor` of shape `(num_items,)`, *optional*):
            The same, summed over each item's references.
        num_pieces (`torch.LongTensor` of shape `(num_items,)`):
            How many pieces each candidate was read in: 1 unless `long_captions="chunks"` split it.
    """

    scores: torch.FloatTensor | None = None
    mean_score: float | None = None
    video_precision: torch.FloatTensor | None = None
    video_recall: torch.FloatTensor | None = None
    video_f: torch.FloatTensor | None = None
    video_coarse: torch.FloatTensor | None = None
    video_scores: torch.FloatTensor | None = None
    mean_video_score: float | None = None
    reference_precision: torch.FloatTensor | None = None
    reference_recall: torch.FloatTensor | None = None
    reference_f: torch.FloatTensor | None = None
    reference_coarse: torch.FloatTensor | None = None
    reference_scores: torch.FloatTensor | None = None
    mean_reference_score: float | None = None
    num_frames: torch.LongTensor | None = None
    truncated_tokens: torch.LongTensor | None = None
    truncated_reference_tokens: torch.LongTensor | None = None
    num_pieces: torch.LongTensor | None = None


# The per-item components of a video score that `long_captions="chunks"` averages over a caption's pieces.
PIECE_AVERAGED_FIELDS = (
    "scores",
    "video_precision",
    "video_recall",
    "video_f",
    "video_coarse",
    "video_scores",
    "reference_precision",
    "reference_recall",
    "reference_f",
    "reference_coarse",
    "reference_scores",
)


def batched(iterable, size: int):
    iterator = iter(iterable)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


class VideoScoringMixin:
    """The video methods of [`PACSModel`][modeling_pacs.PACSModel] (docs/spec/pacs.md#video). See
    `PACSModel.score_videos`."""

    def build_idf_table(self, corpus: Sequence[str]) -> IDFTable:
        """EMScore's IDF table over `corpus` (e.g. every caption of the VATEX training annotations),
        docs/spec/pacs.md#video.

        Captions are tokenized as the video metric tokenizes them (no prompt prefix, truncated to the context).
        Reuse the table across calls by passing it as `score_videos(..., idf=table)`.
        """
        corpus = check_captions(corpus, "IDF corpus caption")
        if not corpus:
            raise ValueError("the IDF corpus is empty: pass at least one caption, or idf=False for uniform weights")
        token_ids = {}
        # In chunks: a training-set corpus (VATEX: ~260k captions) padded at once would hold every row in memory.
        for chunk in batched(dict.fromkeys(corpus), 8192):
            tokens = self.tokenize(chunk, prompt_prefix="")
            for text, row, length in zip(chunk, tokens["input_ids"], tokens["attention_mask"].sum(dim=1).tolist()):
                token_ids[text] = row[:length].tolist()
        return idf_table([token_ids[text] for text in corpus], self.tokenizer.eos_token_id, self.config.max_text_length)

    def encode_videos(
        self,
        videos: Sequence[VideoInput],
        num_frames: int | None = None,
        batch_size: int = 64,
        progress: bool | None = None,
        item_indices: list[int] | None = None,
        num_workers: int | None = None,
    ) -> list[torch.Tensor]:
        """Projected frame embeddings `E_v` of each video, `[T_i, projection_dim]` (unnormalised, fp32).

        Only the sampled frames are decoded (`num_frames=None` keeps every frame; `K` samples
        `np.linspace(0, n - 1, K).astype(int)`). Frames of consecutive videos share encoder batches. `(T, D)`
        frame embeddings are passed through (sampled the same way). `item_indices` are the indices errors name.

        Example:

        ```python
        >>> frames = model.encode_videos(["video.mp4"])[0]  # every frame, once
        >>> out = model.score_videos([frames[0:40], frames[40:100]], ["a man opens a door", "he walks in"])
        ```
        """
        num_frames = check_num_frames(num_frames)
        batch_size = check_positive_int(batch_size, "batch_size")
        videos = list(videos)
        item_indices = item_indices or list(range(len(videos)))
        projection_dim = embedding_dim(self.config.backbone_config)
        for video, index in zip(videos, item_indices):
            check_video(video, index)
            if is_frame_embeddings(video) and video.shape[1] != projection_dim:
                raise ValueError(
                    f"video {index} ({describe_video(video)}) looks like frame embeddings but has {video.shape[1]} "
                    f"dimensions; this model's embeddings have {projection_dim}"
                )
        parts: list[list[torch.Tensor]] = [[] for _ in videos]
        for position, (video, index) in enumerate(zip(videos, item_indices)):
            if is_frame_embeddings(video):
                embeds = torch.as_tensor(video).detach().float().cpu()
                if not torch.isfinite(embeds).all():
                    raise ValueError(f"video {index} ({describe_video(video)}) has non-finite frame embeddings")
                parts[position].append(embeds[sample_frame_indices(len(embeds), num_frames)])
        frames = (
            (position, frame)
            for position, (video, index) in enumerate(zip(videos, item_indices))
            if not is_frame_embeddings(video)
            for frame in iter_video_frames(video, index, num_frames)
        )
        # Each frame goes through the backbone's own image pipeline and encoder, exactly as an image would.
        preprocess = image_preprocessor(self.config.backbone_config)
        encode = self.image_batch_encoder()
        dtype = self.clip.vision_model.embeddings.patch_embedding.weight.dtype
        num_workers = check_positive_int(num_workers or min(8, os.cpu_count() or 1), "num_workers")
        with ThreadPoolExecutor(max_workers=num_workers) as pool, torch.inference_mode():
            for batch in self.progress_bar(batched(frames, batch_size), "encoding video frames", len(videos), progress):
                pixels = list(pool.map(lambda item: preprocess(item[1], item_indices[item[0]]), batch))
                pixel_values = torch.stack(pixels).to(device=self.device, dtype=dtype)
                embeds = encode(pixel_values).float().cpu()
                for (position, _), row in zip(batch, embeds):
                    parts[position].append(row[None])
        return [torch.cat(rows) for rows in parts]

    def video_idf_table(
        self, idf: bool | Sequence[str] | IDFTable, candidates: list[str], references: list[list[str]] | None
    ) -> IDFTable | None:
        """The IDF table `score_videos` uses: EMScore's default corpus, an explicit one, a given table, or none."""
        if isinstance(idf, IDFTable):
            return idf
        if idf is False:
            return None
        if idf is True:
            if references is None:
                return self.build_idf_table(candidates) if candidates else None
            # EMScore: the references flattened once per candidate, duplicates kept.
            return self.build_idf_table([reference for item in references for reference in item])
        if isinstance(idf, (str, bytes)) or not isinstance(idf, Sequence):
            raise TypeError(
                f"idf must be True, False, a list of corpus captions or an IDFTable, got {type(idf).__name__}"
            )
        return self.build_idf_table(idf)

    def score_videos(
        self,
        videos: Sequence[VideoInput],
        candidates: list[str],
        references: list[list[str]] | None = None,
        num_frames: int | None = None,
        idf: bool | Sequence[str] | IDFTable = True,
        batch_size: int = 64,
        text_batch_size: int = 256,
        progress: bool | None = None,
        long_captions: str = "truncate",
    ) -> PACSVideoScoreOutput:
        """Score each candidate caption against its video (Eq. 13) and, with references, Eq. 14
        ([docs/spec/pacs.md#video](../spec/pacs.md#video)).

        Args:
            videos: one video per candidate: a video file (mp4, webm, mkv, avi, mov; needs the `video` extra), a
                folder of frame images (sorted by name), a list of images, a `(T, H, W, C)` uint8 array, or
                precomputed `(T, D)` frame embeddings. Identical videos are decoded and encoded once.
            candidates: one caption per video. Captions over 77 tokens are truncated (end-of-text kept).
            references: optional, one non-empty list of reference captions per candidate.
            num_frames: `None` scores every frame (EMScore's default); `K` samples
                `np.linspace(0, n - 1, K).astype(int)` (VATEX-EVAL uses 10). Only sampled frames are decoded.
            idf: `True` for EMScore's corpus (the references flattened per candidate, duplicates kept, or the
                candidates without references), `False` for uniform weights, a list of captions as the corpus, or
                a table from `build_idf_table`.
            batch_size: frames per encoder batch, and candidates per scoring batch.
            text_batch_size: captions per text-encoder batch.
            long_captions: `"truncate"` (EMScore's behaviour: the first 77 tokens are read; `truncated_tokens` counts
                the rest) or `"chunks"`: longer captions and references are read in pieces (`PACSModel.score`);
                every component is a token-weighted mean over the candidate's pieces, each piece matched against
                every piece of the item's references; the IDF table comes from the whole captions.

        Returns:
            [`PACSVideoScoreOutput`][modeling_pacs.PACSVideoScoreOutput] with per-item scores, their components and
            corpus means.

        Example:

        ```python
        >>> out = model.score_videos(["dog.mp4"], ["a dog catches a frisbee"], num_frames=10)
        >>> out.scores, out.video_precision, out.video_recall, out.video_coarse
        ```
        """

        candidates = check_captions(candidates)
        videos = check_media_list(videos, "video", item_ndim=4)  # a 5-D array is a batch of (T, H, W, C) videos
        check_media_count(videos, candidates, "video", "decoded and encoded")
        if references is not None:
            references = check_references(references, len(candidates))
        num_frames = check_num_frames(num_frames)
        batch_size = check_positive_int(batch_size, "batch_size")
        text_batch_size = check_positive_int(text_batch_size, "text_batch_size")
        for index, video in enumerate(videos):
            check_video(video, index)
        check_long_captions(long_captions)
        table = self.video_idf_table(idf, candidates, references)
        if long_captions == "chunks":
            return self.score_videos_in_pieces(
                videos, candidates, references, num_frames, table, batch_size, text_batch_size, progress
            )
        output = self.score_videos_truncated(
            videos, candidates, references, num_frames, table, batch_size, text_batch_size, progress
        )
        output.truncated_tokens, output.truncated_reference_tokens = self.count_truncation(
            candidates, references, prompt_prefix=""
        )
        return output

    def score_videos_truncated(
        self,
        videos: list[VideoInput],
        candidates: list[str],
        references: list[list[str]] | None,
        num_frames: int | None,
        table: IDFTable | None,
        batch_size: int,
        text_batch_size: int,
        progress: bool | None,
    ) -> PACSVideoScoreOutput:
        """Eqs. 7, 9-14 on validated inputs, each text read up to the context length (EMScore's behaviour)."""
        unique_videos, video_index, first_items = deduplicate(videos, video_key)
        frame_embeds = self.encode_videos(unique_videos, num_frames, batch_size, progress, item_indices=first_items)
        texts = list(candidates)
        if references is not None:
            texts.extend(reference for item_references in references for reference in item_references)
        unique_texts, text_index, _ = deduplicate(texts, lambda text: text)
        features = self.encode_texts(
            unique_texts, text_batch_size, return_tokens=True, progress=progress, prompt_prefix=""
        )
        token_weights = None
        if unique_texts:
            ones = torch.ones(features.input_ids.shape)
            token_weights = table.lookup(features.input_ids) if table is not None else ones
            if ((token_weights * features.attention_mask).sum(dim=1) == 0).any():
                logger.warning(
                    "some captions have IDF weights that sum to 0 (every token occurs in every corpus caption, e.g. "
                    "a one-caption corpus): they are weighted uniformly; pass a larger corpus (pacs-score: --idf FILE; "
                    "Python: score_videos(..., idf=[captions]))"
                )

        parts: list[VideoMatchScores] = []
        reference_parts: list[VideoMatchScores] = []
        reference_start = len(candidates)
        reference_offsets = np.cumsum([0] + [len(item) for item in references]) if references is not None else None
        for chunk in batched(range(len(candidates)), batch_size):
            rows = text_index[chunk]
            frames = [frame_embeds[int(video_index[item])] for item in chunk]
            frame_mask = pad_sequence([torch.ones(len(video), dtype=torch.long) for video in frames], batch_first=True)
            parts.append(
                video_scores(
                    features.token_embeds[rows],
                    features.attention_mask[rows],
                    token_weights[rows],
                    pad_sequence(frames, batch_first=True),
                    frame_mask,
                )
            )
            if references is None:
                continue
            pairs = [
                (position, reference_start + reference)
                for position, item in enumerate(chunk)
                for reference in range(reference_offsets[item], reference_offsets[item + 1])
            ]
            owner = torch.tensor([position for position, _ in pairs])
            candidate_rows = rows[owner]
            reference_rows = text_index[[reference for _, reference in pairs]]
            reference_parts.append(
                reference_video_scores(
                    features.token_embeds[candidate_rows],
                    features.attention_mask[candidate_rows],
                    token_weights[candidate_rows],
                    features.token_embeds[reference_rows],
                    features.attention_mask[reference_rows],
                    token_weights[reference_rows],
                    owner,
                    len(chunk),
                )
            )

        video = concatenate_scores(parts)
        output = PACSVideoScoreOutput(
            scores=video.score,
            mean_score=mean_or_nan(video.score),
            video_precision=video.precision,
            video_recall=video.recall,
            video_f=video.f,
            video_coarse=video.coarse,
            video_scores=video.score,
            mean_video_score=mean_or_nan(video.score),
            num_frames=torch.tensor([len(frame_embeds[int(i)]) for i in video_index], dtype=torch.long),
        )
        if references is not None:
            reference = concatenate_scores(reference_parts)
            combined = combined_video_scores(video, reference)
            output.reference_precision = reference.precision
            output.reference_recall = reference.recall
            output.reference_f = reference.f
            output.reference_coarse = reference.coarse
            output.reference_scores = reference.score
            output.mean_reference_score = mean_or_nan(reference.score)
            output.scores = combined.score
            output.mean_score = mean_or_nan(combined.score)
        output.num_pieces = torch.ones(len(candidates), dtype=torch.long)
        return output

    def score_videos_in_pieces(
        self,
        videos: list[VideoInput],
        candidates: list[str],
        references: list[list[str]] | None,
        num_frames: int | None,
        table: IDFTable | None,
        batch_size: int,
        text_batch_size: int,
        progress: bool | None,
    ) -> PACSVideoScoreOutput:
        """`long_captions="chunks"` for videos: each piece is scored as a caption of its item's video (against every
        piece of the item's references), then every component is averaged over the pieces, weighted by their new
        tokens (`scoring.token_weighted_mean`). Captions that fit are scored exactly as with `"truncate"`."""
        candidate_split = self.split_long_captions(candidates, prompt_prefix="")
        piece_references = None
        reference_splits = None
        if references is not None:
            reference_splits = [self.split_long_captions(item, prompt_prefix="") for item in references]
            piece_references = [reference_splits[item].texts for item in candidate_split.owner]
        pieces = self.score_videos_truncated(
            [videos[item] for item in candidate_split.owner],
            candidate_split.texts,
            piece_references,
            num_frames,
            table,
            batch_size,
            text_batch_size,
            progress,
        )
        owner = torch.tensor(candidate_split.owner, dtype=torch.long)
        new_tokens = torch.tensor(candidate_split.new_tokens, dtype=torch.long)
        num_items = len(candidates)
        first_piece = torch.searchsorted(owner, torch.arange(num_items))  # pieces are listed item by item
        output = PACSVideoScoreOutput(
            num_frames=pieces.num_frames[first_piece],
            truncated_tokens=torch.tensor(candidate_split.dropped_tokens, dtype=torch.long),
            num_pieces=torch.tensor(candidate_split.num_pieces, dtype=torch.long),
        )
        for field in PIECE_AVERAGED_FIELDS:
            values = getattr(pieces, field)
            if values is not None:
                setattr(output, field, token_weighted_mean(values, owner, new_tokens, num_items))
        output.mean_score = mean_or_nan(output.scores)
        output.mean_video_score = mean_or_nan(output.video_scores)
        if reference_splits is not None:
            output.mean_reference_score = mean_or_nan(output.reference_scores)
            output.truncated_reference_tokens = torch.tensor(
                [sum(split.dropped_tokens) for split in reference_splits], dtype=torch.long
            )
        return output


def concatenate_scores(parts: list[VideoMatchScores]) -> VideoMatchScores:
    """Join the per-batch components (empty tensors for an empty call)."""
    if not parts:
        return VideoMatchScores(*(torch.zeros(0) for _ in VideoMatchScores._fields))
    return VideoMatchScores(*(torch.cat(values) for values in zip(*parts)))


__all__ = ["PACSVideoScoreOutput", "VideoScoringMixin"]
