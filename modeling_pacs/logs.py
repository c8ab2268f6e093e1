"""What the package says on a terminal, and what it keeps the libraries from saying.

One form for every command and every warning of ours: `warning: MESSAGE` on stderr (`error: MESSAGE` for errors,
plain lines for progress notes), written by one handler that `setup_command_logging` puts on the package's loggers
(`modeling_pacs.*` and `pacs_pp.*`). The libraries' developer notes (transformers' "Loading weights" bars, its
"LOAD REPORT" tables and FutureWarnings, huggingface_hub's retries) are hidden while a model loads, in the Python API
too (`quiet_library_loading`); a command's `--verbose` (`setup_command_logging(verbose=True)`) brings them back. Our
own warnings are never hidden.

Example:

```python
>>> import logging
>>> from modeling_pacs.logs import setup_command_logging
>>> setup_command_logging()  # in a command's main
>>> logging.getLogger("modeling_pacs.loading").warning("model 'tiny' has RANDOM weights")  # doctest: +SKIP
warning: model 'tiny' has RANDOM weights
```
"""

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator

# The package's loggers: modules log under `modeling_pacs.*`, the commands and the harness under `pacs_pp.*`.
PACKAGE_LOGGERS = ("modeling_pacs", "pacs_pp")
# The libraries whose loading chatter is hidden unless asked for.
LIBRARY_MODULES = r"(transformers|peft|huggingface_hub|torch|accelerate|datasets|evaluate)\b"
LIBRARY_LOGGERS = ("transformers", "peft", "huggingface_hub", "accelerate", "datasets", "evaluate")

# None in the Python API; "quiet" or "verbose" once a command has set up its logging.
_command_mode: str | None = None


class CommandFormatter(logging.Formatter):
    """`warning: MESSAGE` / `error: MESSAGE` for warnings and errors; progress notes (info, debug) as written."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return f"{record.levelname.lower()}: {message}" if record.levelno >= logging.WARNING else message


class StderrHandler(logging.StreamHandler):
    """Writes to the current `sys.stderr` (not the one of the moment it was made), so that a redirected or captured
    stderr gets the lines."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def setup_command_logging(verbose: bool = False, level: int = logging.INFO) -> None:
    """Every command's first call: the package's messages at `level` and above go to stderr through one handler,
    warnings as `warning: MESSAGE`; the libraries' logs, warnings and loading bars are hidden unless `verbose`."""
    global _command_mode
    _command_mode = "verbose" if verbose else "quiet"
    for name in PACKAGE_LOGGERS:
        logger = logging.getLogger(name)
        if level < logging.WARNING and not logging.NOTSET < logger.level <= level:
            logger.setLevel(level)  # only ever lowered: a caller's (or a test's) own capture keeps what it asked for
        handler = next((handler for handler in logger.handlers if isinstance(handler, StderrHandler)), None)
        if handler is None:
            handler = StderrHandler()
            handler.setFormatter(CommandFormatter())
            logger.addHandler(handler)
        handler.setLevel(level)
    if verbose:
        return
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if "transformers" in sys.modules:
        import transformers

        transformers.utils.logging.set_verbosity_error()


@contextlib.contextmanager
def quiet_library_loading() -> Iterator[None]:
    """Around a model load: hide the libraries' loading bars, load reports and FutureWarnings (unless a command asked
    for them with `--verbose`); our own warnings still show. The bars come back afterwards, and in the Python API the
    libraries' log level too (a quiet command keeps them at errors only)."""
    if _command_mode == "verbose":
        yield
        return
    import huggingface_hub.utils
    import transformers

    verbosity = transformers.utils.logging.get_verbosity()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    hub_bars = not huggingface_hub.utils.are_progress_bars_disabled()
    hub_logger = logging.getLogger("huggingface_hub")
    hub_level = hub_logger.level
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()
    hub_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category in (FutureWarning, DeprecationWarning, UserWarning):
                warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
            yield
    finally:
        if _command_mode is None:
            transformers.utils.logging.set_verbosity(verbosity)
            hub_logger.setLevel(hub_level)
        if bars:
            transformers.utils.logging.enable_progress_bar()
        if hub_bars:
            huggingface_hub.utils.enable_progress_bars()


__all__ = ["CommandFormatter", "quiet_library_loading", "setup_command_logging"]
