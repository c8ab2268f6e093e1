"""HadamardNet initialisation (docs/spec/pearl.md#arsm, docs/spec/pearl.md#a2): pretrain the 1x1-conv net to multiply,
ship the result.

Pearl loads `experiments/hadamard.pth` into all six HadamardNets, but that file is absent from its repository and the
paper gives no recipe beyond "regress u*c on vectors drawn from U(a, b)". Ours (A2, scaled to a CPU budget): pairs
`x1, x2 ~ U(low, high)` drawn from a fixed seed, target `x1 * x2`, MSE, Adam, a cosine-decayed learning rate, BatchNorm
in train mode. The result is accepted when the held-out MSE (eval mode, fresh seed) is at most `ACCEPTED_MSE`. It
ships as `modeling_pacs/assets/pearl_hadamard_init.safetensors` with its recipe and measured error in the metadata.
"""

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..models.modeling_pearl import PearlHadamardNet, PearlModel

HADAMARD_INIT_PATH = Path(__file__).resolve().parent.parent / "assets" / "pearl_hadamard_init.safetensors"
DEFAULT_CHANNELS = [128, 256, 512, 1024, 512, 256, 128]
ACCEPTED_MSE = 1e-3


@dataclass
class HadamardRecipe:
    """How the shipped initialisation was made; stored in the artifact's metadata."""

    channels: tuple = tuple(DEFAULT_CHANNELS)
    low: float = -1.0
    high: float = 1.0
    rows: int = 16
    columns: int = 256
    steps: int = 500
    learning_rate: float = 1e-3
    seed: int = 0
    held_out_seed: int = 1


def draw_pairs(generator: torch.Generator, rows: int, columns: int, low: float, high: float):
    """Two `[rows, columns]` tensors from U(low, high)."""
    first = torch.rand(rows, columns, generator=generator) * (high - low) + low
    second = torch.rand(rows, columns, generator=generator) * (high - low) + low
    return first, second


def held_out_mse(net: PearlHadamardNet, recipe: HadamardRecipe, pairs: int = 65536) -> float:
    """MSE of `net(x1, x2)` against `x1 * x2` in eval mode, on pairs from a seed the training never saw."""
    generator = torch.Generator().manual_seed(recipe.held_out_seed)
    first, second = draw_pairs(generator, pairs // 256, 256, recipe.low, recipe.high)
    net.eval()
    with torch.no_grad():
        return float(((net(first, second) - first * second) ** 2).mean())


def pretrain_hadamard(recipe: HadamardRecipe, progress: bool = True) -> tuple[PearlHadamardNet, dict]:
    """Train a HadamardNet to multiply; return it and a report (held-out MSE, final train MSE, seconds)."""
    if recipe.steps <= 0 or recipe.rows <= 0 or recipe.columns <= 0:
        raise ValueError(f"steps, rows and columns must be positive, got {recipe}")
    if not (math.isfinite(recipe.low) and math.isfinite(recipe.high) and recipe.low < recipe.high):
        raise ValueError(f"need finite low < high, got low={recipe.low}, high={recipe.high}")
    if not recipe.learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {recipe.learning_rate}")
    torch.manual_seed(recipe.seed)
    net = PearlHadamardNet(list(recipe.channels)).train()
    optimizer = torch.optim.Adam(net.parameters(), lr=recipe.learning_rate)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=recipe.steps)
    generator = torch.Generator().manual_seed(recipe.seed)
    started = time.perf_counter()
    loss = torch.tensor(float("nan"))
    for step in range(recipe.steps):
        first, second = draw_pairs(generator, recipe.rows, recipe.columns, recipe.low, recipe.high)
        loss = ((net(first, second) - first * second) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if progress and (step % 50 == 0 or step == recipe.steps - 1):
            print(f"step {step + 1}/{recipe.steps}  train MSE {loss.item():.2e}", flush=True)
    report = {
        "held_out_mse": held_out_mse(net, recipe),
        "final_train_mse": loss.item(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return net, report


def save_hadamard_init(net: PearlHadamardNet, recipe: HadamardRecipe, report: dict, path: Path) -> None:
    """Write the state dict (with the recipe and report as metadata) atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    metadata = {"recipe": json.dumps(asdict(recipe)), "report": json.dumps(report)}
    save_file({key: value.contiguous() for key, value in net.state_dict().items()}, temporary, metadata=metadata)
    temporary.chmod(0o644)
    temporary.replace(path)


def load_hadamard_init(path: Path = HADAMARD_INIT_PATH) -> dict[str, torch.Tensor]:
    """The shipped HadamardNet state dict."""
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"HadamardNet initialisation '{path}' is missing: run `python scripts/pretrain_pearl_hadamard.py` to "
            "rebuild it"
        )
    return load_file(path)


def fraction_outside(features: torch.Tensor, low: float, high: float) -> float:
    """Share of feature values outside the pretraining range [low, high] (A2: widen the range above 0.1 %)."""
    if features.numel() == 0:
        return 0.0
    return float(((features < low) | (features > high)).float().mean())


def initialise_hadamard_nets(model: PearlModel, path: Path = HADAMARD_INIT_PATH) -> int:
    """Load the pretrained multiplication into every HadamardNet of `model` (as Pearl does for all six).

    Returns how many nets were initialised. Configs with other `hadamard_channels` raise a ValueError.
    """
    if list(model.config.hadamard_channels) != DEFAULT_CHANNELS and Path(path) == HADAMARD_INIT_PATH:
        raise ValueError(
            f"the shipped HadamardNet initialisation has channels {DEFAULT_CHANNELS}, the model "
            f"{model.config.hadamard_channels}: pretrain one with scripts/pretrain_pearl_hadamard.py --channels ..."
        )
    state_dict = load_hadamard_init(path)
    count = 0
    for arsm in list(model.image_arsms.values()) + list(model.reference_arsms.values()):
        arsm.hadamard_net.load_state_dict(state_dict)
        count += 1
    return count


__all__ = [
    "HADAMARD_INIT_PATH",
    "HadamardRecipe",
    "fraction_outside",
    "held_out_mse",
    "initialise_hadamard_nets",
    "load_hadamard_init",
    "pretrain_hadamard",
    "save_hadamard_init",
]
