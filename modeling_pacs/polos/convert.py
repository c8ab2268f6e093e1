"""Convert the released Polos checkpoint (`reprod.ckpt`, a PyTorch Lightning 1.2 file) into a Hub-ready PolosModel.

The official loader unpickles the whole file (docs/spec/polos.md#safe-loading). This converter never does:

1. `torch.load(weights_only=True)` with two allow-listed names, `EarlyStopping` and `ModelCheckpoint` of
   `pytorch_lightning.callbacks` (Lightning keys its callback states by class), bound to empty placeholder classes:
   nothing of Lightning is imported or run. Any other global is refused.
2. Only `state_dict` is used (plus `hyper_parameters` when there is no `hparams.yaml`, read with `yaml.safe_load`).
3. Every key and shape is checked (docs/spec/polos.md#state-dict, docs/spec/polos.md#conversion-map): `clip.*` in OpenAI
   layout (fp16 or fp32, cast to fp32, geometry read from the shapes as the PAC-S converter does), `encoder.model.*`
   (RoBERTa), `scalar_mix.*`, `ff.*`.

Example:

```python
>>> from modeling_pacs.polos.convert import convert_polos_checkpoint
>>> model = convert_polos_checkpoint("reprod/reprod.ckpt", "polos-converted")
>>> model.score(["cat.jpg"], ["a cat on a sofa"], [["a cat sleeping on a couch"]]).scores
```
"""

import os
import re
from pathlib import Path

import torch

from ..lightning_checkpoints import (
    check_head_dim,
    check_keys,
    check_sentence_encoder,
    fill_model,
    head_weights,
    load_lightning_checkpoint,
    load_sentence_encoder,
    read_hparams,
    scalar_mix_weights,
    write_model_directory,
)
from ..models.configuration_polos import PolosConfig
from ..models.modeling_polos import PolosModel
from ..output_paths import check_output_directory
from ..pacs.convert import (
    OPENAI_HEAD_DIM,
    CheckpointError,
    clip_config_for,
    expected_shapes,
    infer_geometry,
    layout_message,
    to_transformers_state_dict,
)
from ..tokenization import build_clip_tokenizer
from .spec import CITATION

# Entries that are not weights of the scoring model (docs/spec/polos.md#conversion-map).
DROPPED_KEYS = ("scalar_mix.dropout_mask", "scalar_mix.dropout_fill", "encoder.model.embeddings.position_ids")
DROPPED_PREFIXES = ("encoder.model.pooler.",)
CLIP_PREFIX = "clip."
ENCODER_PREFIX = "encoder.model."
HEAD_KEY = re.compile(r"ff\.0\.ff\.linear_(\d+)\.(weight|bias)")
MAX_KEYS_SHOWN = 12

MODEL_CARD = """---
license: other
library_name: transformers
pipeline_tag: image-to-text
base_model:
- {clip_model_id}
- {text_encoder_id}
tags:
- pacs-pp
- polos
- image-captioning-evaluation
---
# Polos (converted for pacs-pp)

Polos (Wada, Kaneda, Saito, Sugiura, *Polos: Multimodal Metric Learning from Human Feedback for Image Captioning*,
CVPR 2024) is a supervised, **reference-based** image-caption metric trained on Polaris human judgements. This
directory was converted from the released Lightning checkpoint `{checkpoint}` by `pacs-pp convert-polos`, loading it
with `torch.load(weights_only=True)` (never unpickling code). CLIP tensors stored as {clip_dtypes} were cast to fp32.

- CLIP ViT-B/32 (`{clip_model_id}`): {clip_geometry}; raw features of the image and of "A photo depicts " + caption.
- Sentence encoder `{text_encoder_id}`: {text_layers} layers x {text_width}, CLS of a learned {mixed}-layer ScalarMix.
- Head: {feature_size} -> {hidden_sizes} -> 1 (Tanh), sigmoid; the score is the max over references.

```python
from transformers import AutoModel
model = AutoModel.from_pretrained("DIR", trust_remote_code=True, dtype="float32")
out = model.score(["cat.jpg"], ["a cat on a sofa"], [["a cat sleeping on a couch"]])
print(out.scores, out.mean_score)
```

## Modes
The official code's scores depend on the batch (shared normalisation statistics, references cut to the batch's
smallest reference count). `mode="per_item"` (default) scores each item alone: deterministic, equal to the official
`batch_size=1`. `mode="official", batch_size=32` reproduces the chunking behind the published numbers.

## Results reported by the authors (not re-measured here)
Reported in the Polos paper, computed with the official code (fp16 CLIP features, official mode, batch 32):

| benchmark | Polos (reported) |
|---|---|
| Composite, Kendall tau-c | 57.6 |
| Flickr8K-Expert, Kendall tau-c | 56.4 |
| Flickr8K-CF, Kendall tau-b | 37.8 |
| Polaris, Kendall tau-c | 57.8 |
| Pascal-50S mean accuracy | 86.5 |
| FOIL 1-ref / 4-ref accuracy | 93.3 / 95.4 |

The license is that of the official release (https://github.com/keio-smilab24/Polos); check it before redistributing.

## Citation
```bibtex
{citation}
```
"""


