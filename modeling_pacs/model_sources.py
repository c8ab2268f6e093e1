"""Where a model name leads, checked before anything is downloaded or loaded: `load_model` asks here first.

A name is an alias of the registry (a released model's Hub id), a tiny alias, a local directory, or a Hub id
(`ORG/NAME`). Anything else (a typo such as `pacs_pp_b32`) is an `UnknownModelError` at once, with the aliases and
the closest one, before any network access. A Hub id that is neither in the local Hugging Face cache nor reachable
fails after one request with a short timeout (huggingface_hub would otherwise retry for about 100 s): the message
names the ways out, offline mode with a cached copy, or a converted checkpoint's directory.

Example:

```python
>>> from modeling_pacs.model_sources import check_model_source
>>> check_model_source("pacs_pp_b32")
Traceback (most recent call last):
...
modeling_pacs.errors.UnknownModelError: unknown model 'pacs_pp_b32' (did you mean 'pac_s_pp_vit_b32'?): ...
```
"""

import json
import os
import re
from pathlib import Path

from .errors import ModelUnavailableError, UnknownModelError
from .metric_spec import MetricSpec
from .registry import (
    PRETRAINED_MODELS,
    RELEASES,
    TINY_SPECS,
    closest_model_name,
    model_choices,
    parse_tiny_alias,
    spec_for_model_type,
)

# `ORG/NAME`, as huggingface_hub validates repository ids (letters, digits, `-`, `_`, `.`; 96 characters each).
HUB_ID_PATTERN = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
CONVERSION_GUIDE = "docs/guides/converting-checkpoints.md"
# Seconds the one request to the Hub may take (`HF_HUB_ETAG_TIMEOUT` sets it, as it does huggingface_hub's own).
DEFAULT_PROBE_TIMEOUT = 5.0


def is_hub_id(name: str) -> bool:
    """Whether `name` can be a Hub repository id (`ORG/NAME`)."""
    return bool(HUB_ID_PATTERN.fullmatch(name)) and ".." not in name and not name.endswith((".", "-"))


def looks_like_path(name: str) -> bool:
    """A name written as a path (`./model`, `/data/model`, `~/model`, `a/b/c`), not as a Hub id."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def unknown_model_message(name: str) -> str:
    closest = closest_model_name(name)
    hint = f" (did you mean {closest!r}?)" if closest else ""
    return (
        f"unknown model {name!r}{hint}: a model is an alias ({', '.join(model_choices())}), a local model directory, "
        "or a Hub id (ORG/NAME)"
    )


def ways_out(name: str, offline: bool = False) -> str:
    """How to run without reaching the Hub: a cached copy in offline mode, or a converted checkpoint's directory."""
    release = RELEASES.get(name)
    if release is not None:
        spec, variant = release
        converter = spec.converters[0].command if spec.converters else "convert"
        convert = f"`pacs-pp {converter} --checkpoint FILE --variant {variant.alias} --output-dir DIR`"
        if converter != "convert":
            convert = f"`pacs-pp {converter} --checkpoint FILE --output-dir DIR`"
    else:
        convert = "`pacs-pp convert --checkpoint FILE --variant ALIAS --output-dir DIR`"
    cached_copy = (
        "put a copy in the local Hugging Face cache (`hf download REPO_ID` on a machine with internet, then copy "
        "$HF_HOME)"
        if offline
        else "set HF_HUB_OFFLINE=1 to use a copy in the local Hugging Face cache (`hf download REPO_ID` beforehand)"
    )
    return (
        f"to run without the Hub, either {cached_copy}, or convert the official checkpoint with "
        f"{convert} ({CONVERSION_GUIDE}) and pass DIR as the model; for a smoke test with random weights, use the "
        "model 'tiny' (or `pacs-pp make-tiny DIR`)"
    )


def check_model_source(name: str) -> None:
    """Refuse a model name that cannot lead to a model, before anything loads; see the module's docstring.

    Aliases are looked up as their Hub ids; tiny aliases and local paths pass (the loader checks their files, or says
    that a directory is missing).
    """
    if parse_tiny_alias(name) is not None:
        return
    name_or_path = PRETRAINED_MODELS.get(name, name)
    if Path(os.path.expanduser(name_or_path)).exists():
        return
    if looks_like_path(name_or_path):
        return  # a missing directory: the loader says so, without the network
    if not is_hub_id(name_or_path):
        raise UnknownModelError(unknown_model_message(name))
    check_hub_model(name, name_or_path)


def spec_for_model_name(name: str) -> MetricSpec | None:
    """The registry's spec of the metric a model name leads to, without loading anything: an alias, a tiny alias, or
    a local directory's `config.json`; None for a Hub id (or a directory without a readable config), which only its
    loading tells. The commands read the metric's capabilities from it before loading (e.g. that Polos needs
    references)."""
    tiny = parse_tiny_alias(name)
    if tiny is not None:
        return TINY_SPECS[tiny[1]]
    if name in RELEASES:
        return RELEASES[name][0]
    config = Path(os.path.expanduser(name)) / "config.json"
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return spec_for_model_type(model_type)


def check_hub_model(name: str, repo_id: str) -> None:
    """A Hub id in the local cache passes; otherwise one request with a short timeout and no retries says whether
    the Hub has it. Offline mode, an unreachable Hub or a missing repository raise here, with the ways out."""
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return  # cached: the libraries use the copy when the Hub cannot be reached, without retrying
    label = repo_id if name == repo_id else f"{name!r} ({repo_id})"
    if constants.HF_HUB_OFFLINE:
        raise ModelUnavailableError(
            f"model {label} is not in the local Hugging Face cache, and HF_HUB_OFFLINE=1 forbids downloading it; "
            f"{ways_out(name, offline=True)}"
        )
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    timeout = float(os.environ.get("HF_HUB_ETAG_TIMEOUT", DEFAULT_PROBE_TIMEOUT))
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=timeout, retry_on_errors=False)
    except RepositoryNotFoundError:
        closest = closest_model_name(name)
        hint = f"; did you mean {closest!r}?" if closest and closest != name else ""
        raise ModelUnavailableError(
            f"model {label} is not on the Hugging Face Hub (no such repository, or a private one: log in with "
            f"`hf auth login`){hint}; {ways_out(name)}"
        ) from None
    except HfHubHTTPError:
        return  # the Hub answered (a gated repository, a missing config.json...): the loader explains
    except Exception as error:  # noqa: BLE001 (whatever the network layer raises: refused, timed out, no DNS)
        raise ModelUnavailableError(
            f"model {label} is not in the local Hugging Face cache, and the Hub ({constants.ENDPOINT}) could not be "
            f"reached ({type(error).__name__}: {error}); {ways_out(name)}"
        ) from None


__all__ = [
    "check_hub_model",
    "check_model_source",
    "is_hub_id",
    "looks_like_path",
    "spec_for_model_name",
    "unknown_model_message",
    "ways_out",
]
