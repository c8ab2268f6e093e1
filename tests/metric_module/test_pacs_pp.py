"""The `evaluate` module (metric/pacs_pp): loads by path and, once registered, by bare name offline; its scores are
the core engine's, bit for bit; bad inputs reach the user as clear messages."""

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import evaluate
import numpy as np
import PIL.Image
import pytest
import torch

import modeling_pacs
from modeling_pacs.cli import main
from modeling_pacs.loading import load_model
from modeling_pacs.metric_module.registration import REGISTRATION_FORMAT, metric_script_path, register_metric
from modeling_pacs.models.inputs import ImageInputError
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.helpers import assert_scores_close

REPO_ROOT = Path(__file__).resolve().parents[2]
METRIC_DIR = str(REPO_ROOT / "metric" / "pacs_pp")
CAPTIONS = [
    "a red circle on a white background",
    "a blue square",
    "a dog running on the grass",
    "a red circle on a white background",
    "two people sitting at a table",
    "a photo of a cat",
]
REFERENCES = [
    ["a red disc", "a circle"],
    ["a dark blue square"],
    ["a dog on grass", "a running dog", "a brown dog"],
    ["a green triangle"],
    ["people at a table"],
    ["a cat sleeping"],
]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    # Seed 2 gives mostly positive image-text cosines (and a few negative ones): scores are not all clipped to 0.
    directory = tmp_path_factory.mktemp("tiny") / "model"
    make_tiny_model(directory, seed=2)
    return str(directory)


@pytest.fixture(scope="module")
def image_paths(tmp_path_factory) -> list[str]:
    directory = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    paths = []
    for index, (height, width) in enumerate([(40, 60), (64, 64), (90, 50), (33, 47)]):
        path = directory / f"image_{index}.png"
        PIL.Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    # Six captions over four images: repeats exercise the engine's deduplication.
    return [paths[0], paths[1], paths[2], paths[0], paths[3], paths[1]]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def metric(tiny_model_dir, tmp_path_factory):
    return evaluate.load(METRIC_DIR, model=tiny_model_dir, cache_dir=str(tmp_path_factory.mktemp("evaluate")))


def test_compute_equals_engine_scores(metric, engine, image_paths):
    expected = engine.score(image_paths, CAPTIONS, references=REFERENCES)
    assert (expected.scores > 0).sum() >= 3, "the tiny model must give non-trivial scores for this test to mean much"
    results = metric.compute(predictions=CAPTIONS, images=image_paths, references=REFERENCES)
    assert results["metric"] == "PAC-S++" and results["ref_metric"] == "RefPAC-S++"
    assert results["scores"] == expected.scores.tolist()
    assert results["ref_scores"] == expected.ref_scores.tolist()
    assert results["score"] == pytest.approx(np.mean(results["scores"]), abs=1e-6)
    assert results["ref_score"] == pytest.approx(np.mean(results["ref_scores"]), abs=1e-6)

    free_only = metric.compute(predictions=CAPTIONS, images=image_paths)
    assert sorted(free_only) == ["metric", "num_truncated", "score", "scores", "signature", "truncated_tokens"]
    assert free_only["scores"] == engine.score(image_paths, CAPTIONS).scores.tolist()


LONG_CAPTION = " ".join(
    f"Sentence {index} says that a red circle lies on a white background near a blue square." for index in range(9)
)


@pytest.mark.filterwarnings("ignore:some .* are longer than the text encoder")
def test_long_captions_are_counted_and_read_in_chunks_on_request(tiny_model_dir, engine, image_paths, tmp_path):
    captions = [LONG_CAPTION, *CAPTIONS[1:]]
    references = [[LONG_CAPTION], *REFERENCES[1:]]
    expected_truncated = engine.truncated_tokens(captions).tolist()
    truncated = evaluate.load(METRIC_DIR, model=engine, cache_dir=str(tmp_path / "a"))
    results = truncated.compute(predictions=captions, images=image_paths, references=references)
    assert results["truncated_tokens"] == expected_truncated and expected_truncated[0] > 0
    assert results["num_truncated"] == 1

    chunks = evaluate.load(METRIC_DIR, model=engine, long_captions="chunks", cache_dir=str(tmp_path / "b"))
    results = chunks.compute(predictions=captions, images=image_paths, references=references)
    expected = engine.score(image_paths, captions, references, long_captions="chunks")
    assert results["scores"] == expected.scores.tolist() and results["ref_scores"] == expected.ref_scores.tolist()
    # Captions that fit keep their scores (another batch composition: equal within the fp32 tolerance).
    assert_scores_close(results["scores"][1:], engine.score(image_paths, captions, references).scores[1:])
    assert results["truncated_tokens"] == [0] * len(captions) and results["num_truncated"] == 0
    with pytest.raises(ValueError, match="long_captions must be one of"):
        evaluate.load(METRIC_DIR, model=engine, long_captions="pieces", cache_dir=str(tmp_path / "c"))