def load_polos_checkpoint(path: str | os.PathLike) -> dict:
    """Read a Polos Lightning checkpoint with `weights_only=True` and the allow-list of
    docs/spec/polos.md#safe-loading."""
    return load_lightning_checkpoint(path, "Polos")


def check_hparams(hparams: dict) -> dict:
    """The architecture settings the port supports, read from the hparams (docs/spec/polos.md#head,
    docs/spec/polos.md#hparams)."""
    expected = {"layer": "mix", "pool": "cls", "activations": "Tanh"}
    for key, value in expected.items():
        if key in hparams and str(hparams[key]) != value:
            raise CheckpointError(
                f"hparams '{key}' is {hparams[key]!r}: only {value!r} (the released Polos) is supported"
            )
    if "final_activation" not in hparams:
        raise CheckpointError(
            "hparams lack 'final_activation': the official code then adds a second sigmoid inside the head; "
            "the released model has 'final_activation: false'. Pass the hparams.yaml of the release"
        )
    if hparams["final_activation"] not in (False, None, "false", "False"):
        raise CheckpointError(f"hparams 'final_activation' is {hparams['final_activation']!r}: only false is supported")
    hidden_sizes = hparams.get("hidden_sizes", "2304,1152")
    try:
        # FeedForward accepts "2304,1152", a list, or one int.
        sizes = hidden_sizes if isinstance(hidden_sizes, (list, tuple)) else str(hidden_sizes).split(",")
        hidden_sizes = [int(size) for size in sizes]
    except (TypeError, ValueError):
        raise CheckpointError(
            f"hparams 'hidden_sizes' {hidden_sizes!r} is not a comma-separated list of ints"
        ) from None
    return {
        "hidden_sizes": hidden_sizes,
        "dropout": float(hparams.get("dropout", 0.1)),
        "scalar_mix_dropout": float(hparams.get("scalar_mix_dropout", 0.1)),
        "pretrained_model": str(hparams.get("pretrained_model", "princeton-nlp/sup-simcse-roberta-base")),
    }


def shorten(keys: list[str]) -> str:
    shown = ", ".join(keys[:MAX_KEYS_SHOWN])
    return shown + (f", ... ({len(keys) - MAX_KEYS_SHOWN} more)" if len(keys) > MAX_KEYS_SHOWN else "")


def split_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Group the checkpoint's tensors by part (prefix stripped); unknown keys are named in an error."""
    parts = {"clip": {}, "encoder": {}, "scalar_mix": {}, "head": {}}
    unknown = []
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"entry '{key}' of the state dict is a {type(value).__name__}, not a tensor")
        if key in DROPPED_KEYS or key.startswith(DROPPED_PREFIXES):
            continue
        if key.startswith(CLIP_PREFIX):
            parts["clip"][key.removeprefix(CLIP_PREFIX)] = value
        elif key.startswith(ENCODER_PREFIX):
            parts["encoder"][key.removeprefix(ENCODER_PREFIX)] = value
        elif key.startswith("scalar_mix."):
            parts["scalar_mix"][key.removeprefix("scalar_mix.")] = value
        elif HEAD_KEY.fullmatch(key):
            parts["head"][key] = value
        else:
            unknown.append(key)
    if unknown:
        raise CheckpointError(
            layout_message("is not a Polos checkpoint (docs/spec/polos.md#state-dict)", [], sorted(unknown))
        )
    return parts


