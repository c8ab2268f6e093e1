"""Convert a checkpoint written by DENEB's trainer (a PyTorch Lightning 1.2 `.ckpt`, `hparams.yaml` beside it) into a
Hub-ready DenebModel directory (docs/spec/deneb.md#conversion).

The authors' loader unpickles the whole file. This converter never does:

1. `torch.load(weights_only=True)` through `lightning_checkpoints`: only the two Lightning callback names are
   allowed, bound to empty placeholders; tensors saved on a GPU are mapped to the CPU. Any other global is refused.
2. Only `state_dict` is used (and `hyper_parameters` when there is no `hparams.yaml`, read with `yaml.safe_load`).
3. Every used key is mapped and shape-checked; the geometry is read from the tensors: `pacs_clip.*` (open_clip's
   ViT-L-14 in OpenAI key layout, as the PAC-S converter reads it), `encoder.model.*` (RoBERTa, checked against the
   `--text-encoder` config), `scalar_mix.*`, `upsampler*`, `cls_token*`, `transformer*` (layers and feed-forward width
   from the tensors), `ff.*` (head widths). The keys the scoring model does not use are reported by group.

What the checkpoint does not store is stated, not guessed: the attention heads of the Sim-Vec transformers (8 in the
authors' code), the CLIP activation (GELU: open_clip's `ViT-L-14`) and preprocessing (open_clip's for
`laion2b_s32b_b82k`: mean = std = 0.5), the prompt "In the image, ".

Example:

```python
>>> from modeling_pacs.deneb.convert import convert_deneb_checkpoint
>>> model = convert_deneb_checkpoint("epoch=4.ckpt", "deneb", text_encoder="./sup-simcse-roberta-base")
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
from ..models.configuration_deneb import DenebConfig
from ..models.modeling_deneb import DenebModel
from ..output_paths import check_output_directory
from ..pacs.convert import (
    OPENAI_HEAD_DIM,
    CheckpointError,
    clip_config_for,
    expected_shapes,
    infer_geometry,
    layout_message,
    shorten,
    to_transformers_state_dict,
)
from ..tokenization import build_clip_tokenizer
from .spec import CITATION

CLIP_PREFIX = "pacs_clip."
ENCODER_PREFIX = "encoder.model."
HEAD_KEY = re.compile(r"ff\.0\.ff\.linear_(\d+)\.(weight|bias)")
SEQUENCE_KEY = re.compile(r"(transformer2?)\.layers\.(\d+)\.(.+)")
# The Sim-Vec transformers' heads: `nhead=8` in deneb_estimator.py:104-107, not recorded in any tensor.
AUTHORS_SEQUENCE_HEADS = 8
# Keys the scoring model does not use, by group (reported, never an error).
UNUSED_GROUPS = {
    "RoBERTa pooler (DENEB reads the ScalarMix CLS position)": ("encoder.model.pooler.",),
    "positional encodings (recomputed; checked equal to the authors' formula)": ("pos_encoder.pe", "pos_encoder2.pe"),
    "ScalarMix layer-dropout buffers (training only)": ("scalar_mix.dropout_mask", "scalar_mix.dropout_fill"),
    "RoBERTa position ids (a constant)": ("encoder.model.embeddings.position_ids",),
    "CLIP causal mask (a constant)": ("pacs_clip.attn_mask",),
}
# The architecture the port supports, as the authors' config sets it (configs/xlmr/base/da-estimator-cvpr.yaml).
SUPPORTED_HPARAMS = {"layer": "mix", "pool": "cls", "activations": "Tanh", "encoder_model": "BERT"}

MODEL_CARD = """---
license: other
library_name: transformers
pipeline_tag: image-to-text
base_model:
- {clip_model_id}
- {text_encoder_id}
tags:
- pacs-pp
- deneb
- image-captioning-evaluation
---
# DENEB (converted for pacs-pp)

DENEB (Matsuda, Wada, Sugiura, *DENEB: A Hallucination-Robust Automatic Evaluation Metric for Image Captioning*,
ACCV 2024) is a supervised, **reference-based** image-caption metric trained on Nebula human judgements. This
directory was converted from the Lightning checkpoint `{checkpoint}` by `pacs-pp convert-deneb`, loading it with
`torch.load(weights_only=True)` (never unpickling code).

