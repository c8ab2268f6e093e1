"""scripts/score_corpus.py: formats, sharding across processes, and resumption after a real SIGKILL."""

import csv
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from modeling_pacs.loading import load_model
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.helpers import assert_rows_match, assert_scores_close
from tests.fixtures.processes import kill_after_first_shard

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "score_corpus.py"
WORDS = "a the red blue green dog cat man woman sits runs on under near table grass street big small photo".split()


from modeling_pacs.cli import score_corpus  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("tiny") / "model"
    make_tiny_model(directory, seed=2)  # mostly positive cosines: scores are not all clipped to 0
    return str(directory)


def make_corpus(directory: Path, num_rows: int, num_images: int = 5, seed: int = 0) -> list[dict]:
    """Rows with relative image paths, random captions and one or two references each."""
    rng = np.random.default_rng(seed)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    for index in range(num_images):
        pixels = rng.integers(0, 256, (30 + 7 * index, 41, 3), dtype=np.uint8)
        PIL.Image.fromarray(pixels).save(directory / "images" / f"{index}.png")
    rows = []
    for row in range(num_rows):
        caption = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 9))))
        references = [" ".join(rng.choice(WORDS, size=5)) for _ in range(int(rng.integers(1, 3)))]
        rows.append(
            {
                "id": f"item-{row}",
                "image": f"images/{row % num_images}.png",
                "caption": caption,
                "references": references,
            }
        )
    with (directory / "corpus.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return rows


def read_scores(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "scores.jsonl").read_text().splitlines()]


def script_environment() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_formats_give_the_engine_scores(tiny_model_dir, tmp_path):
    rows = make_corpus(tmp_path, 23)
    common = ["--model", tiny_model_dir, "--shard-size", "10", "--references-column", "references"]
    summary = score_corpus.main(
        [str(tmp_path / "corpus.jsonl"), "--output-dir", str(tmp_path / "jsonl"), *common, "--keep-columns", "id"]
    )
    results = read_scores(tmp_path / "jsonl")
    assert [result["row"] for result in results] == list(range(23))
    assert [result["id"] for result in results] == [row["id"] for row in rows]

    # Independent of the script: the engine on each shard's rows.
    engine = load_model(tiny_model_dir)
    expected, expected_ref = [], []
    for start in range(0, 23, 10):
        chunk = rows[start : start + 10]
        output = engine.score(
            [str(tmp_path / row["image"]) for row in chunk],
            [row["caption"] for row in chunk],
            references=[row["references"] for row in chunk],
        )
        expected += output.scores.tolist()
        expected_ref += output.ref_scores.tolist()
    assert_scores_close([result["PAC-S++"] for result in results], expected)
    assert_scores_close([result["RefPAC-S++"] for result in results], expected_ref)
    assert summary["num_items"] == 23 and summary["num_shards"] == 3
    assert summary["mean"]["PAC-S++"] == pytest.approx(np.mean(expected), abs=1e-9)
    assert summary["mean"]["RefPAC-S++"] == pytest.approx(np.mean(expected_ref), abs=1e-9)

    with (tmp_path / "corpus.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["image", "caption", "references"])
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {"image": row["image"], "caption": row["caption"], "references": json.dumps(row["references"])}
            )
    import datasets

    dataset = datasets.Dataset.from_list(
        [{key: row[key] for key in ("image", "caption", "references")} for row in rows]
    )
    dataset.to_parquet(str(tmp_path / "corpus.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved_dataset"))
    for source in ("corpus.csv", "corpus.parquet", "saved_dataset"):
        output_dir = tmp_path / f"out_{source}"
        arguments = [str(tmp_path / source), "--output-dir", str(output_dir), *common, "--image-root", str(tmp_path)]
        score_corpus.main(arguments)
        assert_scores_close([result["PAC-S++"] for result in read_scores(output_dir)], expected, what=source)
        assert_scores_close([result["RefPAC-S++"] for result in read_scores(output_dir)], expected_ref, what=source)


