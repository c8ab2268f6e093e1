"""`pacs-pp convert-pearl`: a checkpoint in the exact layout Pearl's training code writes (PearlEstimator's module
names, Lightning 1.2 dict, callback states keyed by class, tensors tagged cuda:0) converts safely and scores like the
authors' forward computed in NumPy (tests/references/pearl.py), and like their own code when PACS_PEARL_DIR names a
checkout."""

import importlib.util
import logging
import os
import re
import subprocess
import sys
import types
import zipfile
from argparse import Namespace
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from modeling_pacs import PearlModel
from modeling_pacs.cli import convert as convert_cli
from modeling_pacs.pacs.convert import CheckpointError
from modeling_pacs.pearl import convert as pearl_convert
from modeling_pacs.pearl.convert import (
    PearlGeometry,
    convert_pearl_checkpoint,
    infer_pearl_geometry,
    map_pearl_state_dict,
    pearl_config,
)
from tests.fixtures.helpers import SCORE_TOLERANCE, assert_scores_close
from tests.polos.test_convert import fake_lightning
from tests.references.pearl import numpy_weights, pearl_forward

REPO_ROOT = Path(__file__).resolve().parents[2]
PEARL_DIR = os.environ.get("PACS_PEARL_DIR")
CLONE_HINT = "set PACS_PEARL_DIR to a checkout: git clone https://github.com/hiranohachiman/Pearl"

# A non-default geometry: every quantity the converter reads from shapes differs from Pearl's release.
TINY = {
    "feature_dim": 16,
    "num_layers": 3,
    "ffn_dim": 40,
    "num_queries": 3,
    "hidden_sizes": [24, 12],
    "hadamard_channels": [6, 10, 6],
    "max_positions": 60,
    "blip_dim": 8,
    "num_heads": 8,
}
RELEASE = {
    "feature_dim": 768,
    "num_layers": 2,
    "ffn_dim": 2048,
    "num_queries": 8,
    "hidden_sizes": [1536, 768],
    "hadamard_channels": [128, 256, 512, 1024, 512, 256, 128],
    "max_positions": 1000,
    "blip_dim": 256,
    "num_heads": 8,
}
# Pearl zero-pads CLIP and BLIP-2 features to E and takes BEiT-3 and Stella features at E.
TINY_DIMS = {"clip": 12, "blip2": 8, "beit3": 16, "stella": 16}
BLIP_TOKENS = 4
REFERENCE_COUNTS = [5, 0, 2, 1, 3, 0, 4]


def lightning_hparams(hidden_sizes: str) -> dict:
    """The 42 keys of `PearlEstimator.ModelConfig.namespace()` for the release config (notes §3.3)."""
    hparams = {
        "activations": "Tanh", "batch_size": 16, "dropout": 0.1, "encoder_learning_rate": 1e-05,
        "encoder_model": "XLMR", "final_activation": False, "hidden_sizes": hidden_sizes,
        "keep_embeddings_frozen": False, "layer": "mix", "layerwise_decay": 0.95, "learning_rate": 1e-05,
        "load_weights": False, "loader_workers": 1, "loss": "huber", "model": "PearlEstimator",
        "monitor": "kendall_c", "nr_frozen_epochs": 100000, "optimizer": "Adam", "pool": "cls",
        "pretrained_model": "xlmr.base", "scalar_mix_dropout": 0.1, "scheduler": "linear_warmup",
        "switch_prob": 0.0, "warmup_steps": 1000,
    }  # fmt: skip
    for split in ("train", "val", "test"):
        hparams[f"{split}_path"] = f"data/spica_{split}.csv"
        hparams[f"{split}_img_dir_path"] = "data/images"
        hparams[f"{split}_features_path"] = f"features/clippp/{split}"
        for encoder in ("blip", "beit3", "stella"):
            name = "blip2" if encoder == "blip" else encoder
            hparams[f"{split}_{encoder}_features_path"] = f"features/{name}/{split}"
    return dict(sorted(hparams.items()))


# ------------------------------------------------------------------------- PearlEstimator's modules, by name
class FeedForward(nn.Module):
    """pearl/modules/feedforward.py with activations Tanh and final_activation False."""

    def __init__(self, in_dim: int, hidden_sizes: list[int], dropout: float):
        super().__init__()
        self.ff = nn.Sequential()
        previous = in_dim
        for index, size in enumerate(hidden_sizes, start=1):
            self.ff.add_module(f"linear_{index}", nn.Linear(previous, size))
            self.ff.add_module(f"activation_{index}", nn.Tanh())
            self.ff.add_module(f"dropout_{index}", nn.Dropout(dropout))
            previous = size
        self.ff.add_module(f"linear_{len(hidden_sizes) + 1}", nn.Linear(previous, 1))


class IndependentFeatureMLP(nn.Module):
    def __init__(self, feature_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([[1.0, -1.0]] * feature_size))
        self.bias = nn.Parameter(torch.zeros(feature_size))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.dropout = nn.Dropout(p=0.1)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)


