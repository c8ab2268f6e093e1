"""Publish a PAC-S / PAC-S++ model directory to the Hugging Face Hub, after checking that it is complete.

`validate_model_directory` checks what a Hub user needs to run `AutoModel.from_pretrained(repo, trust_remote_code=True)`
on a fresh machine; `push_model_directory` validates, then (unless `dry_run`) creates the repository and uploads.

Example:

```python
>>> from modeling_pacs.hub import push_model_directory
>>> files = push_model_directory("pac-s-pp-vit-b32", "my-user/pac-s-pp-clip-vit-b32", dry_run=True)
>>> "model.safetensors" in files
True
```
"""

import ast
import json
import os
import re
import stat
from pathlib import Path

from huggingface_hub import metadata_load

from .errors import InputError

# A Hub repository id: "name" or "owner/name" (letters, digits, '-', '_', '.'), never a filesystem path.
HUB_ID_PATTERN = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
# Files a user's `AutoProcessor` / `AutoTokenizer` need (either set of tokenizer files is enough).
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
TOKENIZER_FILE_SETS = (
    ("tokenizer.json", "tokenizer_config.json"),
    ("vocab.json", "merges.txt", "tokenizer_config.json"),
)
# Never published: pickles can run code when loaded.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
CARD_REQUIRED_METADATA = ("license", "library_name", "base_model", "tags")


class ModelDirectoryError(InputError):
    """The directory is not ready for the Hub; the message lists every problem found."""


def is_hub_id(value: str) -> bool:
    """Whether `value` reads as a Hub repository id rather than a local path."""
    return bool(HUB_ID_PATTERN.match(value)) and not value.startswith((".", "/", "~")) and ".." not in value


def relative_imports(python_file: Path) -> set[str]:
    """Module names a remote-code file imports relatively (`from .scoring import ...` -> `scoring`)."""
    tree = ast.parse(python_file.read_text(encoding="utf-8"))
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level and node.module}


def check_remote_code(folder: Path, config: dict, problems: list[str]):
    auto_map = config.get("auto_map") or {}
    for auto_class in ("AutoConfig", "AutoModel"):
        if auto_class not in auto_map:
            problems.append(f"config.json: auto_map has no {auto_class} entry (call register_for_auto_class first)")
    pending = [reference.split(".")[0] for reference in auto_map.values() if isinstance(reference, str)]
    seen = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        path = folder / f"{module}.py"
        if not path.is_file():
            problems.append(f"remote code file {module}.py (needed by auto_map or a relative import) is missing")
            continue
        pending.extend(relative_imports(path))


def check_weights(folder: Path, problems: list[str]):
    if not list(folder.glob("model*.safetensors")):
        problems.append("no model.safetensors weights")
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and path.suffix in PICKLE_SUFFIXES:
            problems.append(f"{relative}: pickle files are not published (they can run code when loaded): remove it")
        if path.is_file() and stat.S_IMODE(path.stat().st_mode) & 0o044 != 0o044:
            mode = oct(stat.S_IMODE(path.stat().st_mode))
            problems.append(f"{relative}: mode {mode} is not world-readable (expected 0644; run chmod 644)")


def check_adapter(folder: Path, config: dict, problems: list[str]):
    adapter_path = config.get("adapter_path")
    if not adapter_path:
        return
    adapter = folder / adapter_path
    if Path(adapter_path).is_absolute() or not adapter.is_dir():
        problems.append(f"config.json names the adapter folder '{adapter_path}', which is not a sub-folder here")
        return
    if not (adapter / "adapter_model.safetensors").is_file():
        problems.append(f"{adapter_path}/adapter_model.safetensors is missing")
    adapter_config_path = adapter / "adapter_config.json"
    if not adapter_config_path.is_file():
        problems.append(f"{adapter_path}/adapter_config.json is missing")
        return
    base = json.loads(adapter_config_path.read_text(encoding="utf-8")).get("base_model_name_or_path") or ""
    if not is_hub_id(base) or Path(base).is_absolute() or os.path.isdir(base):
        problems.append(
            f"{adapter_path}/adapter_config.json: base_model_name_or_path is '{base}', a local path, not a Hub id: "
            "set it to the backbone's Hub id (modeling_pacs.models.modeling_pacs.set_adapter_base_model)"
        )


