"""Convert a checkpoint written by Pearl's own training code (a PyTorch Lightning 1.2 `.ckpt`) into a PearlModel.

Pearl's trainer (hiranohachiman/Pearl, `pearl/trainer.py`) saves `experiments/lightning/<version>/epoch=N-step=M.ckpt`
and writes `hparams.yaml` beside it. The `state_dict` is keyed by `PearlEstimator`'s attributes
(`pearl/models/estimators/pearl_estimator.py:108-342`), including modules its forward never uses. The converter:

1. loads the file with `torch.load(weights_only=True)`: only the two Lightning callback names are allowed, as
   placeholders (nothing of Lightning is imported or run), and every tensor is mapped to the CPU (they were saved from
   `cuda:0`);
2. reads the geometry from the tensor shapes (feature size, transformer layers and FFN width, queries, head sizes,
   HadamardNet channels, position table), so a run with a non-default geometry converts too;
3. maps every tensor the forward uses onto `PearlModel` (`KEY_TABLE`) and checks its shape. It drops the unused
   modules and reports them by group. It refuses keys that Pearl's code does not make;
4. takes the settings that leave no trace in the weights from the hparams (`final_activation`, `activations`), and
   takes the encoders from `PearlConfig`'s defaults unless they are given;
5. writes the directory (config, safetensors weights, remote code, model card), reloads it, and checks that its head
   outputs equal the conversion's within `VERIFY_TOLERANCE`. Only then does the directory appear.

Example:

```python
>>> from modeling_pacs.pearl.convert import convert_pearl_checkpoint
>>> model = convert_pearl_checkpoint("experiments/lightning/v1/epoch=3-step=1234.ckpt", "pearl-converted")
```
"""

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..hub import save_remote_code_model
from ..lightning_checkpoints import load_lightning_checkpoint, read_hparams
from ..models.configuration_pearl import (
    DEFAULT_ENCODER_SPECS,
    DEFAULT_IMAGE_ENCODERS,
    DEFAULT_REFERENCE_ENCODERS,
    PearlConfig,
)
from ..models.modeling_pearl import PearlModel, sinusoidal_positions
from ..output_paths import check_output_directory, staged_directory
from ..pacs.convert import CheckpointError, layout_message
from .spec import ENCODER_NAMES, NUM_HEADS

logger = logging.getLogger(__name__)

# Pearl's adapter, DiffNet and HadamardNet of each (GEM, encoder) carry one index: mlpN, diff_feature_mlpN and
# hadamard_netN (pearl_estimator.py:573-600 for the Img-GEM, :628-648 for the Ref-GEM).
ARSM_INDEX = {
    ("image_arsms", "clip"): 1,
    ("image_arsms", "blip2"): 2,
    ("image_arsms", "beit3"): 3,
    ("reference_arsms", "blip2"): 4,
    ("reference_arsms", "beit3"): 5,
    ("reference_arsms", "stella"): 6,
}
ARSM_PARTS = {"diff_net": "diff_feature_mlp{}", "hadamard_net": "hadamard_net{}", "adapter": "mlp{}"}
HEADS = {"image_head": "ff", "reference_head": "ff2"}
# Our key prefix -> Pearl's, for the modules outside the ARSMs (the heads are renamed by `authors_key`).
KEY_TABLE = {
    "vss.transformer.": "transformer.",
    "vss.queries": "learnable_query1",
    "vss.cross_attention.": "cross_attention.",
}
POSITION_KEY = "pos_encoder.pe"
# Modules Pearl builds but its forward never reads (they keep their initial values: no gradient reaches them).
UNUSED_KEY_GROUPS = {
    "cls_token1-6": re.compile(r"cls_token[1-6]"),
    "learnable_query2-3": re.compile(r"learnable_query[23]"),
    "ref_img_ratio": re.compile(r"ref_img_ratio"),
    "transformer2-6": re.compile(r"transformer[2-6]\..+"),
    "pos_encoder2-6": re.compile(r"pos_encoder[2-6]\.pe"),
    "upsampler1-3": re.compile(r"upsampler[1-3]\..+"),
    "cross_attention2": re.compile(r"cross_attention2\..+"),
    "query_mlp": re.compile(r"query_mlp\..+"),
}
# Pearl's forward mixes the two heads with a constant 0.5 (pearl_estimator.py:683); ref_img_ratio starts there.
PEARL_LAMBDA = 0.5
VERIFY_TOLERANCE = 1e-6
FALSE_VALUES = (False, None, 0, "", "false", "False", "None", "null")


