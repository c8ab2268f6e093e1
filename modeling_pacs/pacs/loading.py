"""Load PAC-S++ / PAC-S / CLIP-S models (`PACSModel`) from a Hub id or a directory, on a device and precision.

The component loader: `modeling_pacs.loading.load_model` (aliases, tiny models, Polos, Pearl) calls it for PAC-S
models, and so do Pearl's CLIP encoder and anything else that needs a PACSModel without the alias dispatcher.
"""

import torch
from transformers import AutoConfig

from ..extras import require
from ..models.modeling_pacs import PACSModel

DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


def resolve_device(device: str | None = None) -> torch.device:
    """`None`/`"auto"`: CUDA when present, else CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device {device!r} is not a device: use 'auto', 'cpu', 'cuda' or 'cuda:N' ({error})"
        ) from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} was asked for, but CUDA is not available here (torch {torch.__version__}): "
                "use --device cpu (or auto), or install a CUDA build of torch"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} was asked for, but MPS is not available here: use cpu or auto")
    return resolved


def plain_model_type(name_or_path: str) -> str | None:
    """The `model_type` of a Hub id or directory's config; None when it cannot be read (the loader then explains)."""
    from ..auto_classes import register_auto_classes

    register_auto_classes()  # so that AutoConfig reads our own model types without trust_remote_code
    try:
        return AutoConfig.from_pretrained(name_or_path).model_type
    except (OSError, ValueError):
        return None


def check_dtype(dtype: str | None) -> None:
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def place(model, device: str | None, dtype: str | None):
    """`model` on the device, in eval mode, in `dtype` (None: fp32, the reference numbers)."""
    model = model.to(resolve_device(device)).eval()
    return model.to(DTYPES[dtype]) if dtype is not None else model


def load_pacs_model(
    name_or_path: str, device: str | None = None, dtype: str | None = None, merge_adapter: bool = True
) -> PACSModel:
    """A `PACSModel` from a PAC-S++ directory or Hub id, or from a plain CLIP / SigLIP / SigLIP 2 checkpoint (CLIP-S
    with the backbone's own pipelines). `merge_adapter=False` keeps a LoRA adapter that the config would merge
    unmerged (`PACSModel.from_pretrained`; `model.merge_adapter()` merges it later); True: as the config says.

    Example:

    ```python
    >>> model = load_pacs_model("openai/clip-vit-base-patch32", device="cpu")  # CLIP-S
    ```
    """
    check_dtype(dtype)
    model_type = plain_model_type(name_or_path)
    if model_type == "clip":
        loaded = PACSModel.from_clip(name_or_path, dtype=torch.float32)
    elif model_type in ("siglip", "siglip2"):
        if model_type == "siglip":  # SigLIP's tokenizer is sentencepiece-based; SigLIP 2's is not
            require("sentencepiece", "siglip", "SigLIP")
        loaded = PACSModel.from_siglip(name_or_path, dtype=torch.float32)
    else:
        # True: as the config says (a folder saved with its adapter unmerged stays so)
        merge = None if merge_adapter else False
        loaded = PACSModel.from_pretrained(name_or_path, dtype=torch.float32, merge_adapter=merge)
    return place(loaded, device, dtype)


__all__ = ["DTYPES", "load_pacs_model", "place", "plain_model_type", "resolve_device"]
