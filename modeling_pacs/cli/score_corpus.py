"""Score a large caption corpus with PAC-S++ (or CLIP-S / PAC-S): sharded, streaming, resumable.

Rows are read as a stream (memory does not grow with the corpus) and cut into shards of `--shard-size` consecutive
rows; shard k belongs to process `k % num_processes`. Each finished shard is written atomically to
`OUTPUT_DIR/shards/shard-KKKKKKK.jsonl`; a rerun skips the shards already there, so an interrupted run resumes
without rescoring or losing anything. When every shard is done, the main process merges them, in row order, into
`OUTPUT_DIR/scores.jsonl` (one `{"row": i, "PAC-S++": ...}` per row) and `OUTPUT_DIR/summary.json` (corpus means).
`OUTPUT_DIR/manifest.json` pins what the shards were computed from (the input's content, the image root, the model
and the options): a rerun with an edited input, another --image-root or another model is refused with a message
naming what changed. The machinery is `modeling_pacs.jobs.ShardedJob`.

Inputs: `.jsonl`, `.csv` (references as a JSON list), `.parquet`, a `datasets` folder (`save_to_disk`), or a
`datasets` name/folder for `load_dataset` (streamed, with `--split`).

Progress (main process): on a terminal, a bar with rows done / total, rows/s and ETA over the whole corpus; when
stderr is a log, a line at most every 5 s with the same figures; `--no-progress` turns it off.

Variants:
    accelerate launch --num-processes 4 scripts/score_corpus.py captions.parquet --output-dir scores/ --dtype fp16
    accelerate launch --multi-gpu --num-processes 2 scripts/score_corpus.py captions.csv --output-dir out/ --cpu
    torchrun --nproc_per_node 2 scripts/score_corpus.py captions.csv --output-dir scores/ --cpu
(`accelerate launch --cpu` alone starts ONE process; several CPU processes need --multi_gpu or torchrun, plus --cpu.)
"""

import argparse
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from modeling_pacs.caption_files import check_input_file, check_utf8, resolve_image
from modeling_pacs.cli.arguments import (
    add_long_captions_argument,
    add_scoring_mode_argument,
    add_verbose_argument,
    long_captions_options,
)
from modeling_pacs.corpus_scoring import (
    csv_rows,
    dataset_blocks,
    jsonl_blocks,
    jsonl_row_count,
    list_blocks,
    merge_shards,
    name_item_row,
    name_row,
    parquet_blocks,
    parquet_row_count,
    parse_references,
    undecoded_images,
)
from modeling_pacs.errors import InputError, PacsError
from modeling_pacs.jobs import (
    JobProgress,
    RowBlock,
    ShardedJob,
    ShardReader,
    launch_state,
    path_fingerprint,
)
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.output_paths import check_output_directory
from modeling_pacs.registry import DEFAULT_MODEL, PRETRAINED_MODELS, spec_of
from modeling_pacs.results import count_totals_note, item_rows, references_note, score_items, score_labels

from .arguments import add_example
from .errors import reports_errors

logger = logging.getLogger("pacs_pp.score_corpus")


def open_corpus(args: argparse.Namespace, count: bool) -> tuple[Iterator[RowBlock], int | None]:
    """The input as a stream of row blocks, whatever its format, and its number of rows when `count` is set and it
    can be known (a streamed dataset's is not: None)."""
    source = args.input
    columns = [args.image_column, args.caption_column, *filter(None, [args.references_column]), *args.keep_columns]
    suffix = source.suffix.lower()
    if source.is_file() and suffix == ".jsonl":
        return jsonl_blocks(source), jsonl_row_count(source) if count else None
    if source.is_file() and suffix == ".csv":
        return list_blocks(csv_rows(source)), sum(1 for _ in csv_rows(source)) if count else None
    if source.is_file() and suffix == ".parquet":
        return parquet_blocks(source, columns), parquet_row_count(source)
    if source.is_file():
        raise InputError(f"{source}: unsupported input format '{suffix}' (use .jsonl, .csv, .parquet or a dataset)")
    import datasets

    from modeling_pacs.data import is_saved_dataset  # torch: imported once a corpus is read, not for --help

    if is_saved_dataset(source):
        dataset = datasets.load_from_disk(str(source))
        if isinstance(dataset, datasets.DatasetDict):
            if args.split not in dataset:
                raise InputError(f"{source}: no split '{args.split}' (splits: {sorted(dataset)}); pass --split")
            dataset = dataset[args.split]
        return dataset_blocks(undecoded_images(dataset, args.image_column)), len(dataset)
    streamed = datasets.load_dataset(str(source), split=args.split, streaming=True)
    return list_blocks(iter(undecoded_images(streamed, args.image_column))), None


