"""Reproducibility signatures: a short string beside each number that pins every setting that changes it, the way
sacreBLEU prints `BLEU|nrefs:4|case:mixed|eff:no|tok:13a|smooth:exp|version:2.0.0`.

Two runs with the same signature give the same numbers (within 1e-6: devices and batch compositions differ in the
last bits), so a paper can print it beside its table. What does not change the number (device, batch sizes, progress
bars, the folder a model lies in, its README) is left out.

| field | pins | metrics |
| --- | --- | --- |
| (first) | the metric (`PAC-S++`, `CLIP-S`, `Polos`, `CIDEr-D`, ...) | all |
| `model` | the `--metrics` entry: alias, tiny alias, Hub id, or a directory's name | model metrics |
| `weights` | sha256 of the directory's weight files (`*.safetensors`, `*.bin`, ...), 8 hex digits | models |
| `w` | the rescaling weight of Eq. 4 | PAC-S++, PAC-S, CLIP-S |
| `lora` | `official` (the paper's rank, alpha and placement), `rR-aA` for others, `none` without LoRA | PAC-S++ |
| `mode` | the scoring mode (`per_item`, `official`: `--mode`, else the model's default) | Polos, DENEB |
| `prompt` | the prompt prefix read before each caption (empty: none) | CLIP-based models |
| `captions` | long captions: `truncate` or `chunks` | model metrics |
| `ctx` | the text encoder's context (77 for CLIP, 248 for Long-CLIP) | CLIP-based models |
| `refs` | references per item: `5`, or `min-max` when ragged, `0` without | all |
| `tok` | the tokenizer(s): `clip-bpe`, `roberta-bpe`, ...; `ptb` for the n-gram metrics | all |
| `dtype` | `fp32` (the reference numbers), `fp16`, `bf16` | model metrics |
| `impl` | the implementation of an n-gram metric (`pycocoevalcap-1.2`) | n-gram metrics |
| `version` | the version of pacs-pp | all |

Example:

```python
>>> from modeling_pacs.registry import METRICS
>>> ngram_signature(METRICS["cider"], [["a dog", "a brown dog"], ["a cat", "a cat", "a grey cat"]])  # doctest: +SKIP
'CIDEr-D|refs:2-3|tok:ptb|impl:pycocoevalcap-1.2|version:0.1.0'
```
"""

import functools
import hashlib
import importlib.metadata
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .metric_spec import MetricSpec

# Files whose bytes are a model's numbers (configs are pinned by their fields, tokenizers by `tok`).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".npz", ".npy")
# Tokenizer classes -> the names a signature gives them (the slow and fast classes share one).
TOKENIZER_NAMES = {
    "CLIPTokenizer": "clip-bpe",
    "RobertaTokenizer": "roberta-bpe",
    "BertTokenizer": "bert-wordpiece",
    "SiglipTokenizer": "siglip-spm",
    "GemmaTokenizer": "gemma-spm",
}
# The official PAC-S++ LoRA recipe (docs/spec/pacs.md#training): rank 4, alpha 1, every attention and MLP linear.
OFFICIAL_LORA = (4, 1.0, ("fc1", "fc2", "k_proj", "out_proj", "q_proj", "v_proj"))


def signature(metric: str, **fields: Any) -> str:
    """`metric|key:value|...`, in the order given; fields that are None are left out."""
    return "|".join([metric, *(f"{key}:{value}" for key, value in fields.items() if value is not None)])


def package_version() -> str:
    from .version import __version__

    return __version__


def reference_count(references: Sequence[Sequence[str]] | None) -> str:
    """`"5"` when every item has 5 references, `"3-5"` when they range from 3 to 5, `"0"` without references."""
    counts = [len(item) for item in references or ()]
    if not counts or max(counts) == 0:
        return "0"
    low, high = min(counts), max(counts)
    return str(low) if low == high else f"{low}-{high}"


# ---------------------------------------------------------------------------------------------------- n-gram metrics
def ngram_signature(spec: MetricSpec, references: Sequence[Sequence[str]] | None) -> str:
    """The signature of an n-gram metric (BLEU, METEOR, ROUGE-L, CIDEr-D, SPICE) scored by pycocoevalcap on
    PTB-tokenised captions."""
    return signature(
        spec.display_name,
        refs=reference_count(references),
        tok="ptb",
        impl=f"pycocoevalcap-{distribution_version('pycocoevalcap')}",
        version=package_version(),
    )


