"""Convert Long-CLIP checkpoints (Zhang et al., ECCV 2024) into PACSModel directories: CLIP-S / RefCLIP-S whose
text encoder reads 248 tokens instead of CLIP's 77.

Long-CLIP (code: github.com/beichenzbc/Long-CLIP; weights: `BeichenZhang/LongCLIP-B` and `-L` on the Hub) is OpenAI's
CLIP fine-tuned with a longer text context. Its checkpoints are plain fp32 state dicts in OpenAI CLIP layout with one
extra tensor: both `positional_embedding` and `positional_embedding_res` are `[248, width]`, and the text forward
(`model/model_longclip.py`, `CLIP.encode_text`) adds

    positional_embedding * mask1 + positional_embedding_res * mask2,   mask1 = rows 0..19, mask2 = rows 20..247

("knowledge-preserved stretching": the first 20 positions are CLIP's own, the rest are the stretched and fine-tuned
ones). The masks are 0/1 and complementary, so that sum is one table, `cat(pe[:20], pe_res[20:])`; a transformers
`CLIPModel` with `max_position_embeddings=248` holding it runs Long-CLIP's text forward (causal mask, end-of-text
pooling) unchanged. Everything else is the OpenAI -> transformers mapping of `convert.py`. The image tower, the image
preprocessing and the BPE tokenizer are CLIP's.

Weight precision: Long-CLIP's own `longclip.load()` casts the linear, convolution, attention and projection weights
of the model to fp16 *before* loading the fp32 checkpoint into them, so even on CPU it computes with those tensors
rounded to fp16 (embeddings, layer norms and the logit scale stay fp32). `weight_precision="official"` (the default)
applies the same rounding, so scores equal the ones Long-CLIP's own loader gives; `"fp32"` keeps the checkpoint's
fp32 training weights as stored (features then differ from `longclip.load()` at fp16-rounding level).

Example:

```python
>>> from modeling_pacs.convert_longclip import convert_longclip_checkpoint
>>> converted = convert_longclip_checkpoint("longclip-B.pt", "longclip-b16")
>>> converted.model.score(["cat.jpg"], ["a long and detailed description of a cat ..."]).scores
```
"""

import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import yaml

from ..hub import save_remote_code_model
from ..models.configuration_pacs import PACSConfig
from ..models.modeling_pacs import PACSModel
from ..output_paths import check_output_directory, staged_directory
from ..tokenization import build_clip_tokenizer, build_processor
from .convert import (
    CheckpointError,
    CheckpointGeometry,
    OfficialVariant,
    check_layout,
    clip_config_for,
    infer_geometry,
    load_official_checkpoint,
    to_transformers_state_dict,
    verify_saved_model,
)
from .spec import WEIGHT_PRECISIONS

# Long-CLIP's text context: 77 * 4 - 3 * 20 (model/model_longclip.py hard-codes it, masks included).
LONGCLIP_CONTEXT_LENGTH = 248
# Positions taken from `positional_embedding` (CLIP's own); the rest come from `positional_embedding_res`.
LONGCLIP_KEPT_POSITIONS = 20
LONG_POSITIONS_KEY = "positional_embedding_res"
# OpenAI-layout tensors that Long-CLIP's `convert_weights` casts to fp16 before `load_state_dict` (the parameters of
# every Conv2d / Linear / MultiheadAttention, `text_projection` and `visual.proj`).
FP16_ROUNDED_KEYS = re.compile(
    r"^(visual\.conv1\.weight|text_projection|visual\.proj|"
    r".*\.attn\.(in_proj_weight|in_proj_bias|out_proj\.weight|out_proj\.bias)|"
    r".*\.mlp\.(c_fc|c_proj)\.(weight|bias))$"
)
# The license of every BeichenZhang/LongCLIP-* Hub repository (their model cards' metadata).
LONGCLIP_LICENSE = "apache-2.0"
LONGCLIP_PAPER_URL = "https://arxiv.org/abs/2403.15378"
LONGCLIP_CODE_URL = "https://github.com/beichenzbc/Long-CLIP"
CLIPSCORE_PAPER_URL = "https://arxiv.org/abs/2104.08718"
LONGCLIP_CITATION = """\
@inproceedings{zhang2024longclip,
  title={Long-CLIP: Unlocking the Long-Text Capability of CLIP},
  author={Zhang, Beichen and Zhang, Pan and Dong, Xiaoyi and Zang, Yuhang and Wang, Jiaqi},
  booktitle={European Conference on Computer Vision (ECCV)},
  year={2024}
}
@inproceedings{hessel2021clipscore,
  title={{CLIPScore}: A Reference-free Evaluation Metric for Image Captioning},
  author={Hessel, Jack and Holtzman, Ari and Forbes, Maxwell and Le Bras, Ronan and Choi, Yejin},
  booktitle={Conference on Empirical Methods in Natural Language Processing (EMNLP)},
  year={2021}
}"""


