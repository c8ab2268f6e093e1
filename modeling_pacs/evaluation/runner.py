"""Scoring benchmark items with a model: one engine call per chunk, images deduplicated across the benchmark, and
per-chunk scores cached by the project's job engine (`modeling_pacs.jobs.ShardedJob`: atomic shard files, a manifest
that refuses other items or another chunk size, every item exactly once) so an interrupted run resumes where it
stopped.

Items are ordered by image before chunking, so an image is encoded once per chunk it appears in (once overall unless
a chunk boundary splits its items).
"""

import contextlib
import hashlib
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..jobs import ShardedJob
from ..loading import long_captions_keyword
from ..models.inputs import check_positive_int
from .benchmark import Benchmark

logger = logging.getLogger("pacs_pp.benchmarks")

SCORE_COLUMNS = ("score", "ref_score")


@dataclass
class EncodingCounts:
    """How many images and texts the encoders actually ran on (after deduplication); `None` for models that do not
    encode through `encode_images` / `encode_texts` (Polos, Pearl)."""

    images: int | None = 0
    texts: int | None = 0


@contextlib.contextmanager
def count_encodings(model) -> Iterator[EncodingCounts]:
    """Count the inputs of `model.encode_images` / `model.encode_texts` while the block runs."""
    if not all(callable(getattr(model, name, None)) for name in ("encode_images", "encode_texts")):
        yield EncodingCounts(images=None, texts=None)
        return
    counts = EncodingCounts()
    encode_images, encode_texts = model.encode_images, model.encode_texts

    def counting_images(images, *args, **kwargs):
        counts.images += len(images)
        return encode_images(images, *args, **kwargs)

    def counting_texts(captions, *args, **kwargs):
        counts.texts += len(captions)
        return encode_texts(captions, *args, **kwargs)

    model.__dict__["encode_images"], model.__dict__["encode_texts"] = counting_images, counting_texts
    try:
        yield counts
    finally:
        del model.__dict__["encode_images"], model.__dict__["encode_texts"]


def items_fingerprint(items: list[dict]) -> str:
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps([item["id"], item["candidate"], item["references"]]).encode())
    return digest.hexdigest()


def score_image_items(
    model,
    items: list[dict],
    cache_dir: Path | None = None,
    chunk_size: int = 16384,
    image_batch_size: int = 64,
    text_batch_size: int = 256,
    progress: bool | None = None,
    long_captions: str = "truncate",
) -> tuple[dict[str, dict[str, float]], EncodingCounts]:
    """Scores by column (`score`, `ref_score`) and item id, and the encodings run (cached chunks run none).

    `long_captions` is `PACSModel.score`'s: `"chunks"` reads captions past the context in pieces."""
    for name, value in (("chunk_size", chunk_size), ("image_batch_size", image_batch_size)):
        check_positive_int(value, name)
    check_positive_int(text_batch_size, "text_batch_size")
    ordered = sorted(items, key=lambda item: item["image"])  # stable: file order within an image
    job = None
    if cache_dir is not None:
        job = ShardedJob(cache_dir, {"items_sha256": items_fingerprint(ordered)}, shard_size=chunk_size)
    wanted = job.start() if job is not None else lambda chunk: True
    computed = {}
    chunks = [number for number in range(math.ceil(len(ordered) / chunk_size)) if wanted(number)]
    with count_encodings(model) as counts:
        show = progress if progress is not None else len(chunks) > 1
        for number in tqdm(chunks, desc="scoring chunks", unit="chunk", disable=not show):
            first = number * chunk_size
            chunk = ordered[first : first + chunk_size]
            output = model.score(
                [item["image"] for item in chunk],
                [item["candidate"] for item in chunk],
                [item["references"] for item in chunk],
                image_batch_size=image_batch_size,
                text_batch_size=text_batch_size,
                progress=progress,
                **long_captions_keyword(model, long_captions),
            )
            # Polos is reference-based only: its one column is `score` (no `ref_scores`).
            ref_scores = getattr(output, "ref_scores", None)
            rows = [
                {"row": first + offset, "id": item["id"], "score": float(output.scores[offset])}
                | ({} if ref_scores is None else {"ref_score": float(ref_scores[offset])})
                for offset, item in enumerate(chunk)
            ]
            if job is not None:
                job.write_jsonl_shard(number, rows)
            else:
                computed[number] = rows
    if job is not None:  # cached and new chunks together, each item exactly once
        all_rows = job.merged_rows(len(ordered), job.read_jsonl_shard)
    else:
        all_rows = (row for number in sorted(computed) for row in computed[number])
    scores = {column: {} for column in SCORE_COLUMNS}
    for row in all_rows:
        for column in SCORE_COLUMNS:
            if column in row:
                scores[column][row["id"]] = row[column]
    return {column: values for column, values in scores.items() if values}, counts