def distribution_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------------------------------- model metrics
def model_signature(
    model: Any,
    entry: str,
    references: Sequence[Sequence[str]] | None = None,
    long_captions: str = "truncate",
    dtype: str | None = None,
    mode: str | None = None,
) -> str:
    """The signature of a loaded model metric (`entry` as given to `--metrics` / `--model`) scored with these
    references, long-caption mode, dtype (None: fp32) and scoring mode (None: the model's default)."""
    from .registry import spec_of

    config = model.config
    spec = spec_of(model)
    score_field = next(field for field in spec.outputs if field.kind == "score")
    return signature(
        score_field.label_for(config),
        model=model_name(entry),
        weights=weights_digest(model),
        w=getattr(config, "w", None),
        lora=lora_mode(config),
        mode=mode or getattr(config, "mode", None),
        prompt=prompt_text(config),
        captions=long_captions,
        ctx=getattr(config, "max_text_length", None),
        refs=reference_count(references),
        tok=tokenizer_names(model),
        dtype=dtype or "fp32",
        version=package_version(),
    )


def model_name(entry: str) -> str:
    """An alias or Hub id as given; a local directory by its name (its path differs between machines; the weights'
    digest pins its contents)."""
    return Path(entry).name if os.path.isdir(os.path.expanduser(entry)) else entry


def prompt_text(config: Any) -> str | None:
    prompt = getattr(config, "prompt_prefix", None)
    return None if prompt is None else " ".join(prompt.split()).replace("|", "/")


def lora_mode(config: Any) -> str | None:
    """`official`, `rR-aA` (another rank or alpha or placement) or `none` for a PAC-S family model; None for others."""
    if not hasattr(config, "lora_rank"):
        return None
    if getattr(config, "variant", None) != "pac_s_pp":
        return "none"  # CLIP-S and PAC-S have no adapter
    recipe = (config.lora_rank, float(config.lora_alpha), tuple(sorted(config.lora_target_modules or ())))
    return "official" if recipe == OFFICIAL_LORA else f"r{config.lora_rank}-a{config.lora_alpha:g}"


def tokenizer_names(model: Any) -> str | None:
    """The model's tokenizers by name, `+`-joined (`clip-bpe+roberta-bpe` for Polos)."""
    names = []
    for tokenizer in model_tokenizers(model):
        class_name = type(tokenizer).__name__.removesuffix("Fast")
        name = TOKENIZER_NAMES.get(class_name, class_name.removesuffix("Tokenizer").lower())
        if name not in names:
            names.append(name)
    return "+".join(names) or None


def model_tokenizers(model: Any) -> list:
    """The tokenizers a scoring model holds (`tokenizer`, `clip_tokenizer`, `text_tokenizer`; its `encoders`')."""
    found = [
        getattr(model, name)
        for name in ("tokenizer", "clip_tokenizer", "text_tokenizer")
        if getattr(model, name, None) is not None
    ]
    for encoder in (getattr(model, "encoders", None) or {}).values():
        found.extend(model_tokenizers(encoder))
    return found


def weights_digest(model: Any) -> str:
    """`sha256:` and the first 8 hex digits of the digest of the model directory's weight files (relative paths and
    bytes, sorted by path); `rev:` and the Hub commit when the files cannot be found; `unknown` otherwise."""
    config = model.config
    directory = model_directory(getattr(config, "_name_or_path", "") or "")
    if directory is not None:
        files = tuple(
            (str(path.relative_to(directory)), path.stat().st_size, path.stat().st_mtime_ns)
            for path in sorted(directory.rglob("*"))
            if path.is_file() and path.suffix in WEIGHT_SUFFIXES
        )
        if files:
            return f"sha256:{directory_digest(str(directory), files)[:8]}"
    commit = getattr(config, "_commit_hash", None)
    return f"rev:{commit[:12]}" if commit else "unknown"


def model_directory(name_or_path: str) -> Path | None:
    """A local directory, or the cached snapshot of a Hub id (never downloads); None when neither exists."""
    if not name_or_path:
        return None
    if os.path.isdir(name_or_path):
        return Path(name_or_path)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception:  # not a Hub id, or not cached: the signature falls back to the commit
        return None


@functools.lru_cache(maxsize=32)
def directory_digest(directory: str, files: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 of the files' relative paths and bytes (cached by path, size and modification time)."""
    digest = hashlib.sha256()
    for relative, _, _ in files:
        digest.update(relative.encode() + b"\0")
        with open(Path(directory) / relative, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


__all__ = [
    "model_signature",
    "ngram_signature",
    "reference_count",
    "signature",
    "weights_digest",
]
