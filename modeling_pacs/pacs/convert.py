"""Convert official PAC-S / PAC-S++ checkpoints (OpenAI / OpenCLIP CLIP layouts, docs/spec/pacs.md#checkpoints) into
PACSModel directories.

The official files are torch pickles with the weights under `state_dict`, in OpenAI CLIP key names
(`visual.transformer.resblocks.N.attn.in_proj_weight`, `mlp.c_fc`, `ln_1`, ...); PAC-S++ adds custom-loralib LoRA
tensors (`attn.in_proj_weight_lora_A/B`, `attn.out_proj.lora_A/B`, `mlp.c_fc.lora_A/B`, `mlp.c_proj.lora_A/B`,
`visual.conv1.lora_A/B`). The converter:

1. loads the file with `torch.load(weights_only=True)` (a pickle that needs code is refused);
2. infers the geometry from tensor shapes (as `clip/model.py`'s `build_model` does) and checks every key and shape;
3. maps the base weights onto `transformers.CLIPModel` (the mapping of transformers' own CLIP conversion);
4. PAC-S++: merges the patch-embedding delta (no PEFT equivalent) into `patch_embedding.weight` and writes the other
   deltas as a PEFT LoRA adapter (q/k/v share the official in-projection A; B is split by rows).
   `lora_mode="official"` reproduces the released inference (MLP deltas skipped, see docs/spec/pacs.md#checkpoints),
   `"full"` applies all.

Example:

```python
>>> from modeling_pacs.pacs.convert import convert_checkpoint
>>> result = convert_checkpoint("PAC++_clip_ViT-B-32.pth", "pac_s_pp_vit_b32", "pac-s-pp-vit-b32")
>>> result.model.score(["cat.jpg"], ["a cat on a sofa"]).scores
```
"""

import math
import os
import pickle
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import CLIPConfig

from ..errors import InputError
from ..hub import save_remote_code_model
from ..input_paths import check_input_file
from ..models.artifacts import check_pickle_checkpoint
from ..models.configuration_pacs import PACSConfig
from ..models.modeling_pacs import PACSModel
from ..output_paths import check_output_directory, staged_directory
from ..tokenization import build_clip_tokenizer, build_processor
from .model_card import render_model_card
from .spec import LORA_MODES, OFFICIAL_VARIANTS, OPENAI_HEAD_DIM, OfficialVariant

OFFICIAL_CHECKPOINT_FILE = "the official .pth file itself (e.g. PAC++_clip_ViT-B-32.pth), not its folder"

# Official custom-loralib settings of PAC-S++ (docs/spec/pacs.md#checkpoints): rank from the tensors, alpha 1, so
# scaling = 1 / rank.
OFFICIAL_LORA_ALPHA = 1.0
# Metadata entries of OpenAI's jit checkpoints and the text causal mask some OpenCLIP versions saved: not weights.
NON_WEIGHT_KEYS = ("input_resolution", "context_length", "vocab_size", "attn_mask")
# Keys the geometry is read from; without them the file is not a CLIP ViT in OpenAI layout at all.
GEOMETRY_KEYS = (
    "visual.conv1.weight",
    "visual.positional_embedding",
    "visual.proj",
    "text_projection",
    "positional_embedding",
    "token_embedding.weight",
    "ln_final.weight",
)
# Shown per list in layout errors; the rest is counted.
MAX_KEYS_SHOWN = 12


class CheckpointError(InputError):
    """The file is not a checkpoint the converter can read (not a plain weights file, or of the wrong layout)."""


@dataclass(frozen=True)
class CheckpointGeometry:
    """Dual-encoder geometry read from an OpenAI-layout state dict."""

    embed_dim: int
    image_size: int
    patch_size: int
    vision_width: int
    vision_layers: int
    vision_heads: int
    vision_mlp_width: int
    context_length: int
    vocab_size: int
    text_width: int
    text_layers: int
    text_heads: int
    text_mlp_width: int
    lora_rank: int | None = None

    def describe(self) -> str:
        return (
            f"vision {self.vision_layers} layers x {self.vision_width} "
            f"(patch {self.patch_size}, {self.image_size} px), "
            f"text {self.text_layers} layers x {self.text_width}, projection {self.embed_dim}"
        )


