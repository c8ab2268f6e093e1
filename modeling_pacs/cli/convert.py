"""The converters' command lines, generated from the registry: each metric's `MetricSpec.converters` lists its
`pacs-pp convert-*` commands (`ConverterCommand`: help, description, epilog, example, arguments, call), and this
module builds and runs them with their plumbing once.

Each converter is a library function that raises `ValueError` / `FileNotFoundError` / `FileExistsError` naming the bad
input; here one `run_converter` turns those into one `pacs-pp COMMAND: error: ...` line and exit status 2
(`cli/errors.py`). A new converter is a `ConverterCommand` in its metric's spec, and `pacs-pp` lists it.
"""

import argparse
import logging
from collections.abc import Callable

from ..logs import quiet_library_loading, setup_command_logging
from ..metric_spec import ConverterCommand
from ..registry import METRICS
from .arguments import add_example
from .errors import USAGE_STATUS, report_error, reports_errors

# command -> its spec entry, in registry order
CONVERTERS: dict[str, ConverterCommand] = {
    converter.command: converter for spec in METRICS.values() for converter in spec.converters
}


def run_converter(
    convert: Callable[[argparse.Namespace], None], args: argparse.Namespace, prog: str | None = None
) -> int:
    """Run a parsed conversion; an error about the input prints one clear line and returns 2."""
    try:
        convert(args)
    except (ValueError, FileNotFoundError, FileExistsError) as error:  # CheckpointError, ModelDirectoryError, ...
        return report_error(error, prog, USAGE_STATUS)
    return 0


def build_parser(command: str, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The parser of a conversion command (`parser`: a `pacs-pp` subparser to fill)."""
    converter = CONVERTERS[command]
    parser = parser or argparse.ArgumentParser(prog=f"pacs-pp {command}")
    parser.description = converter.description
    parser.epilog = converter.resolve("epilog")
    add_example(parser, converter.example)
    converter.resolve("add_arguments")(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    with quiet_library_loading():  # transformers' loading and saving bars, load reports and FutureWarnings
        return run_converter(CONVERTERS[command].resolve("convert"), args, f"pacs-pp {command}")


def converter_main(command: str) -> Callable[[list[str] | None], int]:
    """The `main(argv)` of a conversion script (`scripts/convert_*_checkpoint.py`)."""

    @reports_errors(f"pacs-pp {command}")
    def main(argv: list[str] | None = None) -> int:
        args = build_parser(command).parse_args(argv)
        setup_command_logging(level=logging.WARNING)
        return run(command, args)

    return main


main = converter_main("convert")

__all__ = ["CONVERTERS", "build_parser", "converter_main", "main", "run", "run_converter"]
