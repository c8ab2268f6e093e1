"""Argument types and parser helpers shared by every command line of the package."""

import argparse
import functools
from collections.abc import Callable

from ..extras import MissingExtraError


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


DTYPE_CHOICES = ("fp32", "fp16", "bf16")
DEVICE_HELP = "'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1', ..."
DTYPE_HELP = "fp32 gives the reference numbers; fp16/bf16 speed up the GPU encoders (deviation <= ~1e-2)"


def add_device_arguments(parser: argparse.ArgumentParser, dtype_help: str = DTYPE_HELP):
    """`--device` (default auto) and `--dtype` (fp32, fp16, bf16; default fp32), as every scoring command has them."""
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="fp32", help=dtype_help)


def docstring_parser(doc: str, **kwargs) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first paragraph and whose epilog (examples included) is the
    rest, printed as written."""
    head, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(
        description=head, epilog=rest or None, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
    )


def add_example(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """End `parser`'s help with `Example:` and one command to copy (every --help of the package ends so); the
    description and epilog are then printed as written."""
    example = f"Example:\n  {command}"
    parser.epilog = f"{parser.epilog.rstrip()}\n\n{example}" if parser.epilog else example
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def exits_on_missing_extra(main: Callable) -> Callable:
    """Wrap a command line's `main`: a missing optional dependency prints its message (which names the extra to
    install) and exits with status 1, instead of a traceback."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except MissingExtraError as error:
            raise SystemExit(f"error: {error}") from None

    return wrapper


__all__ = [
    "DTYPE_CHOICES",
    "add_device_arguments",
    "add_example",
    "docstring_parser",
    "exits_on_missing_extra",
    "positive_float",
    "positive_int",
]
