"""Argument types and parser helpers shared by every command line of the package."""

import argparse


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


def docstring_parser(doc: str, **kwargs) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first paragraph and whose epilog (examples included) is the
    rest, printed as written."""
    head, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(
        description=head, epilog=rest or None, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
    )


__all__ = ["docstring_parser", "positive_float", "positive_int"]