def test_add_batch_then_compute_equals_one_compute(metric, image_paths):
    single = metric.compute(predictions=CAPTIONS, images=image_paths, references=REFERENCES)
    metric.add_batch(predictions=CAPTIONS[:2], images=image_paths[:2], references=REFERENCES[:2])
    metric.add_batch(predictions=CAPTIONS[2:5], images=image_paths[2:5], references=REFERENCES[2:5])
    metric.add(prediction=CAPTIONS[5], image=image_paths[5], reference=REFERENCES[5])
    assert metric.compute() == single


def test_in_memory_images_match_paths_without_png_round_trip(metric, image_paths, monkeypatch):
    from_paths = metric.compute(predictions=CAPTIONS, images=image_paths)
    opened = [PIL.Image.open(path) for path in image_paths]
    images = [
        opened[0],
        np.asarray(opened[1].convert("RGB")),
        Path(image_paths[2]).read_bytes(),
        opened[3],
        {"bytes": None, "path": image_paths[4]},
        np.asarray(opened[5].convert("RGB")).astype(np.float32) / 255.0,
    ]

    def no_encoding(*args, **kwargs):
        raise AssertionError("an image was re-encoded (PIL -> PNG) on its way to the engine")

    monkeypatch.setattr(PIL.Image.Image, "save", no_encoding)
    from_objects = metric.compute(predictions=CAPTIONS, images=images)
    # float arrays are rounded back to uint8 exactly, so every input form decodes to the same pixels
    assert_scores_close(from_objects["scores"], from_paths["scores"])


def test_config_names_select_variant_and_reference_requirement(tiny_model_dir, engine, image_paths, tmp_path):
    # An already loaded PACSModel is accepted as `model`.
    reference_based = evaluate.load(METRIC_DIR, config_name="refpac_s_pp", model=engine, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"config 'refpac_s_pp' is reference-based but prediction 0 has no references"):
        reference_based.compute(predictions=CAPTIONS, images=image_paths)
    with pytest.raises(ValueError, match=r"config_name 'clip_s' asks for clip_s but model .* is a pac_s_pp model"):
        evaluate.load(METRIC_DIR, config_name="clip_s", model=engine, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"unknown config_name 'pacs'.*'refpac_s_pp'"):
        evaluate.load(METRIC_DIR, config_name="pacs", model=engine, cache_dir=str(tmp_path))


def test_bad_inputs_give_clear_messages(metric, image_paths, tmp_path):
    with pytest.raises(ValueError, match=r"got 6 predictions and 5 images: pass exactly one image per prediction"):
        metric.compute(predictions=CAPTIONS, images=image_paths[:5])
    with pytest.raises(ValueError, match=r"got 2 reference lists for 6 candidates"):
        metric.compute(predictions=CAPTIONS, images=image_paths, references=REFERENCES[:2])
    with pytest.raises(TypeError, match=r"reference 0 of item 1 is int \(3\), expected a string"):
        metric.compute(predictions=CAPTIONS[:2], images=image_paths[:2], references=[["a circle"], [3]])
    with pytest.raises(TypeError, match=r"prediction 1 is NoneType \(None\), expected a string"):
        metric.compute(predictions=["a cat", None], images=image_paths[:2])
    with pytest.raises(FileNotFoundError, match=r"image 1 \('missing\.jpg'\) does not exist"):
        metric.compute(predictions=CAPTIONS[:2], images=[image_paths[0], "missing.jpg"])
    with pytest.raises(TypeError, match=r"image 0 is int"):
        metric.compute(predictions=CAPTIONS[:1], images=[3])
    with pytest.raises(ValueError, match=r"nothing to score"):
        metric.compute()

    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG not really an image")
    with pytest.raises(ValueError, match=r"image 2 \('.*corrupt\.png'\) could not be decoded"):
        metric.compute(predictions=CAPTIONS[:4], images=[image_paths[0], image_paths[0], str(corrupt), str(corrupt)])
    nan_pixel = np.zeros((8, 8, 3), np.float32)
    nan_pixel[2, 3, 1] = np.nan
    refused = {  # the engine's image rules (docs/concepts/image-inputs.md), named by item
        r"image 1 is a datasets.Image dict with no bytes and no path": {"bytes": None, "path": None},
        r"image 1 \('https://example.com/cat.png'\) is a URL": {"bytes": None, "path": "https://example.com/cat.png"},
        r"image 1 is a float32 NumPy array of shape \(8, 8, 3\) holding 1 non-finite value": nan_pixel,
        r"image 1 is a uint8 torch tensor of shape \(8, 8, 3\): read as CxHxW": torch.zeros(8, 8, 3, dtype=torch.uint8),
    }
    for message, image in refused.items():
        with pytest.raises(ImageInputError, match=message):
            metric.compute(predictions=CAPTIONS[:2], images=[image_paths[0], image])

    with pytest.raises(ValueError, match=r"nothing to score"):
        metric.compute()
    # after a failed compute the module is usable again
    assert len(metric.compute(predictions=CAPTIONS[:1], images=image_paths[:1])["scores"]) == 1


