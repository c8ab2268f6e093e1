"""Reproduce the papers' tables: human-correlation, hallucination and system-level benchmarks for any metric.

Reads the user's local copy of the ORIGINAL benchmark files (nothing downloads), scores them with one or more models
(--model) or takes any metric's per-item scores (--scores), applies the official protocol (or the papers' variant,
see the options) and prints each table beside the papers' numbers. File layouts: docs/guides/benchmark-releases.md.
"""

import argparse
import sys
from pathlib import Path

from modeling_pacs.cli.arguments import (
    add_device_arguments,
    add_example,
    add_renamed_argument,
    add_scoring_mode_argument,
    add_verbose_argument,
)
from modeling_pacs.cli.errors import reports_errors
from modeling_pacs.errors import InputError
from modeling_pacs.evaluation import BENCHMARKS, BenchmarkOptions
from modeling_pacs.evaluation.harness import HarnessConfig, run
from modeling_pacs.evaluation.report import format_systems, format_table
from modeling_pacs.evaluation.systems import COCO_METRICS
from modeling_pacs.logs import setup_command_logging

EPILOG = """
variants:
  python scripts/evaluate_benchmarks.py --benchmark flickr8k_expert --data-dir data/flickr8k \\
      --model pac_s_pp_vit_b32 --model clip_s_vit_b32 --w 2.0 --output-dir results/
  python scripts/evaluate_benchmarks.py --benchmark vatex_eval --data-dir data/vatex_eval --model clip_s_vit_b32 \\
      --video-features data/vatex_eval/VATEX-EVAL_video_feats
  python scripts/evaluate_benchmarks.py --benchmark foil --data-dir data/foil --dump-items foil_items.jsonl
  python scripts/evaluate_benchmarks.py --benchmark foil --data-dir data/foil --scores Polos=polos_scores.jsonl
  python scripts/evaluate_benchmarks.py --benchmark all --data-dir data/ --model pac_s_pp_vit_b32 --output-dir out/
  python scripts/evaluate_benchmarks.py --captions base=base.json --captions scst=scst.json \\
      --references refs.json --model pac_s_pp_vit_b32 --model clip_s_vit_b32

--scores FILE is JSONL, one {"id": ..., "score": ...[, "ref_score": ...]} per item of --dump-items.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        choices=[*BENCHMARKS, "all"],
        default=[],
        help="benchmark to run (repeatable); 'all' runs every sub-folder of --data-dir named after one",
    )
    parser.add_argument("--data-dir", type=Path, help="local copy of the benchmark's original files")
    parser.add_argument("--model", action="append", default=[], help="alias, Hub id or directory (repeatable)")
    parser.add_argument(
        "--scores",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="per-item scores of any metric (JSONL id/score[/ref_score]); no model is loaded",
    )
    parser.add_argument("--dump-items", type=Path, metavar="FILE", help="write the benchmark items as JSONL")
    parser.add_argument(
        "--video-features",
        type=Path,
        metavar="DIR",
        help="VATEX-EVAL / ActivityNet-FOIL: EMScore's released CLIP ViT-B/32 features (<video_id>.pt in DIR or in "
        "its VATEX-EVAL_video_feats/ / ActivityNet-FOIL_video_feats/) instead of the raw videos; CLIP-S models only "
        "(PAC-S++ needs the raw videos)",
    )
    parser.add_argument(
        "--captions",
        action="append",
        default=[],
        metavar="SYSTEM=FILE",
        help="system-level evaluation: a captioner's output (JSON/JSONL/CSV as pacs-score reads)",
    )
    parser.add_argument("--references", type=Path, help="--captions: JSON {image: [references]}")
    parser.add_argument(
        "--coco-metrics",
        nargs="+",
        choices=COCO_METRICS,
        default=list(COCO_METRICS),
        help="--captions: COCO caption metrics to compute when pycocoevalcap is installed",
    )
    parser.add_argument("--image-root", type=Path, help="--captions: folder relative image paths start from")
    add_renamed_argument(
        parser,
        "--output-dir",
        "--output",
        type=Path,
        help="folder for results.json, results.md, plots and cached scores",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir folder")
    parser.add_argument("--resume", action="store_true", help="reuse the cached per-item scores in --output-dir")
    parser.add_argument("--w", type=float, help="override the model's w (official PAC-S code: 2.0; paper: 2.5 B/32)")
    add_device_arguments(parser)
    parser.add_argument("--image-batch-size", type=int, default=64)
    parser.add_argument("--text-batch-size", type=int, default=256)
    parser.add_argument("--video-batch-size", type=int, default=16)
    parser.add_argument("--chunk-size", type=int, default=16384, help="items per cached chunk (resume granularity)")
    parser.add_argument(
        "--long-captions",
        nargs="+",
        choices=["truncate", "chunks"],
        default=["truncate"],
        help="how each --model reads captions past its context: 'truncate' (official), 'chunks' (in pieces; "
        "docs/guides/long-captions.md), or both for one row each (e.g. DetailCaps: --long-captions truncate chunks)",
    )
    add_scoring_mode_argument(parser)
    protocol = parser.add_argument_group("protocol variants (defaults: the official code)")
    protocol.add_argument(
        "--official-rounding",
        action="store_true",
        help="Composite/Polaris/Nebula: raw coefficients rounded to 4 decimals (Polos/DENEB)",
    )
    protocol.add_argument(
        "--composite-remove-candidate",
        action="store_true",
        help="Composite, DENEB CSV or Hugging Face copy: drop references equal to the candidate (papers)",
    )
    protocol.add_argument(
        "--composite-rating",
        choices=["correctness", "thoroughness", "mean"],
        default="correctness",
        help="Composite, original AMT_eval files: the human rating (CLIPScore: correctness)",
    )
    protocol.add_argument(
        "--composite-keep-candidate",
        action="store_true",
        help="Composite, original AMT_eval files: keep references equal to the candidate (default: removed)",
    )
    protocol.add_argument(
        "--pascal-references",
        choices=["all", "draws"],
        default="all",
        help="Pascal-50S: all 48 references (official) or random draws (papers)",
    )
    protocol.add_argument("--pascal-draws", type=int, default=5)
    protocol.add_argument("--pascal-per-draw", type=int, default=5)
    protocol.add_argument("--pascal-seed", type=int, default=0)
    protocol.add_argument(
        "--pascal-ties",
        choices=["b", "a", "wrong"],
        default="b",
        help="Pascal-50S metric ties: B (official), A, or never correct (paper wording)",
    )
    protocol.add_argument(
        "--foil-pairs",
        choices=["all", "one_per_image", "subset8k"],
        default="all",
        help="FOIL pairs: all (official), one per image (papers), 8k Karpathy val+test (PAC-S++)",
    )
    protocol.add_argument(
        "--foil-four-refs",
        choices=["all", "four"],
        default="all",
        help="FOIL 4-ref: all remaining references (official) or the first four (papers)",
    )
    protocol.add_argument(
        "--vatex-unrounded",
        action="store_true",
        help="VATEX-EVAL: skip EMScore's 4-decimal rounding of predictions and results",
    )
    protocol.add_argument(
        "--detailcaps-judge-scale",
        type=float,
        default=1.0,
        help="DetailCaps-4870: divide the GPT-4 scores by this for 1-R^2 only (correlations do not depend on it)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_verbose_argument(parser)
    add_example(
        parser, "python scripts/evaluate_benchmarks.py --benchmark foil --data-dir data/foil --model pac_s_pp_vit_b32"
    )
    return parser


@reports_errors("evaluate_benchmarks")
def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    setup_command_logging(args.verbose)
    if args.benchmark and args.data_dir is None:
        raise InputError("--benchmark needs --data-dir (the local copy of the original files)")
    if args.dump_items and not args.benchmark:
        raise InputError("--dump-items needs --benchmark")
    for name in (
        "pascal_draws",
        "pascal_per_draw",
        "image_batch_size",
        "text_batch_size",
        "video_batch_size",
        "chunk_size",
    ):
        if getattr(args, name) <= 0:
            raise InputError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.pascal_seed < 0:
        raise InputError(f"--pascal-seed must be >= 0, got {args.pascal_seed}")
    options = BenchmarkOptions(
        official_rounding=args.official_rounding,
        composite_remove_candidate=args.composite_remove_candidate,
        composite_rating=args.composite_rating,
        composite_keep_candidate=args.composite_keep_candidate,
        pascal_references=args.pascal_references,
        pascal_draws=args.pascal_draws,
        pascal_per_draw=args.pascal_per_draw,
        pascal_seed=args.pascal_seed,
        pascal_ties=args.pascal_ties,
        foil_pairs=args.foil_pairs,
        foil_four_refs=args.foil_four_refs,
        vatex_rounding=not args.vatex_unrounded,
        detailcaps_judge_scale=args.detailcaps_judge_scale,
    )
    config = HarnessConfig(
        benchmarks=args.benchmark,
        data_dir=args.data_dir,
        models=args.model,
        scores=args.scores,
        captions=args.captions,
        references=args.references,
        coco_metrics=args.coco_metrics,
        image_root=args.image_root,
        output=args.output_dir,
        dump_items=args.dump_items,
        video_features=args.video_features,
        w=args.w,
        device=args.device,
        dtype=args.dtype,
        image_batch_size=args.image_batch_size,
        text_batch_size=args.text_batch_size,
        video_batch_size=args.video_batch_size,
        chunk_size=args.chunk_size,
        overwrite=args.overwrite,
        resume=args.resume,
        progress=False if args.quiet else None,
        long_captions=list(dict.fromkeys(args.long_captions)),
        scoring_mode=args.mode,
    )
    with reports_errors("evaluate_benchmarks", ValueError, FileNotFoundError, RuntimeError):
        results = run(config, options)
    for result in results["benchmarks"].values():
        if result["rows"]:
            print(format_table(result))
    if results.get("systems"):
        print(format_systems(results["systems"]))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
