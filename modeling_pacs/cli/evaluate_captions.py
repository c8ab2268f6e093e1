"""`pacs-pp evaluate-captions`: every metric a captioning paper reports, from one results file, in one run.

Prints a markdown table of the corpus scores on stdout, the reproducibility signature of each metric below it and a
footer counting the scored items and anything skipped; `--output` writes the corpus scores, per-item rows and
signatures (JSON) or the per-item rows and a CORPUS row (CSV). The work is `evaluation/captions.py`.
"""

import argparse
import logging
import os
from pathlib import Path

from ..errors import InputError
from ..evaluation.captions import DEFAULT_METRICS, DUPLICATE_POLICIES, SHARD_SIZE, SKIP_POLICIES
from .arguments import (
    add_device_arguments,
    add_example,
    add_long_captions_argument,
    add_raw_csv_argument,
    add_scoring_mode_argument,
    positive_int,
)

logger = logging.getLogger("pacs_pp")

OUTPUT_SUFFIXES = (".json", ".csv")
EPILOG = f"""
inputs:
  --results FILE --annotations FILE --images DIR
      a COCO results file [{{"image_id": 42, "caption": "..."}}, ...] with a COCO captions file
      (captions_val2014.json, nocaps; or Karpathy's dataset_coco.json) and the folder of its images
  --results FILE [--references FILE] [--images DIR]
      pacs-score's formats (.json mapping, .jsonl, .csv; references in the file or a --references JSON); image
      paths relative to --images (default: the file's folder); the image path is the image id
  --results DIR
      a local datasets folder (save_to_disk) with columns image, caption and optionally references, image_id

metrics (--metrics, comma-separated; default {",".join(DEFAULT_METRICS)}):
  n-gram metrics: bleu (Bleu_1..Bleu_4), meteor, rouge_l, cider, spice: pycocoevalcap's scorers on PTB-tokenised
  captions, the COCO caption evaluation's numbers (Java needed; without it they are skipped with a warning)
  model metrics: anything --model of pacs-score accepts (alias, tiny alias, Hub id, directory); columns
  ENTRY/score, ENTRY/ref_score, ...

scale (as scripts/score_corpus.py): --output-dir DIR keeps the model metrics' per-item scores as shards of
--shard-size items (the job engine, docs/concepts/job-engine.md); rerunning the same command resumes after a kill,
finished shards kept. Under torchrun each process scores its own shards (CPUs: --cpu, gloo) and the first
merges them, each item once, runs the n-gram metrics and prints the table:
  torchrun --nproc_per_node 2 -m modeling_pacs.cli evaluate-captions --results r.json --annotations a.json
      --images val2014 --output-dir job/ --output report.json

items without references (others have some): empty reference-based and n-gram cells, counted in the footer.

bad input: an unknown metric, a result whose id is not annotated, a metric that needs references without any, an
empty caption, a missing image and several captions for one image id are errors naming them; --skip
empty-captions,missing-images skips such rows (counted in the footer) and --duplicates separate scores each row as
its own item.
"""


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.epilog = EPILOG
    add_example(
        parser,
        "pacs-pp evaluate-captions --results results.json --annotations captions_val2014.json --images val2014 "
        "--output report.json",
    )
    parser.add_argument("--results", type=Path, required=True, help="captions to evaluate (see inputs below)")
    parser.add_argument("--annotations", type=Path, help="COCO captions file: references and image file names")
    parser.add_argument("--images", type=Path, help="image folder (default: the annotations' or results' folder)")
    parser.add_argument("--references", type=Path, help="pacs-score formats: JSON {image_path: [references]}")
    parser.add_argument(
        "--metrics", default=",".join(DEFAULT_METRICS), help="comma-separated metrics (default: %(default)s)"
    )
    parser.add_argument("--output", "-o", type=Path, help="write corpus scores, per-item rows, signatures (.json/.csv)")
    add_raw_csv_argument(parser)
    add_device_arguments(parser)
    parser.add_argument("--batch-size", type=positive_int, default=64, help="images per encoder batch (texts: 4x)")
    add_long_captions_argument(parser)
    add_scoring_mode_argument(parser)
    parser.add_argument(
        "--duplicates",
        choices=DUPLICATE_POLICIES,
        default="error",
        help="several captions for one image id: an error (default), or each row scored as its own item",
    )
    parser.add_argument(
        "--skip",
        default="",
        help=f"comma-separated: {', '.join(policy.replace('_', '-') for policy in SKIP_POLICIES)}: skip such rows "
        "(counted in the footer) instead of stopping",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="job folder: the model metrics' per-item scores as shards; rerun to resume (needed by torchrun)",
    )
    parser.add_argument(
        "--shard-size",
        type=positive_int,
        default=SHARD_SIZE,
        help="items per shard of --output-dir (the unit of resumption; default %(default)s)",
    )
    parser.add_argument(
        "--cpu", action="store_true", help="score on the CPU (--device cpu); torchrun's CPU processes join through gloo"
    )
    parser.add_argument(
        "--low-memory",
        action="store_true",
        help="return large freed blocks to the system (glibc's mmap threshold fixed at 8 MiB): a lower peak with "
        "several large models, some speed lost to page faults (docs/guides/evaluating-captions.md#speed-and-memory)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument("--verbose", action="store_true", help="also show the libraries' own logs and warnings")
    return parser


def read_inputs(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """The items of `--results` (with `--annotations`: COCO; without: pacs-score's formats) and notes for the footer."""
    if args.annotations is not None:
        from ..evaluation.caption_inputs import read_coco_results

        if args.references is not None:
            raise InputError("--references is for pacs-score's formats: with --annotations, the references are theirs")
        coco = read_coco_results(args.results, args.annotations, args.images)
        notes = []
        if coco.unmatched_images:
            notes.append(f"{coco.unmatched_images} annotated images have no result and were not evaluated")
        return coco.items, notes
    from ..caption_files import attach_references, read_items

    if args.results.is_dir():
        from ..evaluation.caption_inputs import read_dataset_folder

        if args.references is not None:
            raise InputError("--references is for pacs-score's formats: a datasets folder has a references column")
        return read_dataset_folder(args.results), []
    if not args.results.is_file():
        raise InputError(f"--results file '{args.results}' does not exist")
    if args.results.suffix.lower() == ".json" and args.results.read_text(encoding="utf-8-sig").lstrip()[:1] == "[":
        raise InputError(f"{args.results} is a COCO results list: give its annotations with --annotations")
    image_root = args.images or args.results.parent
    rows = read_items(args.results, image_root)
    if args.references is not None:
        attach_references(rows, args.references, image_root)
    items = [{"image_id": row["image"], "image": row["image_path"], "caption": row["caption"],
              "references": row.get("references")} for row in rows]  # fmt: skip
    return items, []


def inputs_of(args: argparse.Namespace) -> list:
    return [args.results, args.annotations, args.references]


def output_text(evaluation, suffix: str, raw_csv: bool = False) -> str:
    """JSON: corpus, items, signatures, skipped, notes. CSV: one row per item and a last CORPUS row (text cells that
    a spreadsheet would run as formulas get a `'` in front unless `raw_csv`: `csv_output.escape_cell`)."""
    from ..output_paths import strict_json

    if suffix == ".json":
        return strict_json(evaluation.to_json(), indent=2, ensure_ascii=False) + "\n"
    from ..csv_output import csv_text

    corpus = {"image_id": "CORPUS", "caption": "", **evaluation.corpus}
    return csv_text(list(evaluation.items[0]), [*evaluation.items, corpus], raw=raw_csv)


def run(args: argparse.Namespace):
    from ..evaluation.captions import evaluate_captions, parse_metrics
    from ..heap import return_large_blocks
    from ..jobs import write_text_atomically
    from ..output_paths import check_output_file
    from .score import quiet_libraries

    quiet_libraries(args.verbose)
    if args.low_memory:
        return_large_blocks()  # one model's freed activations are not kept in the heap under the next one's
    metrics = [name for name in args.metrics.split(",") if name.strip()]
    parse_metrics(metrics)  # an unknown metric is named before any file is read
    skip = [policy.strip().replace("-", "_") for policy in args.skip.split(",") if policy.strip()]
    unknown = sorted(set(skip) - set(SKIP_POLICIES))
    if unknown:
        choices = ", ".join(policy.replace("_", "-") for policy in SKIP_POLICIES)
        raise InputError(f"--skip takes {choices}, got {', '.join(unknown)}")
    if args.output:
        check_output_file(args.output, inputs=inputs_of(args), suffixes=OUTPUT_SUFFIXES)
    if args.output_dir is not None:
        from ..output_paths import check_output_directory

        try:  # the command's own resumable folder: existing content is fine, the place rules still hold
            check_output_directory(args.output_dir, inputs=inputs_of(args), allow_existing=True)
        except ValueError as error:
            raise InputError(f"--output-dir: {error}") from None
    processes, device = None, "cpu" if args.cpu else args.device
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun / accelerate launch: the processes meet
        from ..jobs import launch_state

        processes = launch_state(cpu=device == "cpu")  # CPUs: through gloo
        device = str(processes.device)
    items, notes = read_inputs(args)
    # load_model hides the libraries' loading chatter (modeling_pacs/logs.py; --verbose shows it)
    evaluation = evaluate_captions(
        items,
        metrics,
        device=device,
        dtype=None if args.dtype == "fp32" else args.dtype,
        batch_size=args.batch_size,
        long_captions=args.long_captions,
        mode=args.mode,
        duplicates=args.duplicates,
        skip=skip,
        progress=False if args.no_progress else None,
        output_dir=args.output_dir,
        shard_size=args.shard_size,
        processes=processes,
    )
    if evaluation is None:  # not the main process: it scored its shards, the main one reports
        return None
    evaluation.notes.extend(notes)
    print(evaluation.report())
    if args.output:
        write_text_atomically(args.output, [output_text(evaluation, args.output.suffix.lower(), args.raw_csv)])
        print(f"corpus scores, per-item rows and signatures written to {args.output}")
    return evaluation


__all__ = ["build_parser", "run"]