@dataclass(frozen=True)
class PearlGeometry:
    """What the tensor shapes of a Pearl checkpoint fix (Pearl's release: the defaults below)."""

    feature_dim: int = 768
    num_layers: int = 2
    ffn_dim: int = 2048
    num_queries: int = 8
    head_hidden_sizes: tuple[int, ...] = (1536, 768)
    hadamard_channels: tuple[int, ...] = (128, 256, 512, 1024, 512, 256, 128)
    max_positions: int = 1000

    def describe(self) -> str:
        return (
            f"features {self.feature_dim} (tokens {2 * self.feature_dim}), {self.num_layers} transformer layers with "
            f"FFN {self.ffn_dim}, {self.num_queries} queries, heads {self.num_queries * 2 * self.feature_dim} -> "
            f"{list(self.head_hidden_sizes)} -> 1, HadamardNet channels {list(self.hadamard_channels)}, "
            f"{self.max_positions} positions"
        )


def shape_dim(state_dict: dict, key: str, axis: int) -> int | None:
    """`state_dict[key].shape[axis]`, or None when the key is absent or has too few dimensions."""
    value = state_dict.get(key)
    if isinstance(value, torch.Tensor) and value.dim() > axis:
        return int(value.shape[axis])
    return None


def first_found(*candidates: int | None, default):
    return next((value for value in candidates if value is not None), default)


def infer_pearl_geometry(state_dict: dict[str, torch.Tensor]) -> PearlGeometry:
    """Read the geometry from the shapes. A quantity whose keys are all absent keeps the release value; the key check
    then names the missing keys."""
    release = PearlGeometry()
    feature_dim = first_found(
        *(shape_dim(state_dict, f"diff_feature_mlp{index}.weight", 0) for index in range(1, 7)),
        *(shape_dim(state_dict, f"mlp{index}.0.weight", 1) for index in range(1, 7)),
        default=release.feature_dim,
    )
    layers = {int(match[1]) for key in state_dict if (match := re.match(r"transformer\.layers\.(\d+)\.", key))}
    head_hidden_sizes = release.head_hidden_sizes
    for head in HEADS.values():
        pattern = re.compile(rf"{head}\.0\.ff\.linear_(\d+)\.weight")
        last = max((int(match[1]) for key in state_dict if (match := pattern.fullmatch(key))), default=0)
        sizes = [shape_dim(state_dict, f"{head}.0.ff.linear_{j}.weight", 0) for j in range(1, last)]
        if sizes and None not in sizes:
            head_hidden_sizes = tuple(sizes)
            break
    hadamard_channels = release.hadamard_channels
    for index in range(1, 7):
        pattern = re.compile(rf"hadamard_net{index}\.network\.(\d+)\.weight")
        convolutions = sorted(
            int(match[1])
            for key, value in state_dict.items()
            if (match := pattern.fullmatch(key)) and isinstance(value, torch.Tensor) and value.dim() == 4
        )
        if len(convolutions) >= 2:
            network = f"hadamard_net{index}.network"
            hadamard_channels = tuple(
                int(state_dict[f"{network}.{conv}.weight"].shape[0]) for conv in convolutions[:-1]
            )
            break
    return PearlGeometry(
        feature_dim=feature_dim,
        num_layers=max(layers) + 1 if layers else release.num_layers,
        ffn_dim=first_found(shape_dim(state_dict, "transformer.layers.0.linear1.weight", 0), default=release.ffn_dim),
        num_queries=first_found(shape_dim(state_dict, "learnable_query1", 1), default=release.num_queries),
        head_hidden_sizes=head_hidden_sizes,
        hadamard_channels=hadamard_channels,
        max_positions=first_found(shape_dim(state_dict, POSITION_KEY, 0), default=release.max_positions),
    )


