"""`pacs-score` (and `pacs-pp score`): score the captions of a JSON, JSON lines or CSV file, images or videos."""

import argparse
import logging
import os
from pathlib import Path

from ..caption_files import (
    OUTPUT_SUFFIXES,
    attach_references,
    check_input_file,
    format_results,
    read_items,
    rows_named,
)
from ..errors import InputError
from ..jobs import write_text_atomically
from ..logs import setup_command_logging
from ..model_sources import check_model_source, spec_for_model_name
from ..output_paths import check_output_file
from ..registry import DEFAULT_MODEL, PRETRAINED_MODELS, TINY_ALIASES
from ..results import score_items, summary_counts
from .arguments import (
    add_device_arguments,
    add_example,
    add_long_captions_argument,
    add_raw_csv_argument,
    add_scoring_mode_argument,
    long_captions_options,
    positive_int,
    report_truncation,
)
from .errors import reports_errors
from .video import VIDEO_EPILOG, add_video_arguments, is_video_run, run_video_score

logger = logging.getLogger("pacs_pp")

SCORE_EPILOG = f"""
input formats:
  JSON   {{"images/cat.jpg": "a cat on a sofa", "images/dog.jpg": ["a dog", "a brown dog running"]}}
  JSONL  one object per line: {{"image": "cat.jpg", "caption": "a cat", "references": ["a cat on a couch"]}}
  CSV    columns image, caption and optionally references (a JSON list, e.g. ["ref one", "ref two"])
Relative image paths are resolved against --image-root (default: the input file's folder).
--references FILE is a JSON {{image_path: [reference, ...]}} applied to every caption of that image.

models: a local directory, a Hub id, or an alias: {", ".join(sorted(PRETRAINED_MODELS))};
for an offline smoke run, a tiny model (random weights, meaningless scores): {", ".join(TINY_ALIASES)}.
The columns are the model's scores, named as its metric names them (e.g. PAC-S++ and RefPAC-S++).

variants:
  pacs-score captions.json --output scores.json
  pacs-score captions.jsonl --model clip_s_vit_b32 --output scores.csv
  pacs-score captions.json --references refs.json --device cuda --dtype fp16
"""
SCORE_EPILOG += VIDEO_EPILOG


def quiet_libraries(verbose: bool):
    """One form for the command's messages (`warning: ...` on stderr) and the libraries' developer notes
    (deprecations, loading reports, loading bars) off a user's terminal unless `--verbose` (`modeling_pacs.logs`)."""
    import warnings

    setup_command_logging(verbose, level=logging.WARNING)
    # The command prints its own count of truncated captions (`report_truncation`).
    warnings.filterwarnings("ignore", message=r"some .* are longer than the text encoder")


# ---------------------------------------------------------------------------------------------------- commands
def build_score_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    if parser is None:
        parser = argparse.ArgumentParser(
            prog="pacs-score",
            description="Score image captions with PAC-S++ (reference-free) and RefPAC-S++ (with references); "
            "also CLIP-S and PAC-S.",
            epilog=SCORE_EPILOG,
        )
        add_example(parser, "pacs-score captions.json --model tiny --output scores.json")
    parser.add_argument("input", type=Path, help="captions file: .json mapping, .jsonl or .csv (see below)")
    parser.add_argument(
        "--model",
        default=os.environ.get("PACS_MODEL", DEFAULT_MODEL),
        help=f"alias, Hub id or local directory (default: {DEFAULT_MODEL}, or $PACS_MODEL)",
    )
    parser.add_argument("--references", type=Path, help="JSON {image_path: [references]} for RefPAC-S++")
    parser.add_argument("--image-root", type=Path, help="folder for relative image paths (default: input's folder)")
    parser.add_argument(
        "--output", "-o", type=Path, help="write per-item scores and means (.json, .jsonl or .csv; not an input)"
    )
    add_raw_csv_argument(parser)
    parser.add_argument("--batch-size", type=positive_int, default=64, help="images per encoder batch (texts: 4x)")
    add_device_arguments(parser)
    add_long_captions_argument(parser)
    add_scoring_mode_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--verbose", action="store_true", help="also show the libraries' own logs, warnings and loading bars"
    )
    add_video_arguments(parser)
    return parser