- CLIP (`{clip_model_id}` geometry, PAC-S's weights as the authors load them): {clip_geometry}; raw features of the
  image (open_clip preprocessing, mean = std = 0.5) and of "In the image, " + caption.
- Sentence encoder `{text_encoder_id}`: {text_layers} layers x {text_width}, CLS of a learned {mixed}-layer ScalarMix.
- Sim-Vec transformers: {sequence_layers} layers x {sequence_width} ({sequence_heads} heads) over the image and all
  references at once; head {feature_size} -> {hidden_sizes} -> 1 (Tanh), sigmoid.

```python
from transformers import AutoModel
model = AutoModel.from_pretrained("DIR", trust_remote_code=True, dtype="float32")
out = model.score(["cat.jpg"], ["a cat on a sofa"], [["a cat sleeping on a couch"]])
print(out.scores, out.mean_score)
```

## Modes
The authors' `predict` gives scores that depend on the batch (shared ScalarMix statistics, references cut to the
chunk's smallest reference count). `mode="per_item"` (default) scores each item alone with all its references:
deterministic and batch-invariant. `mode="official", batch_size=32` reproduces the chunking of the authors'
validation scripts (docs/spec/deneb.md#batching).

## Citation
```bibtex
{citation}
```
"""


def load_deneb_checkpoint(path: str | os.PathLike) -> dict:
    """Read a DENEB Lightning checkpoint with `weights_only=True` and the allow-list of `lightning_checkpoints`."""
    return load_lightning_checkpoint(path, "DENEB")


def check_hparams(hparams: dict) -> dict:
    """The settings of the authors' architecture that the port supports, read from the hparams."""
    model = hparams.get("model", "DenebEstimator")
    if model != "DenebEstimator":
        raise CheckpointError(
            f"hparams 'model' is {model!r}: this is not a DenebEstimator checkpoint (DENEB's trainer writes "
            "'model: DenebEstimator'); a Polos checkpoint converts with `pacs-pp convert-polos`"
        )
    for key, value in SUPPORTED_HPARAMS.items():
        if key in hparams and str(hparams[key]) != value:
            raise CheckpointError(
                f"hparams '{key}' is {hparams[key]!r}: only {value!r} (the authors' config) is supported"
            )
    if hparams.get("final_activation", False) not in (False, None, "false", "False"):
        raise CheckpointError(
            f"hparams 'final_activation' is {hparams['final_activation']!r}: only false (the authors' config) is "
            "supported (with it the head would apply a second activation before the sigmoid)"
        )
    return {
        "dropout": float(hparams.get("dropout", 0.1)),
        "scalar_mix_dropout": float(hparams.get("scalar_mix_dropout", 0.1)),
        "pretrained_model": str(hparams.get("pretrained_model", "princeton-nlp/sup-simcse-roberta-base")),
    }


def split_state_dict(state_dict: dict) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, list[str]]]:
    """Group the used tensors by part (prefix stripped) and the unused keys by `UNUSED_GROUPS`; a key of neither kind
    is named in an error (the file is not a DENEB checkpoint)."""
    parts = {"clip": {}, "encoder": {}, "scalar_mix": {}, "projections": {}, "sequences": {}, "head": {}}
    unused: dict[str, list[str]] = {}
    unknown = []
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"entry '{key}' of the state dict is a {type(value).__name__}, not a tensor")
        group = next((name for name, keys in UNUSED_GROUPS.items() if key.startswith(keys)), None)
        if group is not None:
            unused.setdefault(group, []).append(key)
        elif key.startswith(CLIP_PREFIX):
            parts["clip"][key.removeprefix(CLIP_PREFIX)] = value
        elif key.startswith(ENCODER_PREFIX):
            parts["encoder"][key.removeprefix(ENCODER_PREFIX)] = value
        elif key.startswith("scalar_mix."):
            parts["scalar_mix"][key.removeprefix("scalar_mix.")] = value
        elif key in ("upsampler.weight", "upsampler.bias", "upsampler2.weight", "upsampler2.bias"):
            parts["projections"][key] = value
        elif SEQUENCE_KEY.fullmatch(key) or key in ("cls_token1", "cls_token2"):
            parts["sequences"][key] = value
        elif HEAD_KEY.fullmatch(key):
            parts["head"][key] = value
        else:
            unknown.append(key)
    if unknown or not parts["sequences"]:
        hint = ""
        if any(key.startswith("clip.") for key in unknown):
            hint = "\nit has 'clip.*' tensors and no Sim-Vec transformers: a Polos checkpoint? (convert-polos)"
        raise CheckpointError(
            layout_message(
                "is not a DENEB checkpoint (docs/spec/deneb.md#conversion)",
                ["transformer.layers.*", "transformer2.layers.*"] if not parts["sequences"] else [],
                sorted(unknown),
            )
            + hint
        )
    return parts, unused


def sequence_layer_shapes(width: int, intermediate: int) -> dict[str, tuple[int, ...]]:
    """The tensors of one `nn.TransformerEncoderLayer(d_model=width, dim_feedforward=intermediate)`."""
    return {
        "self_attn.in_proj_weight": (3 * width, width),
        "self_attn.in_proj_bias": (3 * width,),
        "self_attn.out_proj.weight": (width, width),
        "self_attn.out_proj.bias": (width,),
        "linear1.weight": (intermediate, width),
        "linear1.bias": (intermediate,),
        "linear2.weight": (width, intermediate),
        "linear2.bias": (width,),
        "norm1.weight": (width,),
        "norm1.bias": (width,),
        "norm2.weight": (width,),
        "norm2.bias": (width,),
    }