def check_corpus_file(source: Path) -> None:
    """Refuse a corpus file that is missing, a directory, or (JSON lines, CSV) not UTF-8, before the job's manifest
    pins it: the corrected file then starts the job afresh instead of being refused as another run's input."""
    suffix = source.suffix.lower()
    if suffix in (".jsonl", ".csv", ".parquet"):
        check_input_file(source)
    if suffix in (".jsonl", ".csv"):
        check_utf8(source)


# ---------------------------------------------------------------------------------------------------- scoring
def score_shard(model, shard: int, rows: list[dict], args: argparse.Namespace, image_root: Path) -> list[dict]:
    """Per-row results of one shard: `{"row", <score name>, [<ref score name>], kept columns}`."""
    first_row = shard * args.shard_size
    images, captions, references = [], [], []
    needed = [args.image_column, args.caption_column, *filter(None, [args.references_column])]
    for offset, row in enumerate(rows):
        if not isinstance(row, dict):  # a JSON line that is a string, a list, a number
            raise InputError(
                f"{name_row(args.input, first_row + offset)} is {json.dumps(row)[:80]}, not an object: each row is "
                f'{{"{args.image_column}": ..., "{args.caption_column}": ...}}'
            )
        missing = [column for column in needed if row.get(column) is None]
        if missing:
            raise InputError(
                f"{name_row(args.input, first_row + offset)} lacks {missing} (columns: {sorted(row)}); set "
                "--image-column, --caption-column or --references-column"
            )
        absent = [column for column in args.keep_columns if column not in row]
        if absent:
            raise InputError(
                f"--keep-columns names {absent}, which {name_row(args.input, first_row + offset)} does not have "
                f"(columns: {sorted(row)}): check the spelling"
            )
        images.append(resolve_image(row[args.image_column], image_root))
        captions.append(row[args.caption_column])
        if args.references_column:
            references.append(parse_references(row[args.references_column], first_row + offset, args.input))
    try:
        scored = score_items(
            model,
            images,
            captions,
            references if args.references_column else None,
            **long_captions_options(
                model,
                args.long_captions,
                args.mode,
                image_batch_size=args.batch_size,
                text_batch_size=4 * args.batch_size,
                progress=False,
            ),
        )
    except PacsError:
        raise  # about the options, not the rows (--long-captions, --mode)
    except (OSError, ValueError, TypeError) as error:
        where = f"shard {shard} (rows {first_row}-{first_row + len(rows) - 1})"  # an error about no one row
        message = name_item_row(str(error), args.input, first_row) or f"{where}: {error}"
        raise InputError(
            f"{message}. Finished shards are kept: fix the input and rerun the same command to resume"
        ) from None
    results = []
    for offset, (row, values) in enumerate(zip(rows, item_rows(scored.columns), strict=True)):
        result = {"row": first_row + offset} | values  # NaN (a judge's unparsable answer): the shard keeps it
        result.update({column: row.get(column) for column in args.keep_columns})
        results.append(result)
    return results


# ---------------------------------------------------------------------------------------------------- writing
def run_manifest(args: argparse.Namespace, image_root: Path) -> dict:
    """What the shard files depend on (issue 10, defect 6): a resumed run must have equal values, or it is refused.

    The input is pinned by its content (sha256 of a file; of the file listing, sizes and times of a dataset folder),
    the model by its name and, for a local folder, its files; the image root and every option that changes a score.
    """
    return {
        "input": str(args.input.resolve()) if args.input.exists() else str(args.input),
        "input_content": path_fingerprint(args.input),
        "split": args.split,
        "image_root": str(image_root.resolve()),
        "model": str(Path(args.model).resolve()) if Path(args.model).exists() else args.model,
        "model_content": path_fingerprint(args.model),
        "dtype": args.dtype,
        "image_column": args.image_column,
        "caption_column": args.caption_column,
        "references_column": args.references_column,
        "keep_columns": args.keep_columns,
        # Only a non-default mode is pinned, so runs started before the option existed still resume.
        **({"long_captions": args.long_captions} if args.long_captions != "truncate" else {}),
        **({"mode": args.mode} if args.mode is not None else {}),
    }


def rows_done_before(job: ShardedJob, total: int | None) -> int:
    """Rows of the shards finished by an earlier run (a resumed job starts its progress there)."""
    finished = job.finished_shards()
    if total is None:
        return len(finished) * job.shard_size
    return sum(len(job.shard_rows(shard, total)) for shard in finished)