def run_score(args: argparse.Namespace) -> dict:
    quiet_libraries(args.verbose)
    image_root = args.image_root or args.input.parent
    check_input_file(args.input)
    if args.output:
        check_output_file(args.output, inputs=[args.input, args.references], suffixes=OUTPUT_SUFFIXES)
    items = read_items(args.input, image_root)
    if args.references:
        attach_references(items, args.references, image_root)
    # The references policy (results.score_items): given for some items only, the others get empty cells, counted.
    references = None
    if args.references or any("references" in item for item in items):
        references = [item.get("references") or [] for item in items]

    with rows_named(args.input):  # "item 3" of the messages below and of the core's is row 3 of the input file
        videos = is_video_run(args, items)
        if videos and references is not None and not all(references):
            missing = references.index([])
            raise InputError(
                f"item {missing} ('{items[missing]['image']}') has no references: a video run scores every item with "
                "references or none (the video metric's IDF weights come from all the references of one run), so "
                "score the videos with and without references in separate runs"
            )
    check_model_source(args.model)  # a mistyped or unreachable model is refused before anything loads
    spec = spec_for_model_name(args.model)  # the metric's capabilities, from the registry: nothing loads
    if spec is not None and spec.capabilities.needs_references and not any(references or []):
        raise InputError(
            f"{spec.display_name} scores a caption against references, and none of the {len(items)} items has any: "
            f"give --references FILE (JSON {{image_path: [references]}}), or references in {args.input}"
        )
    if args.mode is not None and spec is not None:  # refused before the model loads
        from ..loading import check_scoring_mode

        try:
            check_scoring_mode(spec, args.mode)
        except ValueError as error:
            raise type(error)(f"--mode: {error}") from None
    if videos and spec is not None:  # a metric of images only is refused before the model loads
        from ..loading import check_media

        check_media(spec, "video")
    from ..loading import load_model  # torch and transformers load here, once the input is known to be good

    model = load_model(args.model, device=args.device, dtype=None if args.dtype == "fp32" else args.dtype)
    with rows_named(args.input):
        if videos:
            return run_video_score(args, items, model, references is not None)
        scored = score_items(
            model,
            [item["image_path"] for item in items],
            [item["caption"] for item in items],
            references,
            **long_captions_options(
                model,
                args.long_captions,
                args.mode,
                image_batch_size=args.batch_size,
                text_batch_size=4 * args.batch_size,
                progress=False if args.no_progress else None,
            ),
        )
    names, means = [], {}
    for column in scored.columns:
        names.append(column.label)
        if column.is_score:
            means[column.label] = column.mean
        for item, value in zip(items, column.values, strict=True):
            item[column.label] = value
    report_truncation(items, scored.truncation, fix=getattr(model, "truncation_fix", None))
    if args.output:
        suffix = args.output.suffix.lower()
        without = None if references is None else len(scored.without_references)
        w = getattr(model.config, "w", None)
        text = format_results(items, names, means, args.model, w, suffix, without, raw_csv=args.raw_csv)
        write_text_atomically(args.output, [text])
    summary = ", ".join(f"{name} {value:.4f}" for name, value in means.items() if value is not None)
    weight = f" (w={model.config.w})" if getattr(model.config, "w", None) is not None else ""
    print(f"{len(items)} captions scored with {args.model}{weight}: mean {summary}{summary_counts(scored.columns)}")
    if scored.note():
        print(f"{scored.note()} (means over the items that have them)")
    if args.output:
        print(f"per-item scores written to {args.output}")
    return means


def score_main(argv: list[str] | None = None):
    """`pacs-score`: score captions from a JSON/JSONL/CSV file."""
    args = build_score_parser().parse_args(argv)
    with reports_errors("pacs-score", OSError, ValueError, TypeError):
        run_score(args)
