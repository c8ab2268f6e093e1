"""The package's errors: one family, so that a caller (a notebook, a job runner) catches `PacsError` and a command line
turns any of them into one `error:` line (`modeling_pacs/cli/errors.py`).

Each message names the item (file, row, shard, option) and the fix. The library raises these and never exits the
interpreter: exit statuses belong to the command lines.

| error | what went wrong |
| --- | --- |
| `InputError` (a `ValueError`) | bad user input: a file, row, item or option |
| `UnsupportedOptionError` (also a `TypeError`) | a metric was asked for a score option it does not declare |
| `UnknownModelError` | a model name that is no alias, local folder or Hub id |
| `ModelUnavailableError` (an `OSError`) | a Hub id that is neither cached nor on a reachable Hub (or offline mode) |
| `JobStateError` | a job's folder, manifest or shards do not match the request |
| `MissingExtraError` (an `ImportError`) | an optional dependency is not installed |
| `CorruptArtifactError` (a `ValueError`) | a file of a model directory or a converter's input is damaged |

`CorruptArtifactError` is defined in the remote code (`modeling_pacs/models/artifacts.py`, which may import only the
standard library, torch, transformers, peft, numpy and PIL), so it cannot derive from `PacsError`; it is re-exported
here and `COMMAND_ERRORS` lists both roots. The input errors of the data readers and converters (`CorpusError`,
`CheckpointError`, `OutputPathError`, `TrainingDataError`, ...) are `InputError`s.
"""

from .models.artifacts import CorruptArtifactError


class PacsError(Exception):
    """Base class of the package's errors: the message names the item and the fix."""


class InputError(PacsError, ValueError):
    """Bad user input: a file, row, item or option. The message names it and says how to fix it."""


class UnsupportedOptionError(InputError, TypeError):
    """A metric was asked for a score option it does not declare; the message names the metric and the option."""


class UnknownModelError(InputError):
    """A model name that is no alias, local folder or Hub id; the message lists the aliases."""


class ModelUnavailableError(PacsError, OSError):
    """A model named by a Hub id that cannot be had here: not in the local cache, and the Hub is unreachable, offline
    mode forbids it, or has no such repository; the message says the ways out (offline mode with a cached copy, a
    converted checkpoint's directory)."""


class JobStateError(PacsError):
    """A job's output folder, manifest or shards are inconsistent with the request (another run's shards, a damaged or
    missing shard, a foreign folder); the message says what to delete or rerun."""


class MissingExtraError(PacsError, ImportError):
    """An optional dependency is not installed; the message names the extra of `setup.py` that installs it."""


# Every error a command line reports as one `error:` line (no traceback).
COMMAND_ERRORS = (PacsError, CorruptArtifactError)

__all__ = [
    "COMMAND_ERRORS",
    "CorruptArtifactError",
    "InputError",
    "JobStateError",
    "MissingExtraError",
    "ModelUnavailableError",
    "PacsError",
    "UnknownModelError",
    "UnsupportedOptionError",
]
