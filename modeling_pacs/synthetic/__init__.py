"""Synthetic positives for PAC-S++ training: BLIP captions and Stable Diffusion images (SPEC §3).

Not remote code: it may import `diffusers` (the `generate` extra) and `datasets`.
"""

from . import generation
from .generation import *  # noqa: F403 (the package re-exports the module's public names)

__all__ = generation.__all__
