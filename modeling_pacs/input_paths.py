"""Where commands read: an input that must be a file is checked here first, so that a folder given for a file is
refused as a folder (saying what to pass instead), never as a missing file (docs/concepts/bad-input.md, "A folder
given as a file")."""

import os
from pathlib import Path

from .errors import InputError


def check_input_file(path: str | os.PathLike, what: str, expected: str, missing: type[Exception] = InputError) -> Path:
    """`path` as a Path when it is a file. A folder is an `InputError` naming `what` and `expected` (what to pass);
    a missing path is `missing` (the error type the caller's API documents, e.g. `FileNotFoundError`).

    >>> check_input_file("/", "checkpoint", "the .pth file itself")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    modeling_pacs.errors.InputError: checkpoint '/' is a directory, not a file: pass the .pth file itself
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} '{path}' is a directory, not a file: pass {expected}")
    if not path.is_file():
        raise missing(f"{what} '{path}' does not exist")
    return path


__all__ = ["check_input_file"]