def test_bad_corpus_and_changed_options_give_clear_messages(tiny_model_dir, tmp_path):
    make_corpus(tmp_path, 12)
    common = ["--model", tiny_model_dir, "--shard-size", "5"]
    output = ["--output-dir", str(tmp_path / "out")]
    score_corpus.main([str(tmp_path / "corpus.jsonl"), *output, *common])
    with pytest.raises(SystemExit, match=r"holds shards of a different run \(shard_size: 5 -> 4\)"):
        score_corpus.main([str(tmp_path / "corpus.jsonl"), *output, "--model", tiny_model_dir, "--shard-size", "4"])
    with pytest.raises(SystemExit, match=r"row 0 \(line 1 of corpus\.jsonl\) lacks \['text'\].*--caption-column"):
        score_corpus.main(
            [str(tmp_path / "corpus.jsonl"), "--output-dir", str(tmp_path / "o2"), *common, "--caption-column", "text"]
        )
    lines = (tmp_path / "corpus.jsonl").read_text().splitlines()
    lines[7] = json.dumps({"image": "images/none.png", "caption": "a cat"})
    (tmp_path / "broken.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        SystemExit,
        match=r"^score_corpus: error: row 7 \(line 8 of broken\.jsonl\): image \('.*none\.png'\) does not exist or is "
        r"not a file\. Finished shards are kept: fix the input and rerun the same command to resume$",
    ):
        score_corpus.main([str(tmp_path / "broken.jsonl"), "--output-dir", str(tmp_path / "o3"), *common])
    # the shard before the bad one was kept
    assert (tmp_path / "o3" / "shards" / "shard-0000000.jsonl").is_file()


def test_two_processes_equal_one_process(tiny_model_dir, tmp_path):
    make_corpus(tmp_path, 90)
    common = ["--model", tiny_model_dir, "--shard-size", "20", "--references-column", "references"]
    score_corpus.main([str(tmp_path / "corpus.jsonl"), "--output-dir", str(tmp_path / "one"), *common])
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
    ]
    completed = subprocess.run(
        [*launch, str(SCRIPT), str(tmp_path / "corpus.jsonl"), "--output-dir", str(tmp_path / "two"), *common, "--cpu"],
        env=script_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "process 1: shard 1 (20 rows) done" in completed.stderr  # the work really was split
    assert "process 0: shard 0 (20 rows) done" in completed.stderr
    # same rows, ids and order exactly; scores within the fp32 tolerance (two processes, other thread counts)
    assert_rows_match(read_scores(tmp_path / "two"), read_scores(tmp_path / "one"), ("PAC-S++", "RefPAC-S++"))
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["num_items"] == 90


def test_killed_run_resumes_without_duplicates_or_losses(tiny_model_dir, tmp_path):
    rows = make_corpus(tmp_path, 800, num_images=6)
    output_dir = tmp_path / "out"
    command = [
        sys.executable,
        str(SCRIPT),
        str(tmp_path / "corpus.jsonl"),
        "--output-dir",
        str(output_dir),
        "--model",
        tiny_model_dir,
        "--shard-size",
        "20",
        "--keep-columns",
        "id",
    ]
    shard_dir = output_dir / "shards"
    finished = kill_after_first_shard(command, script_environment(), shard_dir, "shard-*.jsonl")
    assert len(finished) == 1, "the kill lands right after the first shard"
    assert not (output_dir / "scores.jsonl").exists()

    completed = subprocess.run(command, env=script_environment(), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for name, modified in finished.items():  # finished shards were not rescored
        assert (shard_dir / name).stat().st_mtime_ns == modified
    assert f"shard {int(sorted(finished)[0][6:13])} " not in completed.stderr
    results = read_scores(output_dir)
    assert [result["row"] for result in results] == list(range(800))
    assert [result["id"] for result in results] == [row["id"] for row in rows]
    assert not list(shard_dir.glob(".*.tmp"))

    uninterrupted = tmp_path / "uninterrupted"
    score_corpus.main([*command[2:4], str(uninterrupted), *command[5:]])
    assert_rows_match(results, read_scores(uninterrupted), ("PAC-S++",))  # run without references


def test_resume_over_changed_input_image_root_or_model_is_refused(tiny_model_dir, tmp_path):
    """Issue 10, defect 6: the manifest pins the input's content, the image root and the model."""
    make_corpus(tmp_path, 12)
    corpus = tmp_path / "corpus.jsonl"
    output = ["--output-dir", str(tmp_path / "out"), "--shard-size", "5"]
    score_corpus.main([str(corpus), *output, "--model", tiny_model_dir])
    before = read_scores(tmp_path / "out")

    original = corpus.read_text()
    lines = original.splitlines()
    lines[3] = json.dumps({"image": "images/1.png", "caption": "an edited caption"})
    corpus.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        SystemExit,
        match=r"holds shards of a different run \(input_content: 'sha256:[0-9a-f]{64}' -> 'sha256:[0-9a-f]{64}'\)",
    ):
        score_corpus.main([str(corpus), *output, "--model", tiny_model_dir])
    corpus.write_text(original)

    other_root = tmp_path / "other_root"
    (other_root / "images").mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"\(image_root: '.*' -> '.*other_root'\)"):
        score_corpus.main([str(corpus), *output, "--model", tiny_model_dir, "--image-root", str(other_root)])

    other_model = tmp_path / "other_model"
    make_tiny_model(other_model, seed=3)
    with pytest.raises(SystemExit, match=r"\(model: '.*/model' -> '.*/other_model', model_content: 'listing-sha256:"):
        score_corpus.main([str(corpus), *output, "--model", str(other_model)])
    # nothing was merged over the old scores: the refused runs changed no file
    assert read_scores(tmp_path / "out") == before