class HadamardNet(nn.Module):
    def __init__(self, channels: list[int]):
        super().__init__()
        layers, previous = [], 2
        for width in channels:
            layers += [nn.Conv2d(previous, width, kernel_size=1), nn.BatchNorm2d(width), nn.ReLU(), nn.Dropout(p=0.0)]
            previous = width
        self.network = nn.Sequential(*layers, nn.Conv2d(previous, 1, kernel_size=1))


class AuthorsLayoutPearl(nn.Module):
    """The modules of `PearlEstimator._build_model` (pearl_estimator.py:108-342), in its order, at any geometry."""

    def __init__(self, geometry: dict):
        super().__init__()
        emb, dim, queries = geometry["feature_dim"], 2 * geometry["feature_dim"], geometry["num_queries"]
        blip = geometry["blip_dim"]
        self.ff = nn.Sequential(FeedForward(queries * dim, geometry["hidden_sizes"], 0.1), nn.Sigmoid())
        self.ff2 = nn.Sequential(FeedForward(queries * dim, geometry["hidden_sizes"], 0.1), nn.Sigmoid())

        def layer():
            return nn.TransformerEncoderLayer(
                d_model=dim, nhead=geometry["num_heads"], dim_feedforward=geometry["ffn_dim"], batch_first=True
            )

        self.transformer = nn.TransformerEncoder(layer(), num_layers=geometry["num_layers"], enable_nested_tensor=False)
        for index in range(2, 7):
            setattr(self, f"transformer{index}", nn.TransformerEncoder(layer(), 1, enable_nested_tensor=False))
        for index in range(1, 7):
            mlp = nn.Sequential(nn.Linear(emb, 2 * emb), nn.Dropout(0.1), nn.ReLU(), nn.Linear(2 * emb, emb))
            setattr(self, f"mlp{index}", mlp)
        for index in range(1, 4):
            upsampler = nn.Sequential(nn.Linear(blip, 2 * blip), nn.Dropout(0.1), nn.ReLU(), nn.Linear(2 * blip, emb))
            setattr(self, f"upsampler{index}", upsampler)
        for index in range(1, 7):
            setattr(self, f"diff_feature_mlp{index}", IndependentFeatureMLP(emb))
        self.pos_encoder = PositionalEncoding(dim, geometry["max_positions"])
        for index in range(2, 7):
            setattr(self, f"pos_encoder{index}", PositionalEncoding(dim, geometry["max_positions"]))
        for index in range(1, 7):
            setattr(self, f"cls_token{index}", nn.Parameter(torch.randn(1, 1, dim) * 1e-6))
        self.learnable_query1 = nn.Parameter(nn.init.xavier_uniform_(torch.zeros(1, queries, dim)))
        self.learnable_query2 = nn.Parameter(nn.init.xavier_uniform_(torch.zeros(1, queries, dim)))
        self.learnable_query3 = nn.Parameter(nn.init.xavier_uniform_(torch.zeros(1, 1, emb)))
        for index in range(1, 7):
            setattr(self, f"hadamard_net{index}", HadamardNet(geometry["hadamard_channels"]))
        self.cross_attention = nn.MultiheadAttention(dim, geometry["num_heads"], dropout=0.1, batch_first=True)
        self.cross_attention2 = nn.MultiheadAttention(dim, geometry["num_heads"], dropout=0.1, batch_first=True)
        self.query_mlp = nn.Sequential(nn.Linear(dim, 4 * emb), nn.ReLU(), nn.Linear(4 * emb, dim))
        self.ref_img_ratio = nn.Parameter(torch.tensor(0.5))


def randomise_trained_state(module: nn.Module, seed: int, head_scale: float = 30.0):
    """What training leaves that defaults do not: BatchNorm statistics and affines, DiffNet weights, LayerNorms; the
    heads' last Linear is scaled by `head_scale` to spread the scores over (0, 1) (default-initialised heads give all
    items about 0.55)."""
    generator = torch.Generator().manual_seed(seed)

    def noise(tensor, scale):
        return torch.randn(tensor.shape, generator=generator) * scale

    with torch.no_grad():
        for name, child in module.named_modules():
            if isinstance(child, nn.BatchNorm2d):
                child.weight.copy_(1 + noise(child.weight, 0.2))
                child.bias.copy_(noise(child.bias, 0.2))
                child.running_mean.copy_(noise(child.running_mean, 0.3))
                child.running_var.copy_(0.5 + torch.rand(child.running_var.shape, generator=generator))
                child.num_batches_tracked.fill_(1000 + len(name))
            elif isinstance(child, nn.LayerNorm):
                child.weight.copy_(1 + noise(child.weight, 0.2))
                child.bias.copy_(noise(child.bias, 0.1))
            elif type(child).__name__ == "IndependentFeatureMLP":
                child.weight.add_(noise(child.weight, 0.3))
                child.bias.copy_(noise(child.bias, 0.1))
            elif type(child).__name__ == "FeedForward":
                child.ff[-1].weight.mul_(head_scale)


