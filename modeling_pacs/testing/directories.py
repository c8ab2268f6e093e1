"""The tiny models behind the `tiny*` aliases of `load_model` and `pacs-pp make-tiny`: built by the builder each
family's `TinyModels` names in the registry, marked as random weights (so that every loader warns), and for the
aliases cached on disk once per variant and backbone."""

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..jobs import write_text_atomically
from ..metric_spec import resolve
from ..models import processing_random_weights
from ..models.artifacts import RANDOM_WEIGHTS_FIELD
from ..registry import TINY_SEED, TINY_SPECS


def save_tiny_model(directory: str | Path, variant: str = "pac_s_pp", backbone: str = "clip", seed: int = TINY_SEED):
    """Save the tiny model of `variant` and `backbone` in `directory`, marked as random weights.

    The default seed is the one of the `tiny` aliases (`registry.TINY_SEED`): its random cosines on the examples are
    positive, so the scores are not all clipped to 0 by Eq. 4's max(cos, 0).
    """
    resolve(TINY_SPECS[variant].tiny.builder)(directory, variant=variant, backbone=backbone, seed=seed)
    mark_random_weights(directory)


def mark_random_weights(directory: str | Path) -> None:
    """Set the config's random-weights marker: loading the directory then warns, through `AutoModel`, `load_model` or
    the metric's `from_pretrained` (`models/artifacts.py`, `warn_if_random_weights`); and, where the directory has a
    processor, name `models/processing_random_weights.py` as its `AutoProcessor` entry, which warns too. Idempotent.

    Only tiny directories carry it: the builders of `modeling_pacs.testing` write released layouts unchanged.
    """
    directory = Path(directory)
    update_json(directory / "config.json", {RANDOM_WEIGHTS_FIELD: True})
    processor_config = directory / "processor_config.json"
    if processor_config.is_file():  # AutoProcessor(..., trust_remote_code=True) warns too
        entry = Path(processing_random_weights.__file__)
        if not (directory / entry.name).is_file():
            shutil.copyfile(entry, directory / entry.name)
            (directory / entry.name).chmod(0o644)
        update_json(processor_config, {"auto_map": {"AutoProcessor": f"{entry.stem}.RandomWeightsProcessor"}})


def update_json(path: Path, values: dict) -> None:
    """Set `values` in the JSON object of `path` (atomically; nothing is written when they are already there)."""
    content = json.loads(path.read_text(encoding="utf-8"))
    if any(content.get(key) != value for key, value in values.items()):
        write_text_atomically(path, [json.dumps(content | values, indent=2, sort_keys=True) + "\n"])


def tiny_model_directory(variant: str = "pac_s_pp", backbone: str = "clip") -> Path:
    """A random tiny model saved once per variant and backbone under the user's cache (offline smoke runs, tests)."""

    cache = Path(os.environ.get("PACS_PP_CACHE", Path.home() / ".cache" / "pacs_pp"))
    directory = cache / f"tiny-{'' if backbone == 'clip' else backbone + '-'}{variant}-seed{TINY_SEED}"
    if (directory / "config.json").is_file():
        mark_random_weights(directory)  # a cache written before the marker existed
    else:
        directory.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=directory.name, dir=directory.parent))
        resolve(TINY_SPECS[variant].tiny.builder)(temporary, variant=variant, backbone=backbone, seed=TINY_SEED)
        if not (temporary / "config.json").is_file():  # never publish a half-saved model into the cache
            shutil.rmtree(temporary)
            raise RuntimeError(
                f"the tiny model {directory.name} could not be saved on process {os.environ.get('RANK', '?')}: "
                "transformers writes weights only on rank 0 once torch.distributed is initialised; load the tiny "
                "models before creating TrainingArguments / the process group, or on rank 0 first"
            )
        mark_random_weights(temporary)
        try:
            temporary.rename(directory)  # atomic: concurrent builders never see a half-written directory
        except OSError:
            shutil.rmtree(temporary)  # another process finished first
    return directory


__all__ = ["mark_random_weights", "save_tiny_model", "tiny_model_directory"]
