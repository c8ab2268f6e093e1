"""`pacs-score` on videos: the EMScore-style video metric (docs/spec/pacs.md#video) for items whose media are videos.

Items are videos when `--video` is given or every media path has a video extension (mp4, webm, mkv, avi, mov, ...);
`--video` also accepts folders of frame images. The scores come from `PACSModel.score_videos`.
"""

import argparse
import json
from pathlib import Path

from ..caption_files import format_results
from ..errors import InputError
from ..jobs import write_text_atomically
from ..models.media import VIDEO_EXTENSIONS
from .arguments import long_captions_options, positive_int, report_truncation

VIDEO_EPILOG = """
videos:
  Items whose "image" (or "video") is a video file (mp4, webm, mkv, avi, mov, ...) are scored with the video metric
  (EMScore-style, docs/spec/pacs.md#video): per caption P, R, F and coarse against the frames, and against references if
  given.
  --video treats every item as a video (also folders of frame images).
  pacs-score videos.jsonl --num-frames 10 --idf vatex_train_captions.txt --output video_scores.json
"""


def add_video_arguments(parser: argparse.ArgumentParser):
    """The video options of `pacs-score`."""
    parser.add_argument("--video", action="store_true", help="score every item as a video (files or frame folders)")
    parser.add_argument(
        "--num-frames",
        type=positive_int,
        help="videos: sample K frames with np.linspace(0, n-1, K) (VATEX-EVAL: 10; default: every frame)",
    )
    parser.add_argument(
        "--idf",
        default="on",
        help="videos: 'on' (EMScore's corpus: the references, or the captions), 'off' (uniform weights), or FILE "
        "(the IDF corpus: one caption per line, or a JSON list of captions)",
    )


def is_video_run(args: argparse.Namespace, items: list[dict]) -> bool:
    """Videos with `--video`, or when every item's media path has a video extension (a mix is an error)."""
    if args.video:
        return True
    is_video = [str(item["image_path"]).lower().endswith(VIDEO_EXTENSIONS) for item in items]
    if any(is_video) and not all(is_video):
        first_image = is_video.index(False)
        raise InputError(
            f"item {first_image} ('{items[first_image]['image']}') is not a video while "
            f"'{items[is_video.index(True)]['image']}' is: score images and videos in separate runs"
        )
    video = bool(items) and all(is_video)
    if not video and (args.num_frames is not None or args.idf != "on"):
        raise InputError("--num-frames and --idf apply to videos only: these items are images (or pass --video)")
    return video


def read_idf_option(value: str) -> bool | list[str]:
    """`on` / `off` / a corpus file (one caption per line, or a JSON list of strings)."""
    if value in ("on", "off"):
        return value == "on"
    path = Path(value)
    if not path.is_file():
        raise InputError(f"--idf must be 'on', 'off' or an existing corpus file; '{value}' is none of these")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        corpus = json.loads(text)
        if not isinstance(corpus, list) or not all(isinstance(caption, str) for caption in corpus):
            raise InputError(f"--idf {path}: a JSON corpus must be a list of caption strings")
        return corpus
    return [line for line in text.splitlines() if line.strip()]


def run_video_score(args: argparse.Namespace, items: list[dict], model, with_references: bool) -> dict:
    """Score items as videos, write the output file (as `pacs-score` does for images) and print the means."""
    from ..loading import check_media
    from ..registry import spec_of

    check_media(spec_of(model), "video")  # a Hub id's metric is known once loaded
    names, means = score_video_items(model, items, args, with_references)
    if args.output:
        suffix = args.output.suffix.lower()
        text = format_results(
            items, names, means, args.model, model.config.w, suffix, media="video", raw_csv=args.raw_csv
        )
        write_text_atomically(args.output, [text])
    summary = ", ".join(f"{name} {value:.4f}" for name, value in means.items())
    print(f"{len(items)} video captions scored with {args.model}: mean {summary}")
    if args.output:
        print(f"per-item scores written to {args.output}")
    return means


def score_video_items(model, items: list[dict], args: argparse.Namespace, with_references: bool):
    """Score items as videos; add the per-item columns to `items` and return (column names, corpus means)."""
    idf = read_idf_option(args.idf)
    output = model.score_videos(
        [item["image_path"] for item in items],
        [item["caption"] for item in items],
        references=[item["references"] for item in items] if with_references else None,
        num_frames=args.num_frames,
        idf=idf,
        batch_size=args.batch_size,
        text_batch_size=4 * args.batch_size,
        progress=False if args.no_progress else None,
        **long_captions_options(model, args.long_captions),
    )
    free_name, ref_name = model.config.score_names
    columns = {
        f"{free_name} video": output.video_scores,
        "video_P": output.video_precision,
        "video_R": output.video_recall,
        "video_F": output.video_f,
        "video_coarse": output.video_coarse,
    }
    if with_references:
        columns.update(
            {
                f"{ref_name} video": output.scores,
                "reference_P": output.reference_precision,
                "reference_R": output.reference_recall,
                "reference_F": output.reference_f,
                "reference_coarse": output.reference_coarse,
            }
        )
    means = {}
    for name, values in columns.items():
        for item, value in zip(items, values.tolist(), strict=True):
            item[name] = value
        means[name] = float(values.mean())
    report_truncation(items, output, "video captions")
    return [*columns, "truncated_tokens"], means


__all__ = ["VIDEO_EPILOG", "add_video_arguments", "is_video_run", "run_video_score", "score_video_items"]
