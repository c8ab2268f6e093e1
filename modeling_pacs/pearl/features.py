"""Pearl features: run the frozen encoders once per distinct image / text, cache them, assemble model batches.

Cache layout (one folder per run; docs/spec/pearl.md#encoders, keyed as Pearl's code keys them: image file name, raw
text):

    CACHE/manifest.json                       encoders, their dims/tokens and the sorted key lists' sizes and hashes
    CACHE/<encoder>/images-00000.safetensors  `features` [n, tokens, dim] for image keys [i*S, (i+1)*S)
    CACHE/<encoder>/texts-00000.safetensors   `features` [n, dim] for text keys [i*S, (i+1)*S)
    CACHE/image_keys.json, CACHE/text_keys.json

Each shard is written to a temporary file and renamed into place, so an interrupted run leaves only whole shards;
running again skips them (resumable, nothing computed twice, nothing lost). A changed key list is refused.
"""

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def keys_digest(keys: list[str]) -> str:
    return hashlib.sha256(json.dumps(keys).encode("utf-8")).hexdigest()


def write_json_atomically(path: Path, content) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump(content, file, ensure_ascii=False, allow_nan=False)
        file.flush()
        os.fsync(file.fileno())
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def save_tensor_atomically(path: Path, features: torch.Tensor) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    save_file({"features": features.contiguous()}, temporary)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def extract_features(
    encoders: dict,
    image_keys: list[str],
    texts: list[str],
    cache_dir: str | Path,
    resolve_image: Callable[[str], object] = lambda key: key,
    shard_size: int = 1024,
    progress: bool = True,
) -> dict:
    """Encode every distinct image key (image encoders only) and text with each encoder into `cache_dir`.

    Args:
        encoders: `{name: PearlEncoder}`; encoders with `tokens == 0` are text-only.
        image_keys: image identifiers as the data names them (e.g. Spica's `imgid`); `resolve_image(key)` gives the
            image input (a path under the image folder, typically).
        texts: candidates and references (raw text: the encoders apply their own prompt / normalisation).
        shard_size: keys per shard (> 0).

    Returns:
        `{"computed": shards written now, "skipped": shards found complete}`.
    """
    if not isinstance(shard_size, int) or shard_size <= 0:
        raise ValueError(f"shard_size must be a positive integer, got {shard_size!r}")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    image_keys = sorted(set(image_keys))
    texts = sorted(set(texts))
    manifest = {
        "encoders": {name: {"dim": encoder.dim, "tokens": encoder.tokens} for name, encoder in encoders.items()},
        "num_images": len(image_keys),
        "num_texts": len(texts),
        "image_keys_sha256": keys_digest(image_keys),
        "text_keys_sha256": keys_digest(texts),
        "shard_size": shard_size,
    }
    manifest_path = cache_dir / MANIFEST
    if manifest_path.is_file():
        existing = json.loads(manifest_path.read_text(encoding="utf-8"))
        if existing != manifest:
            raise ValueError(
                f"feature cache '{cache_dir}' was built for other data or encoders (its manifest differs): "
                "use a new cache folder, or delete this one to rebuild it"
            )
    else:
        write_json_atomically(cache_dir / "image_keys.json", image_keys)
        write_json_atomically(cache_dir / "text_keys.json", texts)
        write_json_atomically(manifest_path, manifest)
    jobs = []
    for name, encoder in encoders.items():
        (cache_dir / name).mkdir(exist_ok=True)
        if encoder.tokens:
            jobs += [(name, "images", start) for start in range(0, len(image_keys), shard_size)]
        jobs += [(name, "texts", start) for start in range(0, len(texts), shard_size)]
    counts = {"computed": 0, "skipped": 0}
    iterator = jobs
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(jobs, desc="extracting Pearl features", unit="shard")
    for name, kind, start in iterator:
        path = cache_dir / name / f"{kind}-{start // shard_size:05d}.safetensors"
        if path.is_file():
            counts["skipped"] += 1
            continue
        if kind == "images":
            keys = image_keys[start : start + shard_size]
            features = encoders[name].encode_image(
                [resolve_image(key) for key in keys], item_indices=list(range(start, start + len(keys)))
            )
        else:
            features = encoders[name].encode_text(texts[start : start + shard_size])
        save_tensor_atomically(path, features.float().cpu())
        counts["computed"] += 1
    logger.info(
        "feature cache %s: %d shards computed, %d already there", cache_dir, counts["computed"], counts["skipped"]
    )
    return counts


class FeatureCache:
    """Read-only view of a cache written by [`extract_features`]: features by image key or text."""

    def __init__(self, cache_dir: str | Path):
        cache_dir = Path(cache_dir)
        manifest_path = cache_dir / MANIFEST
        if not manifest_path.is_file():
            raise FileNotFoundError(f"'{cache_dir}' is not a Pearl feature cache (no {MANIFEST}): run extraction first")
        self.manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        image_keys = json.loads((cache_dir / "image_keys.json").read_text(encoding="utf-8"))
        texts = json.loads((cache_dir / "text_keys.json").read_text(encoding="utf-8"))
        self.image_index = {key: index for index, key in enumerate(image_keys)}
        self.text_index = {text: index for index, text in enumerate(texts)}
        shard_size = self.manifest["shard_size"]
        self.image_features, self.text_features = {}, {}
        for name, encoder in self.manifest["encoders"].items():
            kinds = [("texts", len(texts), self.text_features)]
            if encoder["tokens"]:
                kinds.append(("images", len(image_keys), self.image_features))
            for kind, count, target in kinds:
                shards = []
                for shard in range((count + shard_size - 1) // shard_size):
                    path = cache_dir / name / f"{kind}-{shard:05d}.safetensors"
                    if not path.is_file():
                        raise FileNotFoundError(
                            f"feature cache '{cache_dir}' is incomplete ({path} is missing): "
                            "run the extraction again to finish it"
                        )
                    shards.append(load_file(path)["features"])
                target[name] = torch.cat(shards) if shards else torch.zeros(0)

    def images(self, name: str, keys: list[str]) -> torch.Tensor:
        return self.image_features[name][[self.lookup(self.image_index, key, "image") for key in keys]]

    def texts(self, name: str, texts: list[str]) -> torch.Tensor:
        return self.text_features[name][[self.lookup(self.text_index, text, "text") for text in texts]]

    @staticmethod
    def lookup(index: dict, key: str, what: str) -> int:
        if key not in index:
            raise KeyError(f"{what} {key!r} is not in the feature cache: extract features for this data first")
        return index[key]


def assemble_batch(
    config,
    candidate_features: dict,
    image_features: dict,
    reference_lists: list[list[int]] | None,
    reference_text_features: dict | None,
) -> dict:
    """Model inputs for a batch: `reference_lists[b]` are row indices into `reference_text_features[name]`.

    References beyond `config.max_refs` must already be dropped; slots past an item's own count are masked.
    """
    batch = {"candidate_features": candidate_features, "image_features": image_features}
    if reference_lists is None or not any(reference_lists):
        return batch
    num_slots = max(len(references) for references in reference_lists)
    mask = torch.zeros(len(reference_lists), num_slots, dtype=torch.bool)
    index = torch.zeros(len(reference_lists), num_slots, dtype=torch.long)
    for row, references in enumerate(reference_lists):
        mask[row, : len(references)] = True
        index[row, : len(references)] = torch.tensor(references, dtype=torch.long)
    batch["reference_features"] = {
        encoder["name"]: reference_text_features[encoder["name"]][index] for encoder in config.reference_encoders
    }
    batch["reference_mask"] = mask
    return batch
