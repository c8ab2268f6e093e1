"""Synthetic positives for PAC-S++ training: a BLIP caption per real image and a Stable Diffusion image per human
caption (PAC-S++ paper Sec. 3.2), generated on the job engine (sharded, resumable, exactly once) into parquet shards
that training reads in place. It may import `diffusers` (the `generate` extra) and `datasets`.
"""

from . import generation
from .generation import *  # noqa: F403 (the package re-exports the module's public names)

__all__ = generation.__all__