def check_positional_encodings(state_dict: dict, width: int) -> int:
    """The stored `pe` buffers must be the authors' sinusoids (we recompute them); returns their length."""
    from ..models.scoring_deneb import sinusoidal_positions

    lengths = set()
    for key in ("pos_encoder.pe", "pos_encoder2.pe"):
        stored = state_dict.get(key)
        if stored is None:
            continue
        if stored.dim() != 3 or stored.shape[1:] != (1, width):
            raise CheckpointError(f"'{key}' has shape {tuple(stored.shape)}, expected (max_len, 1, {width})")
        expected = sinusoidal_positions(stored.shape[0], width)
        if not torch.allclose(stored[:, 0].float(), expected, atol=1e-6):
            raise CheckpointError(
                f"'{key}' is not the authors' sinusoidal encoding: the file is corrupt or not DENEB's"
            )
        lengths.add(stored.shape[0])
    return min(lengths) if lengths else 1000


def convert_deneb_state_dict(
    state_dict: dict,
    text_config,
    hparams: dict,
    head_dim: int = OPENAI_HEAD_DIM,
    text_encoder_id: str = "princeton-nlp/sup-simcse-roberta-base",
    log=print,
) -> DenebModel:
    """Build a DenebModel (fp32) from the checkpoint's state dict, checking every key and shape."""
    parts, unused = split_state_dict(state_dict)
    geometry = infer_geometry(parts["clip"], head_dim)
    check_keys("part pacs_clip.* (CLIP) does not match its geometry", parts["clip"], expected_shapes(geometry, False))
    clip_weights = to_transformers_state_dict(parts["clip"], geometry)

    check_sentence_encoder(parts["encoder"], text_config, text_encoder_id)
    hidden = text_config.hidden_size
    if geometry.embed_dim != hidden:
        raise CheckpointError(
            f"the CLIP projection width ({geometry.embed_dim}) differs from the sentence encoder's ({hidden}): "
            "DENEB's upsampler reads both, so this is not a DENEB checkpoint of this text encoder"
        )
    mix = scalar_mix_weights(parts["scalar_mix"], text_config.num_hidden_layers + 1)
    projection_expected = {f"{name}.{kind}": shape for name in ("upsampler", "upsampler2")
                           for kind, shape in (("weight", (hidden, hidden)), ("bias", (hidden,)))}  # fmt: skip
    check_keys("part upsampler* (pair projections) does not match the feature width", parts["projections"],
               projection_expected)  # fmt: skip

    width = 2 * hidden
    layer_indices = [int(match.group(2)) for key in parts["sequences"] if (match := SEQUENCE_KEY.fullmatch(key))]
    layers = 1 + max(layer_indices, default=-1)
    linear1 = parts["sequences"].get("transformer.layers.0.linear1.weight")
    intermediate = linear1.shape[0] if linear1 is not None else 2048
    sequence_expected = {"cls_token1": (1, 1, width), "cls_token2": (1, 1, width)}
    for name in ("transformer", "transformer2"):
        for index in range(layers):
            for key, shape in sequence_layer_shapes(width, intermediate).items():
                sequence_expected[f"{name}.layers.{index}.{key}"] = shape
    check_keys(
        f"part transformer*/cls_token* (Sim-Vec transformers) does not match {layers} layers of width {width}",
        parts["sequences"],
        sequence_expected,
    )
    max_positions = check_positional_encodings(state_dict, width)

    head_indices = sorted({int(HEAD_KEY.fullmatch(key).group(1)) for key in parts["head"]})
    hidden_sizes = [parts["head"][f"ff.0.ff.linear_{index}.weight"].shape[0] for index in head_indices[:-1]
                    if f"ff.0.ff.linear_{index}.weight" in parts["head"]]  # fmt: skip
    feature_size = 6 * hidden
    sizes = [feature_size, *hidden_sizes, 1]
    head = head_weights(f"part ff.* (head) does not match the feature width 6*{hidden} = {feature_size}",
                        parts["head"], sizes)  # fmt: skip

    config = DenebConfig(
        clip_config=clip_config_for(geometry, "gelu"),
        text_config=text_config,
        text_encoder_id=text_encoder_id,
        hidden_sizes=hidden_sizes,
        dropout=hparams["dropout"],
        scalar_mix_dropout=hparams["scalar_mix_dropout"],
        num_sequence_layers=layers,
        num_sequence_heads=AUTHORS_SEQUENCE_HEADS,
        sequence_intermediate_size=intermediate,
        max_references=max_positions - 2,
    )
    model = DenebModel(config)
    weights = {f"clip_encoder.clip.{key}": value for key, value in clip_weights.items()}
    weights |= {f"text_encoder.{key}": value for key, value in parts["encoder"].items()}
    weights |= mix
    for ours, theirs in (("clip_projection", "upsampler"), ("text_projection", "upsampler2")):
        for kind in ("weight", "bias"):
            weights[f"{ours}.{kind}"] = parts["projections"][f"{theirs}.{kind}"]
    for ours, name, token in (("clip_sequence_encoder", "transformer", "cls_token1"),
                              ("text_sequence_encoder", "transformer2", "cls_token2")):  # fmt: skip
        weights[f"{ours}.class_token"] = parts["sequences"][token]
        for key, value in parts["sequences"].items():
            if key.startswith(f"{name}.layers."):
                weights[f"{ours}.encoder.{key.removeprefix(name + '.')}"] = value
    weights |= head
    weights = {key: value.float() for key, value in weights.items()}
    fill_model(model, weights)
    for group, keys in unused.items():
        log(f"unused: {group}: {len(keys)} tensor(s) ({shorten(sorted(keys))})")
    return model


