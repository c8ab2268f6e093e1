"""Every command line of the package: `pacs-score`, the `pacs-pp` subcommands, and the `main` behind each
`scripts/*.py` entry point; shared argument types in `arguments.py`; in `errors.py`, the one place where the
library's errors become an `error:` line and an exit status.

A new command is a module here with its parser and `main`, registered in `main.py`; a new script in `scripts/` is
three lines that call such a `main`.
"""

from .main import main
from .score import build_score_parser, score_main

__all__ = ["build_score_parser", "main", "score_main"]
