"""Where commands may write: every command that writes a file or a directory checks its output here first.

The rules (docs/concepts/bad-input.md, "Outputs never destroy inputs or unrelated data"):
- a command never writes over one of its inputs;
- a directory output is never the current directory, one of its parents, the home or root folder, or a folder that
  contains an input;
- a non-empty directory is replaced only with `--overwrite`, and only when it is recognisably a model directory
  (a `config.json` naming a `model_type`, and nothing but model files beside it);
- a file output has a suffix the command knows how to write.
"""

import errno
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import InputError

# The files a saved model directory holds (transformers, PEFT, our remote code, the model card).
MODEL_DIRECTORY_ENTRIES = re.compile(
    r"^(config\.json|generation_config\.json|.*\.safetensors|.*\.safetensors\.index\.json|pytorch_model.*\.bin|"
    r"tokenizer(_config)?\.json|special_tokens_map\.json|vocab\.json|merges\.txt|added_tokens\.json|"
    r".*\.model|(pre)?processor_config\.json|chat_template\.(json|jinja)|README\.md|\.gitattributes|.*\.py|"
    r"adapter|adapter_config\.json|[a-z_]*tokenizer|training_args\.bin|__pycache__|assets|\.[^/]*\.tmp)$"
)


class OutputPathError(InputError):
    """An output path that would destroy an input or unrelated data, or that the command cannot write."""


def _resolved(path: str | os.PathLike) -> Path:
    return Path(os.path.expanduser(os.fspath(path))).resolve()


def is_model_directory(directory: Path) -> bool:
    """A folder holding a `config.json` with a `model_type` and only the files a saved model consists of."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict) or "model_type" not in config:
        return False
    return all(MODEL_DIRECTORY_ENTRIES.match(entry.name) for entry in directory.iterdir())


def check_output_directory(
    directory: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    overwrite: bool = False,
    allow_existing: bool = False,
    what: str = "output directory",
    replaceable: Callable[[Path], bool] = is_model_directory,
    replaceable_kind: str = "a model directory",
) -> Path:
    """Refuse a directory output that would destroy data; return it resolved.

    Args:
        directory: where the command will write.
        inputs: the command's input files or folders (`None` entries are ignored).
        overwrite: the user passed `--overwrite`: a non-empty *model* directory may be replaced.
        allow_existing: the command resumes or adds to its own folder (e.g. corpus shards): a non-empty folder is
            fine, but the place rules still hold.
        replaceable: which non-empty folders `overwrite` may replace (default: model directories); a command whose
            output is not a model (e.g. benchmark results) passes its own recognisable layout.
    """
    target = _resolved(directory)
    here = Path.cwd().resolve()
    if target == here or target in here.parents:
        raise OutputPathError(
            f"{what} '{directory}' is the current directory or one of its parents: writing there would replace what "
            f"it holds. Name a new sub-folder, e.g. '{Path(directory) / 'output'}'"
        )
    if target == Path(target.anchor) or target == Path.home().resolve():
        raise OutputPathError(f"{what} '{directory}' is the root or home folder: name a new sub-folder")
    for source in filter(None, inputs):
        source_path = _resolved(source)
        if source_path == target or target in source_path.parents:
            raise OutputPathError(
                f"{what} '{directory}' contains the input '{source}': writing there could destroy it. Choose a "
                "folder outside the input"
            )
    if target.exists() and not target.is_dir():
        raise OutputPathError(f"{what} '{directory}' is a file: choose a folder")
    if allow_existing or not target.is_dir() or not any(target.iterdir()):
        return target
    if not overwrite:
        raise OutputPathError(f"{what} '{directory}' exists and is not empty: choose another, or pass --overwrite")
    if not replaceable(target):
        held = sorted(entry.name for entry in target.iterdir() if not MODEL_DIRECTORY_ENTRIES.match(entry.name))
        held = held or sorted(entry.name for entry in target.iterdir())
        raise OutputPathError(
            f"{what} '{directory}' is not {replaceable_kind} (it holds {held[:5]}): --overwrite replaces only a "
            "folder a previous run wrote. Remove it yourself, or choose another"
        )
    return target


def check_output_file(
    path: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    suffixes: Iterable[str] = (),
    what: str = "output file",
) -> Path:
    """Refuse a file output that is one of the inputs, a folder, under a file (its folder could never be made: an
    `OSError` naming the path, as the write would raise, but before any work), or has a suffix the command cannot
    write."""
    target = _resolved(path)
    folder = next(parent for parent in target.parents if parent.exists())
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(path))
    for source in filter(None, inputs):
        if _resolved(source) == target:
            raise OutputPathError(f"{what} '{path}' is also an input: writing it would destroy the input")
    if target.is_dir():
        raise OutputPathError(f"{what} '{path}' is a folder: name a file")
    suffixes = tuple(suffixes)
    if suffixes and target.suffix.lower() not in suffixes:
        raise OutputPathError(
            f"{what} '{path}' has the suffix '{target.suffix}', which this command cannot write: use one of "
            f"{', '.join(suffixes)}"
        )
    return target


@contextmanager
def staged_directory(output_dir: Path) -> Iterator[Path]:
    """A staging folder beside `output_dir` to save into; when the block succeeds it is made world-readable (Hub
    uploads) and renamed into place, replacing `output_dir`: a crash never leaves a half-written `output_dir`.
    Check the output with [`check_output_directory`] first."""
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        yield staging
        staging.chmod(0o755)
        from .models.modeling_pacs import make_world_readable  # the remote code's helper (imports torch)

        make_world_readable(staging)
        if output_dir.exists():
            shutil.rmtree(output_dir) if output_dir.is_dir() else output_dir.unlink()
        staging.rename(output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def finite_or_none(value):
    """JSON has no NaN or Infinity: non-finite floats become null (recursively through dicts and lists)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def strict_json(value, **kwargs) -> str:
    """`json.dumps` that never writes the non-standard tokens NaN/Infinity (they become null)."""
    return json.dumps(finite_or_none(value), allow_nan=False, **kwargs)


__all__ = [
    "staged_directory",
    "OutputPathError",
    "check_output_directory",
    "check_output_file",
    "finite_or_none",
    "is_model_directory",
    "strict_json",
]
