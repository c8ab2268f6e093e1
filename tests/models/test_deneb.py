"""DENEB in the engine: the per-item mode is batch-invariant, the official mode cuts references per chunk as the
authors' collation does, open_clip's LAION normalisation, remote-code loading, and bad input named by item
(docs/spec/deneb.md). Parity with the authors' code is tests/deneb/test_convert.py."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from modeling_pacs import DenebModel
from modeling_pacs.models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, preprocess_image
from modeling_pacs.testing.deneb import make_tiny_deneb_model
from tests.fixtures.helpers import SCORE_TOLERANCE, random_image

# (An empty candidate is refused, naming the item: tests/deneb/test_bad_input.py.)
CANDIDATES = ["a cat on a sofa", "a dog running in the park", "two people", "a plate of food", "a plane"]
REFERENCES = [
    ["a cat sleeping", "a cat", "a sofa with a cat"],
    ["a dog"],
    ["people riding horses", "two men"],
    ["food and vegetables", "a plate", "meat"],
    ["a plane over the city", "an airplane flying"],
]


@pytest.fixture(scope="module")
def deneb_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_deneb")
    make_tiny_deneb_model(directory, seed=0)
    return directory


@pytest.fixture(scope="module")
def deneb(deneb_dir):
    return DenebModel.from_pretrained(deneb_dir, dtype=torch.float32)


@pytest.fixture(scope="module")
def images():
    return [random_image(index, (200 + 10 * index, 180)) for index in range(len(CANDIDATES))]


@pytest.fixture(scope="module")
def per_item(deneb, images):
    return deneb.score(images, CANDIDATES, REFERENCES)


def test_per_item_scores_do_not_depend_on_the_batch(deneb, images, per_item):
    assert per_item.mode == "per_item" and per_item.num_references_used.tolist() == [3, 1, 2, 3, 2]
    assert torch.all((per_item.scores > 0) & (per_item.scores < 1))
    one_by_one = deneb.score(images, CANDIDATES, REFERENCES, batch_size=1).scores
    torch.testing.assert_close(one_by_one, per_item.scores, atol=SCORE_TOLERANCE, rtol=0)
    # transformers' RoBERTa forward instead of the packed CPU path: the same scores.
    deneb.fast_cpu_encoders = False
    try:
        plain = deneb.score(images, CANDIDATES, REFERENCES).scores
    finally:
        deneb.fast_cpu_encoders = True
    torch.testing.assert_close(plain, per_item.scores, atol=SCORE_TOLERANCE, rtol=0)
    # Per item is the official mode's one-item chunk.
    official = deneb.score(images, CANDIDATES, REFERENCES, mode="official", batch_size=1).scores
    torch.testing.assert_close(official, per_item.scores, atol=SCORE_TOLERANCE, rtol=0)


def test_all_references_count_not_only_the_best(deneb, images, per_item):
    """DENEB reads the references together: dropping one changes the score (a max over references would not when
    the dropped one is not the best)."""
    fewer = deneb.score(images[:1], CANDIDATES[:1], [REFERENCES[0][:2]]).scores
    assert abs(float(fewer[0]) - float(per_item.scores[0])) > 1e-4


def test_official_mode_cuts_each_chunk_to_its_smallest_reference_count(deneb, images, per_item):
    out = deneb.score(images, CANDIDATES, REFERENCES, mode="official", batch_size=2)
    assert out.mode == "official" and out.num_references_used.tolist() == [1, 1, 2, 2, 2]
    cut = deneb.score(images[:2], CANDIDATES[:2], [REFERENCES[0][:1], REFERENCES[1]], mode="official", batch_size=2)
    torch.testing.assert_close(out.scores[:2], cut.scores, atol=SCORE_TOLERANCE, rtol=0)
    # The shared statistics alone move the last chunk (one item: its own statistics, its references kept).
    assert abs(float(out.scores[4]) - float(per_item.scores[4])) <= SCORE_TOLERANCE


def test_images_are_normalised_as_open_clip_gives_the_laion_tag(deneb):
    assert deneb.config.image_mean == [0.5, 0.5, 0.5] and deneb.clip_encoder.image_normalisation == (
        (0.5, 0.5, 0.5),
        (0.5, 0.5, 0.5),
    )
    image = random_image(3)
    openai = preprocess_image(image, 224)
    laion = preprocess_image(image, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    pixels = openai * torch.tensor(OPENAI_CLIP_STD).view(3, 1, 1) + torch.tensor(OPENAI_CLIP_MEAN).view(3, 1, 1)
    torch.testing.assert_close(laion, (pixels - 0.5) / 0.5, atol=1e-5, rtol=0)


def test_the_saved_directory_loads_through_its_own_remote_code(deneb_dir, images, per_item, tmp_path):
    """A copy loads with `trust_remote_code=True` in a fresh process that cannot import the package."""
    copy = shutil.copytree(deneb_dir, tmp_path / "copy")
    paths = []
    for index in (0, 2):
        images[index].save(tmp_path / f"{index}.png")
        paths.append(str(tmp_path / f"{index}.png"))
    script = textwrap.dedent(
        f"""
        import json, torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(copy)!r}, trust_remote_code=True, dtype=torch.float32)
        out = model.score({paths!r}, {[CANDIDATES[0], CANDIDATES[2]]!r}, {[REFERENCES[0], REFERENCES[2]]!r})
        print(json.dumps({{"module": type(model).__module__, "scores": out.scores.tolist()}}))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["module"].startswith("transformers_modules.")
    expected = per_item.scores[[0, 2]]
    torch.testing.assert_close(torch.tensor(loaded["scores"]), expected, atol=SCORE_TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    ("references", "error", "message"),
    [
        (None, ValueError, "DENEB is a reference-based metric and has no reference-free mode"),
        ([["a"], [], ["b"], ["c"], ["d"]], ValueError, "item 1 has an empty reference list"),
        ([["a"]] * 4, ValueError, "got 4 reference lists for 5 candidates"),
        ([["a"], ["b"], ["c"], ["d"], ["e", "f", "g"]], ValueError, "item 4 has 3 references, more than the 2"),
        ([["a"], ["b"], ["c"], ["word " * 600], ["e"]], ValueError, "reference 0 of item 3 .* RoBERTa tokens"),
    ],
)
def test_bad_input_is_named(deneb, images, references, error, message, monkeypatch):
    monkeypatch.setattr(deneb.config, "max_references", 2)
    with pytest.raises(error, match=message):
        deneb.score(images, CANDIDATES, references)


def test_mismatched_images_and_an_unknown_mode_are_named(deneb, images):
    with pytest.raises(ValueError, match="image"):
        deneb.score(images[:4], CANDIDATES, REFERENCES)
    with pytest.raises(ValueError, match=r"mode must be one of \['per_item', 'official'\]"):
        deneb.score(images, CANDIDATES, REFERENCES, mode="chunked")