def authors_key(key: str) -> str:
    """Pearl's `state_dict` key for one of `PearlModel`'s (the mapping of the module docstring)."""
    group, rest = key.split(".", 1)
    if group in ("image_arsms", "reference_arsms"):
        encoder, part, rest = rest.split(".", 2)
        return f"{ARSM_PARTS[part].format(ARSM_INDEX[(group, encoder)])}.{rest}"
    if group in HEADS:
        # Ours: [Linear, Tanh, Dropout] * k + [Linear, Sigmoid]; Pearl's FeedForward names its Linears linear_1..k+1.
        position, name = rest.split(".")
        return f"{HEADS[group]}.0.ff.linear_{int(position) // 3 + 1}.{name}"
    for ours, theirs in KEY_TABLE.items():
        if key.startswith(ours):
            return theirs + key[len(ours) :]
    raise KeyError(f"PearlModel key '{key}' has no counterpart in Pearl's checkpoints")


def unused_group(key: str) -> str | None:
    return next((group for group, pattern in UNUSED_KEY_GROUPS.items() if pattern.fullmatch(key)), None)


def check_position_table(table: torch.Tensor):
    """Pearl's `pos_encoder.pe` [M, 1, D] must be the sinusoidal table that PearlModel rebuilds (not stored)."""
    expected = sinusoidal_positions(table.shape[0], table.shape[2])
    difference = float((table[:, 0, :].float() - expected).abs().max())
    if not difference <= VERIFY_TOLERANCE:
        raise CheckpointError(
            f"the checkpoint's {POSITION_KEY} differs from the sinusoidal table of Pearl's PositionalEncoding by up to "
            f"{difference:.3g}: PearlModel rebuilds that table and cannot carry a changed one"
        )


def map_pearl_state_dict(
    state_dict: dict[str, torch.Tensor], config: PearlConfig
) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """Check and rename the tensors Pearl's forward uses.

    Returns `PearlModel`'s state dict (fp32; BatchNorm counters int64) and `{group: key count}` of what was dropped.
    Raises a `CheckpointError` naming every missing key, every key Pearl's code does not make, and every key of the
    wrong shape with both shapes.
    """
    not_tensors = [key for key, value in state_dict.items() if not isinstance(value, torch.Tensor)]
    if not_tensors:
        raise CheckpointError(f"entries of the state dict that are not tensors: {', '.join(not_tensors[:12])}")
    with torch.device("meta"):  # shapes only
        expected = PearlModel(config).state_dict()
    weights, missing, wrong_shapes = {}, [], []
    used = {POSITION_KEY}
    for key, target in expected.items():
        source = authors_key(key)
        used.add(source)
        if source not in state_dict:
            missing.append(source)
        elif state_dict[source].shape != target.shape:
            wrong_shapes.append(f"{source} {tuple(state_dict[source].shape)} (expected {tuple(target.shape)})")
        else:
            weights[key] = state_dict[source].to(target.dtype)
    token_dim = config.token_dim
    if POSITION_KEY not in state_dict:
        missing.append(POSITION_KEY)
    elif state_dict[POSITION_KEY].shape != (config.max_positions, 1, token_dim):
        shape = tuple(state_dict[POSITION_KEY].shape)
        wrong_shapes.append(f"{POSITION_KEY} {shape} (expected {(config.max_positions, 1, token_dim)})")
    dropped, unknown = {}, []
    for key in state_dict:
        if key in used:
            continue
        group = unused_group(key)
        if group is None:
            unknown.append(key)
        else:
            dropped[group] = dropped.get(group, 0) + 1
    if missing or unknown or wrong_shapes:
        raise CheckpointError(
            layout_message(
                "does not match the layout of Pearl's PearlEstimator (pearl_estimator.py:108-342) for the geometry "
                f"its shapes give ({describe_config(config)}); unexpected keys are not made by Pearl's code",
                sorted(missing),
                sorted(unknown),
                wrong_shapes,
            )
        )
    if not state_dict[POSITION_KEY].is_meta:
        check_position_table(state_dict[POSITION_KEY])
    return weights, {f"{POSITION_KEY} (the sinusoidal table PearlModel rebuilds)": 1} | dropped


