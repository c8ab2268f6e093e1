"""Shared fixtures: tiny random models built in code (never downloaded) and images made with PIL."""

import atexit
import os
import shutil
import tempfile

# Tests never reach the network: the Hub is not reachable here, and tests must not depend on it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# The "tiny" alias builds its model once into this cache: keep the tests' copy out of the user's ~/.cache.
if "PACS_PP_CACHE" not in os.environ:
    os.environ["PACS_PP_CACHE"] = tempfile.mkdtemp(prefix="pacs_pp_test_cache_")
    atexit.register(shutil.rmtree, os.environ["PACS_PP_CACHE"], ignore_errors=True)

import pytest  # noqa: E402

from tests.fixtures.helpers import random_image  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A saved, Hub-ready tiny PAC-S++ directory (random CLIP + random LoRA adapter, real tokenizer)."""
    from modeling_pacs.testing.pacs import make_tiny_model

    directory = tmp_path_factory.mktemp("tiny_pacs_pp")
    make_tiny_model(directory, variant="pac_s_pp", seed=0)
    return directory


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    import torch

    from modeling_pacs import PACSModel

    return PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory):
    """Six PNG/JPEG files of different sizes, as a captioner's output folder would hold."""
    folder = tmp_path_factory.mktemp("images")
    sizes = [(320, 240), (240, 320), (224, 224), (500, 375), (97, 131), (640, 427)]
    paths = []
    for index, size in enumerate(sizes):
        path = folder / f"image_{index}.{'png' if index % 2 else 'jpg'}"
        random_image(index, size).save(path)
        paths.append(path)
    return paths