# ----------------------------------------------------------------------------- the Lightning 1.2 file
_SAVE_AS_CUDA = False


def _tag_as_cuda(storage):
    return "cuda:0" if _SAVE_AS_CUDA and storage.device.type == "cpu" else None


# torch.save asks the registered taggers for each storage's location tag; this one answers "cuda:0" while asked to.
torch.serialization.register_package(0, _tag_as_cuda, lambda storage, location: None)


@contextmanager
def saved_as_cuda():
    """Storages saved in this block are tagged 'cuda:0', as when Pearl's trainer saves from the GPU."""
    global _SAVE_AS_CUDA
    _SAVE_AS_CUDA = True
    try:
        yield
    finally:
        _SAVE_AS_CUDA = False


class LinearWarmupPolicy:
    """A callable object like Pearl's schedulers.LinearWarmup policy: LambdaLR stores its __dict__, not its class."""

    def __init__(self, warmup_steps: int, num_training_steps: float):
        self.warmup_steps = warmup_steps
        self.num_training_steps = num_training_steps

    def __call__(self, step: int) -> float:
        return min(1.0, (step + 1) / self.warmup_steps)


def write_lightning_checkpoint(module: nn.Module, path: Path, hparams: dict, weights_only: bool = False):
    """`CheckpointConnector.dump_checkpoint` of Lightning 1.2.10 for Pearl's trainer, tensors tagged cuda:0."""
    used = ("ff", "transformer.", "mlp", "diff_feature_mlp", "hadamard_net", "learnable_query1", "cross_attention.")
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, LinearWarmupPolicy(1000, 4250.0))
    for name, parameter in module.named_parameters():
        # Only the modules the forward uses receive gradients, so Adam keeps state for them alone.
        parameter.grad = torch.zeros_like(parameter) if name.startswith(used) else None
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with fake_lightning() as callbacks, saved_as_cuda():
        checkpoint = {
            "epoch": 3,
            "global_step": 1234,
            "pytorch-lightning_version": "1.2.10",
            "state_dict": module.state_dict(),
        }
        if not weights_only:
            score = torch.tensor(0.4321)
            checkpoint["callbacks"] = {
                callbacks["EarlyStopping"]: {"wait_count": 0, "stopped_epoch": 0, "best_score": score, "patience": 1},
                callbacks["ModelCheckpoint"]: {
                    "monitor": "kendall_c",
                    "best_model_score": score,
                    "best_model_path": str(path),
                    "current_score": score,
                    "dirpath": str(path.parent),
                },
            }
            checkpoint["optimizer_states"] = [optimizer.state_dict()]
            checkpoint["lr_schedulers"] = [scheduler.state_dict()]
        checkpoint["hparams_name"] = None
        checkpoint["hyper_parameters"] = hparams
        torch.save(checkpoint, path)
    # Lightning's TensorBoardLogger writes the same flat hparams beside the checkpoint (OmegaConf: sorted, plain).
    (path.parent / "hparams.yaml").write_text(yaml.safe_dump(hparams), encoding="utf-8")


@pytest.fixture(scope="module")
def pearl_run(tmp_path_factory):
    """A tiny Pearl training run's folder: experiments/lightning/<version>/epoch=2-step=1233.ckpt + hparams.yaml."""
    root = tmp_path_factory.mktemp("pearl_run")
    torch.manual_seed(11)
    module = AuthorsLayoutPearl(TINY)
    randomise_trained_state(module, seed=12)
    path = root / "experiments" / "lightning" / "version_25-11-2026--10-00-00" / "epoch=2-step=1233.ckpt"
    hparams = lightning_hparams("24, 12")
    write_lightning_checkpoint(module, path, hparams)
    state = {key: value.clone() for key, value in module.state_dict().items()}
    return {"root": root, "checkpoint": path, "state": state, "hparams": hparams}


def encoder_dim_flags(dims: dict) -> list[str]:
    return [argument for name, dim in dims.items() for argument in ("--encoder-dim", f"{name}={dim}")]


@pytest.fixture(scope="module")
def converted(pearl_run, tmp_path_factory):
    output = tmp_path_factory.mktemp("converted") / "pearl"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "convert_pearl_checkpoint.py"),
         "--checkpoint", str(pearl_run["checkpoint"]), "--output-dir", str(output), *encoder_dim_flags(TINY_DIMS)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return {"output": output, "log": result.stdout}