def longclip_geometry(embed_dim, image_size, patch_size, vision_width, vision_layers, text_width) -> dict:
    """A released Long-CLIP geometry (the text tower always has 12 layers, 248 positions and CLIP's vocabulary)."""
    return {
        "embed_dim": embed_dim,
        "image_size": image_size,
        "patch_size": patch_size,
        "vision_width": vision_width,
        "vision_layers": vision_layers,
        "text_width": text_width,
        "text_layers": 12,
        "context_length": LONGCLIP_CONTEXT_LENGTH,
        "vocab_size": 49408,
    }


def longclip_variant(name: str, display_name: str, hub_id: str, checkpoint_file: str, geometry: dict):
    """A released Long-CLIP checkpoint, scored as CLIP-S (w = 2.5, CLIPScore's) with QuickGELU towers."""
    return OfficialVariant(
        name=name,
        display_name=display_name,
        metric_variant="clip_s",
        w=2.5,
        base_model_id=hub_id,
        hidden_act="quick_gelu",
        checkpoint_file=checkpoint_file,
        has_lora=False,
        geometry=geometry,
    )


# The released checkpoints (Hub repository BeichenZhang/LongCLIP-*), recognised by their geometry.
LONGCLIP_VARIANTS = {
    "longclip_vit_b16": longclip_variant(
        "longclip_vit_b16",
        "Long-CLIP ViT-B/16",
        "BeichenZhang/LongCLIP-B",
        "longclip-B.pt",
        longclip_geometry(512, 224, 16, 768, 12, 512),
    ),
    "longclip_vit_l14": longclip_variant(
        "longclip_vit_l14",
        "Long-CLIP ViT-L/14",
        "BeichenZhang/LongCLIP-L",
        "longclip-L.pt",
        longclip_geometry(768, 224, 14, 1024, 24, 768),
    ),
    "longclip_vit_b32": longclip_variant(
        "longclip_vit_b32",
        "Long-CLIP ViT-B/32",
        "BeichenZhang/LongCLIP-B-32",
        "longclip-B-32.pt",
        longclip_geometry(512, 224, 32, 768, 12, 512),
    ),
    "longclip_vit_l14_336": longclip_variant(
        "longclip_vit_l14_336",
        "Long-CLIP ViT-L/14@336px",
        "BeichenZhang/LongCLIP-L-336px",
        "longclip-L@336px.pt",
        longclip_geometry(768, 336, 14, 1024, 24, 768),
    ),
}


@dataclass
class ConvertedLongCLIP:
    """Result of a conversion: the CLIP-S model, the released checkpoint it was recognised as, its geometry, the
    weight precision applied and the dtype the file stored."""

    model: PACSModel
    variant: OfficialVariant
    geometry: CheckpointGeometry
    weight_precision: str
    source_dtype: str


