"""The torchmetrics `Metric`s (`ModelMetric`, `PACSppMetric`, ...): two gloo processes (forked, CPU), each updating
with half of the items, compute what one process computes with all of them (1e-6), which is the mean of
`model.score`'s per-item scores; the scoring model stays out of the metric's state; bad input is an error naming it."""

import json
import socket

import pytest
import torch
import torch.distributed
import torch.multiprocessing

from modeling_pacs.errors import InputError
from modeling_pacs.evaluation.torch_metrics import ModelMetric
from modeling_pacs.loading import load_model
from modeling_pacs.pacs.torch_metrics import CLIPSMetric, PACSppMetric
from modeling_pacs.polos.torch_metrics import PolosMetric
from tests.fixtures.helpers import random_image

CAPTIONS = ["a red circle", "a blue square on white", "a green triangle", "a small dark shape"]
REFERENCES = [["a red disc"], ["a blue tile", "a square"], ["a triangle", "a green shape", "green"], ["a shape"]]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("metric_images")
    paths = []
    for seed in range(len(CAPTIONS)):
        paths.append(str(folder / f"{seed}.png"))
        random_image(seed, (48 + 8 * seed, 40)).save(paths[-1])
    return paths


def update_in_halves(metric, images, rank: int, world_size: int):
    """Rank r updates with the items r, r + world_size, ..., two per batch."""
    mine = list(range(rank, len(CAPTIONS), world_size))
    for start in range(0, len(mine), 2):
        batch = mine[start : start + 2]
        metric.update([images[i] for i in batch], [CAPTIONS[i] for i in batch], [REFERENCES[i] for i in batch])


def distributed_worker(rank: int, world_size: int, port: int, model, images: list, output: str):
    torch.set_num_threads(1)  # forked: no OpenMP pool of the parent's (as DataLoader workers), and 2 processes
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                         world_size=world_size)  # fmt: skip
    try:
        metric = CLIPSMetric(model=model, output="ref_score")
        update_in_halves(metric, images, rank, world_size)
        value = metric.compute()
        if rank == 0:
            with open(output, "w") as handle:
                json.dump({"value": value.item(), "signature": metric.signature()}, handle)
    finally:
        torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(
    not torch.distributed.is_gloo_available() or "fork" not in torch.multiprocessing.get_all_start_methods(),
    reason="this torch build has no gloo backend, or this system cannot fork",
)
def test_two_gloo_processes_compute_what_one_process_computes(images, tmp_path):
    model = load_model("tiny:clip_s")  # built once here, read by both processes
    one = CLIPSMetric(model=model, output="ref_score")
    update_in_halves(one, images, 0, 1)
    expected = model.score(images, CAPTIONS, references=REFERENCES).ref_scores.double().mean().item()
    assert one.compute().item() == pytest.approx(expected, abs=1e-6)

    output = tmp_path / "rank0.json"
    # forked, the processes share the loaded model (a spawned process would import and load everything again)
    torch.multiprocessing.start_processes(distributed_worker, args=(2, free_port(), model, images, str(output)),
                                          nprocs=2, start_method="fork")  # fmt: skip
    result = json.loads(output.read_text())
    assert result["value"] == pytest.approx(one.compute().item(), abs=1e-6)
    assert result["signature"] == one.signature() and "|refs:1-3|" in result["signature"]


def test_the_metric_keeps_the_model_out_of_its_state_and_refuses_bad_input(images):
    metric = PACSppMetric(model="tiny")
    assert metric.higher_is_better is True and metric.is_differentiable is False and not metric.full_state_update
    assert list(metric.state_dict()) == [] and not list(metric.parameters())
    with pytest.raises(InputError, match=r"compute\(\) before any update"), pytest.warns(UserWarning, match="before"):
        metric.compute()
    batch = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))  # (B, C, H, W), as a loader gives
    metric.update(images[:2], CAPTIONS[:2])
    metric.update(batch, CAPTIONS[2:3])
    model = metric.scoring_model
    expected = torch.cat([model.score(images[:2], CAPTIONS[:2]).scores, model.score([batch[0]], CAPTIONS[2:3]).scores])
    assert metric.compute().item() == pytest.approx(expected.double().mean().item(), abs=1e-6)
    metric.reset()
    with pytest.raises(InputError, match="RefPAC-S\\+\\+ is reference-based: pass references="):
        PACSppMetric(model="tiny", output="ref_score").update(images[:1], CAPTIONS[:1])
    with pytest.raises(InputError, match="CLIPSMetric scores clip_s, and this model computes pac_s_pp"):
        CLIPSMetric(model=metric.scoring_model)
    with pytest.raises(InputError, match=r"output 'ref': PAC-S\+\+ gives \['score', 'ref_score'\]"):
        ModelMetric(metric.scoring_model, output="ref")
    polos = PolosMetric(model="tiny:polos")
    with pytest.raises(InputError, match="Polos is reference-based"):
        polos.update(images[:1], CAPTIONS[:1])