def describe_config(config: PearlConfig) -> str:
    geometry = PearlGeometry(
        config.feature_dim,
        config.num_layers,
        config.ffn_dim,
        config.num_queries,
        tuple(config.head_hidden_sizes),
        tuple(config.hadamard_channels),
        config.max_positions,
    )
    return geometry.describe()


# ----------------------------------------------------------------------------------------------------- hparams
def parse_hidden_sizes(hidden_sizes) -> list[int]:
    """FeedForward's `hidden_sizes`: "1536, 768" (split on commas), a list, or one int (feedforward.py:38-42)."""
    try:
        sizes = hidden_sizes if isinstance(hidden_sizes, (list, tuple)) else str(hidden_sizes).split(",")
        return [int(size) for size in sizes]
    except (TypeError, ValueError):
        raise CheckpointError(
            f"hparams 'hidden_sizes' {hidden_sizes!r} is not a comma-separated list of ints"
        ) from None


def other_converter_hint(model_class: str) -> str:
    """`"; convert ... checkpoints with pacs-pp convert-..."` when `model_class` (hparams' `model`) names another
    metric of the registry whose converter reads it; empty otherwise."""
    from ..registry import MODEL_METRICS

    for spec in MODEL_METRICS.values():
        if spec.display_name in model_class and spec.converters:
            return f"; convert {spec.display_name} checkpoints with pacs-pp {spec.converters[-1].command}"
    return ""


def check_pearl_hparams(hparams: dict) -> dict:
    """The settings that leave no trace in the weights, checked against what PearlModel computes."""
    model = hparams.get("model")
    if model is not None and str(model) != "PearlEstimator":
        hint = other_converter_hint(str(model))
        raise CheckpointError(
            f"hparams 'model' is {model!r}: this converter reads checkpoints of Pearl's PearlEstimator{hint}"
        )
    activations = hparams.get("activations", "Tanh")  # Estimator.ModelConfig's default
    if str(activations) != "Tanh":
        raise CheckpointError(
            f"hparams 'activations' is {activations!r}: PearlModel's heads put Tanh between their Linears, as Pearl's "
            "release config does (activations: Tanh). The weights do not record this setting, so a head trained "
            f"with {activations} would score differently here. Retrain with activations: Tanh"
        )
    if "final_activation" not in hparams:
        raise CheckpointError(
            "hparams lack 'final_activation': Pearl's code then uses its default 'Sigmoid', which adds a second "
            "sigmoid inside each head; the release config sets 'final_activation: False'. Pass the hparams.yaml "
            "written beside the checkpoint (--hparams)"
        )
    final_activation = hparams["final_activation"]
    if final_activation not in FALSE_VALUES:
        raise CheckpointError(
            f"hparams 'final_activation' is {final_activation!r}: Pearl's FeedForward then applies it after its last "
            "Linear, and PearlEstimator applies nn.Sigmoid once more (for 'Sigmoid', the scores are "
            "sigmoid(sigmoid(x)), confined to (0.5, 0.731)). PearlModel's heads end in one sigmoid, as with the "
            "release config's 'final_activation: False'. The weights do not record this setting, so the checkpoint "
            "cannot be converted faithfully: retrain with final_activation: False"
        )
    dropout = float(hparams.get("dropout", 0.1))
    if not 0.0 <= dropout < 1.0:
        raise CheckpointError(f"hparams 'dropout' is {dropout!r}: it must be in [0, 1)")
    hidden_sizes = hparams.get("hidden_sizes")
    return {
        "hidden_sizes": None if hidden_sizes is None else parse_hidden_sizes(hidden_sizes),
        "dropout": dropout,
        "final_activation": final_activation,
    }