# ---------------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", type=Path, help=".jsonl / .csv / .parquet file, or a datasets folder or name")
    parser.add_argument("--output-dir", type=Path, required=True, help="shards, scores.jsonl and summary.json")
    parser.add_argument(
        "--model",
        default=os.environ.get("PACS_MODEL", DEFAULT_MODEL),
        help=f"alias ({', '.join(sorted(PRETRAINED_MODELS))}), Hub id, local directory, or 'tiny'",
    )
    parser.add_argument("--image-column", default="image")
    parser.add_argument("--caption-column", default="caption")
    parser.add_argument(
        "--references-column",
        help="column with a list of references: also compute RefPAC-S++ (a row with none gets null reference scores)",
    )
    parser.add_argument("--keep-columns", nargs="*", default=[], help="input columns copied into the output rows")
    parser.add_argument("--image-root", type=Path, help="folder for relative image paths (default: input's folder)")
    parser.add_argument("--split", default="train", help="split of a datasets input")
    parser.add_argument("--shard-size", type=int, default=2048, help="rows per shard (the unit of resumption)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per encoder batch (texts: 4x)")
    parser.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    parser.add_argument("--cpu", action="store_true", help="score on CPU; CPU processes join through gloo")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress (default: a bar with rows/s and ETA on a terminal; in logs, a line every few seconds)",
    )
    add_long_captions_argument(parser)
    add_scoring_mode_argument(parser)
    add_verbose_argument(parser)
    add_example(parser, "python scripts/score_corpus.py captions.jsonl --output-dir scores/")
    return parser


def main(argv: list[str] | None = None) -> dict | None:
    """Score this process's shards, then (main process) merge everything. Returns the summary on the main process."""
    args = build_parser().parse_args(argv)
    setup_command_logging(args.verbose)
    with reports_errors("score_corpus"):  # CorpusError, JobStateError, ...
        return run(args)


def run(args: argparse.Namespace) -> dict | None:
    # The run reports the number of truncated captions once, at the end, instead of a warning per shard.
    warnings.filterwarnings("ignore", message=r"some .* are longer than the text encoder")
    if args.shard_size < 1:
        raise InputError("--shard-size must be at least 1")
    if args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {args.batch_size}")
    check_corpus_file(args.input)
    state = launch_state(args.cpu)
    image_root = args.image_root or (args.input.parent if args.input.is_file() else args.input)
    try:  # a resumable folder of this command's own: existing content is fine, the place rules still hold
        check_output_directory(args.output_dir, inputs=[args.input], allow_existing=True)
    except ValueError as error:
        raise InputError(f"--output-dir: {error}") from None
    job = ShardedJob(
        args.output_dir,
        run_manifest(args, image_root),
        shard_size=args.shard_size,
        process_index=state.process_index,
        num_processes=state.num_processes,
        barrier=state.wait_for_everyone,
    )
    wanted = job.start()
    from modeling_pacs.loading import load_model
    from modeling_pacs.models.inputs import TRUNCATION_FIX

    model = load_model(args.model, device=str(state.device), dtype=None if args.dtype == "fp32" else args.dtype)
    show_progress = state.is_main_process and not args.no_progress
    blocks, total = open_corpus(args, count=show_progress)
    progress = JobProgress(total, rows_done_before(job, total), enabled=show_progress)
    reader = ShardReader(blocks, args.shard_size, wanted)
    for shard, rows in reader:
        job.write_jsonl_shard(shard, score_shard(model, shard, rows, args, image_root))
        logger.info("process %d: shard %d (%d rows) done", state.process_index, shard, len(rows))
        # The other processes score their own shards meanwhile: the main process counts them at its own pace.
        progress.update(len(rows) * state.num_processes)
    progress.close()
    state.wait_for_everyone()
    if not state.is_main_process:
        return None
    counted = [field for field in spec_of(model).outputs if field.summary]
    summary = merge_shards(
        job, reader.num_rows, args.model, score_labels(model), bool(args.references_column),
        counted=tuple(field.label_for(model.config) for field in counted),
    )  # fmt: skip
    means = ", ".join(f"{name} {value:.4f}" for name, value in summary["mean"].items())
    totals = count_totals_note({field: summary["totals"][field.label_for(model.config)] for field in counted})
    print(f"{summary['num_items']} captions scored with {args.model}: mean {means}{totals}")
    if summary.get("num_without_references"):
        empty = [field.label_for(model.config) for field in spec_of(model).outputs if field.needs_references]
        note = references_note(summary["num_without_references"], summary["num_items"], empty, "row", "null")
        print(f"{note} in scores.jsonl (means over the rows that have them)")
    if summary.get("num_truncated"):
        logger.warning(
            f"{summary['num_truncated']} of {summary['num_items']} captions were longer than the text "
            "encoder's context and were truncated (truncated_tokens in scores.jsonl): "
            f"{getattr(model, 'truncation_fix', TRUNCATION_FIX)}"
        )
    print(f"per-row scores: {args.output_dir / 'scores.jsonl'}")
    return summary


if __name__ == "__main__":
    main()
