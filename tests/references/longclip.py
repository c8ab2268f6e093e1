"""Long-CLIP references for `tests/pacs/test_longclip.py`: tiny random checkpoints in the original layout, Long-CLIP's
text and image forward written out in NumPy, and Long-CLIP's own code loaded by path from a checkout.

- `build_longclip_state_dict`: OpenAI's `clip/model.py` (installed `openai-clip`, loaded by path) built with a
  248-token context, every tensor random, plus a random `positional_embedding_res` of the same shape: the key set of
  Long-CLIP's `CLIP(..., load_from_clip=False)` (`model/model_longclip.py`), which `longclip_code_model` checks
  with Long-CLIP's strict `load_state_dict` when a checkout is given.
- `numpy_encode_text` / `numpy_encode_image`: float64, from the formulas of `model/model_longclip.py`, sharing
  nothing with `modeling_pacs`: the positional table is `pe * mask1 + pe_res * mask2` with the masks built as
  Long-CLIP builds them (rows 0..19 / 20..247), a causal `-inf` mask, QuickGELU, LayerNorm eps 1e-5, pooling at
  `argmax(ids)` (the end-of-text id is the largest), no normalisation.
- `numpy_round_like_longclip_load`: the fp16 rounding `longclip.load()` applies (its `convert_weights` casts every
  Conv2d / Linear / MultiheadAttention parameter and both projections to fp16 before loading the fp32 file).
- `longclip_code`: `model/longclip.py` and `model/model_longclip.py` of a Long-CLIP checkout imported by path, with
  placeholders for the two imports this environment lacks (`pkg_resources`, torchvision's transforms, which are
  only used by `_transform`); `longclip.load()` and `longclip.tokenize()` run as shipped.

Example:

```python
>>> state_dict = build_longclip_state_dict(seed=0)
>>> ids = original_tokenize(["A photo depicts a cat"], context_length=248).numpy()
>>> numpy_encode_text(state_dict, ids).shape
(1, 64)
```
"""

import importlib
import sys
import types
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import numpy as np
import torch

from modeling_pacs.testing.modules import temporary_modules
from tests.references.original_clip import OriginalGeometry, build_original_clip

CONTEXT_LENGTH = 248
KEPT_POSITIONS = 20
LAYER_NORM_EPS = 1e-5
# Head size 64, as Long-CLIP's `build_model` derives head counts (width // 64): its own code builds this geometry.
TINY_LONGCLIP_GEOMETRY = OriginalGeometry(
    embed_dim=64,
    image_resolution=64,
    vision_layers=2,
    vision_width=128,
    vision_patch_size=16,
    context_length=CONTEXT_LENGTH,
    vocab_size=49408,
    transformer_width=128,
    transformer_heads=2,
    transformer_layers=2,
    vision_heads=2,
)
CLONE_COMMAND = "git clone https://github.com/beichenzbc/Long-CLIP /path/to/Long-CLIP"


# ----------------------------------------------------------------------------------------------------- checkpoints
def build_longclip_state_dict(
    seed: int = 0, geometry: OriginalGeometry = TINY_LONGCLIP_GEOMETRY, shared_direction: float = 0.15
) -> dict:
    """Random fp32 weights in Long-CLIP's layout: OpenAI CLIP keys with both positional tables `[248, width]`.

    The two tables are drawn independently (and larger than CLIP's init), so a converter that drops one of them, or
    splits them at the wrong row, changes the features by far more than rounding. Both towers' final LayerNorm
    biases are set to norm 5 and both projections gain `shared_direction * outer(bias / |bias|, c)` for one random
    `c`: every image and text embedding then holds a common component, so image-text cosines are positive (about
    0.3 with the default) and CLIP-S's clipping at 0 hides no difference.
    """
    state_dict = {key: value.clone() for key, value in build_original_clip(geometry, seed=seed).state_dict().items()}
    generator = torch.Generator().manual_seed(seed + 1000)
    shape = (geometry.context_length, geometry.transformer_width)
    state_dict["positional_embedding"] = 0.5 * torch.randn(shape, generator=generator)
    state_dict["positional_embedding_res"] = 0.5 * torch.randn(shape, generator=generator)
    common = torch.randn(geometry.embed_dim, generator=generator)
    for bias, projection in (("ln_final.bias", "text_projection"), ("visual.ln_post.bias", "visual.proj")):
        direction = state_dict[bias] / state_dict[bias].norm()
        state_dict[bias] = 5 * direction
        state_dict[projection] = state_dict[projection] + shared_direction * torch.outer(direction, common)
    return state_dict