# ----------------------------------------------------------------------------------------------------- config
def pearl_config(
    geometry: PearlGeometry,
    dropout: float = 0.1,
    num_heads: int = NUM_HEADS,
    encoder_paths: dict[str, str] | None = None,
    encoder_dims: dict[str, int] | None = None,
) -> PearlConfig:
    """The PearlConfig of a converted checkpoint: its geometry, Pearl's six ARSMs, and the encoders (PearlConfig's
    defaults unless `encoder_paths` / `encoder_dims` name others)."""
    encoder_paths, encoder_dims = dict(encoder_paths or {}), dict(encoder_dims or {})
    unknown = sorted((set(encoder_paths) | set(encoder_dims)) - set(ENCODER_NAMES))
    if unknown:
        raise ValueError(f"unknown encoder {unknown[0]!r}: Pearl's encoders are {list(ENCODER_NAMES)}")
    defaults = {encoder["name"]: int(encoder["dim"]) for encoder in DEFAULT_IMAGE_ENCODERS + DEFAULT_REFERENCE_ENCODERS}
    dims = defaults | {name: int(dim) for name, dim in encoder_dims.items()}
    too_wide = {name: dim for name, dim in dims.items() if not 0 < dim <= geometry.feature_dim}
    if too_wide:
        name, dim = next(iter(too_wide.items()))
        raise CheckpointError(
            f"encoder '{name}' gives {dim}-d features, but this checkpoint's feature size is {geometry.feature_dim} "
            f"(diff_feature_mlp1.weight): Pearl zero-pads every feature to that size, so each encoder must give "
            f"1 to {geometry.feature_dim} dimensions. Pass --encoder-dim {name}=N with the size its features had "
            "in training"
        )
    specs = {}
    for name in ENCODER_NAMES:
        spec = dict(DEFAULT_ENCODER_SPECS[name])
        if name in encoder_paths:
            spec["path"] = str(encoder_paths[name])
            spec.pop("prompt_prefix", None)  # the PAC-S model given sets its own prompt
        specs[name] = spec
    try:
        return PearlConfig(
            image_encoders=[encoder | {"dim": dims[encoder["name"]]} for encoder in DEFAULT_IMAGE_ENCODERS],
            reference_encoders=[encoder | {"dim": dims[encoder["name"]]} for encoder in DEFAULT_REFERENCE_ENCODERS],
            encoder_specs=specs,
            feature_dim=geometry.feature_dim,
            num_layers=geometry.num_layers,
            num_heads=num_heads,
            ffn_dim=geometry.ffn_dim,
            num_queries=geometry.num_queries,
            head_hidden_sizes=list(geometry.head_hidden_sizes),
            dropout=dropout,
            hadamard_channels=list(geometry.hadamard_channels),
            lambda_img=PEARL_LAMBDA,
            max_positions=geometry.max_positions,
        )
    except ValueError as error:
        raise CheckpointError(f"the checkpoint's geometry gives an invalid PearlConfig: {error}") from None


def convert_pearl_state_dict(
    state_dict: dict[str, torch.Tensor],
    hparams: dict,
    num_heads: int = NUM_HEADS,
    encoder_paths: dict[str, str] | None = None,
    encoder_dims: dict[str, int] | None = None,
    log=print,
) -> PearlModel:
    """Build a PearlModel (fp32, eval mode) from the `state_dict` of a Pearl Lightning checkpoint."""
    settings = check_pearl_hparams(hparams)
    geometry = infer_pearl_geometry(state_dict)
    config = pearl_config(geometry, settings["dropout"], num_heads, encoder_paths, encoder_dims)
    weights, dropped = map_pearl_state_dict(state_dict, config)
    if settings["hidden_sizes"] is not None and tuple(settings["hidden_sizes"]) != geometry.head_hidden_sizes:
        raise CheckpointError(
            f"hparams 'hidden_sizes' is {hparams['hidden_sizes']!r} but the heads' weights (ff.0.ff.linear_j) have "
            f"hidden sizes {list(geometry.head_hidden_sizes)}: "
            "pass the hparams.yaml of the run that wrote this checkpoint"
        )
    ratio = state_dict.get("ref_img_ratio")
    if ratio is not None and ratio.numel() == 1 and float(ratio) != PEARL_LAMBDA:
        logger.warning(
            f"ref_img_ratio is {float(ratio):.6g}, not {PEARL_LAMBDA}. Pearl's released forward never reads "
            f"it (the image/reference mix is fixed at {PEARL_LAMBDA}, pearl_estimator.py:683) and neither does this "
            "conversion; a modified Pearl that learned the mix would score differently"
        )
    log(f"hparams: final_activation {settings['final_activation']!r}, activations Tanh, dropout {settings['dropout']}")
    source_dtypes = sorted({str(value.dtype).removeprefix("torch.") for value in state_dict.values()})
    log(f"Pearl geometry from the weights: {geometry.describe()}; {num_heads} attention heads (not in the weights)")
    log(
        f"mapped {len(weights)} tensors the forward uses (stored as {'/'.join(source_dtypes)}, loaded as float32); "
        f"dropped {sum(dropped.values())} it never uses: "
        + ", ".join(f"{group} ({count})" for group, count in dropped.items())
    )
    model = PearlModel(config)
    model.load_state_dict(weights, strict=True)
    return model.eval()


