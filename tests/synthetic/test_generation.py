"""scripts/generate_synthetic.py end to end on CPU: tiny random BLIP and Stable Diffusion built in code, a COCO-like
Karpathy file with an unreadable image, resumption after a real SIGKILL, two machines, refusals, training on it."""

import hashlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pyarrow.parquet as pq
import pytest
import torch

from modeling_pacs.errors import InputError
from modeling_pacs.synthetic import GenerationSettings, StableDiffusionGenerator, generate_shard
from modeling_pacs.synthetic.generation import SourceImage
from modeling_pacs.testing.synthetic import make_tiny_blip, make_tiny_stable_diffusion
from tests.fixtures.processes import kill_after_first_shard

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "generate_synthetic.py"
UNREADABLE_COCOID = 1003
# Pixels of one item generated in another batch or process: float noise may move a value across a rounding boundary.
PIXEL_TOLERANCE = 1


from modeling_pacs.cli import generate_synthetic  # noqa: E402


@pytest.fixture(scope="module")
def single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the subprocesses run with OMP_NUM_THREADS=1 too
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, single_thread) -> dict:
    """Tiny models, a Karpathy file (6 images x 2 captions; image 3 unreadable) and one uninterrupted run."""
    root = tmp_path_factory.mktemp("synthetic")
    make_tiny_blip(root / "blip")
    make_tiny_stable_diffusion(root / "sd")
    rng = np.random.default_rng(0)
    (root / "coco" / "train2014").mkdir(parents=True)
    images, sentid = [], 500
    for index in range(6):
        name = f"COCO_train2014_{index:012d}.jpg"
        if 1000 + index == UNREADABLE_COCOID:
            (root / "coco" / "train2014" / name).write_bytes(b"not a JPEG")
        else:
            pixels = rng.integers(0, 256, (40 + 3 * index, 56, 3), dtype=np.uint8)
            PIL.Image.fromarray(pixels).save(root / "coco" / "train2014" / name)
        sentences = [{"sentid": sentid + k, "raw": f"a dog {index} sits on the grass {k}"} for k in range(2)]
        sentid += 2
        split = ["train", "restval", "train", "train", "val", "val"][index]
        images.append(
            {"cocoid": 1000 + index, "filepath": "train2014", "filename": name, "split": split, "sentences": sentences}
        )
    images.append({"cocoid": 2000, "filepath": "val2014", "filename": "x.jpg", "split": "test", "sentences": []})
    (root / "dataset_coco.json").write_text(json.dumps({"images": images}))
    arguments = command_arguments(root, root / "reference")
    summary = generate_synthetic.main(arguments)
    return {"root": root, "summary": summary, "reference": read_rows(root / "reference"), "karpathy": images}


def command_arguments(root: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--karpathy-json", str(root / "dataset_coco.json"), "--image-root", str(root / "coco"),
        "--output-dir", str(output_dir), "--captioner", str(root / "blip"), "--generator", str(root / "sd"),
        "--steps", "2", "--height", "32", "--width", "32", "--shard-size", "1", "--image-batch-size", "3",
        "--caption-batch-size", "2", "--seed", "7", *extra,
    ]  # fmt: skip


def read_rows(output_dir: Path) -> list[dict]:
    """Every shard's rows in order, synthetic images decoded to uint8 arrays."""
    rows = []
    for path in sorted((output_dir / "shards").glob("shard-*.parquet")):
        for row in pq.read_table(path).to_pylist():
            image = row["synthetic_image"]
            row["synthetic_image"] = None if image is None else np.asarray(PIL.Image.open(io.BytesIO(image["bytes"])))
            rows.append(row)
    return rows


