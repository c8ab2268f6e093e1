"""An embedding cache for [`PACSModel`]: text and image embeddings keyed by content and by the model's weights.

Repeated scoring (an SCST reward whose references and images recur every step, a Space scoring the same image
against several captions) encodes each distinct input once. Entries are keyed by

- a fingerprint of the model: a hash of every weight and buffer plus the config fields that change an embedding
  (prompt prefix, text length). Image entries hash only the image side (every tensor but the text tower's, and the
  image preprocessing), so models that share an image encoder (CLIP-S and PAC-S built on one backbone whose vision
  tower neither changed) share their image entries when they share a cache. It is recomputed whenever a parameter
  is replaced or modified in place (tracked by PyTorch's tensor version counters), so an optimizer step or
  `load_state_dict` invalidates every entry;
- the content of the input: the caption string, or a hash of the image bytes (file content for paths, pixels for
  PIL images and arrays), never a path alone, so an edited file is a new entry.

A hit returns the very tensor stored at the miss (bit-identical). The memory store is bounded (least recently used
entries are dropped); an optional directory keeps entries across processes, one file per entry written atomically.

Remote code: only the standard library and torch.
"""

import hashlib
import io
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch

from .inputs import image_source, tensor_to_numpy

TEXT = "text"
IMAGE = "image"


def model_weights_stamp(model: torch.nn.Module) -> tuple:
    """A cheap token that changes whenever a parameter or buffer is replaced or modified in place."""
    return tuple(
        (name, id(tensor), tensor.data_ptr(), tensor._version)
        for name, tensor in (*model.named_parameters(), *model.named_buffers())
    )


# State-dict names of a dual encoder's text side (CLIP's and SigLIP's), which image embeddings do not read.
TEXT_SIDE_NAMES = ("text_model", "text_projection", "logit_scale", "logit_bias")