# ------------------------------------------------------------------------------------------- features
def random_items(counts: list[int], dims: dict, blip_tokens: int, seed: int) -> list[dict]:
    """Items in the authors' format (tests/references/pearl.py), `counts[i]` references for item i."""
    generator = np.random.default_rng(seed)

    def vector(*shape):
        return generator.standard_normal(shape).astype(np.float32)

    items = []
    for count in counts:
        item = {
            "clip_img": vector(dims["clip"]), "clip_mt": vector(dims["clip"]),
            "blip_img": vector(blip_tokens, dims["blip2"]), "blip_mt": vector(dims["blip2"]),
            "beit3_img": vector(dims["beit3"]), "beit3_mt": vector(dims["beit3"]), "stella_mt": vector(dims["stella"]),
        }  # fmt: skip
        for key, name in (("clip", "clip"), ("blip", "blip2"), ("beit3", "beit3"), ("stella", "stella")):
            item[f"{key}_refs"] = [vector(dims[name]) for _ in range(count)]
        items.append(item)
    return items


def model_inputs(items: list[dict]) -> dict:
    """PearlModel's inputs for `items`: reference slots up to the batch's largest count, masked."""
    slots = max(1, max(len(item["clip_refs"]) for item in items))

    def stacked(key):
        return torch.from_numpy(np.stack([item[key] for item in items]))

    def references(key):
        features = torch.zeros(len(items), slots, len(items[0][key.replace("refs", "mt")]))
        for row, item in enumerate(items):
            for slot, reference in enumerate(item[key]):
                features[row, slot] = torch.from_numpy(reference)
        return features

    mask = torch.tensor([[slot < len(item["clip_refs"]) for slot in range(slots)] for item in items])
    return {
        "candidate_features": {
            "clip": stacked("clip_mt"), "beit3": stacked("beit3_mt"), "blip2": stacked("blip_mt"),
            "stella": stacked("stella_mt"),
        },
        "image_features": {
            "clip": stacked("clip_img")[:, None], "beit3": stacked("beit3_img")[:, None], "blip2": stacked("blip_img"),
        },
        "reference_features": {
            "blip2": references("blip_refs"), "beit3": references("beit3_refs"), "stella": references("stella_refs"),
        },
        "reference_mask": mask,
    }  # fmt: skip


def scores_in_batches(model, items: list[dict], batch_size: int) -> dict[str, np.ndarray]:
    """Per-item outputs with `items` cut into consecutive batches of `batch_size` (ref_scores padded to 5 slots)."""
    outputs = {"score": [], "img_score": [], "ref_score": [], "ref_scores": []}
    for start in range(0, len(items), batch_size):
        with torch.no_grad():
            output = model(**model_inputs(items[start : start + batch_size]))
        for name in ("score", "img_score", "ref_score"):
            assert getattr(output, name).shape == (len(items[start : start + batch_size]),), name
            outputs[name].append(getattr(output, name).double().numpy())
        ref_scores = output.ref_scores.double().numpy()
        outputs["ref_scores"].append(np.pad(ref_scores, [(0, 0), (0, 5 - ref_scores.shape[1])]))
    return {name: np.concatenate(values) for name, values in outputs.items()}


# ------------------------------------------------------------------------------------------------- tests
def test_release_geometry_maps_478_keys_onto_the_103m_parameter_model():
    with torch.device("meta"):
        module = AuthorsLayoutPearl(RELEASE)
    state = module.state_dict()
    state["pos_encoder.pe"] = PositionalEncoding(1536, 1000).pe
    assert len(state) == 478
    assert sum(1 for _ in module.parameters()) == 346 and sum(p.numel() for p in module.parameters()) == 202_759_433
    geometry = infer_pearl_geometry(state)
    assert geometry == PearlGeometry()
    config = pearl_config(geometry)
    weights, dropped = map_pearl_state_dict(state, config)
    assert len(weights) == 383
    with torch.device("meta"):
        assert sum(p.numel() for p in PearlModel(config).parameters()) == 103_552_776
    assert dropped == {
        "pos_encoder.pe (the sinusoidal table PearlModel rebuilds)": 1,
        "cls_token1-6": 6,
        "learnable_query2-3": 2,
        "ref_img_ratio": 1,
        "transformer2-6": 60,
        "upsampler1-3": 12,
        "pos_encoder2-6": 5,
        "cross_attention2": 4,
        "query_mlp": 4,
    }
    assert weights["image_arsms.blip2.hadamard_net.network.25.num_batches_tracked"].dtype == torch.int64


def test_checkpoint_is_lightning_1_2_with_cuda_tags(pearl_run):
    with zipfile.ZipFile(pearl_run["checkpoint"]) as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("/data.pkl")))
    assert b"cuda:0" in pickled and b"X\x03\x00\x00\x00cpu" not in pickled  # every storage tagged cuda:0
    assert b"pytorch_lightning.callbacks.early_stopping" in pickled and b"EarlyStopping" in pickled
    # The release's 478 keys, plus a third transformer layer (12), minus 4 of 7 HadamardNet blocks (7 keys each) x 6.
    assert len(pearl_run["state"]) == 478 + 12 - 6 * 4 * 7
    if not torch.cuda.is_available():
        with fake_lightning() as callbacks, pytest.raises(RuntimeError, match="CUDA"):
            with torch.serialization.safe_globals(list(callbacks.values())):
                torch.load(pearl_run["checkpoint"], weights_only=True)  # the tags matter: no map_location fails