def fp16_rounded_keys(state_dict: dict) -> list[str]:
    """The tensors Long-CLIP's `convert_weights` casts to fp16, by module: each residual block's
    `nn.MultiheadAttention` (fused in-projection, out-projection) and MLP linears, the patch convolution and the
    two projection matrices."""
    keys = ["visual.conv1.weight", "visual.proj", "text_projection"]
    blocks = sorted({key[: -len("attn.in_proj_weight")] for key in state_dict if key.endswith("attn.in_proj_weight")})
    for block in blocks:
        for name in ("attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias"):
            keys.append(block + name)
        for linear in ("mlp.c_fc", "mlp.c_proj"):
            keys += [f"{block}{linear}.weight", f"{block}{linear}.bias"]
    return keys


def numpy_round_like_longclip_load(state_dict: dict) -> dict:
    """The weights as `longclip.load(path, device="cpu")` holds them: fp16-rounded where `convert_weights` casts."""
    rounded = {key: value.numpy().astype(np.float32) for key, value in state_dict.items()}
    for key in fp16_rounded_keys(state_dict):
        rounded[key] = rounded[key].astype(np.float16).astype(np.float32)
    return {key: torch.from_numpy(value) for key, value in rounded.items()}


# ----------------------------------------------------------------------------------------------------- NumPy forward
def weights64(state_dict: dict) -> dict[str, np.ndarray]:
    return {key: value.detach().double().numpy() for key, value in state_dict.items()}


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPS) * weight + bias


def softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def residual_block(x: np.ndarray, w: dict, prefix: str, heads: int, mask: np.ndarray | None) -> np.ndarray:
    """One `ResidualAttentionBlock` on `[B, L, D]`: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`."""
    batch, length, width = x.shape
    head_dim = width // heads
    h = layer_norm(x, w[prefix + "ln_1.weight"], w[prefix + "ln_1.bias"])
    qkv = h @ w[prefix + "attn.in_proj_weight"].T + w[prefix + "attn.in_proj_bias"]
    q, k, v = (part.reshape(batch, length, heads, head_dim).transpose(0, 2, 1, 3) for part in np.split(qkv, 3, -1))
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    if mask is not None:
        logits = logits + mask
    attended = (softmax(logits) @ v).transpose(0, 2, 1, 3).reshape(batch, length, width)
    x = x + attended @ w[prefix + "attn.out_proj.weight"].T + w[prefix + "attn.out_proj.bias"]
    h = layer_norm(x, w[prefix + "ln_2.weight"], w[prefix + "ln_2.bias"])
    h = h @ w[prefix + "mlp.c_fc.weight"].T + w[prefix + "mlp.c_fc.bias"]
    h = h * (1 / (1 + np.exp(-1.702 * h)))  # QuickGELU
    return x + h @ w[prefix + "mlp.c_proj.weight"].T + w[prefix + "mlp.c_proj.bias"]


def block_count(w: dict, prefix: str) -> int:
    return len({key[len(prefix) :].split(".")[0] for key in w if key.startswith(prefix)})


def longclip_positional_table(w: dict) -> np.ndarray:
    """`positional_embedding * mask1 + positional_embedding_res * mask2` with Long-CLIP's masks."""
    mask1 = np.zeros((CONTEXT_LENGTH, 1))
    mask1[:KEPT_POSITIONS] = 1
    mask2 = np.zeros((CONTEXT_LENGTH, 1))
    mask2[KEPT_POSITIONS:] = 1
    return w["positional_embedding"] * mask1 + w["positional_embedding_res"] * mask2


def numpy_encode_text(state_dict: dict, token_ids: np.ndarray, heads: int = 2) -> np.ndarray:
    """Long-CLIP's `encode_text` on `[B, 248]` ids (zero padded): projected end-of-text features `[B, embed_dim]`."""
    w = weights64(state_dict)
    token_ids = np.asarray(token_ids, dtype=np.int64)
    if token_ids.shape[1] != CONTEXT_LENGTH:
        raise ValueError(f"Long-CLIP reads exactly {CONTEXT_LENGTH} ids per text, got {token_ids.shape[1]}")
    x = w["token_embedding.weight"][token_ids] + longclip_positional_table(w)
    causal = np.triu(np.full((CONTEXT_LENGTH, CONTEXT_LENGTH), -np.inf), k=1)
    prefix = "transformer.resblocks."
    for index in range(block_count(w, prefix)):
        x = residual_block(x, w, f"{prefix}{index}.", heads, causal)
    x = layer_norm(x, w["ln_final.weight"], w["ln_final.bias"])
    pooled = x[np.arange(len(token_ids)), token_ids.argmax(axis=-1)]
    return pooled @ w["text_projection"]


