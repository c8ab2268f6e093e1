"""The ORIGINAL CLIP code as an independent reference for parity tests.

Loads `clip/model.py` and `clip/simple_tokenizer.py` of the installed `openai-clip` package by file path (the
package `__init__` imports torchvision, which has no CPU build here), builds tiny random CLIP ViTs in the exact
original layouts (OpenAI: QuickGELU; OpenCLIP ViT-L-14 laion2b: the same module tree and key names with plain GELU)
and computes reference features with `encode_image` / `encode_text`. `build_open_clip_towers` builds the same
tiny geometry with open_clip's own `VisionTransformer` / `TextTransformer` (the ViT-L-14 laion2b configuration:
plain GELU), to check the OpenCLIP layout against the real open_clip code.

For PAC-S++ it adds LoRA tensors named as in the official checkpoints (docs/spec/pacs.md#checkpoints) and applies them
the way the official `custom_loralib` does at inference:

- `full`: every delta (attention in-projection, attention out-projection, both MLP linears, patch embedding);
- `official`: the released inference, where `model.eval()` runs before the checkpoint is loaded and so marks the
  MLP LoRA layers as merged (with zero deltas): the MLP deltas are skipped, the others applied.

Example:

```python
>>> from tests.references.original_clip import build_original_clip, add_official_lora, original_features
>>> from tests.references.original_clip import original_tokenize
>>> model = build_original_clip(activation="quick_gelu", seed=0)
>>> state_dict = add_official_lora(model.state_dict(), seed=1)
>>> pixels = torch.randn(2, 3, 224, 224)
>>> image_features, text_features = original_features(state_dict, pixels, original_tokenize(["a cat"]), "full")
```
"""

import importlib.util
import sys
import types
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from modeling_pacs.testing.modules import temporary_modules

CLIP_PACKAGE_DIR = Path(importlib.util.find_spec("clip").submodule_search_locations[0])
OPEN_CLIP_PACKAGE_DIR = Path(importlib.util.find_spec("open_clip").submodule_search_locations[0])
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
LORA_MODES = ("full", "official")


@dataclass(frozen=True)
class OriginalGeometry:
    """Arguments of the original `CLIP(...)` constructor, plus the vision head count it derives as width // 64
    (which is 0 for tiny widths, so it is set explicitly here)."""

    embed_dim: int = 32
    image_resolution: int = 224
    vision_layers: int = 2
    vision_width: int = 32
    vision_patch_size: int = 32
    context_length: int = 77
    vocab_size: int = 49408
    transformer_width: int = 32
    transformer_heads: int = 4
    transformer_layers: int = 2
    vision_heads: int = 4


# Same geometry as `modeling_pacs.testing.pacs.tiny_clip_config()`: 224 px, patch 32, width 32, 2 layers, 4 heads.
TINY_GEOMETRY = OriginalGeometry()


def load_module_from_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def original_clip_module(activation: str = "quick_gelu"):
    """`clip/model.py` as a standalone module. With `activation="gelu"` it is loaded as a separate copy whose
    residual blocks use `nn.GELU` (OpenCLIP's ViT-L-14): `ResidualAttentionBlock` looks `QuickGELU` up at build time."""
    if activation not in ("quick_gelu", "gelu"):
        raise ValueError(f"activation must be 'quick_gelu' (OpenAI) or 'gelu' (OpenCLIP), got {activation!r}")
    module = load_module_from_file(f"original_clip_model_{activation}", CLIP_PACKAGE_DIR / "model.py")
    if activation == "gelu":
        module.QuickGELU = nn.GELU
    return module


@lru_cache(maxsize=1)
def original_simple_tokenizer():
    """OpenAI's own BPE tokenizer (`clip/simple_tokenizer.py`, with ftfy cleaning)."""
    module = load_module_from_file("original_clip_simple_tokenizer", CLIP_PACKAGE_DIR / "simple_tokenizer.py")
    return module.SimpleTokenizer()


def original_tokenize(texts: list[str], context_length: int = 77) -> torch.Tensor:
    """`clip.tokenize(texts, context_length, truncate=True)`: zero padding, end-of-text forced into the last slot."""
    tokenizer = original_simple_tokenizer()
    sot_token = tokenizer.encoder["<|startoftext|>"]
    eot_token = tokenizer.encoder["<|endoftext|>"]
    result = torch.zeros(len(texts), context_length, dtype=torch.int)
    for row, text in enumerate(texts):
        tokens = [sot_token] + tokenizer.encode(text) + [eot_token]
        if len(tokens) > context_length:
            tokens = tokens[:context_length]
            tokens[-1] = eot_token
        result[row, : len(tokens)] = torch.tensor(tokens)
    return result