def test_converted_directory_has_the_checkpoints_geometry_and_weights(pearl_run, converted):
    output = converted["output"]
    for name in ("config.json", "model.safetensors", "configuration_pearl.py", "modeling_pearl.py", "README.md"):
        assert (output / name).is_file(), name
        assert (output / name).stat().st_mode & 0o777 == 0o644
    model = PearlModel.from_pretrained(output, dtype=torch.float32)
    config = model.config
    assert (config.feature_dim, config.num_layers, config.ffn_dim, config.num_queries) == (16, 3, 40, 3)
    assert (config.head_hidden_sizes, config.hadamard_channels) == ([24, 12], [6, 10, 6])
    assert (config.max_positions, config.num_heads, config.lambda_img) == (60, 8, 0.5)
    assert [(e["name"], e["dim"]) for e in config.image_encoders] == [("clip", 12), ("beit3", 16), ("blip2", 8)]
    assert [(e["name"], e["dim"]) for e in config.reference_encoders] == [("blip2", 8), ("beit3", 16), ("stella", 16)]
    assert config.encoder_specs["blip2"]["path"] == "Salesforce/blip2-itm-vit-g"  # PearlConfig's default encoders
    state = pearl_run["state"]
    converted_state = model.state_dict()
    for ours, theirs in [
        ("image_arsms.beit3.hadamard_net.network.5.running_var", "hadamard_net3.network.5.running_var"),
        ("reference_arsms.stella.hadamard_net.network.9.running_mean", "hadamard_net6.network.9.running_mean"),
        ("reference_arsms.blip2.hadamard_net.network.1.num_batches_tracked", "hadamard_net4.network.1.num_batches_tracked"),  # noqa: E501
        ("image_arsms.blip2.diff_net.weight", "diff_feature_mlp2.weight"),
        ("reference_arsms.beit3.adapter.3.bias", "mlp5.3.bias"),
        ("vss.queries", "learnable_query1"),
        ("vss.transformer.layers.2.norm2.weight", "transformer.layers.2.norm2.weight"),
        ("reference_head.6.weight", "ff2.0.ff.linear_3.weight"),
    ]:  # fmt: skip
        assert torch.equal(converted_state[ours], state[theirs]), ours
        assert converted_state[ours].device.type == "cpu"
    log = converted["log"]
    assert "hparams from '" in log and "hparams.yaml'" in log
    assert "dropped 95 it never uses: pos_encoder.pe (the sinusoidal table PearlModel rebuilds) (1), " in log
    assert "cls_token1-6 (6), learnable_query2-3 (2), ref_img_ratio (1), transformer2-6 (60), upsampler1-3 (12)" in log
    assert re.search(r"max \|difference\| \S+ <= 1e-06", log)
    card = (output / "README.md").read_text()
    assert card.startswith("---\n") and "epoch=2-step=1233.ckpt" in card and "Lightning 1.2.10" in card


@pytest.mark.parametrize("batch_size", [7, 3, 2, 1])
def test_scores_equal_the_authors_forward_in_numpy(pearl_run, converted, batch_size):
    model = PearlModel.from_pretrained(converted["output"], dtype=torch.float32).eval()
    items = random_items(REFERENCE_COUNTS, TINY_DIMS, BLIP_TOKENS, seed=3)
    expected = pearl_forward(numpy_weights(pearl_run["state"]), items, num_heads=TINY["num_heads"])
    actual = scores_in_batches(model, items, batch_size)  # batch_size 1: the batches Pearl's predict() crashes on
    for name in ("score", "img_score", "ref_score", "ref_scores"):
        assert_scores_close(actual[name], expected[name], what=f"{name}, batches of {batch_size}")
    # The reference-free items score img_score; the others mix it 0.5/0.5 with their best reference.
    with_refs = np.array(REFERENCE_COUNTS) > 0
    np.testing.assert_allclose(actual["score"][~with_refs], actual["img_score"][~with_refs], rtol=0, atol=0)
    assert np.all(np.abs(expected["score"][with_refs] - expected["img_score"][with_refs]) > 1e-4)


@pytest.mark.parametrize("lambda_img", [0.2, 0.9])
def test_a_lambda_other_than_half_weights_the_image_score_as_the_authors_formula(pearl_run, converted, lambda_img):
    """With lambda = 0.5, swapping lambda and 1 - lambda in the fusion changes nothing: other values catch it."""
    model = PearlModel.from_pretrained(converted["output"], dtype=torch.float32).eval()
    model.config.lambda_img = lambda_img
    items = random_items(REFERENCE_COUNTS, TINY_DIMS, BLIP_TOKENS, seed=3)
    weights = numpy_weights(pearl_run["state"])
    expected = pearl_forward(weights, items, num_heads=TINY["num_heads"], lambda_img=lambda_img)
    assert_scores_close(scores_in_batches(model, items, 7)["score"], expected["score"], what=f"lambda {lambda_img}")
    swapped = pearl_forward(weights, items, num_heads=TINY["num_heads"], lambda_img=1 - lambda_img)["score"]
    assert np.abs(swapped - expected["score"]).max() > 1e-3  # the test can tell lambda from 1 - lambda