def check_processor(folder: Path, problems: list[str]):
    if not any((folder / name).is_file() for name in PROCESSOR_FILES):
        problems.append(f"no processor config ({' or '.join(PROCESSOR_FILES)}): save the CLIPProcessor too")
    if not any(all((folder / name).is_file() for name in names) for names in TOKENIZER_FILE_SETS):
        problems.append("no tokenizer files (tokenizer.json + tokenizer_config.json, or vocab.json + merges.txt)")


def check_model_card(folder: Path, problems: list[str]):
    card = folder / "README.md"
    if not card.is_file():
        problems.append("README.md (the model card) is missing: render it with modeling_pacs.pacs.model_card")
        return
    if not card.read_text(encoding="utf-8").startswith("---\n"):
        problems.append("README.md has no YAML front matter (it must start with a '---' metadata block)")
        return
    try:
        metadata = metadata_load(card) or {}
    except Exception as error:  # yaml's errors vary by version: report any as a bad card
        problems.append(f"README.md: its YAML front matter does not parse: {error}")
        return
    missing = [key for key in CARD_REQUIRED_METADATA if not metadata.get(key)]
    if missing:
        problems.append(f"README.md metadata lacks {', '.join(missing)}")


def save_remote_code_model(model, directory: str | os.PathLike, processor=None) -> None:
    """Save config, weights and remote code so that `AutoModel.from_pretrained(directory, trust_remote_code=True)`
    loads the model in a fresh process (and, with `processor`, `AutoProcessor.from_pretrained(directory)` too), with
    the files world-readable (mode 0644) for the Hub and other users."""
    from .logs import quiet_library_loading
    from .models.modeling_pacs import make_world_readable

    type(model.config).register_for_auto_class()
    type(model).register_for_auto_class("AutoModel")
    with quiet_library_loading():  # transformers' saving bars and FutureWarnings
        model.save_pretrained(directory)
        if processor is not None:
            processor.save_pretrained(directory)
    make_world_readable(Path(directory))


def validate_model_directory(folder: str | os.PathLike) -> list[str]:
    """Check a model directory for the Hub and return the files that would be uploaded (relative paths, sorted).

    Raises `ModelDirectoryError` listing every problem: config with `auto_map` and the remote-code files it needs,
    safetensors weights (no pickles), files world-readable (0644), the adapter's base model a Hub id, processor and
    tokenizer files, a README.md model card with YAML metadata.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelDirectoryError(f"'{folder}' is not a directory")
    problems: list[str] = []
    config_path = folder / "config.json"
    if not config_path.is_file():
        problems.append("config.json is missing")
        config = {}
    else:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        check_remote_code(folder, config, problems)
        check_adapter(folder, config, problems)
    check_weights(folder, problems)
    check_processor(folder, problems)
    check_model_card(folder, problems)
    if problems:
        raise ModelDirectoryError(
            f"'{folder}' is not ready for the Hub:\n" + "\n".join(f"  - {problem}" for problem in problems)
        )
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def push_model_directory(
    folder: str | os.PathLike,
    repo_id: str,
    dry_run: bool = False,
    private: bool = False,
    token: str | None = None,
    commit_message: str = "Upload PAC-S / PAC-S++ model",
    log=print,
) -> list[str]:
    """Validate `folder` and upload it to the model repository `repo_id` (created if needed).

    With `dry_run=True` nothing leaves the machine: the files that would be uploaded are listed and returned.
    """
    if not is_hub_id(repo_id) or "/" not in repo_id:
        raise ValueError(f"repo_id must look like 'owner/name', got {repo_id!r}")
    files = validate_model_directory(folder)
    size = sum((Path(folder) / name).stat().st_size for name in files)
    log(f"{'would upload' if dry_run else 'uploading'} {len(files)} files ({size / 2**20:.1f} MiB) to {repo_id}:")
    for name in files:
        log(f"  {name}")
    if dry_run:
        return files
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    commit = api.upload_folder(
        folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message
    )
    log(f"uploaded: {getattr(commit, 'commit_url', commit)}")
    return files


__all__ = [
    "ModelDirectoryError",
    "is_hub_id",
    "push_model_directory",
    "save_remote_code_model",
    "validate_model_directory",
]
