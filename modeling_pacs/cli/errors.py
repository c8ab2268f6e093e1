"""The one place where a command line turns an error into a line on stderr and an exit status.

The library raises typed errors (`modeling_pacs/errors.py`) and never exits. Every command runs its work inside
`reports_errors(prog, ...)`: a `PacsError` or `CorruptArtifactError`, any `OSError` (a path that cannot be read,
created or written: the line names the path, the system's reason and the fix, `os_error_message`), or one of the extra
types the command names (e.g. `ValueError` around reading its input), ends the command with one line,
`PROG: error: MESSAGE`, and no traceback. Any other exception is a bug and keeps its traceback.

| status | when |
| --- | --- |
| 0 | success |
| 1 | an error reported by `reports_errors` (bad input, damaged file, job state, missing extra) |
| 2 | a usage error found by argparse (unknown option, bad value type); the converters' bad input (`report_error`) |
"""

import contextlib
import errno
import os
import sys
from collections.abc import Iterator

from ..errors import COMMAND_ERRORS

ERROR_STATUS = 1  # what `SystemExit(line)` exits with
USAGE_STATUS = 2  # argparse's status for a bad command line; the converters return it for a bad input file


# What to do about an operating-system error, by its errno; the line names the path and the system's reason.
OS_ERROR_FIXES = {
    errno.ENOENT: "check the path (a relative path starts from {cwd}); a folder to create needs an existing parent",
    errno.ENOTDIR: "a part of the path is a file, not a folder: check the path",
    errno.EISDIR: "it is a folder: give the path of a file",
    errno.EEXIST: "it already exists: choose another path, or remove it",
    errno.EACCES: "you may not use this path: choose one you can read and write, or change its permissions",
    errno.EPERM: "you may not use this path: choose one you can read and write, or change its permissions",
    errno.EROFS: "the file system is read-only: choose a writable path",
    errno.ENOSPC: "the disk is full: free some space, or choose a path on another disk",
    errno.EDQUOT: "the disk quota is used up: free some space, or choose a path on another disk",
    errno.ENAMETOOLONG: "the name is too long: choose a shorter path",
    errno.ELOOP: "the path has a loop of symbolic links: check the links",
    errno.EMFILE: "too many files are open: raise the limit (`ulimit -n`) or use fewer workers",
}
OS_ERROR_FALLBACK_FIX = "check the path and its permissions"


def os_error_message(error: OSError) -> str:
    """One line for an `OSError`: `'PATH': REASON: FIX` when it names a path (`'A' -> 'B'` for a rename), the
    package's own message when it has one (a `ModelUnavailableError`, a message without an errno).

    >>> os_error_message(FileExistsError(errno.EEXIST, "File exists", "out/scores.json"))
    "'out/scores.json': File exists: it already exists: choose another path, or remove it"
    """
    if error.strerror is None:
        return str(error)
    fix = OS_ERROR_FIXES.get(error.errno, OS_ERROR_FALLBACK_FIX).format(cwd=os.getcwd())
    if error.filename is None:
        return f"{error.strerror}: {fix}"
    path = f"'{os.fsdecode(error.filename)}'"
    if error.filename2 is not None:
        path += f" -> '{os.fsdecode(error.filename2)}'"
    return f"{path}: {error.strerror}: {fix}"


def error_line(error: BaseException, prog: str | None = None) -> str:
    """`PROG: error: MESSAGE` (`error: MESSAGE` without a program name); an `OSError`'s message is
    `os_error_message`'s."""
    message = os_error_message(error) if isinstance(error, OSError) else str(error)
    return f"{prog}: error: {message}" if prog else f"error: {message}"


@contextlib.contextmanager
def reports_errors(prog: str | None, *also: type[Exception]) -> Iterator[None]:
    """Report the package's errors, any `OSError` (and the types in `also`) raised inside as one
    `PROG: error: MESSAGE` line and exit status 1. A context manager, or a decorator of a command's `main`:

    >>> @reports_errors("pacs-score", ValueError)  # doctest: +SKIP
    ... def main(argv=None): ...
    """
    try:
        yield
    except (*COMMAND_ERRORS, OSError, *also) as error:
        # The interpreter prints a string exit code to stderr and exits with status 1 (ERROR_STATUS).
        raise SystemExit(error_line(error, prog)) from None


def report_error(error: BaseException, prog: str | None = None, status: int = USAGE_STATUS) -> int:
    """For a command that returns its exit status: print `error`'s line to stderr and return `status`."""
    print(error_line(error, prog), file=sys.stderr)
    return status


__all__ = ["ERROR_STATUS", "USAGE_STATUS", "error_line", "os_error_message", "report_error", "reports_errors"]
