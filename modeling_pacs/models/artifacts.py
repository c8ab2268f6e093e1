"""Read a model directory's files safely: a damaged file gives one error that names it, says what is wrong and what
to do (re-download, re-convert, restore from a checkpoint), never a raw `JSONDecodeError`, `SafetensorError`,
`size mismatch` or PEFT error from deep inside a loader.

`check_model_directory` is the pre-flight every `from_pretrained` of the remote code runs on a local directory before
transformers or PEFT read it: every JSON file parses as a JSON object, every safetensors file has a sound header whose
tensors lie inside the file, the weights are there, and a LoRA adapter's config fits its weights. The checks read
headers only (a few KiB per weights file); the tensors are read once, by transformers. The table of damage -> message
-> fix is in docs/concepts/corrupt-files.md.
"""

import json
import os
import re
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# What to do about a damaged file of a model directory.
DIRECTORY_FIX = (
    "Re-download the model directory (`hf download REPO_ID --local-dir DIR`), re-convert it from the original "
    "checkpoint (`pacs-pp convert ...`), or restore it from a training checkpoint (`checkpoint-N/`)"
)
# What to do about a converter's input that is not a checkpoint.
CHECKPOINT_FIX = (
    "Pass the checkpoint file of the original release; if it was downloaded or copied, the copy may be truncated or "
    "be an HTML error page: download it again"
)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# The config that a weights file needs beside it.
WEIGHTS_CONFIG = {
    "model.safetensors": "config.json",
    "pytorch_model.bin": "config.json",
    "adapter_model.safetensors": "adapter_config.json",
    "adapter_model.bin": "adapter_config.json",
}
# JSON files of a model directory that hold a list (sentence-transformers' module list).
JSON_LIST_FILES = ("modules.json",)
# Sub-folders deeper than this are not a model directory's own files (a training run's checkpoints, caches).
MAX_CHECKED_DEPTH = 3
# A safetensors header larger than this is not a header (the format caps it at 100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000
# Directories that passed `check_model_directory`, with the size and time of each file then: parsing a 3 MB
# tokenizer.json again for the second `from_pretrained` of one load is the cost this avoids.
CHECKED_DIRECTORIES: dict[str, tuple] = {}
SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


# The config field that marks a model directory of random weights (`pacs-pp make-tiny`, the `tiny` aliases): loading
# it warns, whichever door loads it (`AutoModel`, `load_model`, the metric's own `from_pretrained`).
RANDOM_WEIGHTS_FIELD = "random_weights"
RANDOM_WEIGHTS_WARNING = (
    "{name} has RANDOM weights (a tiny model for tests and smoke runs): its scores are meaningless; "
    "score real captions with a released model"
)


def warn_if_random_weights(config, name_or_path, logger) -> None:
    """Log the random-weights warning when `config` carries the marker `RANDOM_WEIGHTS_FIELD`."""
    if getattr(config, RANDOM_WEIGHTS_FIELD, False):
        logger.warning(RANDOM_WEIGHTS_WARNING.format(name=f"model '{os.fspath(name_or_path)}'"))


class CorruptArtifactError(ValueError):
    """A file of a model directory (or a converter's input) is missing, damaged or inconsistent.

    The message is `'{path}': {problem}. {fix}.`; `path`, `problem` and `fix` are kept as attributes. One of the
    package's errors (`modeling_pacs/errors.py` re-exports it, and the command lines report it as one line), it
    derives from `ValueError` only: the remote code imports nothing of the package, `PacsError` included.
    """

    def __init__(self, path: str | os.PathLike, problem: str, fix: str = DIRECTORY_FIX):
        self.path = Path(path)
        self.problem = problem
        self.fix = fix
        super().__init__(f"'{self.path}': {problem}. {fix}.")


def file_size_problem(path: Path) -> str | None:
    """'missing' / 'empty (0 bytes)' / None."""
    if not path.is_file():
        return "the file is missing" if not path.exists() else "it is not a file"
    if path.stat().st_size == 0:
        return "the file is empty (0 bytes; truncated)"
    return None


