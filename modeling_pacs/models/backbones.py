"""What differs between the dual encoders PAC-S++ can be built on: OpenAI CLIP and Google SigLIP / SigLIP 2.

SigLIP 2's fixed-resolution checkpoints (e.g. `google/siglip2-base-patch16-224`) are SigLIP models (`model_type`
`siglip`, a Gemma tokenizer): they are supported as SigLIP. SigLIP 2's NaFlex checkpoints (`model_type` `siglip2`)
take patch sequences of variable length and are refused with an explanation.

| | CLIP | SigLIP / SigLIP 2 |
| --- | --- | --- |
| image resize | shorter side, then center crop | to the square size, no crop |
| normalisation | OpenAI mean / std | mean = std = 0.5 |
| transparency | dropped (as torchvision) | composited onto white (as `SiglipImageProcessor`) |
| text | CLIP cleaning, "A photo depicts " | as given, no prompt |
| padding | to the longest, masked | to max_length (64), unmasked, as trained |
| pooled text | projection of the end-of-text state | `head` of the last position |
| pooled image | projection of the class token | attention-pooling `head` |
| logit bias | none | never used: scores are cosines |

Nothing here needs more than torch and transformers: this module is part of the remote code.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from transformers import PreTrainedConfig

from .inputs import (
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    ImageInput,
    load_and_preprocess,
    load_and_preprocess_squashed,
)

SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)

# Default `w` of Eq. 4 by backbone and variant. The PAC-S++ paper (Table 8) reports SigLIP results as correlations
# and accuracies, which do not depend on `w` (a positive scale), and states no `w` for SigLIP: we keep CLIP's values
# so scores of all backbones share one convention. Set `w` explicitly to rescale a SigLIP model's scores.
# CLIP's values: docs/spec/pacs.md#metric (PAC-S++ paper Sec. 5.7, CLIPScore Sec. 3, official PAC-S code).
CLIP_DEFAULT_W = {"clip_s": 2.5, "pac_s": 2.0, "pac_s_pp": 2.5}
BACKBONE_DEFAULT_W = {"clip": CLIP_DEFAULT_W, "siglip": CLIP_DEFAULT_W}


@dataclass(frozen=True)
class BackboneSpec:
    """How one backbone family preprocesses, tokenises and pools (see the module docstring's table).

    Args:
        image_mean, image_std: per-channel normalisation of `[0, 1]` pixels.
        center_crop: resize the shorter side then crop (CLIP), or resize to the square size (SigLIP).
        composite_alpha: composite transparent images onto white before dropping alpha.
        clean_text: apply the original CLIP tokenizer's cleaning (ftfy, html unescape, whitespace).
        text_padding: `"longest"` (CLIP: padding is masked, batches may be trimmed) or `"max_length"` (SigLIP: the
            pooled state is the last position, so texts are always as long as the model was trained with).
        text_attention_mask: pass the attention mask to the text tower (SigLIP was trained without one).
        default_prompt_prefix: `PACSConfig.prompt_prefix` when none is given.
    """

    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    center_crop: bool
    composite_alpha: bool
    clean_text: bool
    text_padding: str
    text_attention_mask: bool
    default_prompt_prefix: str


BACKBONES = {
    "clip": BackboneSpec(
        image_mean=OPENAI_CLIP_MEAN,
        image_std=OPENAI_CLIP_STD,
        center_crop=True,
        composite_alpha=False,
        clean_text=True,
        text_padding="longest",
        text_attention_mask=True,
        default_prompt_prefix="A photo depicts ",
    ),
    "siglip": BackboneSpec(
        image_mean=SIGLIP_MEAN,
        image_std=SIGLIP_STD,
        center_crop=False,
        composite_alpha=True,
        clean_text=False,
        text_padding="max_length",
        text_attention_mask=False,
        default_prompt_prefix="",
    ),
}


def backbone_family(backbone_config: PreTrainedConfig) -> str:
    """`"clip"` or `"siglip"` for a backbone config; raises a `ValueError` explaining what is supported otherwise."""
    model_type = getattr(backbone_config, "model_type", None)
    if model_type == "siglip2":
        raise ValueError(
            "backbone model_type 'siglip2' (SigLIP 2 NaFlex: variable-resolution patch sequences) is not supported: "
            "use a fixed-resolution SigLIP 2 checkpoint such as google/siglip2-base-patch16-224 (model_type "
            "'siglip'), which PAC-S++ supports"
        )
    if model_type not in BACKBONES:
        raise ValueError(
            f"backbone model_type {model_type!r} is not supported: PAC-S++ supports {sorted(BACKBONES)} "
            "(CLIP, SigLIP and fixed-resolution SigLIP 2 checkpoints)"
        )
    if model_type == "siglip" and not getattr(backbone_config.vision_config, "vision_use_head", True):
        raise ValueError(
            "this SigLIP backbone has no vision pooling head (vision_use_head=False), so it has no image embedding: "
            "use a SigLIP checkpoint trained for image-text matching (e.g. google/siglip-base-patch16-224)"
        )
    if (
        model_type == "siglip"
        and backbone_config.text_config.projection_size != backbone_config.vision_config.hidden_size
    ):
        raise ValueError(
            f"this SigLIP backbone's text head outputs {backbone_config.text_config.projection_size} dimensions and "
            f"its image head {backbone_config.vision_config.hidden_size}: set text_config.projection_size to the "
            "vision hidden_size so that both embeddings live in one space"
        )
    return model_type


def backbone_spec(backbone_config: PreTrainedConfig) -> BackboneSpec:
    """The [`BackboneSpec`] of a backbone config."""
    return BACKBONES[backbone_family(backbone_config)]


def default_w(backbone_config: PreTrainedConfig, variant: str) -> float:
    """The default `w` of a variant on a backbone (see `BACKBONE_DEFAULT_W`)."""
    return BACKBONE_DEFAULT_W[backbone_family(backbone_config)][variant]


def embedding_dim(backbone_config: PreTrainedConfig) -> int:
    """Size of the joint image-text embedding."""
    if backbone_family(backbone_config) == "siglip":
        return backbone_config.text_config.projection_size
    return backbone_config.projection_dim


def default_max_text_length(backbone_config: PreTrainedConfig) -> int:
    """The context length the backbone was trained with: its text positions (77 for CLIP, 248 for Long-CLIP, 64 for
    SigLIP)."""
    backbone_family(backbone_config)  # refuses unsupported backbones with an explanation
    return backbone_config.text_config.max_position_embeddings


def image_preprocessor(
    backbone_config: PreTrainedConfig, normalisation: tuple[tuple, tuple] | None = None
) -> Callable[[ImageInput, int], torch.Tensor]:
    """`preprocess(image, index) -> [3, H, W]` with the backbone's own image pipeline (see the module docstring);
    `normalisation` = `(mean, std)` replaces the family's (OpenCLIP checkpoints trained on LAION use 0.5, 0.5)."""
    spec = backbone_spec(backbone_config)
    mean, std = normalisation or (spec.image_mean, spec.image_std)
    size = backbone_config.vision_config.image_size
    if spec.center_crop:
        return partial(load_and_preprocess, size=size, mean=tuple(mean), std=tuple(std))
    height, width = (size, size) if isinstance(size, int) else size
    return partial(load_and_preprocess_squashed, height=height, width=width, mean=mean, std=std)


def encode_text_batch(
    backbone: nn.Module, family: str, input_ids: torch.Tensor, attention_mask: torch.Tensor, return_tokens: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Projected pooled text embeddings `[B, D]` and, with `return_tokens`, every position projected `[B, L, D]`."""
    if family == "siglip":
        outputs = backbone.text_model(input_ids=input_ids)
        pooled, projection = outputs.pooler_output, backbone.text_model.head
    else:
        outputs = backbone.text_model(input_ids=input_ids, attention_mask=attention_mask)
        pooled, projection = backbone.text_projection(outputs.pooler_output), backbone.text_projection
    return pooled, projection(outputs.last_hidden_state) if return_tokens else None


def encode_image_batch(backbone: nn.Module, family: str, pixel_values: torch.Tensor) -> torch.Tensor:
    """Projected pooled image embeddings `[B, D]` (SigLIP's attention-pooling head is its projection)."""
    outputs = backbone.vision_model(pixel_values=pixel_values)
    if family == "siglip":
        return outputs.pooler_output
    return backbone.visual_projection(outputs.pooler_output)


def projection_modules(backbone: nn.Module, family: str) -> list[nn.Module]:
    """The modules after the encoders that map to the joint space (what the PAC-S recipe trains)."""
    if family == "siglip":
        return [backbone.vision_model.head, backbone.text_model.head]
    return [backbone.visual_projection, backbone.text_projection]


def multihead_attention_projections(module: nn.Module) -> list[str]:
    """Names of the linear layers inside `nn.MultiheadAttention` modules (SigLIP's pooling head).

    `nn.MultiheadAttention` reads its `out_proj.weight` directly, so a LoRA layer matched there by the name
    `out_proj` would train without ever changing the output: these names are excluded from LoRA targets.
    """
    return [
        f"{name}.{child_name}"
        for name, child in module.named_modules()
        if isinstance(child, nn.MultiheadAttention)
        for child_name, _ in child.named_children()
    ]


__all__ = [
    "BACKBONES",
    "BACKBONE_DEFAULT_W",
    "BackboneSpec",
    "backbone_family",
    "backbone_spec",
    "default_max_text_length",
    "default_w",
    "embedding_dim",
    "encode_image_batch",
    "encode_text_batch",
    "image_preprocessor",
    "multihead_attention_projections",
    "projection_modules",
]