# ------------------------------------------------------------------------------------------------ verification
def verification_batch(config: PearlConfig, seed: int = 0) -> dict:
    """Random features of every encoder for 2 items, one with 2 references and one without; one token per image
    encoder (every module still runs, at a small part of the cost of BLIP-2's 32 tokens)."""
    generator = torch.Generator().manual_seed(seed)
    dims = {encoder["name"]: int(encoder["dim"]) for encoder in config.image_encoders + config.reference_encoders}
    return {
        "candidate_features": {name: torch.randn(2, dim, generator=generator) for name, dim in dims.items()},
        "image_features": {
            encoder["name"]: torch.randn(2, 1, dims[encoder["name"]], generator=generator)
            for encoder in config.image_encoders
        },
        "reference_features": {
            encoder["name"]: torch.randn(2, 2, dims[encoder["name"]], generator=generator)
            for encoder in config.reference_encoders
        },
        "reference_mask": torch.tensor([[True, True], [False, False]]),
    }


def head_outputs(model: PearlModel, batch: dict) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        output = model.eval()(**batch)
    return {"score": output.score, "img_score": output.img_score, "ref_scores": output.ref_scores}


def verify_saved_model(expected: dict[str, torch.Tensor], batch: dict, directory: Path) -> float:
    """Reload `directory` and compare its head outputs on `batch` with `expected`; return the largest difference."""
    reloaded = PearlModel.from_pretrained(directory, dtype=torch.float32)
    outputs = head_outputs(reloaded, batch)
    difference = max(float((outputs[name] - expected[name]).abs().max()) for name in expected)
    if not difference <= VERIFY_TOLERANCE:
        raise RuntimeError(
            f"the written Pearl directory does not reproduce the conversion: its head outputs differ by up to "
            f"{difference:.3g} (tolerance {VERIFY_TOLERANCE}); nothing was written to the output. Check the installed "
            "transformers/safetensors versions"
        )
    return difference


MODEL_CARD = """---
license: other
library_name: transformers
tags:
- pacs-pp
- pearl
- image-captioning-evaluation
---
# Pearl (converted for pacs-pp)

Pearl (Hirano et al., 2025) is a supervised, reference-flexible image-caption metric on frozen features of four
encoders. This directory was converted from `{checkpoint}` (PyTorch Lightning {lightning}, epoch {epoch}, global step
{step}), a checkpoint written by Pearl's own training code, by `pacs-pp convert-pearl`. The file was loaded with
`torch.load(weights_only=True)`, so none of its code was unpickled.

- Geometry read from the weights: {geometry}; {num_heads} attention heads.
- Encoders (from `encoder_specs` in config.json): {encoders}.
- The {dropped} tensors of modules that Pearl's forward never uses were dropped.

Scores are only meaningful on features from the encoders that the checkpoint was trained on. Pearl's release extracted
CLIP features with PAC++ ViT-L/14 (768-d) and no prompt.

```python
from modeling_pacs import load_model
pearl = load_model("DIR")  # the Pearl head and the encoders named in config.json
out = pearl.score(["cat.jpg"], ["a cat on a sofa"], references=[["a cat sleeping on a couch"]])
print(out.scores, out.ref_scores)  # Pearl-img (reference-free) and Pearl
```

The license is that of the checkpoint's authors; check it before redistributing.
"""


