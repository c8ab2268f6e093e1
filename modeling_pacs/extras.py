"""Optional dependencies: every import of a package that only an extra of `setup.py` installs goes through
[`require`], so that a missing one names the extra to install instead of raising a bare `ModuleNotFoundError`.

>>> stats = require("scipy", "train", "Validation correlations")  # doctest: +SKIP

[`MissingExtraError`] is a `PacsError` (`modeling_pacs/errors.py`): command lines print its message (no traceback).
The remote code (`modeling_pacs/models/`) cannot import this module; it raises a plain `ImportError` with the same
text.
"""

import importlib
from types import ModuleType

from .errors import MissingExtraError


def missing_extra_message(module: str, extra: str, purpose: str) -> str:
    """`"Pearl needs sentencepiece: pip install 'pacs-pp[pearl]'"`."""
    return f"{purpose} needs {module}: pip install 'pacs-pp[{extra}]'"


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import and return `module`, or raise [`MissingExtraError`] naming the extra of `setup.py` that installs it.

    `purpose` says what needs the module, capitalised, as the start of a sentence ("Pearl", "Reading video files").
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        missing = getattr(error, "name", None) or module
        # An installed package whose own dependency is broken is a different problem: do not hide it.
        if missing.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtraError(missing_extra_message(module, extra, purpose)) from None


__all__ = ["MissingExtraError", "missing_extra_message", "require"]
