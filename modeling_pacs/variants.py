"""The one registry of variants: released models (Hub aliases, w, names), the official checkpoints, tiny aliases.

Read by loading, the converter, the model cards, training, the evaluation report, the Space, the CLI and the
`evaluate` module; nothing else defines a variant, an alias or a `w`. The remote code (`models/`) cannot import this
module (it is not copied into model directories): the metric variants and their default `w` are defined there
(`models.backbones.CLIP_DEFAULT_W`) and read here, and a test keeps the few Hub ids the remote code must hold as
defaults equal to this registry.
"""

from dataclasses import dataclass

from .models.backbones import CLIP_DEFAULT_W

# `PACSConfig.variant`: the scores a model computes (Eqs. 4-5 with the variant's default w).
METRIC_VARIANTS = tuple(CLIP_DEFAULT_W)

VIT_B32_GEOMETRY = {
    "embed_dim": 512,
    "image_size": 224,
    "patch_size": 32,
    "vision_width": 768,
    "vision_layers": 12,
    "text_width": 512,
    "text_layers": 12,
    "context_length": 77,
    "vocab_size": 49408,
}
VIT_L14_GEOMETRY = {
    "embed_dim": 768,
    "image_size": 224,
    "patch_size": 14,
    "vision_width": 1024,
    "vision_layers": 24,
    "text_width": 768,
    "text_layers": 12,
    "context_length": 77,
    "vocab_size": 49408,
}


@dataclass(frozen=True)
class OfficialVariant:
    """One released checkpoint of the official code: what it is, how it scores, and the geometry it must have."""

    name: str
    display_name: str
    metric_variant: str
    w: float
    base_model_id: str
    hidden_act: str
    checkpoint_file: str
    has_lora: bool
    geometry: dict


# w: PAC-S uses 2.0 (official code); PAC-S++ 2.5 (ViT-B/32) and 3.0 (ViT-L/14) (PAC-S++ paper Sec. 5.7).
OFFICIAL_VARIANTS = {
    variant.name: variant
    for variant in (
        OfficialVariant("pac_s_vit_b32", "PAC-S ViT-B/32", "pac_s", 2.0, "openai/clip-vit-base-patch32",
                        "quick_gelu", "clip_ViT-B-32.pth", False, VIT_B32_GEOMETRY),
        OfficialVariant("pac_s_openclip_vit_l14", "PAC-S OpenCLIP ViT-L/14", "pac_s", 2.0,
                        "laion/CLIP-ViT-L-14-laion2B-s32B-b82K", "gelu", "openClip_ViT-L-14.pth", False,
                        VIT_L14_GEOMETRY),
        OfficialVariant("pac_s_pp_vit_b32", "PAC-S++ ViT-B/32", "pac_s_pp", 2.5, "openai/clip-vit-base-patch32",
                        "quick_gelu", "PAC++_clip_ViT-B-32.pth", True, VIT_B32_GEOMETRY),
        OfficialVariant("pac_s_pp_vit_l14", "PAC-S++ ViT-L/14", "pac_s_pp", 3.0, "openai/clip-vit-large-patch14",
                        "quick_gelu", "PAC++_clip_ViT-L-14.pth", True, VIT_L14_GEOMETRY),
    )
}  # fmt: skip

# Hub ids of the released metrics. The PAC-S / PAC-S++ and Polos repositories are produced by the converters from the
# official checkpoints; CLIP-S wraps OpenAI's CLIP as OpenAI publishes it on the Hub.
PRETRAINED_MODELS = {
    "pac_s_pp_vit_b32": "pacs-pp/pac-s-pp-clip-vit-b32",
    "pac_s_pp_vit_l14": "pacs-pp/pac-s-pp-clip-vit-l14",
    "pac_s_vit_b32": "pacs-pp/pac-s-clip-vit-b32",
    "pac_s_openclip_vit_l14": "pacs-pp/pac-s-openclip-vit-l14",
    "clip_s_vit_b32": "openai/clip-vit-base-patch32",
    "clip_s_vit_l14": "openai/clip-vit-large-patch14",
    "polos_vit_b32": "pacs-pp/polos-clip-vit-b32",
}
DEFAULT_MODEL = "pac_s_pp_vit_b32"
# The metric variant each alias loads (`PACSConfig.variant`, or "polos").
ALIAS_VARIANTS = {
    "pac_s_pp_vit_b32": "pac_s_pp",
    "pac_s_pp_vit_l14": "pac_s_pp",
    "pac_s_vit_b32": "pac_s",
    "pac_s_openclip_vit_l14": "pac_s",
    "clip_s_vit_b32": "clip_s",
    "clip_s_vit_l14": "clip_s",
    "polos_vit_b32": "polos",
}
# Short names (the `evaluate` module's config names, the Space): the ViT-B/32 release of each variant.
SHORT_NAMES = {"pac_s_pp": "pac_s_pp_vit_b32", "pac_s": "pac_s_vit_b32", "clip_s": "clip_s_vit_b32",
               "polos": "polos_vit_b32"}  # fmt: skip