def test_hparams_come_from_the_file_given_or_the_checkpoint(pearl_run, tmp_path):
    hparams = dict(pearl_run["hparams"])
    bare = tmp_path / "copy" / "epoch=2-step=1233.ckpt"
    bare.parent.mkdir()
    bare.write_bytes(pearl_run["checkpoint"].read_bytes())  # no hparams.yaml beside it: hyper_parameters is used
    logged = []
    convert_pearl_checkpoint(bare, tmp_path / "from-checkpoint", encoder_dims=TINY_DIMS, log=logged.append)
    assert any("hparams from the checkpoint's hyper_parameters" in line for line in logged)
    hparams["final_activation"] = "Sigmoid"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(hparams))
    with pytest.raises(CheckpointError, match=r"final_activation' is 'Sigmoid'.*sigmoid\(sigmoid\(x\)\)"):
        convert_pearl_checkpoint(bare, tmp_path / "out", hparams=tmp_path / "bad.yaml", encoder_dims=TINY_DIMS)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"final_activation": True}, r"hparams 'final_activation' is True: .*retrain with final_activation: False"),
        ({"final_activation": None}, None),
        ({"final_activation": "false"}, None),
        ({"activations": "ReLU"}, r"hparams 'activations' is 'ReLU': PearlModel's heads put Tanh"),
        ({"model": "PolosEstimator"}, r"PearlEstimator; convert Polos checkpoints with pacs-pp convert-polos"),
        ({"hidden_sizes": "24, 10"}, r"hparams 'hidden_sizes' is '24, 10' but the heads' weights .* \[24, 12\]"),
        ({"hidden_sizes": "a, b"}, r"hparams 'hidden_sizes' 'a, b' is not a comma-separated list of ints"),
        ({"final_activation": "<drop>"}, r"hparams lack 'final_activation': Pearl's code then uses its default"),
    ],
)
def test_unsupported_hparams_are_explained(pearl_run, change, message):
    hparams = {key: value for key, value in pearl_run["hparams"].items() if change.get(key) != "<drop>"}
    hparams |= {key: value for key, value in change.items() if value != "<drop>"}
    state = pearl_run["state"]
    if message is None:
        pearl_convert.convert_pearl_state_dict(state, hparams, encoder_dims=TINY_DIMS, log=lambda _: None)
    else:
        with pytest.raises(CheckpointError, match=message):
            pearl_convert.convert_pearl_state_dict(state, hparams, encoder_dims=TINY_DIMS, log=lambda _: None)


def test_num_heads_is_taken_as_given_and_ref_img_ratio_is_reported(pearl_run, caplog):
    """The head count leaves no trace in the shapes: --num-heads 4 gives the 4-head forward of the same weights."""
    state = dict(pearl_run["state"]) | {"ref_img_ratio": torch.tensor(0.7)}
    logged = []
    model = pearl_convert.convert_pearl_state_dict(
        state, pearl_run["hparams"], num_heads=4, encoder_dims=TINY_DIMS, log=logged.append
    )
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any(line.startswith("ref_img_ratio is 0.7, not 0.5") for line in warnings)
    items = random_items([2, 0, 5], TINY_DIMS, BLIP_TOKENS, seed=8)
    expected = pearl_forward(numpy_weights(state), items, num_heads=4)
    assert_scores_close(scores_in_batches(model, items, 3)["score"], expected["score"], what="4 heads")
    eight_heads = pearl_forward(numpy_weights(state), items, num_heads=8)["score"]
    assert np.abs(eight_heads - expected["score"]).max() > 1e-4
    with pytest.raises(CheckpointError, match=r"2 \* feature_dim \(32\) must be divisible by num_heads"):
        pearl_convert.convert_pearl_state_dict(
            state, pearl_run["hparams"], num_heads=3, encoder_dims=TINY_DIMS, log=lambda _: None
        )


def save_state(path: Path, state: dict, hparams: dict) -> Path:
    torch.save({"state_dict": state, "hyper_parameters": hparams}, path)
    return path