def convert_deneb_checkpoint(
    checkpoint: str | os.PathLike,
    output_dir: str | os.PathLike,
    hparams: str | os.PathLike | None = None,
    text_encoder: str | None = None,
    head_dim: int = OPENAI_HEAD_DIM,
    overwrite: bool = False,
    log=print,
) -> DenebModel:
    """Convert `checkpoint` and write a Hub-ready DenebModel directory (atomically; model card included), then reload
    it and check every tensor.

    `text_encoder` (a local directory or Hub id) provides the RoBERTa config and tokenizer; it defaults to the
    hparams' `pretrained_model` (`princeton-nlp/sup-simcse-roberta-base`).
    """
    checkpoint_path = Path(checkpoint)
    output_dir = Path(output_dir)
    check_output_directory(output_dir, inputs=[checkpoint_path, hparams], overwrite=overwrite)
    check_head_dim(head_dim)
    loaded = load_deneb_checkpoint(checkpoint_path)
    settings = check_hparams(read_hparams(checkpoint_path, hparams, loaded))
    text_encoder = text_encoder or settings["pretrained_model"]
    text_config, text_tokenizer = load_sentence_encoder(text_encoder)
    non_finite = [key for key, value in loaded["state_dict"].items() if isinstance(value, torch.Tensor)
                  and value.is_floating_point() and not torch.isfinite(value).all()]  # fmt: skip
    if non_finite:
        raise CheckpointError(
            f"{len(non_finite)} tensor(s) hold NaN or infinite values ({shorten(non_finite)}): the file is corrupt or "
            "was saved from a diverged run"
        )
    model = convert_deneb_state_dict(loaded["state_dict"], text_config, settings, head_dim, text_encoder, log)
    model.clip_tokenizer = build_clip_tokenizer(model.config.max_text_length)
    model.text_tokenizer = text_tokenizer
    config = model.config
    clip_config = config.clip_config
    clip_geometry = (
        f"vision {clip_config.vision_config.num_hidden_layers} layers x {clip_config.vision_config.hidden_size}, "
        f"text {clip_config.text_config.num_hidden_layers} layers x {clip_config.text_config.hidden_size}, "
        f"projection {clip_config.projection_dim}"
    )
    log(
        f"DENEB: CLIP {clip_geometry}; sentence encoder {text_config.num_hidden_layers} x {text_config.hidden_size}; "
        f"Sim-Vec {config.num_sequence_layers} x {2 * config.hidden_size} ({config.num_sequence_heads} heads, stated: "
        f"not in the tensors); head {config.feature_size} -> {config.hidden_sizes} -> 1"
    )
    card = MODEL_CARD.format(
        citation=CITATION,
        checkpoint=checkpoint_path.name,
        clip_model_id=config.clip_model_id,
        text_encoder_id=text_encoder,
        clip_geometry=clip_geometry,
        text_layers=text_config.num_hidden_layers,
        text_width=text_config.hidden_size,
        mixed=config.num_mixed_layers,
        sequence_layers=config.num_sequence_layers,
        sequence_width=2 * config.hidden_size,
        sequence_heads=config.num_sequence_heads,
        feature_size=config.feature_size,
        hidden_sizes=config.hidden_sizes,
    )
    write_model_directory(model, card, output_dir)
    log(f"wrote {output_dir} (reloaded: every tensor equal to the conversion)")
    return model


__all__ = ["convert_deneb_checkpoint", "convert_deneb_state_dict", "load_deneb_checkpoint"]