# ---------------------------------------------------------------------------------------------------- layout
def merge_positional_embeddings(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of a Long-CLIP state dict with its two positional tables merged into `positional_embedding`
    (`cat(pe[:20], pe_res[20:])`, exactly what the masks of `encode_text` select) and `positional_embedding_res`
    removed: an OpenAI-layout CLIP state dict with 248 text positions.

    Raises a `CheckpointError` naming what the file is when it is not a Long-CLIP checkpoint.
    """
    if any("lora_" in key for key in state_dict):
        raise CheckpointError(
            "the checkpoint has LoRA tensors: it is a PAC-S++ checkpoint, not a Long-CLIP one. Convert it with "
            "`pacs-pp convert --checkpoint FILE --variant pac_s_pp_vit_b32` (or pac_s_pp_vit_l14)"
        )
    if LONG_POSITIONS_KEY not in state_dict:
        found = state_dict.get("positional_embedding")
        what = f"{tuple(found.shape)[0]} text positions" if isinstance(found, torch.Tensor) else "no text positions"
        raise CheckpointError(
            f"the checkpoint has no '{LONG_POSITIONS_KEY}' tensor ({what}): it is not a Long-CLIP checkpoint "
            "(longclip-B.pt / longclip-L.pt from BeichenZhang/LongCLIP-B or -L). A plain OpenAI CLIP is used through "
            "`PACSModel.from_clip`; a PAC-S checkpoint is converted with `pacs-pp convert`"
        )
    positions, long_positions = state_dict.get("positional_embedding"), state_dict[LONG_POSITIONS_KEY]
    expected = (LONGCLIP_CONTEXT_LENGTH, long_positions.shape[-1])
    shapes = {
        "positional_embedding": None if positions is None else tuple(positions.shape),
        LONG_POSITIONS_KEY: tuple(long_positions.shape),
    }
    if any(shape != expected for shape in shapes.values()):
        found = ", ".join(f"{key} {shape}" for key, shape in shapes.items())
        raise CheckpointError(
            f"the checkpoint's positional tables do not have Long-CLIP's layout: found {found}, expected both "
            f"{(LONGCLIP_CONTEXT_LENGTH, 'width')} (Long-CLIP reads exactly {LONGCLIP_CONTEXT_LENGTH} positions; its "
            "model code hard-codes them)"
        )
    merged = {key: value for key, value in state_dict.items() if key != LONG_POSITIONS_KEY}
    merged["positional_embedding"] = torch.cat(
        [positions[:LONGCLIP_KEPT_POSITIONS], long_positions[LONGCLIP_KEPT_POSITIONS:]], dim=0
    )
    return merged


def round_like_official_loader(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of an OpenAI-layout state dict in fp32 whose `FP16_ROUNDED_KEYS` tensors are rounded through fp16, as
    `longclip.load()` holds them (see the module docstring); raises if a value does not fit fp16."""
    rounded = {}
    for key, value in state_dict.items():
        value = value.float()
        if FP16_ROUNDED_KEYS.match(key):
            value = value.half().float()
            if not torch.isfinite(value).all():
                raise CheckpointError(
                    f"tensor '{key}' has values beyond the fp16 range, which Long-CLIP's own loader turns into "
                    "infinities: convert with weight_precision='fp32' (--weight-precision fp32)"
                )
        rounded[key] = value
    return rounded


def identify_variant(
    geometry: CheckpointGeometry, allow_other_geometry: bool = False, base_model_id: str | None = None
) -> OfficialVariant:
    """The released Long-CLIP checkpoint of this geometry; with `allow_other_geometry`, a custom record for any
    other geometry (tests, own fine-tunes), else a `CheckpointError` listing the released geometries."""
    actual = asdict(geometry)
    for variant in LONGCLIP_VARIANTS.values():
        if all(actual[name] == value for name, value in variant.geometry.items()):
            if base_model_id is None:
                return variant
            return replace(variant, base_model_id=base_model_id)
    if not allow_other_geometry:
        released = "; ".join(
            f"{variant.display_name} ({variant.checkpoint_file})" for variant in LONGCLIP_VARIANTS.values()
        )
        raise CheckpointError(
            f"the checkpoint's geometry ({geometry.describe()}) is not one of the released Long-CLIP models "
            f"({released}): pass --allow-other-geometry for a custom or test checkpoint"
        )
    return longclip_variant(
        "longclip_custom",
        "Long-CLIP (custom geometry)",
        base_model_id or "custom-longclip",
        "",
        {name: actual[name] for name in LONGCLIP_VARIANTS["longclip_vit_b16"].geometry},
    )


# ---------------------------------------------------------------------------------------------------- convert
def convert_longclip_state_dict(
    state_dict: dict[str, torch.Tensor],
    weight_precision: str = "official",
    allow_other_geometry: bool = False,
    base_model_id: str | None = None,
) -> ConvertedLongCLIP:
    """Build the CLIP-S `PACSModel` (248-token text side) of a Long-CLIP state dict.

    Args:
        state_dict: Long-CLIP weights in OpenAI layout with `positional_embedding_res` (`load_official_checkpoint`).
        weight_precision: `"official"` (rounded as `longclip.load()` holds them) or `"fp32"` (as stored).
        allow_other_geometry: accept a geometry other than the released checkpoints' (custom or test checkpoints).
        base_model_id: Hub id recorded as the backbone (default: the released repository of this geometry).
    """
    if weight_precision not in WEIGHT_PRECISIONS:
        raise ValueError(f"weight_precision must be one of {WEIGHT_PRECISIONS}, got {weight_precision!r}")
    source_dtype = str(next(iter(state_dict.values())).dtype).removeprefix("torch.")
    merged = merge_positional_embeddings(state_dict)
    geometry = infer_geometry(merged)
    variant = identify_variant(geometry, allow_other_geometry, base_model_id)
    check_layout(merged, geometry, variant)
    if weight_precision == "official":
        merged = round_like_official_loader(merged)

    config = PACSConfig(
        backbone_config=clip_config_for(geometry, variant.hidden_act),
        variant=variant.metric_variant,
        w=variant.w,
        max_text_length=geometry.context_length,
        adapter_path=None,
        base_model_id=variant.base_model_id,
    )
    model = PACSModel(config).eval()
    model.clip.load_state_dict(to_transformers_state_dict(merged, geometry), strict=True)
    model.tokenizer = build_clip_tokenizer(geometry.context_length)
    return ConvertedLongCLIP(model, variant, geometry, weight_precision, source_dtype)


def render_longclip_model_card(converted: ConvertedLongCLIP) -> str:
    """README.md (Hub metadata and card) of a converted Long-CLIP directory."""
    variant, config = converted.variant, converted.model.config
    released = variant.name in LONGCLIP_VARIANTS
    source = f"`{variant.checkpoint_file}` ({variant.base_model_id})" if released else "a Long-CLIP checkpoint"
    metadata = {
        "license": LONGCLIP_LICENSE if released else "other",
        "library_name": "transformers",
        "tags": [
            "image-captioning",
            "captioning-evaluation",
            "evaluation-metric",
            "clip-score",
            "long-clip",
            "custom_code",
        ],
        "base_model": variant.base_model_id,
    }
    license_text = (
        f"Apache-2.0, as the `{variant.base_model_id}` repository."
        if released
        else f"the terms of the fine-tune this was converted from (`{variant.base_model_id}`); Long-CLIP's released "
        "weights and code are Apache-2.0."
    )
    front_matter = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000)
    precision = {
        "official": "the linear, convolution, attention and projection weights are rounded to fp16 as Long-CLIP's "
        "own `longclip.load()` holds them, so features equal that loader's",
        "fp32": "the checkpoint's fp32 weights as stored (features differ from Long-CLIP's own `longclip.load()`, "
        "which rounds the linear weights to fp16, at that rounding level)",
    }[converted.weight_precision]
    sections = [
        f"# CLIP-S / RefCLIP-S on {variant.display_name}: captions of up to {config.max_text_length} tokens",
        f"A captioning metric: CLIPScore (Hessel et al., [arXiv:2104.08718]({CLIPSCORE_PAPER_URL})) computed with "
        f"Long-CLIP (Zhang et al., ECCV 2024, [arXiv:2403.15378]({LONGCLIP_PAPER_URL})), a CLIP fine-tuned to read "
        f"{config.max_text_length} text tokens instead of 77, so long, detailed captions are scored whole. Converted "
        f"from {source} with `pacs-pp convert-longclip`. No results are reported for this model.",
        "## What the metric computes",
        f"- Reference-free (CLIP-S, Eq. 4): `w * max(cos(E_v(v), E_t(t)), 0)` with **w = {config.w}**.\n"
        "- Reference-based (RefCLIP-S, Eq. 5): the harmonic mean of CLIP-S and `max(0, max_r cos(E_t(t), E_t(r)))`.\n"
        f'- Texts: `"{config.prompt_prefix}"` + caption, CLIP\'s BPE tokenizer, up to {config.max_text_length} '
        "tokens (longer ones are truncated keeping the end-of-text token, as Long-CLIP's `tokenize(..., "
        "truncate=True)`). Images: CLIP's preprocessing (shorter side to "
        f"{config.backbone_config.vision_config.image_size} px, bicubic, center crop, OpenAI mean/std).\n"
        f"- Text positions: the first {LONGCLIP_KEPT_POSITIONS} from `positional_embedding`, the rest from "
        "`positional_embedding_res`, exactly as Long-CLIP's `encode_text` combines them.\n"
        f"- Weights: {precision}.",
        "## Usage",
        "```python\nimport torch\nfrom transformers import AutoModel\n\n"
        'model = AutoModel.from_pretrained("path/to/this/directory", trust_remote_code=True, dtype=torch.float32)\n'
        'out = model.score(["cat.jpg"], ["a long, detailed description of the picture ..."])\n```',
        "## Limitations",
        "- Scores are comparable only within one model and one w: Long-CLIP's cosines are not on the scale of "
        "OpenAI CLIP's, and w = 2.5 is CLIPScore's value for CLIP ViT-B/32.\n"
        "- The text tower reads at most 248 tokens; longer captions are still truncated.\n"
        f"- License: {license_text}",
        "## Citation",
        f"```bibtex\n{LONGCLIP_CITATION}\n```",
    ]
    return f"---\n{front_matter}---\n\n" + "\n\n".join(sections) + "\n"