def assert_same_rows(actual: list[dict], expected: list[dict]):
    """Ids, text and provenance exactly; synthetic pixels within PIXEL_TOLERANCE (another process or batch)."""
    assert [row["row"] for row in actual] == [row["row"] for row in expected]
    for got, want in zip(actual, expected):
        got, want = dict(got), dict(want)
        got_image, want_image = got.pop("synthetic_image"), want.pop("synthetic_image")
        assert got == want
        assert (got_image is None) == (want_image is None), got["row"]
        if got_image is not None:
            difference = np.abs(got_image.astype(int) - want_image.astype(int)).max()
            assert difference <= PIXEL_TOLERANCE, f"row {got['row']}: pixels differ by {difference}"


def script_environment(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf")}


def test_rows_columns_provenance_and_independent_recomputation(workspace):
    root, rows, summary = workspace["root"], workspace["reference"], workspace["summary"]
    karpathy = [image for image in workspace["karpathy"] if image["split"] in ("train", "restval", "val")]
    expected_ids = [(s["sentid"], image["cocoid"]) for image in karpathy for s in image["sentences"]]
    assert [(row["sentid"], row["cocoid"]) for row in rows] == expected_ids
    assert [row["row"] for row in rows] == list(range(12))
    assert summary == {
        "num_rows": 12,
        "num_images": 6,
        "num_shards": 6,
        "synthetic_images": 10,
        "safety_flagged": 0,
        "unreadable_images": 1,
        "unreadable_image_ids": [UNREADABLE_COCOID],
        "shards": str(root / "reference" / "shards" / "*.parquet"),
    }
    for row in rows:
        if row["cocoid"] == UNREADABLE_COCOID:  # the policy: reported, skipped, no synthetic data
            assert row["error"].startswith(f"image {UNREADABLE_COCOID} ('{root}/coco/train2014/COCO_train2014_")
            assert "could not be decoded: cannot identify image file" in row["error"]
            assert row["synthetic_image"] is None and row["synthetic_caption"] is None and row["safety_flagged"] is None
            continue
        assert row["error"] is None and row["safety_flagged"] is False
        assert row["synthetic_image"].shape == (32, 32, 3)
        assert row["image"] == {
            "bytes": None,
            "path": str(root / "coco" / "train2014" / Path(row["image"]["path"]).name),
        }
        digest = hashlib.sha256(f"7:{row['sentid']}".encode()).digest()
        assert row["seed"] == int.from_bytes(digest[:8], "big") >> 1
        assert (row["steps"], row["guidance_scale"], row["height"], row["width"]) == (2, 7.5, 32, 32)
        assert (row["generator"], row["captioner"], row["scheduler"]) == (
            str(root / "sd"),
            str(root / "blip"),
            "default",
        )
        assert row["generator_revision"] is None and row["global_seed"] == 7 and row["dtype"] == "fp32"
        assert json.loads(row["caption_decoding"]) == {
            "max_length": 20,
            "min_length": 5,
            "num_beams": 3,
            "prompt": "a picture of ",
        }
    assert [row["split"] for row in rows[::2]] == ["train", "restval", "train", "train", "val", "val"]

    # BLIP, called directly with transformers (one image per shard: the same batch as the run).
    from transformers import BertTokenizer, BlipForConditionalGeneration, BlipImageProcessorPil

    blip = BlipForConditionalGeneration.from_pretrained(root / "blip", dtype=torch.float32).eval()
    processor, tokenizer = (
        BlipImageProcessorPil.from_pretrained(root / "blip"),
        BertTokenizer.from_pretrained(root / "blip"),
    )
    for row in rows[::2]:
        if row["cocoid"] == UNREADABLE_COCOID:
            continue
        pixels = processor(images=[PIL.Image.open(row["image"]["path"]).convert("RGB")], return_tensors="pt")
        prompt = tokenizer(["a picture of"], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            tokens = blip.generate(
                pixel_values=pixels["pixel_values"], input_ids=prompt, num_beams=3, max_length=20, min_length=5
            )
        text = tokenizer.decode(tokens[0], skip_special_tokens=True)
        assert text.startswith("a picture of ")
        assert row["synthetic_caption"] == text[len("a picture of ") :].strip()

    # Stable Diffusion, called directly with diffusers for one item alone (the run had batches of 2).
    from diffusers import StableDiffusionPipeline

    pipeline = StableDiffusionPipeline.from_pretrained(root / "sd", dtype=torch.float32)
    pipeline.set_progress_bar_config(disable=True)
    item = rows[5]
    alone = pipeline(
        item["caption"],
        num_inference_steps=2,
        height=32,
        width=32,
        generator=torch.Generator().manual_seed(item["seed"]),
    ).images[0]
    assert np.abs(np.asarray(alone).astype(int) - item["synthetic_image"].astype(int)).max() <= PIXEL_TOLERANCE


def test_safety_flagged_images_are_recorded_not_stored(workspace):
    root = workspace["root"]
    settings = GenerationSettings(generator=str(root / "sd"), steps=2, height=32, width=32)
    generator = StableDiffusionGenerator(settings, "cpu")
    with torch.no_grad():
        generator.pipeline.safety_checker.concept_embeds_weights.fill_(-10.0)  # every image exceeds its threshold
    source = SourceImage(
        7, str(root / "coco" / "train2014" / "COCO_train2014_000000000000.jpg"), "train", [(0, 70, "a cat")]
    )
    rows, unreadable = generate_shard([source], lambda images: ["a caption"], generator, settings, {}, 1, 1)
    assert unreadable == []
    assert rows[0]["safety_flagged"] is True and rows[0]["synthetic_image"] is None
    assert rows[0]["synthetic_caption"] == "a caption" and rows[0]["error"] is None


def test_killed_run_resumes_with_every_item_once_and_identical_content(workspace, tmp_path):
    root = workspace["root"]
    output_dir = tmp_path / "out"
    command = [sys.executable, str(SCRIPT), *command_arguments(root, output_dir)]
    shard_dir = output_dir / "shards"
    finished = kill_after_first_shard(command, script_environment(tmp_path), shard_dir, "shard-*.parquet")
    assert len(finished) == 1, "the kill lands right after the first shard"
    assert not (output_dir / "summary.json").exists()

    summary = generate_synthetic.main(command[2:])  # the restart (in this process: a process start costs seconds)
    assert summary["num_rows"] == 12 and summary["unreadable_image_ids"] == [UNREADABLE_COCOID]
    for name, modified in finished.items():  # finished shards were not regenerated
        assert (shard_dir / name).stat().st_mtime_ns == modified
    assert not list(shard_dir.glob(".*.tmp"))
    assert_same_rows(read_rows(output_dir), workspace["reference"])


def test_two_machines_equal_one_run(workspace, tmp_path, caplog):
    root = workspace["root"]
    output_dir = tmp_path / "out"
    # machine 0 in a subprocess, machine 1 in this process, at the same time
    machine_zero = subprocess.Popen(
        [sys.executable, str(SCRIPT), *command_arguments(root, output_dir, "--shard-id", "0", "--num-shards", "2")],
        env=script_environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with caplog.at_level(logging.INFO):
        generate_synthetic.main(command_arguments(root, output_dir, "--shard-id", "1", "--num-shards", "2"))
    _, stderr = machine_zero.communicate(timeout=300)
    assert machine_zero.returncode == 0, stderr[-3000:]
    for machine, log in enumerate([stderr, caplog.text]):  # the work really was split: each did its own shards
        done = sorted(int(line.split(": shard ")[1].split()[0]) for line in log.splitlines() if ": shard " in line)
        assert done == [shard for shard in range(6) if shard % 2 == machine]
    summary = json.loads((output_dir / "summary.json").read_text())
    assert {key: summary[key] for key in ("num_rows", "synthetic_images", "unreadable_image_ids")} == {
        "num_rows": 12,
        "synthetic_images": 10,
        "unreadable_image_ids": [UNREADABLE_COCOID],
    }
    assert_same_rows(read_rows(output_dir), workspace["reference"])


def test_accelerate_processes_split_the_shards_with_no_overlap(workspace, tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    output_dir = tmp_path / "out"
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
        "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
    ]  # fmt: skip
    completed = subprocess.run(
        [*launch, str(SCRIPT), *command_arguments(workspace["root"], output_dir), "--cpu"],
        env=script_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    for process in range(2):  # unfinished shards dealt out round-robin
        done = [line for line in completed.stderr.splitlines() if f"process {process}: shard " in line]
        shards = [int(line.split(f"process {process}: shard ")[1].split()[0]) for line in done]
        assert sorted(shards) == [process, process + 2, process + 4]
    assert_same_rows(read_rows(output_dir), workspace["reference"])


def test_changed_input_or_settings_on_resume_are_refused(workspace, tmp_path):
    root = workspace["root"]
    output_dir = tmp_path / "out"
    (output_dir / "shards").mkdir(parents=True)
    reference = root / "reference"
    (output_dir / "manifest.json").write_text((reference / "manifest.json").read_text())
    changed = [
        (["--steps", "3"], r"\(steps: 2 -> 3\)"),
        (["--seed", "8"], r"\(global_seed: 7 -> 8\)"),
        (["--no-safety-checker"], r"\(safety_checker: True -> False\)"),
        (["--shard-size", "2"], r"\(shard_size: 1 -> 2\)"),
        (["--caption-num-beams", "1"], r"\(caption_num_beams: 3 -> 1\)"),
    ]
    for extra, message in changed:
        with pytest.raises(SystemExit, match=r"holds shards of a different run " + message + ": rerun with the same"):
            generate_synthetic.main(command_arguments(root, output_dir, *extra))
    other = tmp_path / "dataset_coco.json"
    edited = json.loads((root / "dataset_coco.json").read_text())
    edited["images"][0]["sentences"][0]["raw"] = "an edited caption"
    other.write_text(json.dumps(edited))
    arguments = command_arguments(root, output_dir)
    arguments[1] = str(other)
    with pytest.raises(SystemExit, match=r"\(input: '.*' -> '.*', input_content: 'sha256:[0-9a-f]{64}' -> 'sha256:"):
        generate_synthetic.main(arguments)
    assert sorted(path.name for path in output_dir.iterdir()) == ["manifest.json", "shards"]  # nothing written


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--guidance-scale", "nan"], "invalid option: guidance_scale must be a finite number, got nan"),
        (["--height", "36"], "invalid option: height must be a multiple of 8 .*, got 36"),
        (
            ["--caption-min-length", "30"],
            r"invalid option: caption_min_length \(30\) exceeds caption_max_length \(20\)",
        ),
        (["--shard-id", "2", "--num-shards", "2"], "invalid option: shard id 2 of 2: need num_shards >= 1 and 0 <= "),
        (["--seed", "-1"], "invalid option: global_seed must be an integer >= 0, got -1"),
        (["--dtype", "fp16", "--cpu"], r"--dtype fp16 needs a GPU .*: use fp32"),
    ],
)
def test_bad_options_are_refused_with_a_clear_message(workspace, tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        generate_synthetic.main(command_arguments(workspace["root"], tmp_path / "out", *extra))


def test_missing_inputs_are_refused(workspace, tmp_path):
    arguments = command_arguments(workspace["root"], tmp_path / "out")
    arguments[3] = str(tmp_path / "no_such_root")
    with pytest.raises(SystemExit, match=r"--image-root .*no_such_root is not a folder"):
        generate_synthetic.main(arguments)
    (tmp_path / "broken.json").write_text('{"annotations": []}')
    arguments = command_arguments(workspace["root"], tmp_path / "out")
    arguments[1] = str(tmp_path / "broken.json")
    with pytest.raises(
        SystemExit, match=r"broken.json: not a Karpathy dataset_coco.json \(no 'images' list\); expected \{\"images\""
    ):
        generate_synthetic.main(arguments)
    assert not (tmp_path / "out").exists()
    arguments = command_arguments(workspace["root"], workspace["root"])  # the folder holding the inputs
    with pytest.raises(
        SystemExit, match=r"--output-dir: output directory '.*' contains the input '.*dataset_coco.json'"
    ):
        generate_synthetic.main(arguments)


def test_argument_parser_refuses_non_positive_counts(workspace, tmp_path, capsys):
    for flag in ("--steps", "--image-batch-size", "--caption-batch-size", "--shard-size"):
        with pytest.raises(SystemExit):
            generate_synthetic.main(command_arguments(workspace["root"], tmp_path / "out", flag, "0"))
        assert f"argument {flag}: must be a positive integer, got 0" in capsys.readouterr().err


def test_train_pacs_trains_on_the_generated_data(workspace, tmp_path):
    from modeling_pacs.synthetic import load_synthetic_dataset
    from modeling_pacs.testing.pacs import make_tiny_model

    root = workspace["root"]
    usable = load_synthetic_dataset(root / "reference")
    assert usable.num_rows == 10 and UNREADABLE_COCOID not in usable["cocoid"]
    assert {"image", "caption", "synthetic_image", "synthetic_caption"} <= set(usable.column_names)

    make_tiny_model(tmp_path / "base", variant="clip_s", seed=0)
    from modeling_pacs.cli import train_pacs

    metrics = train_pacs.main(
        [
            "--model_name_or_path", str(tmp_path / "base"), "--karpathy_json", str(root / "dataset_coco.json"),
            "--image_root", str(root / "coco"), "--synthetic_data", str(root / "reference"),
            "--output_dir", str(tmp_path / "run"), "--max_steps", "2", "--per_device_train_batch_size", "3",
            "--per_device_eval_batch_size", "4", "--eval_strategy", "no", "--save_strategy", "no",
            "--report_to", "none", "--use_cpu", "--disable_tqdm", "true",
        ]
    )  # fmt: skip
    assert np.isfinite(metrics["train_loss"]) and np.isfinite(metrics["eval_loss"])
    assert (tmp_path / "run" / "model" / "adapter" / "adapter_model.safetensors").is_file()


def test_a_datasets_source_groups_captions_by_image(tmp_path):
    """Any image-caption `datasets` dataset: rows sharing an image path are one BLIP unit; bytes images each alone."""
    import datasets

    from modeling_pacs.data import ImageReference, resolve_references
    from modeling_pacs.synthetic import dataset_images

    PIL.Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    png = (tmp_path / "a.png").read_bytes()
    rows = {
        "image": [
            {"bytes": None, "path": str(tmp_path / "a.png")},
            {"bytes": png, "path": None},
            {"bytes": None, "path": str(tmp_path / "a.png")},
        ],
        "text": ["one", "two", "three"],
    }
    dataset = datasets.Dataset.from_dict(
        rows, features=datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    )
    sources = dataset_images(dataset, "image", "text", "train")
    assert [(source.image_id, source.captions) for source in sources] == [
        (0, [(0, 0, "one"), (2, 2, "three")]),
        (1, [(1, 1, "two")]),
    ]
    # A path stays a path; bytes stay in the dataset until the unit's shard reads them.
    assert sources[0].image == str(tmp_path / "a.png")
    assert isinstance(sources[1].image, ImageReference)
    assert resolve_references([sources[1].image]) == [{"bytes": png, "path": None}]
    with pytest.raises(InputError, match=r"the dataset lacks column\(s\) \['caption'\] .*--caption-column"):
        dataset_images(dataset, "image", "caption", "train")
    bad = datasets.Dataset.from_dict({"image": ["a.png"], "caption": [3]})
    with pytest.raises(InputError, match=r"row 0: caption is int \(3\), expected a string"):
        dataset_images(bad, "image", "caption", "train")
