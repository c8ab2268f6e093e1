"""Scoring benchmark items with a model: one engine call per chunk, images deduplicated across the benchmark, and
per-chunk scores cached by the project's job engine (`modeling_pacs.jobs.ShardedJob`: atomic shard files, a manifest
that refuses other items or another chunk size, every item exactly once) so an interrupted run resumes where it
stopped.

Items are ordered by image before chunking, so an image is encoded once per chunk it appears in (once overall unless
a chunk boundary splits its items). A scoring mode whose numbers depend on which items share a batch (`"official"`:
the authors' chunks of DENEB and Polos) keeps the benchmark's item order instead, as the authors' validation scripts
read it, in cache chunks that hold whole official chunks.
"""

import contextlib
import hashlib
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from ..jobs import ShardedJob
from ..loading import check_media, long_captions_keyword, score_options, scoring_mode_keyword
from ..models.inputs import check_positive_int
from ..registry import spec_of
from ..results import item_rows, result_columns, score_columns
from .benchmark import Benchmark

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("pacs_pp.benchmarks")

SCORE_COLUMNS = ("score", "ref_score")
# Scoring modes whose scores depend on which items share a batch: items keep the benchmark's order.
ORDER_DEPENDENT_MODES = ("official",)


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
    scoring_mode: str | None = None,
) -> tuple[dict[str, dict[str, float]], EncodingCounts]:
    """Scores by column (`score`, `ref_score`) and item id, and the encodings run (cached chunks run none).

    `long_captions` is `PACSModel.score`'s: `"chunks"` reads captions past the context in pieces. `scoring_mode` is
    the `mode` of a metric with scoring modes (None: the model's default; a metric without modes refuses one)."""
    for name, value in (("chunk_size", chunk_size), ("image_batch_size", image_batch_size)):
        check_positive_int(value, name)
    check_positive_int(text_batch_size, "text_batch_size")
    options = score_options(
        model,
        long_captions,
        scoring_mode,
        image_batch_size=image_batch_size,
        text_batch_size=text_batch_size,
        progress=progress,
    )
    if (scoring_mode or getattr(model.config, "mode", None)) in ORDER_DEPENDENT_MODES:
        official_chunk = model.config.official_batch_size
        if chunk_size % official_chunk:
            raise ValueError(
                f"--chunk-size {chunk_size} is not a multiple of the model's official chunk ({official_chunk} items): "
                "the official mode's chunks would be cut at the cache's chunk boundaries; pass a multiple of it"
            )
        ordered = list(items)  # the benchmark's order: the authors' chunks
    else:
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
                **options,
            )
            # the score columns by key (`score`, and `ref_score` where the metric has a reference-free score too)
            values = item_rows(score_columns(result_columns(model, output)), by="key")
            # a judge's answer that gave no score (NaN) is null in JSON, NaN again when read back
            rows = [
                {"row": first + offset, "id": item["id"]}
                | {
                    key: None if isinstance(value, float) and math.isnan(value) else value
                    for key, value in item_values.items()
                }
                for offset, (item, item_values) in enumerate(zip(chunk, values, strict=True))
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
                scores[column][row["id"]] = math.nan if row[column] is None else row[column]
    if job is not None:
        job.remove_temporaries()  # left by a process killed mid-write; every writer has finished by now
    return {column: values for column, values in scores.items() if values}, counts


# EMScore's releases: one folder of `<video_id>.pt` per benchmark (`VATEX-EVAL-demo.py`, `ActivityNet-FOIL_demo.py`)
FEATURE_FOLDERS = {"vatex_eval": "VATEX-EVAL_video_feats", "activitynet_foil": "ActivityNet-FOIL_video_feats"}
FEATURES_PROTOCOL = (
    "EMScore's released CLIP ViT-B/32 per-frame features (<video_id>.pt, L2-normalised rows of every decoded "
    "frame), read with torch.load(weights_only=True); VATEX-EVAL samples 10 of them (np.linspace), ActivityNet-FOIL "
    "slices each segment from all of them, as EMScore's evaluation scripts do"
)


def feature_folder(directory: Path, benchmark_name: str) -> Path:
    """`--video-features DIR`: DIR itself, or its release sub-folder (`VATEX-EVAL_video_feats/`, ...) if present."""
    nested = directory / FEATURE_FOLDERS[benchmark_name]
    return nested if nested.is_dir() else directory


def check_feature_model(model, model_name: str):
    """EMScore's features are OpenAI CLIP ViT-B/32 image embeddings: only a CLIP-S model's own frame embeddings."""
    variant = getattr(getattr(model, "config", None), "variant", None)
    if variant != "clip_s":
        title = {"pac_s_pp": "PAC-S++", "pac_s": "PAC-S"}.get(variant, type(model).__name__)
        raise ValueError(
            f"--video-features cannot score '{model_name}' ({title}): PAC-S++ (and PAC-S) needs the raw videos, since "
            "its vision tower is fine-tuned and EMScore's released CLIP ViT-B/32 features are not its frame "
            "embeddings. Put the videos in <data-dir>/videos/<video_id>.mp4 and leave out --video-features; the "
            "features give the CLIP-S / EMScore rows only (--model clip_s_vit_b32)"
        )


def load_video_features(folder: Path, video_ids: list[str], dim: int) -> dict[str, "torch.Tensor"]:
    """`<folder>/<video_id>.pt` for each id: one `[n_frames, dim]` tensor, loaded with `weights_only=True`, checked
    and cast to fp32 (EMScore saved fp32; fp16 copies are accepted)."""
    import torch

    missing = [video_id for video_id in video_ids if not (folder / f"{video_id}.pt").is_file()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of {len(video_ids)} video feature files not found, first: {folder / missing[0]}.pt "
            "(EMScore's release: one <video_id>.pt per video in VATEX-EVAL_video_feats/ or "
            "ActivityNet-FOIL_video_feats/)"
        )
    features = {}
    for video_id in video_ids:
        path = folder / f"{video_id}.pt"
        try:
            tensor = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises several types for a file that is not a plain tensor
            raise ValueError(f"{path}: not a tensor file torch.load(weights_only=True) can read ({error})") from error
        expected = f"one [n_frames, {dim}] tensor of per-frame CLIP ViT-B/32 features (EMScore's release format)"
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            raise ValueError(f"{path}: holds a {type(tensor).__name__}, expected {expected}")
        if tensor.ndim != 2 or tensor.shape[0] < 1 or tensor.shape[1] != dim:
            raise ValueError(f"{path}: shape {tuple(tensor.shape)}, expected {expected}")
        if not torch.isfinite(tensor).all():
            raise ValueError(f"{path}: holds NaN or infinite values, expected {expected}")
        features[video_id] = tensor.float()
    return features


def score_video_items(
    model,
    benchmark: Benchmark,
    batch_size: int = 64,
    video_features: Path | None = None,
    model_name: str = "the model",
    long_captions: str = "truncate",
    scoring_mode: str | None = None,
) -> dict[str, dict[str, float]]:
    """Video benchmarks through `PACSModel.score_videos` (docs/spec/pacs.md#video): `score` is Eq. 13, `ref_score`
    Eq. 14. With `video_features` (a folder of EMScore's released `<video_id>.pt`), the frame embeddings come from
    those files instead of the videos (CLIP-S only). `long_captions`, `scoring_mode`: as for `score_image_items` (a
    metric that scores images only is refused, naming the video metrics)."""
    check_positive_int(batch_size, "batch_size")
    check_media(spec_of(model), "video")
    mode_option = scoring_mode_keyword(model, scoring_mode)  # a video metric with scoring modes would take it
    if not hasattr(model, "score_videos"):
        raise RuntimeError(
            f"{benchmark.name} needs PACSModel.score_videos (video scoring), which this installation lacks; "
            "score the items with --dump-items and pass the result with --scores"
        )
    items = benchmark.items
    features = None
    if video_features is not None:
        from ..models.backbones import embedding_dim

        check_feature_model(model, model_name)
        video_ids = sorted({item["video_id"] for item in items})
        folder = feature_folder(video_features, benchmark.name)
        features = load_video_features(folder, video_ids, embedding_dim(model.config.backbone_config))
    else:
        missing = sorted({item["video"] for item in items if not Path(item["video"]).is_file()})
        if missing:
            raise FileNotFoundError(
                f"{len(missing)} videos not found, first: {missing[0]} (expected under videos/; or pass EMScore's "
                "released features with --video-features for the CLIP-S rows)"
            )
    if benchmark.name == "activitynet_foil":
        if long_captions != "truncate":
            raise ValueError("--long-captions chunks does not apply to activitynet_foil (it scores segment captions)")
        return score_segments(model, items, benchmark.options.get("idf_corpus"), batch_size, features)
    output = model.score_videos(
        [item["video"] if features is None else features[item["video_id"]] for item in items],
        [item["candidate"] for item in items],
        [item["references"] for item in items],
        num_frames=benchmark.options.get("num_frames"),
        idf=benchmark.options.get("idf_corpus") or True,
        batch_size=batch_size,
        **long_captions_keyword(model, long_captions),
        **mode_option,
    )
    return {
        "score": {item["id"]: float(value) for item, value in zip(items, output.video_scores)},
        "ref_score": {item["id"]: float(value) for item, value in zip(items, output.scores)},
    }


def score_segments(
    model,
    items: list[dict],
    idf_corpus: list[str] | None,
    batch_size: int,
    features: dict[str, "torch.Tensor"] | None = None,
) -> dict[str, dict[str, float]]:
    """ActivityNet-FOIL: every frame of a video encoded once (or its released features, by video id), each sentence
    scored on its segment's slice."""
    import torch

    from .protocols import segment_frames

    if features is None:
        videos = sorted({item["video"] for item in items})
        # Every frame of each video, decoded and encoded once (EMScore's demo slices the whole-video features).
        frames_by_video = dict(zip(videos, model.encode_videos(videos, batch_size=batch_size)))
    segments, empty = [], 0
    for item in items:
        embeds = frames_by_video[item["video"]] if features is None else features[item["video_id"]]
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