def convert_polos_state_dict(
    state_dict: dict[str, torch.Tensor],
    text_config,
    hparams: dict,
    head_dim: int = OPENAI_HEAD_DIM,
    text_encoder_id: str = "princeton-nlp/sup-simcse-roberta-base",
) -> PolosModel:
    """Build a PolosModel (fp32) from the checkpoint's state dict, checking every key and shape."""
    parts = split_state_dict(state_dict)
    geometry = infer_geometry(parts["clip"], head_dim)
    check_keys("part clip.* (CLIP) does not match its geometry", parts["clip"], expected_shapes(geometry, False))
    clip_weights = to_transformers_state_dict(parts["clip"], geometry)

    check_sentence_encoder(parts["encoder"], text_config, text_encoder_id)
    num_mixed = text_config.num_hidden_layers + 1
    mix = scalar_mix_weights(parts["scalar_mix"], num_mixed)

    feature_size = 4 * text_config.hidden_size + 6 * geometry.embed_dim
    sizes = [feature_size, *hparams["hidden_sizes"], 1]
    head = head_weights(
        f"part ff.* (head) does not match the feature width 4*{text_config.hidden_size} + 6*{geometry.embed_dim} = "
        f"{feature_size} and hidden_sizes {hparams['hidden_sizes']}",
        parts["head"],
        sizes,
    )

    config = PolosConfig(
        clip_config=clip_config_for(geometry, "quick_gelu"),
        text_config=text_config,
        text_encoder_id=text_encoder_id,
        hidden_sizes=hparams["hidden_sizes"],
        dropout=hparams["dropout"],
        scalar_mix_dropout=hparams["scalar_mix_dropout"],
    )
    model = PolosModel(config)
    weights = {f"clip_encoder.clip.{key}": value for key, value in clip_weights.items()}
    weights |= {f"text_encoder.{key}": value.float() for key, value in parts["encoder"].items()}
    return fill_model(model, weights | mix | head)


def convert_polos_checkpoint(
    checkpoint: str | os.PathLike,
    output_dir: str | os.PathLike,
    hparams: str | os.PathLike | None = None,
    text_encoder: str | None = None,
    head_dim: int = OPENAI_HEAD_DIM,
    overwrite: bool = False,
    log=print,
) -> PolosModel:
    """Convert `checkpoint` and write a Hub-ready PolosModel directory (atomically; model card included).

    `text_encoder` (a Hub id or a local directory) provides the RoBERTa config and tokenizer; it defaults to the
    hparams' `pretrained_model` (`princeton-nlp/sup-simcse-roberta-base`).
    """
    checkpoint_path = Path(checkpoint)
    output_dir = Path(output_dir)
    check_output_directory(output_dir, inputs=[checkpoint_path, hparams], overwrite=overwrite)
    check_head_dim(head_dim)
    loaded = load_polos_checkpoint(checkpoint_path)
    settings = check_hparams(read_hparams(checkpoint_path, hparams, loaded))
    text_encoder = text_encoder or settings["pretrained_model"]
    text_config, text_tokenizer = load_sentence_encoder(text_encoder)
    clip_dtypes = sorted({str(value.dtype).removeprefix("torch.") for key, value in loaded["state_dict"].items()
                          if key.startswith(CLIP_PREFIX)})  # fmt: skip
    model = convert_polos_state_dict(loaded["state_dict"], text_config, settings, head_dim, text_encoder)
    model.clip_tokenizer = build_clip_tokenizer(model.config.max_text_length)
    model.text_tokenizer = text_tokenizer
    clip_config = model.config.clip_config
    log(
        f"Polos: CLIP vision {clip_config.vision_config.num_hidden_layers} x {clip_config.vision_config.hidden_size}, "
        f"text {clip_config.text_config.num_hidden_layers} x {clip_config.text_config.hidden_size}; sentence encoder "
        f"{text_config.num_hidden_layers} x {text_config.hidden_size}; head {model.config.feature_size} -> "
        f"{model.config.hidden_sizes} -> 1 (CLIP tensors: {', '.join(clip_dtypes)}, converted to fp32)"
    )
    card = MODEL_CARD.format(
        citation=CITATION,
        checkpoint=checkpoint_path.name,
        clip_model_id=model.config.clip_model_id,
        text_encoder_id=text_encoder,
        clip_dtypes="/".join(clip_dtypes),
        clip_geometry=(
            f"vision {clip_config.vision_config.num_hidden_layers} layers x {clip_config.vision_config.hidden_size}, "
            f"text {clip_config.text_config.num_hidden_layers} layers x {clip_config.text_config.hidden_size}"
        ),
        text_layers=text_config.num_hidden_layers,
        text_width=text_config.hidden_size,
        mixed=model.config.num_mixed_layers,
        feature_size=model.config.feature_size,
        hidden_sizes=model.config.hidden_sizes,
    )
    write_model_directory(model, card, output_dir)
    log(f"wrote {output_dir} (reloaded: every tensor equal to the conversion)")
    return model


# ---------------------------------------------------------------------------------------------------- command line
__all__ = [
    "convert_polos_checkpoint",
    "convert_polos_state_dict",
    "load_polos_checkpoint",
]