def original_preprocess(image: Image.Image, size: int = 224) -> torch.Tensor:
    """`clip.clip._transform(size)` without torchvision: shorter side to `size` (bicubic, long side truncated as
    torchvision does), center crop (torchvision's rounding), RGB, [0, 1], normalise."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    new_width, new_height = (new_short, new_long) if width <= height else (new_long, new_short)
    image = image.resize((new_width, new_height), Image.BICUBIC)
    top = int(round((new_height - size) / 2.0))
    left = int(round((new_width - size) / 2.0))
    image = image.crop((left, top, left + size, top + size)).convert("RGB")
    array = np.asarray(image, dtype=np.float32) / 255.0
    array = (array - np.array(OPENAI_CLIP_MEAN, dtype=np.float32)) / np.array(OPENAI_CLIP_STD, dtype=np.float32)
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def build_original_clip(
    geometry: OriginalGeometry = TINY_GEOMETRY, activation: str = "quick_gelu", seed: int = 0
) -> nn.Module:
    """An original-code `CLIP` ViT in fp32 with every tensor random: weights, biases, layer norms (not 1/0),
    class and positional embeddings, projections, logit scale."""
    module = original_clip_module(activation)
    arguments = asdict(geometry)
    vision_heads = arguments.pop("vision_heads")
    original_vision_transformer = module.VisionTransformer

    def vision_transformer_with_heads(**kwargs):
        return original_vision_transformer(**{**kwargs, "heads": vision_heads})

    # CLIP.__init__ derives the vision head count as width // 64; tiny widths need it set.
    module.VisionTransformer = vision_transformer_with_heads
    try:
        # The init only sets each tensor's scale (values are redrawn below); seed it without touching global RNG.
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = module.CLIP(**arguments)
    finally:
        module.VisionTransformer = original_vision_transformer
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_pre.weight", "ln_post.weight", "ln_final.weight")):
                parameter.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias") or "ln_" in name:
                parameter.copy_(0.1 * noise)
            elif name == "logit_scale":
                parameter.fill_(float(np.log(1 / 0.07)) + 0.1 * float(noise))
            else:
                # Keep each tensor's own scale (the original init), so activations stay in a sane range.
                std = float(parameter.std()) if parameter.numel() > 1 and float(parameter.std()) > 0 else 0.05
                parameter.copy_(std * noise)
    return model.float().eval()


def lora_block_prefixes(state_dict: dict[str, torch.Tensor]) -> list[str]:
    """`transformer.resblocks.N.` and `visual.transformer.resblocks.N.` prefixes of every residual block."""
    suffix = "attn.in_proj_weight"
    return sorted({key[: -len(suffix)] for key in state_dict if key.endswith(suffix)})


def add_official_lora(
    state_dict: dict[str, torch.Tensor], rank: int = 4, seed: int = 1, scale: float = 0.3
) -> dict[str, torch.Tensor]:
    """A copy of `state_dict` with random PAC-S++ LoRA tensors named and shaped as in the official checkpoints."""
    generator = torch.Generator().manual_seed(seed)

    def random(*shape):
        return scale * torch.randn(shape, generator=generator)

    result = dict(state_dict)
    for prefix in lora_block_prefixes(state_dict):
        width = state_dict[f"{prefix}attn.in_proj_weight"].shape[1]
        hidden = state_dict[f"{prefix}mlp.c_fc.weight"].shape[0]
        result[f"{prefix}attn.in_proj_weight_lora_A"] = random(rank, width)
        result[f"{prefix}attn.in_proj_weight_lora_B"] = random(3 * width, rank)
        result[f"{prefix}attn.out_proj.lora_A"] = random(rank, width)
        result[f"{prefix}attn.out_proj.lora_B"] = random(width, rank)
        result[f"{prefix}mlp.c_fc.lora_A"] = random(rank, width)
        result[f"{prefix}mlp.c_fc.lora_B"] = random(hidden, rank)
        result[f"{prefix}mlp.c_proj.lora_A"] = random(rank, hidden)
        result[f"{prefix}mlp.c_proj.lora_B"] = random(width, rank)
    out_channels, in_channels, kernel, _ = state_dict["visual.conv1.weight"].shape
    result["visual.conv1.lora_A"] = random(rank * kernel, in_channels * kernel)
    result["visual.conv1.lora_B"] = random(out_channels * kernel, rank * kernel)
    return result


def apply_official_lora(
    state_dict: dict[str, torch.Tensor], mode: str = "full", rank: int = 4, alpha: float = 1.0
) -> dict[str, torch.Tensor]:
    """Plain original-layout weights with the LoRA deltas folded in as `custom_loralib` applies them
    (`W + B @ A * alpha / r`; conv: `(B @ A).view(W.shape) * alpha / r`). `official` skips the MLP deltas."""
    if mode not in LORA_MODES:
        raise ValueError(f"mode must be one of {LORA_MODES}, got {mode!r}")
    scaling = alpha / rank
    weights = {key: value.clone() for key, value in state_dict.items() if "lora_" not in key}
    targets = {"attn.in_proj_weight": "attn.in_proj_weight_lora_", "attn.out_proj.weight": "attn.out_proj.lora_"}
    if mode == "full":
        targets.update({"mlp.c_fc.weight": "mlp.c_fc.lora_", "mlp.c_proj.weight": "mlp.c_proj.lora_"})
    for prefix in lora_block_prefixes(state_dict):
        for weight_name, lora_name in targets.items():
            delta = state_dict[f"{prefix}{lora_name}B"] @ state_dict[f"{prefix}{lora_name}A"]
            weights[f"{prefix}{weight_name}"] += delta * scaling
    conv_weight = weights["visual.conv1.weight"]
    conv_delta = state_dict["visual.conv1.lora_B"] @ state_dict["visual.conv1.lora_A"]
    weights["visual.conv1.weight"] = conv_weight + conv_delta.view(conv_weight.shape) * scaling
    return weights


def original_features(
    state_dict: dict[str, torch.Tensor],
    pixel_values: torch.Tensor,
    token_ids: torch.Tensor,
    lora_mode: str | None = None,
    geometry: OriginalGeometry = TINY_GEOMETRY,
    activation: str = "quick_gelu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """`encode_image(pixel_values)` and `encode_text(token_ids)` of the original code loaded with `state_dict`
    (with LoRA deltas applied in `lora_mode` when the state dict carries LoRA tensors)."""
    if any("lora_" in key for key in state_dict):
        if lora_mode is None:
            raise ValueError("this state dict has LoRA tensors: pass lora_mode='full' or 'official'")
        state_dict = apply_official_lora(state_dict, lora_mode)
    model = build_original_clip(geometry, activation)
    model.load_state_dict(state_dict)
    with torch.no_grad():
        return model.encode_image(pixel_values.float()), model.encode_text(token_ids.long())


@contextmanager
def torchvision_stub():
    """open_clip's `utils.py` imports `torchvision.ops.misc.FrozenBatchNorm2d` (only used to freeze ResNets), and
    torchvision has no CPU build here: provide a placeholder while loading, then remove it so that nothing else
    (e.g. transformers' availability checks) ever sees it."""
    stubs = {name: types.ModuleType(name) for name in ("torchvision", "torchvision.ops", "torchvision.ops.misc")}
    stubs["torchvision.ops.misc"].FrozenBatchNorm2d = nn.BatchNorm2d
    with temporary_modules(stubs):
        yield


@lru_cache(maxsize=1)
def open_clip_transformer_module():
    """open_clip's `transformer.py` (the towers of its CLIP), loaded by file path inside a stand-alone package so
    that its relative imports (`.utils`, `.pos_embed`) resolve without running open_clip's `__init__`."""
    package_name = "open_clip_standalone"
    package = types.ModuleType(package_name)
    package.__path__ = [str(OPEN_CLIP_PACKAGE_DIR)]
    sys.modules[package_name] = package
    with torchvision_stub():
        return importlib.import_module(f"{package_name}.transformer")


def build_open_clip_towers(geometry: OriginalGeometry = TINY_GEOMETRY, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """open_clip `VisionTransformer` and `TextTransformer` with the defaults of the ViT-L-14 laion2b config (plain
    GELU, ln_pre, class-token pooling, causal text mask, argmax pooling, unbiased projections), every tensor random.

    `open_clip_state_dict(visual, text)` gives the key layout of open_clip's `CLIP.state_dict()`."""
    module = open_clip_transformer_module()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        visual = module.VisionTransformer(
            image_size=geometry.image_resolution,
            patch_size=geometry.vision_patch_size,
            width=geometry.vision_width,
            layers=geometry.vision_layers,
            heads=geometry.vision_heads,
            mlp_ratio=4.0,
            output_dim=geometry.embed_dim,
        )
        text = module.TextTransformer(
            context_length=geometry.context_length,
            vocab_size=geometry.vocab_size,
            width=geometry.transformer_width,
            heads=geometry.transformer_heads,
            layers=geometry.transformer_layers,
            output_dim=geometry.embed_dim,
        )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in [*visual.named_parameters(), *text.named_parameters()]:
            noise = torch.randn(parameter.shape, generator=generator)
            if "ln" in name and name.endswith("weight"):
                parameter.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias") or "ln" in name:
                parameter.copy_(0.1 * noise)
            else:
                std = float(parameter.std()) if parameter.numel() > 1 and float(parameter.std()) > 0 else 0.05
                parameter.copy_(std * noise)
    return visual.float().eval(), text.float().eval()


def open_clip_state_dict(visual: nn.Module, text: nn.Module, logit_scale: float = 4.6) -> dict[str, torch.Tensor]:
    """The keys of open_clip's `CLIP.state_dict()`: the vision tower under `visual.`, the text tower's modules at
    the top level (open_clip's CLIP assigns `text.transformer`, `text.token_embedding`, ... to itself), the causal
    mask a non-persistent buffer, plus `logit_scale`."""
    state_dict = {f"visual.{key}": value.detach().clone() for key, value in visual.state_dict().items()}
    state_dict.update({key: value.detach().clone() for key, value in text.state_dict().items()})
    state_dict["logit_scale"] = torch.tensor(logit_scale)
    return state_dict