def model_fingerprint(model: torch.nn.Module, kind: str | None = None) -> str:
    """A hash of every parameter and buffer (name, dtype, shape, bytes) and of the config fields used by encoding.

    `kind="image"` hashes what an image embedding depends on only: every tensor but the text side's
    (`TEXT_SIDE_NAMES`) and the image preprocessing (the backbone family's pipeline and image size), so two models
    with one image encoder have one image fingerprint whatever their text towers, `w` or prompt.
    """
    digest = hashlib.blake2b(digest_size=16)
    config = getattr(model, "config", None)
    if kind == IMAGE:
        backbone_config = getattr(config, "backbone_config", None)
        if backbone_config is not None:
            from .backbones import backbone_spec

            size = getattr(getattr(backbone_config, "vision_config", None), "image_size", None)
            digest.update(f"image;{backbone_spec(backbone_config)!r};size={size!r};".encode())
    else:
        for field in ("prompt_prefix", "max_text_length"):
            digest.update(f"{field}={getattr(config, field, None)!r};".encode())
    for name, tensor in sorted(model.state_dict().items()):
        if kind == IMAGE and any(part in name.split(".") for part in TEXT_SIDE_NAMES):
            continue
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def image_content_key(image: Any) -> str | None:
    """A hash of an image's content, or `None` when it cannot be read (the encoder then reports the error by the
    rules of `inputs.load_image`: a dict without an image, a closed PIL image, a tensor NumPy cannot hold...)."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        image = image_source(image, "image")
        if isinstance(image, (str, os.PathLike)):
            digest.update(b"bytes:" + Path(image).read_bytes())
        elif isinstance(image, (bytes, bytearray, memoryview)):
            digest.update(b"bytes:" + bytes(image))
        elif isinstance(image, PIL.Image.Image):
            digest.update(f"pil:{image.mode}:{image.size};".encode() + image.tobytes())
        elif isinstance(image, (np.ndarray, torch.Tensor)):
            array = tensor_to_numpy(image, "image") if isinstance(image, torch.Tensor) else image
            if isinstance(image, torch.Tensor):
                digest.update(b"tensor;")  # a tensor is CxHxW, an array HxWxC: equal bytes are different images
            digest.update(f"array:{array.shape}:{array.dtype};".encode() + np.ascontiguousarray(array).tobytes())
        else:
            return None
    except (OSError, ValueError, TypeError):  # ImageInputError is a ValueError
        return None
    return digest.hexdigest()


def embedding_checksum(embedding: torch.Tensor) -> str:
    """blake2b of an embedding's dtype, shape and bytes: a stored entry whose bytes changed is not trusted."""
    digest = hashlib.blake2b(f"{embedding.dtype}{tuple(embedding.shape)}".encode(), digest_size=16)
    digest.update(embedding.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class EmbeddingCache:
    r"""
    Bounded, content-keyed cache of the embeddings of a [`PACSModel`], optionally persisted in a directory.

    Attach it with `model.embedding_cache = EmbeddingCache(...)`: `encode_texts`, `encode_images` and therefore
    `score` then encode only what the cache does not hold. Token-level features (`return_tokens=True`) bypass it.

    Args:
        max_entries (`int`, defaults to 100,000):
            Entries kept in memory (each holds one `projection_dim` fp32 vector: 2 KiB for ViT-B/32); the least
            recently used are dropped beyond it.
        directory (`str` or `os.PathLike`, *optional*):
            Where entries are also stored, one file per entry under a folder named by the model fingerprint.

    Example:

    ```python
    >>> from modeling_pacs.models.embedding_cache import EmbeddingCache
    >>> from modeling_pacs.loading import load_model
    >>> model = load_model("tiny")
    >>> model.embedding_cache = EmbeddingCache(max_entries=10_000)
    >>> first = model.encode_texts(["a dog on a beach"])
    >>> second = model.encode_texts(["a dog on a beach"])  # a hit: the same tensor values
    >>> bool((first == second).all()), model.embedding_cache.hits
    (True, 1)
    ```
    """

    def __init__(self, max_entries: int = 100_000, directory: str | os.PathLike | None = None):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries <= 0:
            raise ValueError(f"max_entries must be a positive integer, got {max_entries!r}")
        self.max_entries = max_entries
        self.directory = Path(directory) if directory is not None else None
        self.entries: OrderedDict[tuple[str, str, str], torch.Tensor] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._fingerprints: dict[tuple[int, str], tuple[tuple, str]] = {}
        self._lock = threading.Lock()
        self._filling = threading.local()

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self):
        """Drop every entry held in memory (files in `directory` stay) and reset the counters."""
        with self._lock:
            self.entries.clear()
            self.hits = self.misses = 0

    def fingerprint(self, model: torch.nn.Module, kind: str = TEXT) -> str:
        """The model's weight fingerprint for `kind` entries (`model_fingerprint`), recomputed only when a weight
        tensor changed since the last call."""
        stamp = model_weights_stamp(model)
        known = self._fingerprints.get((id(model), kind))
        if known is None or known[0] != stamp:
            known = (stamp, model_fingerprint(model, kind))
            self._fingerprints[(id(model), kind)] = known
        return known[1]

    def is_filling(self) -> bool:
        """True while this thread encodes the misses of a cached call (the model then encodes directly)."""
        return getattr(self._filling, "active", False)

    @contextmanager
    def _encoding_misses(self):
        self._filling.active = True
        try:
            yield
        finally:
            self._filling.active = False

    def encode(
        self,
        model: torch.nn.Module,
        kind: str,
        items: list,
        encode_missing: Callable[[list[int]], torch.Tensor],
    ) -> torch.Tensor:
        """Embeddings `[len(items), D]` of `items`, calling `encode_missing(positions)` for the uncached ones.

        `kind` is `"text"` (items are caption strings) or `"image"` (any image input). Items whose content cannot be
        read are encoded (and fail there with the model's own error message) but not cached.
        """
        if kind not in (TEXT, IMAGE):
            raise ValueError(f"kind must be '{TEXT}' or '{IMAGE}', got {kind!r}")
        fingerprint = self.fingerprint(model, kind)
        keys = [item if kind == TEXT else image_content_key(item) for item in items]
        found: dict[int, torch.Tensor] = {}
        missing: list[int] = []
        first_missing: dict[str, int] = {}
        duplicates: dict[int, int] = {}
        for position, key in enumerate(keys):
            stored = self._get((fingerprint, kind, key)) if key is not None else None
            if stored is not None:
                found[position] = stored
            elif key is not None and key in first_missing:
                duplicates[position] = first_missing[key]
            else:
                if key is not None:
                    first_missing[key] = position
                missing.append(position)
        if missing:
            with self._encoding_misses():
                encoded = encode_missing(missing)  # a failure here (bad input) leaves the cache as it was
            for row, position in enumerate(missing):
                found[position] = encoded[row].clone()
                if keys[position] is not None:
                    self._put((fingerprint, kind, keys[position]), found[position])
        with self._lock:  # counted once the call succeeded: a failed call is neither a hit nor a miss
            self.hits += len(found) - len(missing)
            self.misses += len(missing)
        for position, source in duplicates.items():
            found[position] = found[source]
        if not items:
            return torch.zeros(0, model.config.backbone_config.projection_dim)
        return torch.stack([found[position] for position in range(len(items))])

    # ---------------------------------------------------------------------------------------------- storage
    def _file(self, key: tuple[str, str, str]) -> Path:
        fingerprint, kind, content = key
        name = hashlib.blake2b(content.encode("utf-8"), digest_size=16).hexdigest()
        return self.directory / fingerprint / kind / name[:2] / f"{name}.pt"

    def _get(self, key: tuple[str, str, str]) -> torch.Tensor | None:
        with self._lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
        if self.directory is None:
            return None
        path = self._file(key)
        if not path.is_file():
            return None
        try:
            stored = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # any damage (truncated, garbage, not a zip, not a pickle) is a miss, rewritten below
            return None
        if not isinstance(stored, dict) or stored.get("content") != key[2]:
            return None  # a hash collision of the file name: never return another input's embedding
        embedding = stored.get("embedding")
        if not isinstance(embedding, torch.Tensor) or stored.get("checksum") != embedding_checksum(embedding):
            return None  # changed bytes (or a file written before entries had checksums): recomputed and rewritten
        self._remember(key, embedding)
        return embedding

    def _put(self, key: tuple[str, str, str], embedding: torch.Tensor):
        self._remember(key, embedding)
        if self.directory is None:
            return
        path = self._file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        torch.save({"content": key[2], "embedding": embedding, "checksum": embedding_checksum(embedding)}, buffer)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(buffer.getvalue())
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _remember(self, key: tuple[str, str, str], embedding: torch.Tensor):
        with self._lock:
            self.entries[key] = embedding
            self.entries.move_to_end(key)
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)


__all__ = ["EmbeddingCache", "image_content_key", "model_fingerprint"]