# Official LoRA groups: (checkpoint name inside a residual block, PEFT target modules of the transformers layer).
LORA_GROUPS = {
    "attn.in_proj": ("attn.in_proj_weight_lora_", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    "attn.out_proj": ("attn.out_proj.lora_", ("self_attn.out_proj",)),
    "mlp.c_fc": ("mlp.c_fc.lora_", ("mlp.fc1",)),
    "mlp.c_proj": ("mlp.c_proj.lora_", ("mlp.fc2",)),
}
# The released inference skips these (model.eval() before loading marks them merged; docs/spec/pacs.md#checkpoints).
SKIPPED_IN_OFFICIAL_MODE = ("mlp.c_fc", "mlp.c_proj")
# Base weight each LoRA group modifies, for relative delta norms.
LORA_GROUP_WEIGHTS = {
    "attn.in_proj": "attn.in_proj_weight",
    "attn.out_proj": "attn.out_proj.weight",
    "mlp.c_fc": "mlp.c_fc.weight",
    "mlp.c_proj": "mlp.c_proj.weight",
}
TOWERS = {
    "vision": ("visual.transformer.resblocks.", "vision_model.encoder.layers."),
    "text": ("transformer.resblocks.", "text_model.encoder.layers."),
}


@dataclass
class DeltaNorm:
    """Frobenius norm of one LoRA delta group of one tower (over all its blocks), absolute and relative to the
    base weights it modifies, and whether the chosen mode applies it."""

    tower: str
    group: str
    norm: float
    relative_norm: float
    applied: bool


@dataclass
class ConvertedCheckpoint:
    """Result of a conversion: the model (PAC-S++: adapter attached unmerged), its geometry and the delta norms."""

    model: PACSModel
    variant: OfficialVariant
    geometry: CheckpointGeometry
    lora_mode: str | None
    delta_norms: list[DeltaNorm]
    source_dtype: str


# ---------------------------------------------------------------------------------------------------- loading
def load_official_checkpoint(
    path: str | os.PathLike, expected: str = OFFICIAL_CHECKPOINT_FILE
) -> dict[str, torch.Tensor]:
    """Read an official checkpoint safely (`weights_only=True`) and return its OpenAI-layout state dict as stored
    (fp16 or fp32; the conversion casts to fp32).

    Accepts `{"state_dict": {...}, ...}` (the official layout) or a bare state dict; strips a DataParallel
    `module.` prefix and drops the non-weight entries of `NON_WEIGHT_KEYS`. `expected` says, when `path` is a folder,
    which file to pass instead.
    """
    path = check_input_file(path, "checkpoint", expected, missing=FileNotFoundError)
    check_pickle_checkpoint(path)  # a text file, an empty or truncated file, a zip that is not torch's: named here
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"refused to load '{path}': it is not a plain weights file, torch.load(weights_only=True) rejected it "
            f"({reason}). Official PAC-S / PAC-S++ checkpoints hold only tensors; a pickle that needs code can run "
            "that code when loaded. Use the file from the official release, never weights_only=False on an "
            "untrusted file."
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise CheckpointError(f"'{path}' could not be read as a torch checkpoint: {error}") from None
    state_dict = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else checkpoint
    if not isinstance(state_dict, dict) or not any(isinstance(value, torch.Tensor) for value in state_dict.values()):
        found = sorted(map(str, checkpoint))[:MAX_KEYS_SHOWN] if isinstance(checkpoint, dict) else type(checkpoint)
        raise CheckpointError(
            f"'{path}' holds no state dict: expected a dict with the weights under 'state_dict' (or a bare state "
            f"dict of tensors), found {found}"
        )
    weights = {}
    for key, value in state_dict.items():
        key = key.removeprefix("module.")
        if key in NON_WEIGHT_KEYS:
            continue
        if not isinstance(value, torch.Tensor):
            kind = type(value).__name__
            raise CheckpointError(f"'{path}': entry '{key}' of the state dict is a {kind}, not a tensor")
        weights[key] = value
    non_finite = [
        key for key, value in weights.items() if value.is_floating_point() and not torch.isfinite(value).all()
    ]
    if non_finite:
        raise CheckpointError(
            f"'{path}': {len(non_finite)} tensor(s) hold NaN or infinite values ({shorten(non_finite)}): the file is "
            "corrupt or was saved from a diverged run; use the official release"
        )
    return weights


# ---------------------------------------------------------------------------------------------------- layout
def count_blocks(state_dict: dict[str, torch.Tensor], prefix: str) -> int:
    """Number of residual blocks under `prefix` (highest index + 1, so a missing middle block shows as missing)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    indices = [int(match.group(1)) for key in state_dict if (match := pattern.match(key))]
    return max(indices) + 1 if indices else 0


def infer_geometry(state_dict: dict[str, torch.Tensor], head_dim: int = OPENAI_HEAD_DIM) -> CheckpointGeometry:
    """Geometry from tensor shapes, as OpenAI's `build_model` reads it (heads = width // `head_dim`)."""
    missing = [key for key in GEOMETRY_KEYS if key not in state_dict]
    if missing:
        raise CheckpointError(
            layout_message(
                "is not a CLIP ViT checkpoint in the OpenAI key layout (docs/spec/pacs.md#checkpoints)",
                missing,
                unknown_keys(state_dict),
            )
        )
    vision_width, _, patch_size, _ = state_dict["visual.conv1.weight"].shape
    grid = round((state_dict["visual.positional_embedding"].shape[0] - 1) ** 0.5)
    text_width = state_dict["ln_final.weight"].shape[0]
    vision_prefix, text_prefix = TOWERS["vision"][0], TOWERS["text"][0]
    rank_key = next((key for key in state_dict if key.endswith("attn.in_proj_weight_lora_A")), None)

    def mlp_width(prefix: str, width: int) -> int:
        weight = state_dict.get(f"{prefix}0.mlp.c_fc.weight")
        return weight.shape[0] if weight is not None else 4 * width

    return CheckpointGeometry(
        embed_dim=state_dict["text_projection"].shape[1],
        image_size=patch_size * grid,
        patch_size=patch_size,
        vision_width=vision_width,
        vision_layers=count_blocks(state_dict, vision_prefix),
        vision_heads=max(vision_width // head_dim, 1),
        vision_mlp_width=mlp_width(vision_prefix, vision_width),
        context_length=state_dict["positional_embedding"].shape[0],
        vocab_size=state_dict["token_embedding.weight"].shape[0],
        text_width=text_width,
        text_layers=count_blocks(state_dict, text_prefix),
        text_heads=max(text_width // head_dim, 1),
        text_mlp_width=mlp_width(text_prefix, text_width),
        lora_rank=state_dict[rank_key].shape[0] if rank_key else None,
    )


def expected_shapes(geometry: CheckpointGeometry, with_lora: bool) -> dict[str, tuple[int, ...]]:
    """Every key of an official checkpoint of this geometry and its shape."""
    g = geometry
    grid = g.image_size // g.patch_size
    shapes = {
        "visual.class_embedding": (g.vision_width,),
        "visual.positional_embedding": (grid * grid + 1, g.vision_width),
        "visual.conv1.weight": (g.vision_width, 3, g.patch_size, g.patch_size),
        "visual.ln_pre.weight": (g.vision_width,),
        "visual.ln_pre.bias": (g.vision_width,),
        "visual.ln_post.weight": (g.vision_width,),
        "visual.ln_post.bias": (g.vision_width,),
        "visual.proj": (g.vision_width, g.embed_dim),
        "token_embedding.weight": (g.vocab_size, g.text_width),
        "positional_embedding": (g.context_length, g.text_width),
        "ln_final.weight": (g.text_width,),
        "ln_final.bias": (g.text_width,),
        "text_projection": (g.text_width, g.embed_dim),
        "logit_scale": (),
    }
    rank = g.lora_rank or 4
    towers = (
        (TOWERS["vision"][0], g.vision_layers, g.vision_width, g.vision_mlp_width),
        (TOWERS["text"][0], g.text_layers, g.text_width, g.text_mlp_width),
    )
    for prefix, layers, width, mlp in towers:
        for index in range(layers):
            block = f"{prefix}{index}."
            shapes.update(
                {
                    f"{block}attn.in_proj_weight": (3 * width, width),
                    f"{block}attn.in_proj_bias": (3 * width,),
                    f"{block}attn.out_proj.weight": (width, width),
                    f"{block}attn.out_proj.bias": (width,),
                    f"{block}ln_1.weight": (width,),
                    f"{block}ln_1.bias": (width,),
                    f"{block}ln_2.weight": (width,),
                    f"{block}ln_2.bias": (width,),
                    f"{block}mlp.c_fc.weight": (mlp, width),
                    f"{block}mlp.c_fc.bias": (mlp,),
                    f"{block}mlp.c_proj.weight": (width, mlp),
                    f"{block}mlp.c_proj.bias": (width,),
                }
            )
            if with_lora:
                shapes.update(
                    {
                        f"{block}attn.in_proj_weight_lora_A": (rank, width),
                        f"{block}attn.in_proj_weight_lora_B": (3 * width, rank),
                        f"{block}attn.out_proj.lora_A": (rank, width),
                        f"{block}attn.out_proj.lora_B": (width, rank),
                        f"{block}mlp.c_fc.lora_A": (rank, width),
                        f"{block}mlp.c_fc.lora_B": (mlp, rank),
                        f"{block}mlp.c_proj.lora_A": (rank, mlp),
                        f"{block}mlp.c_proj.lora_B": (width, rank),
                    }
                )
    if with_lora:
        shapes["visual.conv1.lora_A"] = (rank * g.patch_size, 3 * g.patch_size)
        shapes["visual.conv1.lora_B"] = (g.vision_width * g.patch_size, rank * g.patch_size)
    return shapes


def unknown_keys(state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Keys that no OpenAI-layout CLIP ViT (with or without PAC-S++ LoRA) has."""
    known_prefixes = ("visual.", "transformer.resblocks.")
    known = set(GEOMETRY_KEYS) | {"ln_final.bias", "logit_scale"}
    return sorted(key for key in state_dict if key not in known and not key.startswith(known_prefixes))


def shorten(keys: list[str]) -> str:
    shown = ", ".join(keys[:MAX_KEYS_SHOWN])
    return shown + (f", ... ({len(keys) - MAX_KEYS_SHOWN} more)" if len(keys) > MAX_KEYS_SHOWN else "")


def layout_message(problem: str, missing: list[str], unexpected: list[str], wrong_shapes: list[str] = ()) -> str:
    lines = [f"the checkpoint {problem}:"]
    if missing:
        lines.append(f"  missing keys ({len(missing)}): {shorten(missing)}")
    if unexpected:
        lines.append(f"  unexpected keys ({len(unexpected)}): {shorten(unexpected)}")
    if wrong_shapes:
        lines.append(f"  wrong shapes ({len(wrong_shapes)}): {shorten(list(wrong_shapes))}")
    return "\n".join(lines)


def check_layout(state_dict: dict[str, torch.Tensor], geometry: CheckpointGeometry, variant: OfficialVariant):
    """Raise a `CheckpointError` naming every missing, unexpected and mis-shaped key."""
    shapes = expected_shapes(geometry, variant.has_lora)
    missing = sorted(key for key in shapes if key not in state_dict)
    unexpected = sorted(key for key in state_dict if key not in shapes)
    wrong_shapes = [
        f"{key} {tuple(state_dict[key].shape)} (expected {shape})"
        for key, shape in shapes.items()
        if key in state_dict and tuple(state_dict[key].shape) != shape
    ]
    if not (missing or unexpected or wrong_shapes):
        return
    hint = ""
    has_lora_keys = any("lora_" in key for key in state_dict)
    if has_lora_keys and not variant.has_lora:
        hint = "\nit has LoRA tensors: it looks like a PAC-S++ checkpoint, use --variant pac_s_pp_vit_b32/_l14"
    elif variant.has_lora and not has_lora_keys:
        hint = "\nit has no LoRA tensors: it looks like a PAC-S checkpoint, use --variant pac_s_vit_b32 (or _l14)"
    raise CheckpointError(
        layout_message(
            f"does not have the layout of {variant.name} (docs/spec/pacs.md#checkpoints)",
            missing,
            unexpected,
            wrong_shapes,
        )
        + hint
    )


def check_variant_geometry(geometry: CheckpointGeometry, variant: OfficialVariant):
    """Raise when the checkpoint's geometry is not the released backbone of `variant`."""
    actual = asdict(geometry)
    differences = [
        f"{name} {actual[name]} (expected {value})" for name, value in variant.geometry.items() if actual[name] != value
    ]
    if differences:
        raise CheckpointError(
            f"the checkpoint's geometry does not match {variant.name} ({variant.display_name}): "
            f"{'; '.join(differences)}. Pick the --variant of this file ({', '.join(OFFICIAL_VARIANTS)}), or pass "
            "--allow-other-geometry for a custom or test checkpoint."
        )


# ---------------------------------------------------------------------------------------------------- mapping
def clip_config_for(geometry: CheckpointGeometry, hidden_act: str) -> CLIPConfig:
    """A transformers `CLIPConfig` for this geometry; begin/end-of-text ids are the last two ids of the vocabulary."""
    g = geometry
    text_config = {
        "vocab_size": g.vocab_size,
        "hidden_size": g.text_width,
        "intermediate_size": g.text_mlp_width,
        "num_hidden_layers": g.text_layers,
        "num_attention_heads": g.text_heads,
        "max_position_embeddings": g.context_length,
        "hidden_act": hidden_act,
        "bos_token_id": g.vocab_size - 2,
        "eos_token_id": g.vocab_size - 1,
        "pad_token_id": g.vocab_size - 1,
    }
    vision_config = {
        "hidden_size": g.vision_width,
        "intermediate_size": g.vision_mlp_width,
        "num_hidden_layers": g.vision_layers,
        "num_attention_heads": g.vision_heads,
        "image_size": g.image_size,
        "patch_size": g.patch_size,
        "hidden_act": hidden_act,
    }
    return CLIPConfig(text_config=text_config, vision_config=vision_config, projection_dim=g.embed_dim)


def to_transformers_state_dict(state_dict: dict[str, torch.Tensor], geometry: CheckpointGeometry) -> dict:
    """OpenAI CLIP keys -> `transformers.CLIPModel` keys (LoRA tensors are left out), all in fp32."""
    converted = {
        "logit_scale": state_dict["logit_scale"],
        "text_model.embeddings.token_embedding.weight": state_dict["token_embedding.weight"],
        "text_model.embeddings.position_embedding.weight": state_dict["positional_embedding"],
        "text_model.final_layer_norm.weight": state_dict["ln_final.weight"],
        "text_model.final_layer_norm.bias": state_dict["ln_final.bias"],
        "text_projection.weight": state_dict["text_projection"].t(),
        "vision_model.embeddings.class_embedding": state_dict["visual.class_embedding"],
        "vision_model.embeddings.patch_embedding.weight": state_dict["visual.conv1.weight"],
        "vision_model.embeddings.position_embedding.weight": state_dict["visual.positional_embedding"],
        "vision_model.pre_layrnorm.weight": state_dict["visual.ln_pre.weight"],
        "vision_model.pre_layrnorm.bias": state_dict["visual.ln_pre.bias"],
        "vision_model.post_layernorm.weight": state_dict["visual.ln_post.weight"],
        "vision_model.post_layernorm.bias": state_dict["visual.ln_post.bias"],
        "visual_projection.weight": state_dict["visual.proj"].t(),
    }
    block_names = {
        "attn.out_proj.weight": "self_attn.out_proj.weight",
        "attn.out_proj.bias": "self_attn.out_proj.bias",
        "ln_1.weight": "layer_norm1.weight",
        "ln_1.bias": "layer_norm1.bias",
        "ln_2.weight": "layer_norm2.weight",
        "ln_2.bias": "layer_norm2.bias",
        "mlp.c_fc.weight": "mlp.fc1.weight",
        "mlp.c_fc.bias": "mlp.fc1.bias",
        "mlp.c_proj.weight": "mlp.fc2.weight",
        "mlp.c_proj.bias": "mlp.fc2.bias",
    }
    for tower, layers in (("vision", geometry.vision_layers), ("text", geometry.text_layers)):
        source_prefix, target_prefix = TOWERS[tower]
        for index in range(layers):
            source, target = f"{source_prefix}{index}.", f"{target_prefix}{index}."
            for source_name, target_name in block_names.items():
                converted[target + target_name] = state_dict[source + source_name]
            # The fused in-projection stacks q, k and v by rows.
            for name, weight, bias in zip(
                ("q_proj", "k_proj", "v_proj"),
                state_dict[f"{source}attn.in_proj_weight"].chunk(3),
                state_dict[f"{source}attn.in_proj_bias"].chunk(3),
            ):
                converted[f"{target}self_attn.{name}.weight"] = weight
                converted[f"{target}self_attn.{name}.bias"] = bias
    return {key: value.float().contiguous() for key, value in converted.items()}


def conv_delta(state_dict: dict[str, torch.Tensor], scaling: float) -> torch.Tensor:
    """The patch-embedding delta of custom loralib's Conv2d: `(B @ A).view(weight shape) * scaling`."""
    weight = state_dict["visual.conv1.weight"]
    return (state_dict["visual.conv1.lora_B"].float() @ state_dict["visual.conv1.lora_A"].float()).view(
        weight.shape
    ) * scaling


def lora_delta(state_dict: dict[str, torch.Tensor], block: str, group: str, scaling: float) -> torch.Tensor:
    stem = LORA_GROUPS[group][0]
    return state_dict[f"{block}{stem}B"].float() @ state_dict[f"{block}{stem}A"].float() * scaling


def lora_delta_norms(
    state_dict: dict[str, torch.Tensor], geometry: CheckpointGeometry, lora_mode: str
) -> list[DeltaNorm]:
    """Frobenius norm of each delta group per tower (over all blocks), and relative to its base weights."""
    scaling = OFFICIAL_LORA_ALPHA / geometry.lora_rank
    norms = []
    for tower, layers in (("vision", geometry.vision_layers), ("text", geometry.text_layers)):
        prefix = TOWERS[tower][0]
        for group, weight_name in LORA_GROUP_WEIGHTS.items():
            delta_squares = base_squares = 0.0
            for index in range(layers):
                block = f"{prefix}{index}."
                delta_squares += float(lora_delta(state_dict, block, group, scaling).pow(2).sum())
                base_squares += float(state_dict[block + weight_name].float().pow(2).sum())
            applied = lora_mode == "full" or group not in SKIPPED_IN_OFFICIAL_MODE
            norm = math.sqrt(delta_squares)
            norms.append(DeltaNorm(tower, group, norm, norm / max(math.sqrt(base_squares), 1e-12), applied))
    delta = conv_delta(state_dict, scaling)
    norm = float(delta.norm())
    relative = norm / max(float(state_dict["visual.conv1.weight"].float().norm()), 1e-12)
    norms.append(DeltaNorm("vision", "conv1", norm, relative, True))
    return norms


def format_delta_norms(norms: list[DeltaNorm], lora_mode: str) -> str:
    """A table of the delta norms, saying which deltas the chosen mode applies."""
    lines = [
        f"LoRA delta Frobenius norms (lora_mode={lora_mode}):",
        f"  {'tower':<7} {'group':<14} {'||delta||':>12} {'||delta||/||W||':>16}  applied",
    ]
    for item in norms:
        applied = "yes" if item.applied else "no (skipped by the official inference)"
        if item.group == "conv1":
            applied = "yes (merged into patch_embedding.weight)"
        lines.append(f"  {item.tower:<7} {item.group:<14} {item.norm:>12.6g} {item.relative_norm:>16.6g}  {applied}")
    return "\n".join(lines)


def attach_lora_adapter(
    model: PACSModel, state_dict: dict[str, torch.Tensor], geometry: CheckpointGeometry, lora_mode: str
):
    """Attach a PEFT LoRA adapter to `model.clip` holding the official A/B values of the groups `lora_mode` applies.

    The official in-projection has one A (r x E) for the fused q/k/v weight and B (3E x r): q, k and v each get
    that A and their rows of B. PEFT's scaling lora_alpha / r equals the official alpha / r.
    """
    from peft import LoraConfig, get_peft_model

    groups = [group for group in LORA_GROUPS if lora_mode == "full" or group not in SKIPPED_IN_OFFICIAL_MODE]
    target_modules = sorted({module.rsplit(".", 1)[1] for group in groups for module in LORA_GROUPS[group][1]})
    lora_config = LoraConfig(
        r=geometry.lora_rank,
        lora_alpha=OFFICIAL_LORA_ALPHA,
        target_modules=target_modules,
        lora_dropout=0.0,
        bias="none",
    )
    peft_model = get_peft_model(model.clip, lora_config)
    backbone = peft_model.base_model.model
    assigned = set()
    with torch.no_grad():
        for tower, layers in (("vision", geometry.vision_layers), ("text", geometry.text_layers)):
            source_prefix, target_prefix = TOWERS[tower]
            for index in range(layers):
                block = f"{source_prefix}{index}."
                for group in groups:
                    stem, modules = LORA_GROUPS[group]
                    lora_a = state_dict[f"{block}{stem}A"].float()
                    lora_b_rows = state_dict[f"{block}{stem}B"].float().chunk(len(modules))
                    for module_name, lora_b in zip(modules, lora_b_rows):
                        name = f"{target_prefix}{index}.{module_name}"
                        layer = backbone.get_submodule(name)
                        layer.lora_A["default"].weight.copy_(lora_a)
                        layer.lora_B["default"].weight.copy_(lora_b)
                        assigned.add(name)
    targeted = {name for name, module in backbone.named_modules() if hasattr(module, "lora_A") and module.lora_A}
    if targeted != assigned:
        raise RuntimeError(f"LoRA layers without official values: {sorted(targeted - assigned)[:MAX_KEYS_SHOWN]}")
    model.config.lora_target_modules = target_modules
    model._peft_model = peft_model
    return peft_model


# ---------------------------------------------------------------------------------------------------- convert
def convert_state_dict(
    state_dict: dict[str, torch.Tensor],
    variant: str,
    lora_mode: str = "official",
    head_dim: int = OPENAI_HEAD_DIM,
    allow_other_geometry: bool = False,
) -> ConvertedCheckpoint:
    """Build the `PACSModel` of an official-layout state dict (PAC-S++: with its LoRA adapter attached unmerged).

    Args:
        state_dict: OpenAI-layout weights (from `load_official_checkpoint`).
        variant: one of `OFFICIAL_VARIANTS`: sets the metric variant, w, activation and base model id.
        lora_mode: PAC-S++ only: `"official"` (released inference: MLP deltas skipped) or `"full"` (all deltas).
        head_dim: attention head size used to derive head counts (64 for every released CLIP).
        allow_other_geometry: accept a geometry other than the released backbone's (custom or test checkpoints).
    """
    if variant not in OFFICIAL_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: choose one of {', '.join(OFFICIAL_VARIANTS)}")
    if lora_mode not in LORA_MODES:
        raise ValueError(f"lora_mode must be one of {LORA_MODES}, got {lora_mode!r}")
    spec = OFFICIAL_VARIANTS[variant]
    source_dtype = str(next(iter(state_dict.values())).dtype).removeprefix("torch.")
    geometry = infer_geometry(state_dict, head_dim)
    check_layout(state_dict, geometry, spec)
    if not allow_other_geometry:
        check_variant_geometry(geometry, spec)

    config = PACSConfig(
        backbone_config=clip_config_for(geometry, spec.hidden_act),
        variant=spec.metric_variant,
        w=spec.w,
        max_text_length=geometry.context_length,
        adapter_path="adapter" if spec.has_lora else None,
        lora_rank=geometry.lora_rank or 4,
        lora_alpha=OFFICIAL_LORA_ALPHA,
        base_model_id=spec.base_model_id,
    )
    model = PACSModel(config).eval()
    weights = to_transformers_state_dict(state_dict, geometry)
    delta_norms = []
    if spec.has_lora:
        scaling = OFFICIAL_LORA_ALPHA / geometry.lora_rank
        # Both modes apply the patch-embedding delta (the official Conv2d never merges it at eval, it adds it live).
        weights["vision_model.embeddings.patch_embedding.weight"] += conv_delta(state_dict, scaling)
        delta_norms = lora_delta_norms(state_dict, geometry, lora_mode)
    model.clip.load_state_dict(weights, strict=True)
    model.tokenizer = build_clip_tokenizer(geometry.context_length)
    if spec.has_lora:
        attach_lora_adapter(model, state_dict, geometry, lora_mode)
    return ConvertedCheckpoint(model, spec, geometry, lora_mode if spec.has_lora else None, delta_norms, source_dtype)


def adapter_card(converted: ConvertedCheckpoint) -> str:
    """README.md of the `adapter/` sub-folder."""
    spec = converted.variant
    return (
        f"---\nbase_model: {spec.base_model_id}\nlibrary_name: peft\ntags:\n- lora\n- pac-s-pp\n---\n\n"
        f"# {spec.display_name} LoRA adapter (lora_mode={converted.lora_mode})\n\n"
        "PEFT LoRA adapter converted from the official PAC-S++ checkpoint. The patch-embedding delta of that "
        "checkpoint has no PEFT form and is merged into the base weights of the parent directory: load the parent "
        "directory (`AutoModel.from_pretrained(..., trust_remote_code=True)`), not this adapter on the plain "
        f"`{spec.base_model_id}`. See the parent README.md.\n"
    )


def save_converted(converted: ConvertedCheckpoint, output_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write a complete Hub-ready directory (config with auto_map, remote code, safetensors, adapter, processor,
    README.md model card), atomically: a crash never leaves a half-written `output_dir`."""
    output_dir = Path(output_dir)
    check_output_directory(output_dir, overwrite=overwrite)
    with staged_directory(output_dir) as staging:
        save_remote_code_model(
            converted.model, staging, processor=build_processor(converted.model.config, converted.model.tokenizer)
        )
        card = render_model_card(
            converted.variant.name,
            lora_mode=converted.lora_mode,
            delta_norms=converted.delta_norms,
            geometry=converted.geometry,
        )
        (staging / "README.md").write_text(card, encoding="utf-8")
        if converted.lora_mode is not None:
            # PEFT writes an empty template card; point adapter-only users at what the adapter lacks.
            (staging / converted.model.config.adapter_path / "README.md").write_text(
                adapter_card(converted), encoding="utf-8"
            )
    return output_dir


def verify_saved_model(
    converted: ConvertedCheckpoint, output_dir: str | os.PathLike, tolerance: float = 1e-4, text_length: int = 12
) -> float:
    """Reload `output_dir` as a fresh model and return the largest feature difference from the in-memory
    conversion on random pixels and token ids (`text_length` tokens, end-of-text last); raise if it exceeds
    `tolerance`."""
    reloaded = PACSModel.from_pretrained(output_dir, dtype=torch.float32).eval()
    vision_config = converted.model.config.backbone_config.vision_config
    generator = torch.Generator().manual_seed(0)
    pixel_values = torch.randn(2, 3, vision_config.image_size, vision_config.image_size, generator=generator)
    text_config = converted.model.config.backbone_config.text_config
    input_ids = torch.randint(0, text_config.vocab_size - 2, (2, text_length), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = text_config.bos_token_id, text_config.eos_token_id
    with torch.no_grad():
        differences = [
            (converted_output.pooler_output - reloaded_output.pooler_output).abs().max()
            for converted_output, reloaded_output in (
                (
                    converted.model.clip.get_image_features(pixel_values=pixel_values),
                    reloaded.clip.get_image_features(pixel_values=pixel_values),
                ),
                (
                    converted.model.clip.get_text_features(input_ids=input_ids),
                    reloaded.clip.get_text_features(input_ids=input_ids),
                ),
            )
        ]
    largest = float(max(differences))
    if not largest <= tolerance:  # also true for NaN
        raise RuntimeError(
            f"the saved directory '{output_dir}' does not reproduce the converted model (largest feature difference "
            f"{largest:.3g} > {tolerance}): check the installed peft/transformers versions"
        )
    return largest


def convert_checkpoint(
    checkpoint: str | os.PathLike,
    variant: str,
    output_dir: str | os.PathLike,
    lora_mode: str = "official",
    head_dim: int = OPENAI_HEAD_DIM,
    allow_other_geometry: bool = False,
    overwrite: bool = False,
    verify: bool = True,
    log=print,
) -> ConvertedCheckpoint:
    """Load an official checkpoint safely, convert it, write a Hub-ready directory and (by default) check that the
    directory reloads to the same features. Prints the LoRA delta norms of PAC-S++ checkpoints."""
    check_output_directory(output_dir, inputs=[checkpoint], overwrite=overwrite)
    state_dict = load_official_checkpoint(checkpoint)
    converted = convert_state_dict(state_dict, variant, lora_mode, head_dim, allow_other_geometry)
    geometry = converted.geometry.describe()
    log(f"{converted.variant.display_name}: {geometry} (checkpoint dtype {converted.source_dtype})")
    if converted.delta_norms:
        log(format_delta_norms(converted.delta_norms, lora_mode))
    save_converted(converted, output_dir, overwrite)
    if verify:
        difference = verify_saved_model(converted, output_dir)
        log(f"reloaded '{output_dir}': largest feature difference from the conversion {difference:.2g}")
    log(f"wrote {output_dir}")
    return converted


# ---------------------------------------------------------------------------------------------------- command line
__all__ = [
    "LORA_MODES",
    "OFFICIAL_VARIANTS",
    "CheckpointError",
    "CheckpointGeometry",
    "ConvertedCheckpoint",
    "convert_checkpoint",
    "convert_state_dict",
    "load_official_checkpoint",
    "save_converted",
]