# The papers' names of the released models (evaluation report rows), by alias and by Hub id.
PAPER_NAMES = {"pac_s_pp_vit_b32": "PAC-S++", "pac_s_pp_vit_l14": "PAC-S++ L/14", "pac_s_vit_b32": "PAC-S",
               "clip_s_vit_b32": "CLIP-S"}  # fmt: skip
PAPER_NAMES.update({PRETRAINED_MODELS[alias]: name for alias, name in list(PAPER_NAMES.items())})
# The Space's model selector: label -> (CLIP-S model, the second metric's model).
SPACE_CHOICES = {
    "ViT-B/32": ("clip_s_vit_b32", "pac_s_pp_vit_b32"),
    "ViT-L/14": ("clip_s_vit_l14", "pac_s_pp_vit_l14"),
    # Polos is reference-based: the Space shows Polos (and CLIP-S) once references are entered.
    "Polos (ViT-B/32)": ("clip_s_vit_b32", "polos_vit_b32"),
}

# Tiny random models (tests, offline smoke runs): "tiny[-siglip|-siglip2][:variant]".
TINY_MODEL_PREFIX = "tiny"
TINY_BACKBONES = {TINY_MODEL_PREFIX: "clip", "tiny-siglip": "siglip", "tiny-siglip2": "siglip2"}
TINY_VARIANTS = (*METRIC_VARIANTS, "polos", "pearl")
# Seed of the tiny models: with it, random cosines on the examples are positive, so demos show non-zero scores.
TINY_SEED = 1


def parse_tiny_alias(name: str) -> tuple[str, str] | None:
    """`"tiny-siglip:pac_s"` -> `("siglip", "pac_s")`, `"tiny"` -> `("clip", "pac_s_pp")`; None for any other name.

    Example:

    ```python
    >>> parse_tiny_alias("tiny:clip_s"), parse_tiny_alias("openai/clip-vit-base-patch32")
    (('clip', 'clip_s'), None)
    ```
    """
    prefix, _, variant = name.partition(":")
    if prefix not in TINY_BACKBONES:
        return None
    variant = variant or "pac_s_pp"
    if variant not in TINY_VARIANTS:
        raise ValueError(f"unknown tiny model {name!r}: the variant after ':' must be one of {list(TINY_VARIANTS)}")
    return TINY_BACKBONES[prefix], variant


def tiny_alias(variant: str = "pac_s_pp", backbone: str = "clip") -> str:
    """The alias of a tiny model: `tiny_alias("clip_s")` -> `"tiny:clip_s"`, `tiny_alias()` -> `"tiny"`."""
    prefix = next(alias for alias, family in TINY_BACKBONES.items() if family == backbone)
    return prefix if variant == "pac_s_pp" else f"{prefix}:{variant}"


def release_for_training(metric_variant: str, large: bool) -> str:
    """The official release whose model card a model trained here derives from (its recipe and backbone size)."""
    return {
        ("pac_s_pp", False): "pac_s_pp_vit_b32",
        ("pac_s_pp", True): "pac_s_pp_vit_l14",
        ("pac_s", False): "pac_s_vit_b32",
        ("pac_s", True): "pac_s_openclip_vit_l14",
    }[(metric_variant, large)]


__all__ = [
    "ALIAS_VARIANTS",
    "DEFAULT_MODEL",
    "METRIC_VARIANTS",
    "OFFICIAL_VARIANTS",
    "OfficialVariant",
    "PAPER_NAMES",
    "PRETRAINED_MODELS",
    "SHORT_NAMES",
    "SPACE_CHOICES",
    "TINY_BACKBONES",
    "TINY_MODEL_PREFIX",
    "TINY_SEED",
    "TINY_VARIANTS",
    "VIT_B32_GEOMETRY",
    "VIT_L14_GEOMETRY",
    "parse_tiny_alias",
    "release_for_training",
    "tiny_alias",
]
