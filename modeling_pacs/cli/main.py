"""`pacs-pp`: every command of the package in one place (score, make-tiny, the converters, register-metric, ...).

A new command is a module of `modeling_pacs.cli` with `build_parser(parser)` and `run(args)`, registered here.
"""

import argparse
import logging
import shutil
from pathlib import Path

from ..logs import quiet_library_loading, setup_command_logging
from ..output_paths import check_output_directory
from ..registry import TINY_BACKBONES, TINY_SEED, TINY_VARIANTS, parse_tiny_alias, tiny_alias
from . import convert
from .arguments import add_example, add_verbose_argument
from .convert import CONVERTERS
from .errors import reports_errors
from .score import SCORE_EPILOG, build_score_parser, run_score


def build_parser() -> argparse.ArgumentParser:
    """The `pacs-pp` parser: one subparser per command, each `--help` ending with an example. Building it imports no
    torch, transformers or model (each command imports what it needs when it runs)."""
    parser = add_example(
        argparse.ArgumentParser(
            prog="pacs-pp",
            description="PAC-S++ utilities: score, make-tiny, the converters, register-metric",
            epilog="Documentation: docs/index.md",
        ),
        "pacs-pp score captions.json --model tiny --output scores.json",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    score = commands.add_parser(
        "score",
        help="score captions of images or videos (same as pacs-score)",
        description="Score image (or video) captions with PAC-S++ and RefPAC-S++; also CLIP-S, PAC-S, Polos, Pearl.",
        epilog=SCORE_EPILOG,
    )
    add_example(score, "pacs-pp score captions.json --model tiny --output scores.json")
    build_score_parser(score)
    tiny = commands.add_parser(
        "make-tiny",
        help="save a random tiny model directory (offline tests and demos)",
        description="Save a tiny model with random weights (meaningless scores): offline tests, demos, smoke runs.",
    )
    add_example(tiny, "pacs-pp make-tiny tiny-model --variant pac_s_pp --backbone clip")
    tiny.add_argument("output", type=Path, help="directory to write (a Hub-ready model directory)")
    tiny.add_argument(
        "--variant",
        choices=TINY_VARIANTS,
        default=TINY_VARIANTS[0],
        help=f"the metric whose tiny model to build (default {TINY_VARIANTS[0]})",
    )
    tiny.add_argument(
        "--seed",
        type=int,
        default=TINY_SEED,
        help=f"seed of the random weights (default {TINY_SEED}: non-zero scores on the examples)",
    )
    tiny.add_argument("--overwrite", action="store_true", help="replace an existing tiny model directory")
    tiny.add_argument(
        "--backbone",
        choices=sorted(set(TINY_BACKBONES.values())),
        default="clip",
        help="the family of the tiny image and text towers (default clip)",
    )
    add_verbose_argument(tiny)
    for command, converter in CONVERTERS.items():
        convert.build_parser(command, commands.add_parser(command, help=converter.help))
    register = commands.add_parser(
        "register-metric",
        help="install the evaluate module so that evaluate.load('pacs_pp') works offline from any folder",
        description="Install the evaluate module so that evaluate.load('pacs_pp') works offline from any folder.",
    )
    add_example(register, "pacs-pp register-metric")
    register.add_argument(
        "--modules-cache",
        type=Path,
        help="evaluate's modules cache (default: $HF_MODULES_CACHE, i.e. $HF_HOME/modules)",
    )
    evaluate = commands.add_parser(
        "evaluate-captions",
        help="BLEU, METEOR, ROUGE-L, CIDEr, SPICE and model metrics of a results file, with signatures",
        description="Every metric a captioning paper reports, from one results file: a markdown table of corpus\n"
        "scores with a reproducibility signature per metric, and per-item rows (--output).",
    )
    from . import evaluate_captions  # its module reads the evaluation package: not for `pacs-score`

    evaluate_captions.build_parser(evaluate)
    return parser


def main(argv: list[str] | None = None):
    """`pacs-pp`: utilities (score, make-tiny, the converters, register-metric)."""
    args = build_parser().parse_args(argv)
    setup_command_logging(getattr(args, "verbose", False), level=logging.WARNING)
    prog = f"pacs-pp {args.command}"
    with reports_errors(prog):
        return run_command(prog, args)


def run_command(prog: str, args: argparse.Namespace):
    """Run the parsed command; the errors each one reports as a line besides the package's are named here."""
    if args.command == "score":
        with reports_errors(prog, OSError, ValueError, TypeError):
            run_score(args)
    elif args.command == "make-tiny":
        with reports_errors(prog, ValueError):
            check_output_directory(args.output, overwrite=args.overwrite)
            parse_tiny_alias(tiny_alias(args.variant, args.backbone))  # a backbone the variant's family has
        if args.output.is_dir() and any(args.output.iterdir()):
            shutil.rmtree(args.output)  # a model directory, checked above, that --overwrite replaces
        from ..testing.directories import save_tiny_model

        with quiet_library_loading():  # transformers' saving bars and FutureWarnings
            save_tiny_model(args.output, variant=args.variant, backbone=args.backbone, seed=args.seed)
        print(f"tiny {args.backbone} {args.variant} model (random weights) saved to {args.output}")
    elif args.command in CONVERTERS:
        return convert.run(args.command, args)
    elif args.command == "evaluate-captions":
        with reports_errors(prog, OSError, ValueError):
            from . import evaluate_captions

            evaluate_captions.run(args)
    elif args.command == "register-metric":
        from ..metric_module.registration import register_metric

        for copy in register_metric(args.modules_cache):
            print(f"registered {copy}")
        print("evaluate.load('pacs_pp') and evaluate.load('pacs-pp/pacs_pp') now load it from any folder, offline too")


__all__ = ["build_parser", "main"]