def score_video_items(
    model, benchmark: Benchmark, batch_size: int = 64, long_captions: str = "truncate"
) -> dict[str, dict[str, float]]:
    """Video benchmarks through `PACSModel.score_videos` (SPEC §2): `score` is Eq. 13, `ref_score` Eq. 14."""
    check_positive_int(batch_size, "batch_size")
    missing = sorted({item["video"] for item in benchmark.items if not Path(item["video"]).is_file()})
    if missing:
        raise FileNotFoundError(f"{len(missing)} videos not found, first: {missing[0]} (expected under videos/)")
    if not hasattr(model, "score_videos"):
        raise RuntimeError(
            f"{benchmark.name} needs PACSModel.score_videos (video scoring), which this installation lacks; "
            "score the items with --dump-items and pass the result with --scores"
        )
    items = benchmark.items
    if benchmark.name == "activitynet_foil":
        if long_captions != "truncate":
            raise ValueError("--long-captions chunks does not apply to activitynet_foil (it scores segment captions)")
        return score_segments(model, items, benchmark.options.get("idf_corpus"), batch_size)
    output = model.score_videos(
        [item["video"] for item in items],
        [item["candidate"] for item in items],
        [item["references"] for item in items],
        num_frames=benchmark.options.get("num_frames"),
        idf=benchmark.options.get("idf_corpus") or True,
        batch_size=batch_size,
        **long_captions_keyword(model, long_captions),
    )
    return {
        "score": {item["id"]: float(value) for item, value in zip(items, output.video_scores)},
        "ref_score": {item["id"]: float(value) for item, value in zip(items, output.scores)},
    }


def score_segments(
    model, items: list[dict], idf_corpus: list[str] | None, batch_size: int
) -> dict[str, dict[str, float]]:
    """ActivityNet-FOIL: every frame of a video encoded once, each sentence scored on its segment's slice."""
    import torch

    from .protocols import segment_frames

    videos = sorted({item["video"] for item in items})
    # Every frame of each video, decoded and encoded once (EMScore's demo slices the whole-video features).
    frames_by_video = dict(zip(videos, model.encode_videos(videos, batch_size=batch_size)))
    segments, empty = [], 0
    for item in items:
        embeds = frames_by_video[item["video"]]
        window = segment_frames(item["segment"], len(embeds), item["duration"])
        segment = embeds[window]
        if len(segment) == 0:  # a segment shorter than one frame: its nearest frame stands in (logged)
            empty += 1
            segment = embeds[min(window.start, len(embeds) - 1)].unsqueeze(0)
        segments.append(torch.as_tensor(segment))
    if empty:
        logger.warning("%d segments are shorter than one frame: each is scored on its nearest frame", empty)
    output = model.score_videos(
        segments,
        [item["candidate"] for item in items],
        [item["references"] for item in items],
        idf=idf_corpus or True,
        batch_size=batch_size,
    )
    return {
        "score": {item["id"]: float(value) for item, value in zip(items, output.video_scores)},
        "ref_score": {item["id"]: float(value) for item, value in zip(items, output.scores)},
    }