def convert_pearl_checkpoint(
    checkpoint: str | os.PathLike,
    output: str | os.PathLike,
    hparams: str | os.PathLike | None = None,
    overwrite: bool = False,
    num_heads: int = NUM_HEADS,
    encoder_paths: dict[str, str] | None = None,
    encoder_dims: dict[str, int] | None = None,
    log=print,
) -> PearlModel:
    """Convert a Pearl Lightning checkpoint and write a PearlModel directory (atomically, verified by reloading).

    Args:
        checkpoint: `epoch=N-step=M.ckpt` from Pearl's trainer (loaded with `weights_only=True`).
        output: the directory to write (must be new or empty unless `overwrite`).
        hparams: `hparams.yaml`; default: the one beside the checkpoint, else the checkpoint's `hyper_parameters`.
        num_heads: attention heads of the transformer and the cross-attention (Pearl's code: 8; not in the weights).
        encoder_paths: `{encoder: Hub id or directory}` replacing `PearlConfig`'s default encoders.
        encoder_dims: `{encoder: feature size}` replacing the default sizes (clip 512, beit3 768, blip2 256,
            stella 768); Pearl zero-pads features to its feature size, so the weights do not record them.
    """
    checkpoint_path, output = Path(checkpoint), Path(output)
    check_output_directory(output, inputs=[checkpoint_path, hparams], overwrite=overwrite)
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    loaded = load_lightning_checkpoint(checkpoint_path, "Pearl")
    beside = checkpoint_path.parent / "hparams.yaml"
    source = f"'{hparams}'" if hparams else f"'{beside}'" if beside.is_file() else "the checkpoint's hyper_parameters"
    log(
        f"{checkpoint_path.name}: PyTorch Lightning {loaded.get('pytorch-lightning_version', '?')}, epoch "
        f"{loaded.get('epoch', '?')}, global step {loaded.get('global_step', '?')}; hparams from {source}"
    )
    hparams_values = read_hparams(checkpoint_path, hparams, loaded)
    model = convert_pearl_state_dict(loaded["state_dict"], hparams_values, num_heads, encoder_paths, encoder_dims, log)
    config = model.config
    encoders = ", ".join(
        f"{name} {int(encoder['dim'])}-d ({config.encoder_specs[name]['path']})"
        for name, encoder in {e["name"]: e for e in config.image_encoders + config.reference_encoders}.items()
    )
    log(f"encoders: {encoders}")
    if "clip" not in (encoder_paths or {}):
        log(
            "note: Pearl's release extracted CLIP features with PAC++ ViT-L/14 (768-d) and no prompt; to score with "
            "the encoder this checkpoint was trained on, pass --encoder-path clip=DIR --encoder-dim clip=768"
        )
    card = MODEL_CARD.format(
        checkpoint=checkpoint_path.name,
        lightning=loaded.get("pytorch-lightning_version", "unknown version"),
        epoch=loaded.get("epoch", "?"),
        step=loaded.get("global_step", "?"),
        geometry=describe_config(config),
        num_heads=config.num_heads,
        encoders=encoders,
        dropped=len(loaded["state_dict"]) - len(model.state_dict()),
    )
    batch = verification_batch(config)
    expected = head_outputs(model, batch)
    with staged_directory(output) as staging:
        save_remote_code_model(model, staging)
        (staging / "README.md").write_text(card, encoding="utf-8")
        difference = verify_saved_model(expected, batch, staging)
    log(
        f"wrote {output} (reloaded: head outputs on {len(batch['reference_mask'])} random items equal to the "
        f"conversion, max |difference| {difference:.3g} <= {VERIFY_TOLERANCE})"
    )
    return model


# ---------------------------------------------------------------------------------------------------- command line
__all__ = [
    "PearlGeometry",
    "authors_key",
    "check_pearl_hparams",
    "convert_pearl_checkpoint",
    "convert_pearl_state_dict",
    "infer_pearl_geometry",
    "map_pearl_state_dict",
]
