"""The one place where a command line turns an error into a line on stderr and an exit status.

The library raises typed errors (`modeling_pacs/errors.py`) and never exits. Every command runs its work inside
`reports_errors(prog, ...)`: a `PacsError` or `CorruptArtifactError` (always), or one of the extra types the command
names (e.g. `OSError` around reading its input), ends the command with one line, `PROG: error: MESSAGE`, and no
traceback. Any other exception is a bug and keeps its traceback.

| status | when |
| --- | --- |
| 0 | success |
| 1 | an error reported by `reports_errors` (bad input, damaged file, job state, missing extra) |
| 2 | a usage error found by argparse (unknown option, bad value type); the converters' bad input (`report_error`) |
"""

import contextlib
import sys
from collections.abc import Iterator

from ..errors import COMMAND_ERRORS

ERROR_STATUS = 1  # what `SystemExit(line)` exits with
USAGE_STATUS = 2  # argparse's status for a bad command line; the converters return it for a bad input file


def error_line(error: BaseException, prog: str | None = None) -> str:
    """`PROG: error: MESSAGE` (`error: MESSAGE` without a program name)."""
    return f"{prog}: error: {error}" if prog else f"error: {error}"


@contextlib.contextmanager
def reports_errors(prog: str | None, *also: type[Exception]) -> Iterator[None]:
    """Report the package's errors (and the types in `also`) raised inside as one `PROG: error: MESSAGE` line and exit
    status 1. A context manager, or a decorator of a command's `main`:

    >>> @reports_errors("pacs-score", OSError)  # doctest: +SKIP
    ... def main(argv=None): ...
    """
    try:
        yield
    except (*COMMAND_ERRORS, *also) as error:
        # The interpreter prints a string exit code to stderr and exits with status 1 (ERROR_STATUS).
        raise SystemExit(error_line(error, prog)) from None


def report_error(error: BaseException, prog: str | None = None, status: int = USAGE_STATUS) -> int:
    """For a command that returns its exit status: print `error`'s line to stderr and return `status`."""
    print(error_line(error, prog), file=sys.stderr)
    return status


__all__ = ["ERROR_STATUS", "USAGE_STATUS", "error_line", "report_error", "reports_errors"]
