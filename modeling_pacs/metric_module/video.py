"""Videos in the `evaluate` module (`compute(predictions=..., videos=..., num_frames=..., idf=...)`).

The module stores each video like an image (a path string in the Arrow column, or an in-memory placeholder) and, for
a video run, calls `PACSModel.score_videos` here.
"""

from ..loading import check_media, scoring_mode_keyword
from ..models.inputs import check_media_list
from ..models.video import check_num_frames, check_video
from ..registry import spec_of


def check_video_batch(images, videos, previous_kind: str | None, start: int) -> tuple[list, str]:
    """The media of one `add_batch` call and their kind ("images" or "videos"); one kind per computation."""
    if images is not None and videos is not None:
        raise ValueError("pass images= or videos=, not both: score images and videos in separate computations")
    kind = "videos" if videos is not None else "images"
    if previous_kind is not None and kind != previous_kind:
        raise ValueError(
            f"this computation already holds {previous_kind}; got {kind}: score images and videos in separate "
            "computations"
        )
    if videos is None:
        return images, kind
    videos = check_media_list(videos, "video", item_ndim=4)  # a single video is refused, as in `score_videos`
    for offset, video in enumerate(videos):
        check_video(video, start + offset)
    return videos, kind


def compute_video_results(engine, predictions, videos, references, with_references, options, settings) -> dict:
    """`score_videos` on the gathered inputs; the results of an `evaluate` video computation.

    `options` are the compute-time keywords (`num_frames`, `idf`); `settings` the module's batch sizes and progress.
    """
    check_media(spec_of(engine), "video")  # a metric of images only is named, with the metrics that score videos
    mode_option = scoring_mode_keyword(engine, options.get("mode"))  # refused by a video metric without modes
    unknown = sorted(set(options) - {"num_frames", "idf", "mode"})
    if unknown:
        raise ValueError(f"unexpected options {unknown} for videos: pass num_frames= and/or idf=")
    output = engine.score_videos(
        videos,
        predictions,
        references=references if with_references else None,
        num_frames=check_num_frames(options.get("num_frames")),
        idf=options.get("idf", True),
        batch_size=settings["batch_size"],
        text_batch_size=settings["text_batch_size"],
        progress=settings["progress"],
        **({"long_captions": settings["long_captions"]} if "long_captions" in settings else {}),
        **mode_option,
    )
    free_name, ref_name = engine.config.score_names
    results = {
        "metric": f"{free_name} (video)",
        "score": output.mean_video_score,
        "scores": output.video_scores.tolist(),
        "precision": output.video_precision.tolist(),
        "recall": output.video_recall.tolist(),
        "f": output.video_f.tolist(),
        "coarse": output.video_coarse.tolist(),
    }
    if with_references:
        results.update(
            ref_metric=f"{ref_name} (video)",
            ref_score=output.mean_score,
            ref_scores=output.scores.tolist(),
            reference_precision=output.reference_precision.tolist(),
            reference_recall=output.reference_recall.tolist(),
            reference_f=output.reference_f.tolist(),
            reference_coarse=output.reference_coarse.tolist(),
        )
    results["truncated_tokens"] = output.truncated_tokens.tolist()
    results["num_truncated"] = int((output.truncated_tokens > 0).sum())
    return results


__all__ = ["check_video_batch", "compute_video_results"]
