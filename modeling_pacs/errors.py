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

The core (`models/`) names an item by its index in the call (`image 3 ('cat.png') does not exist`); a caller whose
items came from somewhere else renames it: `renumber_item` (a call on a subset of the items), `name_item` (the row of
an input file, `caption_files.name_row`).
"""

import re
from collections.abc import Callable, Sequence

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

# How the core names item i of a call: "image 3 (...)", "video 3, frame 2", "caption 3", "candidate 3", "item 3" at the
# start of the message, or "... of item 3" ("reference 1 of item 3", "references of item 3").
ITEM_INDEX = re.compile(r"^(image|video|caption|candidate|item) (\d+)\b|\bof item (\d+)\b")


def renumber_item(message: str, indices: Sequence[int]) -> str | None:
    """The core's message about item i of a call on the items `indices` of a larger call, naming item `indices[i]`
    instead; None when the message names no item.

    >>> renumber_item("image 1 ('b.png') does not exist", [4, 7])
    "image 7 ('b.png') does not exist"
    """
    match = ITEM_INDEX.search(message)
    if match is None:
        return None
    group = 2 if match.group(1) else 3
    return f"{message[: match.start(group)]}{indices[int(match.group(group))]}{message[match.end(group) :]}"


def name_item(message: str, name_of: Callable[[int], str]) -> str | None:
    """The core's message about item i, led by `name_of(i)` (an input row and its line) instead of the index; None when
    the message names no item.

    >>> name_item("reference 1 of item 3 is int (3)", lambda row: f"row {row} (line {row + 2} of c.csv)")
    'row 3 (line 5 of c.csv): reference 1 is int (3)'
    """
    match = ITEM_INDEX.search(message)
    if match is None:
        return None
    if match.group(1):  # "image 34 ..." at the start
        index, text = int(match.group(2)), match.group(1) + message[match.end() :]
    else:  # "reference 2 of item 34 ..."
        index, text = int(match.group(3)), message[: match.start()].rstrip() + message[match.end() :]
    return f"{name_of(index)}: {text}"


def with_message(error: Exception, message: str) -> Exception:
    """An error of `error`'s type with `message` (an `InputError` when that type's constructor wants more than a
    message): the core's error, with the item renamed."""
    try:
        return type(error)(message)
    except Exception:
        return InputError(message)


__all__ = [
    "COMMAND_ERRORS",
    "CorruptArtifactError",
    "InputError",
    "JobStateError",
    "MissingExtraError",
    "ITEM_INDEX",
    "ModelUnavailableError",
    "PacsError",
    "UnknownModelError",
    "UnsupportedOptionError",
    "name_item",
    "renumber_item",
    "with_message",
]