def read_json_object(path: str | os.PathLike, fix: str = DIRECTORY_FIX, allow_list: bool = False) -> dict | list:
    """The JSON object stored in `path` (or, with `allow_list`, a JSON list); a missing, empty, unparsable or
    non-object file raises `CorruptArtifactError`."""
    path = Path(path)
    problem = file_size_problem(path)
    if problem:
        raise CorruptArtifactError(path, problem, fix)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        problem = f"not a JSON file: byte {error.start} is not UTF-8 (garbage bytes)"
        raise CorruptArtifactError(path, problem, fix) from None
    except json.JSONDecodeError as error:
        raise CorruptArtifactError(
            path, f"invalid JSON ({error.msg} at line {error.lineno}, column {error.colno}; truncated or edited)", fix
        ) from None
    if not isinstance(value, dict) and not (allow_list and isinstance(value, list)):
        raise CorruptArtifactError(path, f"expected a JSON object ({{...}}), found a JSON {json_kind(value)}", fix)
    return value


def json_kind(value) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "null")


def read_safetensors_header(path: str | os.PathLike, fix: str = DIRECTORY_FIX) -> dict[str, dict]:
    """The tensor entries (`{name: {"dtype", "shape", "data_offsets"}}`) of a safetensors file, after checking that
    the header is sound and every tensor lies inside the file (a truncated file fails here, not mid-load)."""
    path = Path(path)
    problem = file_size_problem(path)
    if problem:
        raise CorruptArtifactError(path, problem, fix)
    size = path.stat().st_size
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise CorruptArtifactError(
                path, f"not a safetensors file: {size} bytes, shorter than its 8-byte prefix", fix
            )
        (header_size,) = struct.unpack("<Q", prefix)
        if header_size > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise CorruptArtifactError(
                path,
                f"not a safetensors file, or truncated: its prefix announces a {header_size}-byte header but the file "
                f"has {size} bytes",
                fix,
            )
        raw_header = file.read(header_size)
    try:
        header = json.loads(raw_header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CorruptArtifactError(
            path, "not a safetensors file: its header is not JSON (garbage bytes)", fix
        ) from None
    if not isinstance(header, dict):
        raise CorruptArtifactError(path, "not a safetensors file: its header is not a JSON object", fix)
    data_size = size - 8 - header_size
    tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
    for name, entry in tensors.items():
        try:
            start, end = (int(offset) for offset in entry["data_offsets"])
            count = 1
            for dim in entry["shape"]:
                count *= int(dim)
            expected = count * SAFETENSORS_DTYPE_BYTES[entry["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise CorruptArtifactError(path, f"the header entry of tensor '{name}' is malformed", fix) from None
        if end > data_size:
            raise CorruptArtifactError(
                path,
                f"truncated: tensor '{name}' ends at byte {end} of the data but the file holds {data_size} data bytes "
                f"({size} bytes in all)",
                fix,
            )
        if end - start != expected:
            raise CorruptArtifactError(
                path,
                f"the header lies: tensor '{name}' of shape {entry['shape']} needs {expected} bytes, not {end - start}",
                fix,  # fmt: skip
            )
    return tensors


def check_pickle_checkpoint(path: str | os.PathLike, fix: str = CHECKPOINT_FIX) -> None:
    """Refuse a file that cannot be a `torch.save` checkpoint before `torch.load` reads it: missing, empty, text, a
    zip without the `data.pkl` of torch's format, or bytes that do not start a pickle. A safetensors file passes
    through `read_safetensors_header` instead."""
    path = Path(path)
    problem = file_size_problem(path)
    if problem:
        raise CorruptArtifactError(path, problem, fix)
    with open(path, "rb") as file:
        head = file.read(64)
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                broken = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            raise CorruptArtifactError(path, f"a damaged zip archive ({error}); truncated", fix) from None
        if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
            raise CorruptArtifactError(
                path, f"a zip archive but not a PyTorch checkpoint (no data.pkl among {names[:5]})", fix
            )
        if broken is not None:
            raise CorruptArtifactError(path, f"a damaged PyTorch checkpoint: member '{broken}' fails its CRC", fix)
        return
    if head[:2] == b"PK":
        raise CorruptArtifactError(path, "a truncated zip archive (a PyTorch checkpoint cut short)", fix)
    if looks_like_safetensors(head):
        read_safetensors_header(path, fix)
        return
    if head.startswith(b"version https://git-lfs"):
        raise CorruptArtifactError(
            path, "a Git LFS pointer, not the checkpoint itself", f"Run `git lfs pull` in its repository. {fix}"
        )
    if head[:1] != b"\x80":  # every pickle of protocol 2 and later, torch's legacy format included, starts so
        kind = "a text file" if is_text(head) else "not a PyTorch checkpoint (neither a zip archive nor a pickle)"
        raise CorruptArtifactError(path, f"{kind}, not a checkpoint (it starts with {head[:16]!r})", fix)


def looks_like_safetensors(head: bytes) -> bool:
    return len(head) > 9 and head[8:9] == b"{"


def is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def model_files(directory: Path) -> Iterator[Path]:
    """The JSON, safetensors and torch weights files of a model directory and its sub-folders (adapter/, tokenizers,
    encoders)."""
    for root, folders, files in os.walk(directory):
        depth = len(Path(root).relative_to(directory).parts)
        folders[:] = sorted(f for f in folders if not f.startswith((".", "__")) and depth < MAX_CHECKED_DEPTH)
        for name in sorted(files):
            if name.endswith((".json", ".safetensors")) or (
                name.endswith(".bin") and name.startswith(("pytorch_model", "adapter_model"))
            ):
                yield Path(root) / name


def check_model_directory(name_or_path: str | os.PathLike) -> None:
    """Check a local model directory's files before loading (a Hub id is left to the Hub's checksums).

    Every JSON file must parse as a JSON object, every safetensors file must have a sound header with its tensors
    inside the file, `config.json` and the weights must be present, and every LoRA adapter's config must fit its
    weights (`check_adapter_directory`). Raises `CorruptArtifactError` naming the first damaged file.
    """
    directory = Path(name_or_path)
    if not directory.is_dir():
        return
    top_config = directory / "config.json"
    files = [top_config, *(path for path in model_files(directory) if path != top_config)]
    signature = tuple((str(path), *file_state(path)) for path in files)
    if CHECKED_DIRECTORIES.get(str(directory.resolve())) == signature:
        return  # checked already, and no file changed since (load_model, then from_pretrained, check once)
    for path in files:
        if path.suffix == ".json":
            read_json_object(path, allow_list=path.name in JSON_LIST_FILES)
        elif path.suffix == ".bin":
            check_pickle_checkpoint(path, DIRECTORY_FIX)
        else:
            read_safetensors_header(path)
        check_companions(path, top_config)
    for adapter_config in directory.rglob("adapter_config.json"):
        check_adapter_directory(adapter_config.parent)
    CHECKED_DIRECTORIES[str(directory.resolve())] = signature


def file_state(path: Path) -> tuple[int, int]:
    """(size, modification time) of a file; (-1, -1) when it is missing."""
    try:
        state = path.stat()
    except OSError:
        return (-1, -1)
    return (state.st_size, state.st_mtime_ns)


def check_companions(path: Path, top_config: Path) -> None:
    """A model config needs its weights (and the adapter folder it names), weights need their config.

    Model configs: the directory's own, and below it those with a `model_type` (Pearl's encoders) or an
    `out_features` (a sentence-transformers Dense layer); a Pooling layer's config has no weights."""
    folder = path.parent
    if path.name == "config.json":
        config = read_json_object(path)
        has_weights = path == top_config or "model_type" in config or "out_features" in config
        if has_weights and not any((folder / name).is_file() for name in WEIGHT_FILES):
            missing = f"the weights are missing (none of {', '.join(WEIGHT_FILES)} is in the folder)"
            raise CorruptArtifactError(folder / WEIGHT_FILES[0], missing)
        adapter_path = config.get("adapter_path")
        if isinstance(adapter_path, str) and not Path(adapter_path).is_absolute():
            if not (folder / adapter_path).is_dir():
                raise CorruptArtifactError(
                    folder / adapter_path,
                    f"the LoRA adapter folder that {path.name} names ('adapter_path') is missing (to score with the "
                    "base weights alone instead, set 'adapter_path' to null in config.json)",
                )
            if not (folder / adapter_path / "adapter_config.json").is_file():
                raise CorruptArtifactError(folder / adapter_path / "adapter_config.json", "the file is missing")
    else:
        config_name = WEIGHTS_CONFIG.get(path.name)
        if config_name and not (folder / config_name).is_file():
            raise CorruptArtifactError(folder / config_name, f"the file is missing (the folder holds {path.name})")


def adapter_targets(target_modules) -> str | list[str]:
    return target_modules if isinstance(target_modules, str) else list(target_modules or [])


def is_targeted(module_name: str, target_modules: str | list[str]) -> bool:
    """PEFT's rule: a string is a regex that must match the whole name, a list names module-name suffixes."""
    if isinstance(target_modules, str):
        return re.fullmatch(target_modules, module_name) is not None
    return any(module_name == target or module_name.endswith(f".{target}") for target in target_modules)


def check_adapter_directory(adapter_directory: str | os.PathLike, module_names: set[str] | None = None) -> dict:
    """Check a PEFT LoRA adapter folder: `adapter_config.json` is an object with `r` and `target_modules`, the
    weights are present and sound, every weight belongs to a targeted module and has rank `r`, and (with
    `module_names`, the backbone's modules) every target names modules that exist. Returns the adapter config."""
    adapter_directory = Path(adapter_directory)
    config_path = adapter_directory / "adapter_config.json"
    config = read_json_object(config_path)
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise CorruptArtifactError(config_path, f"'r' (the LoRA rank) must be a positive int, found {rank!r}")
    targets = adapter_targets(config.get("target_modules"))
    if not targets or not all(isinstance(target, str) for target in targets):
        raise CorruptArtifactError(
            config_path, f"'target_modules' must name the adapted modules, found {config.get('target_modules')!r}"
        )
    weights_path = next(
        (adapter_directory / n for n in ADAPTER_WEIGHT_FILES if (adapter_directory / n).is_file()), None
    )
    if weights_path is None:
        raise CorruptArtifactError(adapter_directory / ADAPTER_WEIGHT_FILES[0], "the adapter weights are missing")
    if weights_path.suffix != ".safetensors":
        check_pickle_checkpoint(weights_path, DIRECTORY_FIX)
        return config
    rank_pattern = config.get("rank_pattern") or {}
    for name, entry in read_safetensors_header(weights_path).items():
        match = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.\w+)?\.weight", name)
        if match is None:
            continue
        module_name, side = match.groups()
        if not is_targeted(module_name, targets):
            raise CorruptArtifactError(
                config_path,
                f"the adapter config does not fit its weights: 'target_modules' {targets!r} does not cover module "
                f"'{module_name}', which {weights_path.name} holds LoRA weights for",
            )
        if rank_pattern:
            continue  # per-module ranks: PEFT checks them
        shape = entry["shape"]
        # lora_A is (r, in, ...) and lora_B (out, r, ...): linear layers and convolutions (patch embeddings) alike.
        found = (shape[0] if side == "A" else shape[1]) if len(shape) >= 2 else None
        if found != rank:
            raise CorruptArtifactError(
                config_path,
                f"the adapter config does not fit its weights: 'r' is {rank} but {weights_path.name} holds '{name}' "
                f"of shape {shape} (rank {found})",
            )
    if module_names is not None:
        if not any(is_targeted(name, targets) for name in module_names):
            raise CorruptArtifactError(
                config_path,
                f"'target_modules' {targets!r} names no module of the backbone (for CLIP: q_proj, k_proj, v_proj, "
                "out_proj, fc1, fc2)",
            )
    return config


@contextmanager
def explain_load_errors(directory: str | os.PathLike, weights: str = "model.safetensors") -> Iterator[None]:
    """Turn a loader's shape or format error about files of `directory` into a `CorruptArtifactError` that names the
    weights and the config they disagree with."""
    try:
        yield
    except RuntimeError as error:
        text = str(error)
        if "ignore_mismatched_sizes" in text:  # transformers logs the mismatched tensors in its report just before
            detail = "tensor shapes differ from those the config describes; the loading report above lists them"
        elif "size mismatch" in text or "Error(s) in loading state_dict" in text:
            detail = next((line.strip() for line in text.splitlines() if "size mismatch" in line), text.splitlines()[0])
        else:
            raise
        raise CorruptArtifactError(
            Path(directory) / weights,
            f"the weights do not fit config.json ({detail}): one of the two was replaced or edited",
        ) from None


__all__ = [
    "CHECKPOINT_FIX",
    "DIRECTORY_FIX",
    "CorruptArtifactError",
    "RANDOM_WEIGHTS_FIELD",
    "RANDOM_WEIGHTS_WARNING",
    "check_adapter_directory",
    "check_model_directory",
    "check_pickle_checkpoint",
    "explain_load_errors",
    "read_json_object",
    "read_safetensors_header",
    "warn_if_random_weights",
]
