"""Install the `evaluate` module shipped in this package into evaluate's module cache (`pacs-pp register-metric`).

`evaluate.load("pacs_pp")` first looks for `./pacs_pp/pacs_pp.py`, then for the Hub module `evaluate-metric/pacs_pp`;
when neither exists (or the Hub is unreachable or `HF_EVALUATE_OFFLINE=1`) it falls back to the newest copy cached
under `$HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--pacs_pp/<hash>/pacs_pp.py`. Registering writes
that copy, and the one for the Hub name `pacs-pp/pacs_pp`, from the package's own files (so a wheel install needs
no repository checkout).

The copy is the package's short script `metric_module/script/pacs_pp.py`: it imports `PACSPlusPlus` from
`modeling_pacs.metric_module` and calls `check_registration` with its `REGISTRATION_FORMAT`, so a registration
follows upgrades of the package; only a change of that format asks for registering again. A copy the package cannot
serve (registered by another version) fails to load with an `ImportError` that says to re-run
`pacs-pp register-metric`.
"""

import os
from importlib import resources
from pathlib import Path

METRIC_MODULE_NAME = "pacs_pp"
# The format of the registered script (`pacs_pp.py`, which holds the same number): raise both when the script changes
# what it imports or expects, so that registrations written before fail with the advice to register again.
REGISTRATION_FORMAT = 1
STALE_REGISTRATION_ADVICE = "re-run `pacs-pp register-metric` with the pacs-pp of this environment"
# The names evaluate resolves from its cache: the bare name, and the community module once published on the Hub.
CACHED_MODULE_NAMES = (f"evaluate-metric/{METRIC_MODULE_NAME}", f"pacs-pp/{METRIC_MODULE_NAME}")


def check_registration(registration_format: int, script: str) -> None:
    """Refuse a registered script of another format (called by the script itself, `pacs_pp.py`, when it loads)."""
    if registration_format != REGISTRATION_FORMAT:
        raise ImportError(
            f"the evaluate module {script} was registered by another pacs-pp version (registration format "
            f"{registration_format}; this pacs-pp reads format {REGISTRATION_FORMAT}): {STALE_REGISTRATION_ADVICE}"
        )


def metric_script_path() -> Path:
    """The metric script inside the installed package (`modeling_pacs/metric_module/script/pacs_pp.py`)."""
    return Path(str(resources.files("modeling_pacs") / "metric_module" / "script" / f"{METRIC_MODULE_NAME}.py"))


def register_metric(modules_cache: str | os.PathLike | None = None) -> list[Path]:
    """Copy the metric script (a short module importing the installed package's metric) into evaluate's module cache
    so that `evaluate.load("pacs_pp")` works from any folder.

    Args:
        modules_cache: evaluate's modules cache (default: `$HF_MODULES_CACHE`, i.e. `$HF_HOME/modules`). Use the
            same value in the processes that call `evaluate.load`.

    Returns:
        The registered script copies, one per cached name.

    Example:

    ```python
    >>> from modeling_pacs.metric_module.registration import register_metric
    >>> register_metric()  # then, from any folder: evaluate.load("pacs_pp")
    ```
    """
    # evaluate's own writer lays the cache out exactly as its loader reads it (names, hash folders, __init__ files).
    from datasets import DownloadMode
    from evaluate.loading import _create_importable_file, init_dynamic_modules

    script = metric_script_path()
    dynamic_modules_path = init_dynamic_modules(hf_modules_cache=os.fspath(modules_cache) if modules_cache else None)
    registered = []
    for name in CACHED_MODULE_NAMES:
        _, module_hash = _create_importable_file(
            local_path=str(script),
            local_imports=[],
            additional_files=[],
            dynamic_modules_path=dynamic_modules_path,
            module_namespace="metrics",
            name=name,
            download_mode=DownloadMode.REUSE_DATASET_IF_EXISTS,
        )
        copy = Path(dynamic_modules_path, "metrics", name.replace("/", "--"), module_hash, script.name)
        # evaluate picks the most recently modified cached copy: the one registered last must win.
        copy.touch()
        registered.append(copy)
    return registered


__all__ = [
    "CACHED_MODULE_NAMES",
    "REGISTRATION_FORMAT",
    "STALE_REGISTRATION_ADVICE",
    "check_registration",
    "metric_script_path",
    "register_metric",
]
