"""Tiny Pearl configs and random feature batches shared by the Pearl tests."""

import pytest
import torch

from modeling_pacs import PearlConfig

# clip 12-d (zero-padded to 16), blip2 8-d with 3 query tokens, stella 20-d (wider than 16: projected, A8).
TINY_IMAGE_ENCODERS = [{"name": "clip", "dim": 12, "tokens": 1}, {"name": "blip2", "dim": 8, "tokens": 3}]
TINY_REFERENCE_ENCODERS = [{"name": "blip2", "dim": 8}, {"name": "stella", "dim": 20}]
ENCODER_DIMS = {"clip": 12, "blip2": 8, "stella": 20}


def tiny_pearl_config(**overrides) -> PearlConfig:
    settings = dict(
        image_encoders=TINY_IMAGE_ENCODERS,
        reference_encoders=TINY_REFERENCE_ENCODERS,
        encoder_specs={},
        feature_dim=16,
        num_heads=2,
        ffn_dim=32,
        num_queries=2,
        head_hidden_sizes=[16, 8],
        hadamard_channels=[8, 8],
        max_refs=5,
    )
    settings.update(overrides)
    return PearlConfig(**settings)


def random_features(batch: int, num_refs: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    candidate = {name: torch.randn(batch, dim, generator=generator) for name, dim in ENCODER_DIMS.items()}
    image = {
        encoder["name"]: torch.randn(batch, encoder["tokens"], encoder["dim"], generator=generator)
        for encoder in TINY_IMAGE_ENCODERS
    }
    references = {
        encoder["name"]: torch.randn(batch, num_refs, encoder["dim"], generator=generator)
        for encoder in TINY_REFERENCE_ENCODERS
    }
    return {"candidate_features": candidate, "image_features": image, "reference_features": references}


# ------------------------------------------------------------------------------------- tiny Spica-layout fixture
SPICA_CAPTIONS = [
    ("a dog running on the grass", ["a dog running in a field", "a brown dog on grass"], 0.9),
    ("a cat on the sofa", [], 0.7),
    ("two people riding a bike", ["a man and a woman riding a bike"], 0.6),
    ("a red car on the street", [], 0.2),
    ("a child playing with a ball", ["a boy playing with a ball", "a child with a ball", "a kid playing"], 0.8),
    ("a blue bus", [], 0.1),
    ("a woman eating at a table", ["a woman sitting at a table eating"], 0.5),
    ("trees and water", [], 0.3),
]


def write_spica_fixture(directory) -> dict:
    """`spica_{train,val}.csv` (rows with and without references) and `images/` under `directory`."""
    import csv
    from pathlib import Path

    from tests.helpers import random_image

    directory = Path(directory)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for index, (candidate, references, score) in enumerate(SPICA_CAPTIONS * 2):
        image = f"img_{index % 6}.jpg"
        rows.append({"mt": candidate, "refs": repr(references), "score": score, "imgid": image, "extra": index})
    for index in range(6):
        random_image(index, (48 + 8 * index, 40)).save(directory / "images" / f"img_{index}.jpg")
    for split, split_rows in (("train", rows[:12]), ("val", rows[12:])):
        with (directory / f"spica_{split}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["mt", "refs", "score", "imgid", "extra"])
            writer.writeheader()
            writer.writerows(split_rows)
    return {"data": directory, "images": directory / "images"}


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a loaded machine spinning threads slow them 10x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
