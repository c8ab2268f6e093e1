"""Every job recovers from a damaged shard (docs/concepts/recovery.md): corpus scoring, synthetic generation,
benchmark caching and Pearl feature extraction are each run to the end, one finished shard is damaged (truncated,
emptied, bytes flipped, bytes appended, deleted, its record deleted or corrupted) or a killed merge's temporary file is
left behind, and the job is run again. The rerun names the damaged shard in its log, recomputes that shard only, ends
with the output of the undamaged run (ids and counts exactly, floats within 1e-6) and leaves no temporary file."""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from modeling_pacs.jobs import record_path

# ---------------------------------------------------------------------------------------------------- damages


def truncate_half(path: Path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def truncate_empty(path: Path):
    path.write_bytes(b"")


def drop_last_line(path: Path):  # JSON lines cut at a line boundary still parse: only the record catches it
    data = path.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n")
    path.write_bytes(data[: cut + 1] if cut >= 0 else data[: len(data) // 2])


def flip_bytes(path: Path):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for offset in range(middle, min(middle + 8, len(data))):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def append_garbage(path: Path):
    with path.open("ab") as handle:
        handle.write(b'{"row": 9999, "not": "this job\'s"}\n\x00\xff')


def delete_shard(path: Path):
    path.unlink()


def delete_record(path: Path):
    record_path(path).unlink()


def corrupt_record(path: Path):
    record_path(path).write_text('{"bytes": 12, "checks')


DAMAGES = {
    "truncate_half": truncate_half,
    "truncate_empty": truncate_empty,
    "drop_last_line": drop_last_line,
    "flip_bytes": flip_bytes,
    "append_garbage": append_garbage,
    "delete_shard": delete_shard,
    "delete_record": delete_record,
    "corrupt_record": corrupt_record,
    "stale_temporaries": None,  # no damage: a killed merge's and a killed shard writer's temporary files
}


# ---------------------------------------------------------------------------------------------------- jobs
@dataclass
class Job:
    """One job kind: `run(folder)` runs it to the end in `folder` and returns its output; `shard(folder)` is a
    finished shard's path; `merge_temporary(folder)` is where a killed merge leaves its temporary file."""

    run: Callable[[Path], object]
    shard: Callable[[Path], Path]
    merge_temporary: Callable[[Path], Path]
    compare: Callable[[object, object], None]


def compare_rows(actual: list[dict], expected: list[dict]):
    """Every key exactly, except floats within 1e-6."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, abs=1e-6), (want.get("row"), key)
            else:
                assert got[key] == value, (want.get("row"), key)


@pytest.fixture(scope="module")
def single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus_job(tmp_path_factory, single_thread) -> Job:
    from modeling_pacs.cli import score_corpus
    from modeling_pacs.testing.pacs import make_tiny_model
    from tests.fixtures.helpers import random_image

    root = tmp_path_factory.mktemp("corpus")
    make_tiny_model(root / "model", seed=2)
    (root / "images").mkdir()
    for index in range(3):
        random_image(index, (32 + 4 * index, 40)).save(root / "images" / f"{index}.png")
    words = "a dog cat sits on the red blue table grass".split()
    with (root / "corpus.jsonl").open("w") as handle:
        for row in range(10):
            caption = " ".join(words[(row + k) % len(words)] for k in range(4))
            handle.write(json.dumps({"id": f"item-{row}", "image": f"images/{row % 3}.png", "caption": caption}) + "\n")

    def run(folder: Path) -> list[dict]:
        score_corpus.main(
            [str(root / "corpus.jsonl"), "--output-dir", str(folder), "--model", str(root / "model")]
            + ["--shard-size", "4", "--keep-columns", "id"]
        )
        return [json.loads(line) for line in (folder / "scores.jsonl").read_text().splitlines()]

    return Job(
        run=run,
        shard=lambda folder: folder / "shards" / "shard-0000001.jsonl",
        merge_temporary=lambda folder: folder / ".scores.jsonl.k1ll3d.tmp",
        compare=compare_rows,
    )


@pytest.fixture(scope="module")
def synthetic_job(tmp_path_factory, single_thread) -> Job:
    import io

    import PIL.Image
    import pyarrow.parquet as pq

    from modeling_pacs.cli import generate_synthetic
    from modeling_pacs.testing.synthetic import make_tiny_blip, make_tiny_stable_diffusion
    from tests.fixtures.helpers import random_image

    root = tmp_path_factory.mktemp("synthetic")
    make_tiny_blip(root / "blip")
    make_tiny_stable_diffusion(root / "sd")
    (root / "coco" / "train2014").mkdir(parents=True)
    images = []
    for index in range(3):
        name = f"COCO_train2014_{index:012d}.jpg"
        random_image(index, (40 + 3 * index, 48)).save(root / "coco" / "train2014" / name)
        sentences = [{"sentid": 10 * index + k, "raw": f"a dog {index} sits on the grass {k}"} for k in range(2)]
        images.append(
            {"cocoid": 100 + index, "filepath": "train2014", "filename": name, "split": "train", "sentences": sentences}
        )
    (root / "dataset_coco.json").write_text(json.dumps({"images": images}))

    def run(folder: Path) -> list[dict]:
        generate_synthetic.main(
            ["--karpathy-json", str(root / "dataset_coco.json"), "--image-root", str(root / "coco")]
            + ["--output-dir", str(folder), "--captioner", str(root / "blip"), "--generator", str(root / "sd")]
            + ["--steps", "2", "--height", "32", "--width", "32", "--shard-size", "1", "--seed", "7"]
        )
        rows = []
        for path in sorted((folder / "shards").glob("shard-*.parquet")):
            for row in pq.read_table(path).to_pylist():
                image = row.pop("synthetic_image")
                row["pixels"] = None if image is None else np.asarray(PIL.Image.open(io.BytesIO(image["bytes"])))
                rows.append(row)
        return {"rows": rows, "summary": json.loads((folder / "summary.json").read_text())}

    def compare(actual: dict, expected: dict):
        summaries = [
            {key: value for key, value in output["summary"].items() if key != "shards"} for output in (actual, expected)
        ]
        assert summaries[0] == summaries[1]  # "shards" names the folder
        actual_pixels = [row["pixels"] for row in actual["rows"]]
        expected_pixels = [row["pixels"] for row in expected["rows"]]
        compare_rows(
            *([{k: v for k, v in row.items() if k != "pixels"} for row in o["rows"]] for o in (actual, expected))
        )
        for got, want in zip(actual_pixels, expected_pixels):
            assert (got is None) == (want is None)
            if got is not None:  # the same process and settings: at most a rounding step apart
                assert np.abs(got.astype(int) - want.astype(int)).max() <= 1

    return Job(
        run=run,
        shard=lambda folder: folder / "shards" / "shard-0000001.parquet",
        merge_temporary=lambda folder: folder / ".summary.json.k1ll3d.tmp",
        compare=compare,
    )


@pytest.fixture(scope="module")
def benchmark_job(tmp_path_factory, single_thread) -> Job:
    from modeling_pacs.evaluation.runner import score_image_items
    from modeling_pacs.loading import load_model
    from modeling_pacs.testing.pacs import make_tiny_model
    from tests.fixtures.helpers import random_image

    root = tmp_path_factory.mktemp("benchmark")
    make_tiny_model(root / "model", seed=2)
    model = load_model(str(root / "model"))
    for index in range(3):
        random_image(index, (32 + 4 * index, 40)).save(root / f"{index}.png")
    items = [
        {
            "id": f"item-{index}",
            "image": str(root / f"{index % 3}.png"),
            "candidate": f"a photo of thing {index}",
            "references": [f"a picture of thing {index}", "something else"],
        }
        for index in range(10)
    ]

    def run(folder: Path) -> dict:
        scores, _ = score_image_items(model, items, cache_dir=folder, chunk_size=4, progress=False)
        return scores

    def compare(actual: dict, expected: dict):
        assert sorted(actual) == sorted(expected)
        for column in expected:
            assert list(actual[column]) == list(expected[column])
            np.testing.assert_allclose(list(actual[column].values()), list(expected[column].values()), atol=1e-6)

    return Job(
        run=run,
        shard=lambda folder: folder / "shards" / "shard-0000001.jsonl",
        merge_temporary=lambda folder: folder / ".scores.jsonl.k1ll3d.tmp",
        compare=compare,
    )


@pytest.fixture(scope="module")
def pearl_job(tmp_path_factory, single_thread) -> Job:
    from modeling_pacs.cli import extract_pearl_features
    from modeling_pacs.pearl.features import FeatureCache
    from modeling_pacs.testing.directories import tiny_model_directory
    from tests.fixtures.pearl import write_spica_fixture

    paths = write_spica_fixture(tmp_path_factory.mktemp("pearl"))
    model = tiny_model_directory("pearl")

    def run(folder: Path) -> dict:
        arguments = ["--data", str(paths["data"]), "--images", str(paths["images"]), "--model", str(model)]
        assert (
            extract_pearl_features.main([*arguments, "--cache", str(folder), "--shard-size", "8", "--no-progress"]) == 0
        )
        cache = FeatureCache(folder)
        return {
            "image_index": cache.image_index,
            "text_index": cache.text_index,
            "features": {
                f"{kind}/{name}": features.numpy()
                for kind, table in (("images", cache.image_features), ("texts", cache.text_features))
                for name, features in table.items()
            },
        }

    def compare(actual: dict, expected: dict):
        assert actual["image_index"] == expected["image_index"] and actual["text_index"] == expected["text_index"]
        assert sorted(actual["features"]) == sorted(expected["features"])
        for key, features in expected["features"].items():
            assert actual["features"][key].shape == features.shape, key
            np.testing.assert_allclose(actual["features"][key], features, atol=1e-6, err_msg=key)

    return Job(
        run=run,
        shard=lambda folder: folder / "blip2" / "texts-00001.safetensors",
        merge_temporary=lambda folder: folder / ".manifest.json.k1ll3d.tmp",
        compare=compare,
    )


JOBS = ["corpus_job", "synthetic_job", "benchmark_job", "pearl_job"]
CASES = [(job, damage) for job in JOBS for damage in DAMAGES]


@pytest.fixture(scope="module")
def undamaged(request, tmp_path_factory):
    """Each job's output of one undamaged run, computed once."""
    outputs = {}

    def output(job_name: str):
        if job_name not in outputs:
            job = request.getfixturevalue(job_name)
            outputs[job_name] = job.run(tmp_path_factory.mktemp(f"{job_name}-undamaged"))
        return outputs[job_name]

    return output


def temporaries(folder: Path) -> list[Path]:
    return sorted(folder.rglob(".*.tmp"))


@pytest.mark.parametrize("job_name, damage", CASES)
def test_a_damaged_shard_is_named_recomputed_and_the_output_is_the_undamaged_one(
    job_name, damage, request, undamaged, tmp_path, caplog
):
    job: Job = request.getfixturevalue(job_name)
    expected = undamaged(job_name)
    folder = tmp_path / "job"
    job.compare(job.run(folder), expected)
    shard = job.shard(folder)
    others = {path: path.stat().st_mtime_ns for path in shard.parent.iterdir() if path.name != shard.name}
    others = {path: modified for path, modified in others.items() if not path.name.startswith(shard.name)}
    if DAMAGES[damage] is None:
        job.merge_temporary(folder).write_text('{"row": 0, "half a merge')
        (shard.parent / f".{shard.name}.k1ll3d.tmp").write_bytes(b"half a shard")
    else:
        DAMAGES[damage](shard)

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        resumed = job.run(folder)
    job.compare(resumed, expected)
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    damaged = [message for message in warnings if "is damaged" in message]
    if DAMAGES[damage] is None:
        assert damaged == []
    else:
        assert len(damaged) == 1 and str(shard) in damaged[0] and damaged[0].endswith("; recomputing"), warnings
        assert shard.is_file() and record_path(shard).is_file()
    assert temporaries(folder) == []
    for path, modified in others.items():  # only the damaged shard was recomputed
        assert path.stat().st_mtime_ns == modified, path
