"""FLEUR through corpus scoring (scripts/score_corpus.py, the job engine): two gloo processes under torchrun give the
rows one process gives, a killed run resumes with every row once, and unparsable answers stay null and counted."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_pacs.cli import score_corpus
from modeling_pacs.cli.score import score_main
from tests.cli.test_score_corpus import free_port, read_scores, script_environment
from tests.fixtures.helpers import assert_rows_match
from tests.fixtures.processes import kill_after_first_shard

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "score_corpus.py"
FIXTURE = json.loads((REPO_ROOT / "tests" / "fixtures" / "fleur_original.json").read_text())
SCORES = ("FLEUR", "RefFLEUR")
COUNTED = "unparsable answers (NaN, left out of the means)"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The parity fixture's judge (answers 2 and 5 do not parse) and its 6 items; items 4 and 5 have no references."""
    pytest.importorskip("sentencepiece")
    from modeling_pacs.fleur.convert import convert_llava
    from modeling_pacs.testing.fleur import make_tiny_original_llava

    root = tmp_path_factory.mktemp("fleur-corpus")
    convert_llava(make_tiny_original_llava(root / "llava", **FIXTURE["builder"]), root / "judge")
    config = json.loads((root / "judge" / "config.json").read_text())
    (root / "judge" / "config.json").write_text(json.dumps(config | {"max_new_tokens": FIXTURE["max_new_tokens"]}))
    rows = [
        {"id": f"item-{index}", "image": str(REPO_ROOT / image), "caption": caption, "references": references}
        for index, (image, caption, references) in enumerate(
            zip(FIXTURE["images"], FIXTURE["candidates"], FIXTURE["references"][:4] + [[], []], strict=True)
        )
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = ["--model", str(root / "judge"), "--shard-size", "1", "--references-column", "references",
              "--keep-columns", "id", "--no-progress"]  # fmt: skip
    summary = score_corpus.main([str(root / "corpus.jsonl"), "--output-dir", str(root / "one"), *common])
    return root, common, summary


def test_one_process_keeps_failed_answers_null_and_counted(corpus, capsys):
    root, _, summary = corpus
    results = read_scores(root / "one")
    assert [row["id"] for row in results] == [f"item-{index}" for index in range(6)]
    assert [row["FLEUR"] is None for row in results] == [False, False, True, False, False, True]
    assert [row["RefFLEUR"] is None for row in results] == [False, False, True, False, True, True]
    assert [row["failed_answers"] for row in results] == [0, 0, 2, 0, 0, 1]
    assert "_failed_scores" not in results[2]
    expected = [item["score"] for item in FIXTURE["fleur"]]
    for row, score in zip(results, expected, strict=True):
        assert row["FLEUR"] == (None if score is None else pytest.approx(score, abs=1e-4))
    assert summary["num_failed"] == {"FLEUR": 2, "RefFLEUR": 1} and summary["totals"] == {"failed_answers": 3}
    assert summary["num_without_references"] == 2  # rows 4 and 5, whatever their FLEUR answers
    assert summary["mean"]["FLEUR"] == pytest.approx(sum(filter(None, expected)) / 4, abs=1e-4)
    # pacs-score on the same rows (with and without references: two calls) gives the same means and count
    score_main([str(root / "corpus.jsonl"), "--model", str(root / "judge"), "--no-progress"])
    means = ", ".join(f"{name} {summary['mean'][name]:.4f}" for name in SCORES)
    expected_line = f"6 captions scored with {root / 'judge'}: mean {means}; {COUNTED}: 3"
    assert capsys.readouterr().out.splitlines()[0] == expected_line


def test_two_gloo_processes_equal_one_process(corpus):
    root, common, _ = corpus
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    command = [*launch, str(SCRIPT), str(root / "corpus.jsonl"), "--output-dir", str(root / "two"), *common, "--cpu"]
    completed = subprocess.run(command, env=script_environment(), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "process 1: shard 1 (1 rows) done" in completed.stderr  # the work really was split
    assert_rows_match(read_scores(root / "two"), read_scores(root / "one"), SCORES)  # null where one has null
    assert completed.stdout.splitlines()[0].endswith("; unparsable answers (NaN, left out of the means): 3")


def test_killed_run_resumes_with_each_row_once(corpus):
    root, common, _ = corpus
    command = [sys.executable, str(SCRIPT), str(root / "corpus.jsonl"), "--output-dir", str(root / "killed"), *common]
    finished = kill_after_first_shard(command, script_environment(), root / "killed" / "shards", "shard-*.jsonl")
    assert 1 <= len(finished) < 6, "the kill must land mid-run"
    score_corpus.main(command[2:])
    for name, modified in finished.items():  # finished shards were not rescored
        assert (root / "killed" / "shards" / name).stat().st_mtime_ns == modified
    assert_rows_match(read_scores(root / "killed"), read_scores(root / "one"), SCORES)


def test_evaluate_captions_job_folder_keeps_failed_answers(corpus, tmp_path):
    """evaluate-captions with a job folder (shards of JSON lines, which have no NaN) gives the judge's unparsable
    answers as NaN, as the run without one does, and counts them in the footer."""
    from modeling_pacs.evaluation.captions import evaluate_captions

    root = corpus[0]
    items = [
        {"image_id": row["id"], "image": row["image"], "caption": row["caption"], "references": row["references"]}
        for row in map(json.loads, (root / "corpus.jsonl").read_text().splitlines())
    ]
    judge = str(root / "judge")
    plain = evaluate_captions(items, [judge], progress=False)
    sharded = evaluate_captions(items, [judge], progress=False, output_dir=tmp_path / "job", shard_size=2)
    column = f"{judge}/score"
    assert [row[column] != row[column] for row in sharded.items] == [False, False, True, False, False, True]
    assert [list(row) for row in sharded.items] == [list(row) for row in plain.items]
    for got, want in zip(sharded.items, plain.items, strict=True):
        for key, value in want.items():
            if isinstance(value, float) and value != value:  # NaN: an unparsable answer
                assert got[key] != got[key], key
            elif isinstance(value, float):
                assert got[key] == pytest.approx(value, abs=1e-6), key
            else:
                assert got[key] == value, key
    assert sharded.notes == plain.notes and any(f"{COUNTED}: 3" in note for note in sharded.notes)