def numpy_encode_image(state_dict: dict, pixel_values: np.ndarray, heads: int = 2) -> np.ndarray:
    """`VisionTransformer.forward` on `[B, 3, H, W]` pixels: projected class-token features `[B, embed_dim]`."""
    w = weights64(state_dict)
    pixels = np.asarray(pixel_values, dtype=np.float64)
    conv = w["visual.conv1.weight"]
    width, _, patch, _ = conv.shape
    batch, channels, height, _ = pixels.shape
    grid = height // patch
    # Non-overlapping patches, flattened in the convolution's (channel, row, column) order.
    patches = pixels.reshape(batch, channels, grid, patch, grid, patch).transpose(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(batch, grid * grid, channels * patch * patch) @ conv.reshape(width, -1).T
    class_token = np.broadcast_to(w["visual.class_embedding"], (batch, 1, width))
    x = np.concatenate([class_token, patches], axis=1) + w["visual.positional_embedding"]
    x = layer_norm(x, w["visual.ln_pre.weight"], w["visual.ln_pre.bias"])
    prefix = "visual.transformer.resblocks."
    for index in range(block_count(w, prefix)):
        x = residual_block(x, w, f"{prefix}{index}.", heads, None)
    return layer_norm(x[:, 0], w["visual.ln_post.weight"], w["visual.ln_post.bias"]) @ w["visual.proj"]


def numpy_scores(image_features, text_features, reference_features, w: float):
    """CLIP-S (Eq. 4) and RefCLIP-S (Eq. 5) in float64 on raw features; `reference_features[i]` is `[R_i, D]`."""

    def normalise(x):
        x = np.asarray(x, dtype=np.float64)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    image, text = normalise(image_features), normalise(text_features)
    scores = w * np.maximum((image * text).sum(axis=1), 0)
    ref_scores = []
    for item, references in enumerate(reference_features):
        similarity = max(float((normalise(references) @ text[item]).max()), 0.0)
        total = scores[item] + similarity
        ref_scores.append(2 * scores[item] * similarity / total if total > 0 else 0.0)
    return scores, np.array(ref_scores)


# ----------------------------------------------------------------------------------------------------- their code
@contextmanager
def missing_import_placeholders():
    """`model/longclip.py` imports `pkg_resources.packaging` (for a torch version check) and torchvision's
    transforms (for `_transform`); neither is installed here. Provide placeholders while importing, then remove
    them so that nothing else sees them."""
    import packaging.version

    class Transform:
        def __init__(self, *args, **kwargs):
            self.args = args

    stubs = {name: types.ModuleType(name) for name in ("pkg_resources", "torchvision", "torchvision.transforms")}
    stubs["pkg_resources"].packaging = packaging
    transforms = stubs["torchvision.transforms"]
    for name in ("Compose", "Resize", "CenterCrop", "ToTensor", "Normalize"):
        setattr(transforms, name, type(name, (Transform,), {}))
    transforms.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic")
    with temporary_modules(stubs):
        yield


@cache
def longclip_code(checkout: str) -> types.ModuleType:
    """`model/longclip.py` of a Long-CLIP checkout (with `build_model` and `CLIP` of `model/model_longclip.py`),
    imported by path as a stand-alone package so that its relative imports resolve."""
    model_dir = Path(checkout) / "model"
    if not (model_dir / "longclip.py").is_file() or not (model_dir / "model_longclip.py").is_file():
        raise FileNotFoundError(
            f"PACS_LONGCLIP_DIR='{checkout}' is not a Long-CLIP checkout (no model/longclip.py and "
            f"model/model_longclip.py): {CLONE_COMMAND}"
        )
    package_name = "longclip_reference_checkout"
    package = types.ModuleType(package_name)
    package.__path__ = [str(model_dir)]
    sys.modules[package_name] = package
    with missing_import_placeholders():
        return importlib.import_module(f"{package_name}.longclip")


def longclip_code_model(checkout: str, state_dict: dict) -> torch.nn.Module:
    """Long-CLIP's own `CLIP` (`load_from_clip=False`) holding `state_dict` in fp32, loaded strictly: its fp32
    forward, without the fp16 rounding of `longclip.load()`."""
    module = importlib.import_module(longclip_code(checkout).__package__ + ".model_longclip")
    width = state_dict["ln_final.weight"].shape[0]
    model = module.CLIP(
        embed_dim=state_dict["text_projection"].shape[1],
        image_resolution=TINY_LONGCLIP_GEOMETRY.image_resolution,
        vision_layers=TINY_LONGCLIP_GEOMETRY.vision_layers,
        vision_width=state_dict["visual.conv1.weight"].shape[0],
        vision_patch_size=state_dict["visual.conv1.weight"].shape[-1],
        context_length=CONTEXT_LENGTH,
        vocab_size=state_dict["token_embedding.weight"].shape[0],
        transformer_width=width,
        transformer_heads=width // 64,
        transformer_layers=TINY_LONGCLIP_GEOMETRY.transformer_layers,
        load_from_clip=False,
    )
    model.load_state_dict(state_dict, strict=True)
    return model.float().eval()