def save_converted_longclip(
    converted: ConvertedLongCLIP, output_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write a complete Hub-ready directory (config with auto_map, remote code, safetensors, tokenizer with
    `model_max_length` 248, processor, README.md), atomically."""
    output_dir = Path(output_dir)
    check_output_directory(output_dir, overwrite=overwrite)
    with staged_directory(output_dir) as staging:
        save_remote_code_model(
            converted.model, staging, processor=build_processor(converted.model.config, converted.model.tokenizer)
        )
        (staging / "README.md").write_text(render_longclip_model_card(converted), encoding="utf-8")
    return output_dir


def convert_longclip_checkpoint(
    checkpoint: str | os.PathLike,
    output_dir: str | os.PathLike,
    weight_precision: str = "official",
    allow_other_geometry: bool = False,
    base_model_id: str | None = None,
    overwrite: bool = False,
    verify: bool = True,
    log=print,
) -> ConvertedLongCLIP:
    """Load a Long-CLIP checkpoint safely (`torch.load(weights_only=True)`), convert it, write a Hub-ready directory
    and (by default) check that the directory reloads to the same features on 248-token texts."""
    check_output_directory(output_dir, inputs=[checkpoint], overwrite=overwrite)
    state_dict = load_official_checkpoint(checkpoint, "the Long-CLIP .pt file itself (longclip-B.pt), not its folder")
    converted = convert_longclip_state_dict(state_dict, weight_precision, allow_other_geometry, base_model_id)
    log(
        f"{converted.variant.display_name}: {converted.geometry.describe()}, {converted.geometry.context_length} text "
        f"positions (checkpoint dtype {converted.source_dtype}, weight precision {weight_precision})"
    )
    save_converted_longclip(converted, output_dir, overwrite)
    if verify:
        difference = verify_saved_model(converted, output_dir, text_length=converted.geometry.context_length)
        log(f"reloaded '{output_dir}': largest feature difference from the conversion {difference:.2g}")
    log(f"wrote {output_dir}")
    return converted


__all__ = [
    "LONGCLIP_CONTEXT_LENGTH",
    "LONGCLIP_KEPT_POSITIONS",
    "LONGCLIP_VARIANTS",
    "WEIGHT_PRECISIONS",
    "ConvertedLongCLIP",
    "convert_longclip_checkpoint",
    "convert_longclip_state_dict",
    "merge_positional_embeddings",
    "round_like_official_loader",
]