def test_missing_unknown_and_mis_shaped_keys_are_named(pearl_run, tmp_path):
    def convert(state):
        path = save_state(tmp_path / "run.ckpt", state, pearl_run["hparams"])
        return convert_pearl_checkpoint(path, tmp_path / "out", encoder_dims=TINY_DIMS, log=lambda _: None)

    state = dict(pearl_run["state"])
    for key in ("mlp4.0.weight", "hadamard_net6.network.5.running_var", "transformer.layers.1.norm2.bias",
                "ff2.0.ff.linear_3.bias", "upsampler2.0.weight"):  # fmt: skip
        state.pop(key)
    with pytest.raises(CheckpointError) as error:
        convert(state)
    assert "missing keys (4): ff2.0.ff.linear_3.bias, hadamard_net6.network.5.running_var, mlp4.0.weight, " \
           "transformer.layers.1.norm2.bias" in str(error.value)  # fmt: skip
    assert "upsampler2" not in str(error.value)  # unused: dropped, never required

    state = dict(pearl_run["state"])
    state["mlp3.0.weight"] = torch.zeros(32, 15)
    state["encoder.model.embeddings.weight"] = torch.zeros(2)
    with pytest.raises(CheckpointError) as error:
        convert(state)
    assert "unexpected keys (1): encoder.model.embeddings.weight" in str(error.value)
    assert "wrong shapes (1): mlp3.0.weight (32, 15) (expected (32, 16))" in str(error.value)

    state = dict(pearl_run["state"])
    state["pos_encoder.pe"] = state["pos_encoder.pe"] + 0.01
    with pytest.raises(CheckpointError, match="pos_encoder.pe differs from the sinusoidal table .* by up to 0.01"):
        convert(state)
    assert not (tmp_path / "out").exists()


def test_encoder_sizes_must_fit_the_feature_size(pearl_run, tmp_path, capsys):
    arguments = ["--checkpoint", str(pearl_run["checkpoint"]), "--output-dir", str(tmp_path / "out")]
    assert convert_cli.converter_main("convert-pearl")(arguments) == 2
    assert re.search(
        r"error: encoder 'clip' gives 512-d features, but this checkpoint's feature size is 16 .* "
        r"Pass --encoder-dim clip=N",
        capsys.readouterr().err,
    )
    with pytest.raises(SystemExit):
        convert_cli.converter_main("convert-pearl")([*arguments, "--encoder-dim", "bert=3"])
    assert "expected NAME=N, NAME one of ['clip', 'beit3', 'blip2', 'stella'], got 'bert=3'" in capsys.readouterr().err
    paths = ["--encoder-path", "clip=./pac-s-pp-l14", *encoder_dim_flags(TINY_DIMS)]
    assert convert_cli.converter_main("convert-pearl")([*arguments, *paths]) == 0
    spec = PearlModel.from_pretrained(tmp_path / "out").config.encoder_specs["clip"]
    assert spec == {"type": "pacs", "path": "./pac-s-pp-l14"}


def test_unsafe_and_unreadable_files_are_refused(pearl_run, tmp_path, capsys):
    marker = tmp_path / "code-ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = save_state(tmp_path / "evil.ckpt", pearl_run["state"], {"payload": Exploit()})
    with pytest.raises(CheckpointError, match=r"refused to load '.*evil\.ckpt'.*\(it needs posix\.system\)"):
        convert_pearl_checkpoint(evil, tmp_path / "out")
    # Later Lightning versions pickle an argparse.Namespace in hyper_parameters: named, refused, never built.
    namespaced = save_state(tmp_path / "namespace.ckpt", pearl_run["state"], Namespace(hidden_sizes="24, 12"))
    with pytest.raises(CheckpointError, match=r"it needs argparse\.Namespace"):
        convert_pearl_checkpoint(namespaced, tmp_path / "out")

    text = tmp_path / "epoch=0-step=1.ckpt"
    text.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 812\n")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(pearl_run["checkpoint"].read_bytes()[:5000])
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    for path in (text, truncated, empty):
        arguments = ["--checkpoint", str(path), "--output-dir", str(tmp_path / "out")]
        assert convert_cli.converter_main("convert-pearl")(arguments) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"pacs-pp convert-pearl: error: '{path}': ")
        assert any(words in error for words in ("Git LFS pointer", "truncated", "empty (0 bytes"))
        assert "Pass the .ckpt file that Pearl's Lightning trainer saved" in error and "Traceback" not in error
        assert len(error.strip().splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert "pytorch_lightning" not in sys.modules


def test_a_directory_that_does_not_reload_the_same_fails_and_writes_nothing(pearl_run, tmp_path, monkeypatch):
    original = pearl_convert.save_remote_code_model

    def save_then_change(model, directory):
        with torch.no_grad():
            model.vss.queries.add_(1e-3)
        original(model, directory)  # what is written no longer matches the outputs computed before saving

    monkeypatch.setattr(pearl_convert, "save_remote_code_model", save_then_change)
    with pytest.raises(RuntimeError, match=r"does not reproduce the conversion: its head outputs differ by up to"):
        convert_pearl_checkpoint(pearl_run["checkpoint"], tmp_path / "out", encoder_dims=TINY_DIMS, log=lambda _: None)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ the authors' own code
def load_authors_estimator(root: Path, monkeypatch) -> type:
    """`PearlEstimator` from the checkout's pearl_estimator.py, with its own FeedForward, activations and HadamardNet
    loaded by path. Its training-only imports (the Lightning base class, torchnlp, ScalarMix) are stand-ins: the
    modules and the forward are the authors' code."""

    class Estimator(nn.Module):
        class ModelConfig:
            pass

        def __init__(self, hparams):
            super().__init__()
            self.hparams = hparams
            self._build_model()

        def _build_model(self):
            pass

    stand_ins = {
        "pearl.models.estimators.estimator_base": {"Estimator": Estimator},
        "pearl.modules.scalar_mix": {"ScalarMixWithDropout": None},
        "torchnlp.utils": {"collate_tensors": None},
    }
    packages = (
        "pearl",
        "pearl.models",
        "pearl.models.estimators",
        "pearl.modules",
        "pearl.models.hadamard",
        "torchnlp",
    )
    for package in packages:
        monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
    for name, attributes in stand_ins.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)

    def by_path(name, relative):
        spec = importlib.util.spec_from_file_location(name, root / relative)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    by_path("pearl.modules.activations", "pearl/modules/activations.py")
    by_path("pearl.modules.feedforward", "pearl/modules/feedforward.py")
    hadamard = by_path("pearl.models.hadamard.hadamard", "pearl/models/hadamard/hadamard.py")
    estimator = by_path("pearl.models.estimators.pearl_estimator", "pearl/models/estimators/pearl_estimator.py")
    return estimator.PearlEstimator, hadamard.HadamardNet