def test_progress_lines_in_logs_resume_and_no_progress(tiny_model_dir, tmp_path, capsys):
    make_corpus(tmp_path, 45)
    command = [str(tmp_path / "corpus.jsonl"), "--model", tiny_model_dir, "--shard-size", "20"]
    line = re.compile(r"progress: (\d+)/45 rows \((\d+\.\d)%\), \d+\.\d rows/s, ETA \d+:\d\d:\d\d")

    def progress_lines() -> list[re.Match]:
        lines = [text for text in capsys.readouterr().err.splitlines() if text.startswith("progress:")]
        assert all(line.fullmatch(text) for text in lines), lines
        return [line.fullmatch(text) for text in lines]

    score_corpus.main([*command, "--output-dir", str(tmp_path / "out")])  # stderr is not a terminal here
    lines = progress_lines()
    assert lines and lines[-1].group(1, 2) == ("45", "100.0")  # at most one line every 5 s, and the last one
    done = [int(match.group(1)) for match in lines]
    assert done == sorted(done)

    (tmp_path / "out" / "shards" / "shard-0000001.jsonl").unlink()  # resume: 25 of the 45 rows are done
    score_corpus.main([*command, "--output-dir", str(tmp_path / "out")])
    assert [match.group(1) for match in progress_lines()][-1] == "45"

    score_corpus.main([*command, "--output-dir", str(tmp_path / "quiet"), "--no-progress"])
    assert progress_lines() == []


def test_long_captions_are_counted_and_can_be_read_in_chunks(tiny_model_dir, tmp_path, capsys):
    rows = make_corpus(tmp_path, 6)
    long_caption = " ".join(
        f"Row {index} shows a big dog that sits on the green grass near a table." for index in range(8)
    )
    rows[2]["caption"] = long_caption
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    engine = load_model(tiny_model_dir)
    images = [str(tmp_path / row["image"]) for row in rows]
    captions = [row["caption"] for row in rows]
    for mode in ("truncate", "chunks"):
        output_dir = tmp_path / mode
        arguments = [str(tmp_path / "corpus.jsonl"), "--output-dir", str(output_dir), "--model", tiny_model_dir]
        summary = score_corpus.main([*arguments, "--long-captions", mode])
        expected = engine.score(images, captions, long_captions=mode)
        results = read_scores(output_dir)
        assert_scores_close([result["PAC-S++"] for result in results], expected.scores, what=mode)
        assert [result["truncated_tokens"] for result in results] == expected.truncated_tokens.tolist()
        assert summary["num_truncated"] == (1 if mode == "truncate" else 0)
        printed = capsys.readouterr().err  # warnings go to stderr (modeling_pacs/logs.py)
        assert ("warning: 1 of 6 captions" in printed) == (mode == "truncate")
    assert read_scores(tmp_path / "chunks")[2]["PAC-S++"] != read_scores(tmp_path / "truncate")[2]["PAC-S++"]
