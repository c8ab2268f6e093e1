"""The tiny models behind the `tiny*` aliases of `load_model`: built once per variant and backbone, cached on disk,
by the builder each family's `TinyModels` names in the registry."""

import os
import shutil
import tempfile
from pathlib import Path

from ..metric_spec import resolve
from ..registry import TINY_SEED, TINY_SPECS


def tiny_model_directory(variant: str = "pac_s_pp", backbone: str = "clip") -> Path:
    """A random tiny model saved once per variant and backbone under the user's cache (offline smoke runs, tests)."""

    cache = Path(os.environ.get("PACS_PP_CACHE", Path.home() / ".cache" / "pacs_pp"))
    directory = cache / f"tiny-{'' if backbone == 'clip' else backbone + '-'}{variant}-seed{TINY_SEED}"
    if not (directory / "config.json").is_file():
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
        try:
            temporary.rename(directory)  # atomic: concurrent builders never see a half-written directory
        except OSError:
            shutil.rmtree(temporary)  # another process finished first
    return directory


__all__ = ["tiny_model_directory"]