def authors_inputs(items: list[dict]) -> dict:
    """PearlEstimator.forward's keyword arguments (prepare_sample's output) for `items`."""

    def stacked(key):
        return torch.from_numpy(np.stack([item[key] for item in items]))

    def references(key):
        return [[torch.from_numpy(reference) for reference in item[key]] for item in items]

    return {
        "refs_features": references("clip_refs"), "mt_features": stacked("clip_mt"),
        "imgs_features": stacked("clip_img"),
        "blip_img_features": stacked("blip_img"), "blip_mt_features": stacked("blip_mt"),
        "blip_refs_features": references("blip_refs"), "beit3_mt_features": stacked("beit3_mt"),
        "beit3_refs_features": references("beit3_refs"), "beit3_img_features": stacked("beit3_img"),
        "stella_mt_features": stacked("stella_mt"), "stella_refs_features": references("stella_refs"),
    }  # fmt: skip


@pytest.mark.skipif(not PEARL_DIR, reason=CLONE_HINT)
def test_the_authors_code_scores_like_the_converted_model(tmp_path, monkeypatch):
    pearl_estimator, hadamard_net = load_authors_estimator(Path(PEARL_DIR), monkeypatch)
    # _build_model loads experiments/hadamard.pth from the working directory into each HadamardNet; the checkpoint
    # overwrites them, so any HadamardNet state serves (the file is not in the authors' repository).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").mkdir()
    torch.save(hadamard_net().state_dict(), tmp_path / "experiments" / "hadamard.pth")
    torch.manual_seed(21)
    hparams = lightning_hparams("1536, 768")
    authors = pearl_estimator(Namespace(**hparams))
    randomise_trained_state(authors, seed=22, head_scale=5.0)  # 768 hidden units: a smaller scale spreads the scores
    authors.eval()
    assert len(authors.state_dict()) == 478
    checkpoint = tmp_path / "lightning" / "version_0" / "epoch=0-step=9.ckpt"
    write_lightning_checkpoint(authors, checkpoint, hparams, weights_only=True)  # the large config's layout
    model = convert_pearl_checkpoint(checkpoint, tmp_path / "out", encoder_dims={"clip": 768}, log=lambda _: None)
    reloaded = PearlModel.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()
    assert torch.equal(reloaded.vss.queries, model.vss.queries)
    # 4 BLIP-2 query tokens instead of 32 (their forward loops over any count) keep the CPU time to minutes.
    items = random_items([5, 0, 2, 1, 3], {"clip": 768, "blip2": 256, "beit3": 768, "stella": 768}, 4, seed=5)
    for batch_size in (5, 2, 1):
        ours = scores_in_batches(reloaded, items, batch_size)
        theirs = {"score": [], "img_score": [], "ref_score": [], "ref_scores": []}
        for start in range(0, len(items), batch_size):
            with torch.no_grad():
                output = authors(**authors_inputs(items[start : start + batch_size]))
            for name in theirs:  # a one-item batch gives a 0-d img_score (the .squeeze() that breaks predict())
                theirs[name].append(output[name].double().numpy().reshape(-1, 5 if name == "ref_scores" else 1))
        for name, values in theirs.items():
            expected = np.concatenate(values)
            assert_scores_close(ours[name], expected if name == "ref_scores" else expected[:, 0], what=name)
    assert SCORE_TOLERANCE == 1e-6
