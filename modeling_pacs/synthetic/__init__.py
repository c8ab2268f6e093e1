"""Synthetic positives for PAC-S++ training: BLIP captions and Stable Diffusion images (SPEC §3).

Not remote code: it may import `diffusers` (the `generate` extra) and `datasets`.
"""

from .generation import (
    DEFAULT_CAPTIONER,
    DEFAULT_GENERATOR,
    SCHEDULERS,
    BlipCaptioner,
    GenerationSettings,
    SourceImage,
    StableDiffusionGenerator,
    dataset_images,
    generate_shard,
    item_seed,
    karpathy_images,
    load_synthetic_dataset,
    resolve_revision,
    summarize,
    write_parquet,
)

__all__ = [
    "DEFAULT_CAPTIONER",
    "DEFAULT_GENERATOR",
    "SCHEDULERS",
    "BlipCaptioner",
    "GenerationSettings",
    "SourceImage",
    "StableDiffusionGenerator",
    "dataset_images",
    "generate_shard",
    "item_seed",
    "karpathy_images",
    "load_synthetic_dataset",
    "resolve_revision",
    "summarize",
    "write_parquet",
]