def registered_environment(tmp_path) -> dict:
    """The environment of a process that loads the module by name from the cache `register-metric` wrote into."""
    return {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_MODULES_CACHE": str(tmp_path / "hf_home" / "modules"),
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "PYTHONPATH": str(REPO_ROOT),
    }


def test_registered_module_loads_by_bare_name_offline_from_any_folder(
    tiny_model_dir, image_paths, engine, tmp_path, capsys
):
    modules_cache = tmp_path / "hf_home" / "modules"
    main(["register-metric", "--modules-cache", str(modules_cache)])
    registered = [Path(line.removeprefix("registered ")) for line in capsys.readouterr().out.splitlines()[:2]]
    assert [path.parent.parent.name for path in registered] == ["evaluate-metric--pacs_pp", "pacs-pp--pacs_pp"]
    # What is registered is the package's short script, which imports the metric from the installed package.
    assert all(path.read_text() == metric_script_path().read_text() for path in registered)
    outside = tmp_path / "somewhere_else"
    outside.mkdir()
    program = f"""
import json, evaluate
pacs = evaluate.load("pacs_pp", model={tiny_model_dir!r})
published_name = evaluate.load("pacs-pp/pacs_pp", config_name="refpac_s_pp", model={tiny_model_dir!r})
results = pacs.compute(predictions={CAPTIONS!r}, images={image_paths!r}, references={REFERENCES!r})
print(json.dumps({{"class": f"{{type(pacs).__module__}}.{{type(pacs).__name__}}", "results": results,
                  "published": type(published_name).__name__}}))
"""
    completed = subprocess.run(
        [sys.executable, "-c", program],
        cwd=outside,
        env=registered_environment(tmp_path),
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"Using the latest cached version of the module from {registered[0].parent}" in completed.stderr
    answer = json.loads(completed.stdout.strip().splitlines()[-1])
    assert answer["class"] == "modeling_pacs.metric_module.pacs_pp.PACSPlusPlus"
    assert answer["published"] == "PACSPlusPlus"
    expected = engine.score(image_paths, CAPTIONS, references=REFERENCES)
    assert_scores_close(answer["results"]["scores"], expected.scores.tolist())
    assert_scores_close(answer["results"]["ref_scores"], expected.ref_scores.tolist())


def test_metric_script_ships_inside_the_package():
    # The package holds the real file (so wheels carry it); the repository's metric folder links to it.
    packaged = metric_script_path()
    assert packaged.is_file() and not packaged.is_symlink()
    assert packaged.parent.parent.parent == Path(modeling_pacs.__file__).parent
    assert (REPO_ROOT / "metric" / "pacs_pp" / "pacs_pp.py").resolve() == packaged.resolve()
    # It imports one stable public path of the package, and holds the registration format the package reads.
    imports = [
        node for node in ast.walk(ast.parse(packaged.read_text())) if isinstance(node, ast.ImportFrom | ast.Import)
    ]
    assert [(node.module, [alias.name for alias in node.names]) for node in imports] == [
        ("modeling_pacs.metric_module", ["PACSPlusPlus", "check_registration"])
    ]
    assert f"\nREGISTRATION_FORMAT = {REGISTRATION_FORMAT}\n" in packaged.read_text()


STALE_ADVICE = re.escape("re-run `pacs-pp register-metric`")
# How a registered script can be stale: written for another registration format, or importing what is gone.
STALE_SCRIPTS = {
    "another registration format": (f"REGISTRATION_FORMAT = {REGISTRATION_FORMAT}", "REGISTRATION_FORMAT = 0"),
    "an import that is gone": ("import PACSPlusPlus, check_registration", "import PACSPlusPlusV0, check_registration"),
}


@pytest.mark.parametrize("stale", STALE_SCRIPTS)
def test_a_stale_registration_says_to_register_again(tmp_path, stale):
    old, new = STALE_SCRIPTS[stale]
    folder = tmp_path / "pacs_pp"
    folder.mkdir()
    (folder / "pacs_pp.py").write_text(metric_script_path().read_text().replace(old, new))
    assert (folder / "pacs_pp.py").read_text() != metric_script_path().read_text()
    with pytest.raises(ImportError, match=STALE_ADVICE):
        evaluate.load(str(folder), model="tiny", cache_dir=str(tmp_path / "evaluate"))


def test_a_stale_registration_in_the_cache_says_to_register_again_when_loaded_by_name(tmp_path):
    modules_cache = tmp_path / "hf_home" / "modules"
    for path in register_metric(modules_cache):  # as an earlier version of the script would have been registered
        path.write_text(path.read_text().replace(*STALE_SCRIPTS["another registration format"]))
    completed = subprocess.run(
        [sys.executable, "-c", "import evaluate; evaluate.load('pacs_pp', model='tiny')"],
        cwd=tmp_path,
        env=registered_environment(tmp_path),
        capture_output=True,
        text=True,
    )
    assert completed.returncode != 0
    message = (
        r"ImportError: the evaluate module .*pacs_pp\.py was registered by another pacs-pp version "
        rf"\(registration format 0; this pacs-pp reads format {REGISTRATION_FORMAT}\): {STALE_ADVICE}"
    )
    assert re.search(message, completed.stderr), completed.stderr[-3000:]


@pytest.mark.parametrize(
    "removed",
    ["modeling_pacs.inputs", "modeling_pacs.model_card", "modeling_pacs.modeling_pacs", "modeling_pacs.video_metric"],
)
def test_the_paths_early_registrations_import_say_to_register_again(removed):
    # Registrations by an early pacs-pp copied the whole script, which imported these paths (before the package's
    # layout change); tests/models/test_directory_compatibility.py loads such a copy.
    with pytest.raises(ImportError, match=STALE_ADVICE):
        importlib.import_module(removed)


# ------------------------------------------------------------------------------------ state after a failure
def corrupt_image(tmp_path) -> str:
    path = tmp_path / "corrupt.png"
    path.write_bytes(b"\x89PNG not really an image")
    return str(path)


# A computation that fails on bad input, and what its message says. Failures found while scoring (once every row is
# gathered) come with references, as the pending rows do, so that their own error is the one raised.
FAILING_COMPUTES = {
    "missing image": (lambda paths, tmp: dict(predictions=["a cat"], images=["missing.jpg"]), "does not exist"),
    "None prediction": (lambda paths, tmp: dict(predictions=[None], images=paths[:1]), "prediction 0 is NoneType"),
    "count mismatch": (lambda paths, tmp: dict(predictions=["a", "b"], images=paths[:1]), "got 2 predictions and 1"),
    "image of a wrong type": (lambda paths, tmp: dict(predictions=["a cat"], images=[3.5]), r"image \d+ is float"),
    "reference of a wrong type": (
        lambda paths, tmp: dict(predictions=["a cat"], images=paths[:1], references=[[3]]),
        "reference 0 of item 0 is int",
    ),
    "images and videos": (
        lambda paths, tmp: dict(predictions=["a cat"], images=paths[:1], videos=paths[:1]),
        "pass images= or videos=, not both",
    ),
    "undecodable image": (
        lambda paths, tmp: dict(predictions=["a cat"], images=[corrupt_image(tmp)], references=[["a dog"]]),
        r"could not be decoded",
    ),
    "unknown option": (
        lambda paths, tmp: dict(predictions=["a cat"], images=paths[:1], references=[["a dog"]], num_frames=3),
        "num_frames= and idf= apply to videos= only",
    ),
}
PENDING_ROWS = {  # rows added by earlier add_batch calls when the computation fails
    "none": lambda paths: [],
    "paths with references": lambda paths: [
        dict(predictions=CAPTIONS[:2], images=paths[:2], references=REFERENCES[:2])
    ],
    "in-memory images": lambda paths: [
        dict(predictions=CAPTIONS[:1], images=[PIL.Image.open(paths[0])], references=REFERENCES[:1]),
        dict(
            predictions=CAPTIONS[1:3],
            images=[np.asarray(PIL.Image.open(path).convert("RGB")) for path in paths[1:3]],
            references=REFERENCES[1:3],
        ),
    ],
}


@pytest.fixture(scope="module")
def fresh_results(tiny_model_dir, image_paths, tmp_path_factory) -> dict:
    """What a fresh module returns for the next, unrelated computations (reference-free, and with references)."""
    fresh = evaluate.load(METRIC_DIR, model=tiny_model_dir, cache_dir=str(tmp_path_factory.mktemp("fresh")))
    return {
        "free": fresh.compute(predictions=CAPTIONS[3:], images=image_paths[3:]),
        "with references": fresh.compute(predictions=CAPTIONS[3:], images=image_paths[3:], references=REFERENCES[3:]),
    }


def arrow_files(metric) -> list[str]:
    return sorted(str(path) for path in Path(metric.data_dir).glob("*.arrow"))


@pytest.mark.parametrize("pending", PENDING_ROWS)
@pytest.mark.parametrize("failure", FAILING_COMPUTES)
def test_a_failed_compute_drops_the_pending_rows_and_the_next_compute_is_a_fresh_ones(
    metric, image_paths, fresh_results, tmp_path, failure, pending
):
    batches = PENDING_ROWS[pending](image_paths)
    for batch in batches:
        metric.add_batch(**batch)
    num_pending = sum(len(batch["predictions"]) for batch in batches)
    assert len(metric) == num_pending
    arguments, message = FAILING_COMPUTES[failure]
    dropped = rf"\(nothing was scored: the {num_pending} pending rows of earlier add_batch calls were dropped"
    with pytest.raises((ValueError, TypeError, OSError)) as raised:
        metric.compute(**arguments(image_paths, tmp_path))
    assert re.search(message, str(raised.value)), str(raised.value)
    assert bool(re.search(dropped, str(raised.value))) == bool(num_pending), str(raised.value)
    assert len(metric) == 0 and metric.in_memory_images == {} and metric.input_kind is None
    assert arrow_files(metric) == []  # evaluate's cache file of the dropped rows is gone too
    for kind, arguments in (("free", {}), ("with references", {"references": REFERENCES[3:]})):
        metric.add_batch(predictions=CAPTIONS[3:], images=image_paths[3:], **arguments)
        # evaluate released its lock too: the rows go to its usual cache file, not to a new one beside a locked one
        assert [Path(path).name for path in arrow_files(metric)] == ["default_experiment-1-0.arrow"]
        results = metric.compute()
        assert sorted(results) == sorted(fresh_results[kind])
        assert_scores_close(results["scores"], fresh_results[kind]["scores"])
        if "ref_scores" in results:
            assert_scores_close(results["ref_scores"], fresh_results[kind]["ref_scores"])


FAILING_ADD_BATCHES = {
    "missing image after an in-memory one": dict(predictions=["a", "b"], images=["PIL", "missing.jpg"]),
    "None prediction": dict(predictions=[None], images=["PIL"]),
    "videos after images": dict(predictions=["a"], videos=["PIL"]),
    "reference of a wrong type": dict(predictions=["a"], images=["PIL"], references=[[3]]),
}


@pytest.mark.parametrize("failure", FAILING_ADD_BATCHES)
def test_a_failed_add_batch_stores_nothing_and_keeps_the_earlier_rows(metric, image_paths, failure):
    expected = metric.compute(predictions=CAPTIONS[:3], images=image_paths[:3], references=REFERENCES[:3])
    metric.add_batch(predictions=CAPTIONS[:1], images=[PIL.Image.open(image_paths[0])], references=REFERENCES[:1])
    bad = {
        key: [PIL.Image.open(image_paths[1]) if value == "PIL" else value for value in values]
        for key, values in FAILING_ADD_BATCHES[failure].items()
    }
    with pytest.raises((ValueError, TypeError, OSError)) as raised:
        metric.add_batch(**bad)
    assert "dropped" not in str(raised.value)
    assert len(metric) == 1 and list(metric.in_memory_images) == [0] and metric.input_kind == "images"
    metric.add_batch(predictions=CAPTIONS[1:3], images=image_paths[1:3], references=REFERENCES[1:3])
    results = metric.compute()
    assert_scores_close(results["scores"], expected["scores"])
    assert_scores_close(results["ref_scores"], expected["ref_scores"])
