"""modeling_pacs.jobs: the one engine for sharded, resumable, exactly-once work."""

import io
import json
import re

import pytest

from modeling_pacs.errors import JobStateError, PacsError
from modeling_pacs.jobs import (
    JobProgress,
    RowBlock,
    ShardedJob,
    ShardReader,
    atomic_path,
    format_duration,
    nan_as_null,
    path_fingerprint,
    record_path,
)


def make_job(tmp_path, **kwargs) -> ShardedJob:
    return ShardedJob(tmp_path / "job", {"input": "numbers"}, shard_size=3, **kwargs)


def test_machines_and_processes_split_every_shard_exactly_once(tmp_path):
    num_shards = 23
    earlier = make_job(tmp_path)
    earlier.start()
    for finished in (0, 4, 5, 9, 22):  # an interrupted earlier run
        earlier.write_jsonl_shard(finished, [])
    owners = {}
    for machine in range(3):
        for process in range(2):
            job = make_job(tmp_path, machine_index=machine, num_machines=3, process_index=process, num_processes=2)
            wanted = job.start()
            for shard in filter(wanted, range(num_shards)):
                assert shard % 3 == machine
                owners.setdefault(shard, []).append((machine, process))
    assert sorted(owners) == sorted(set(range(num_shards)) - {0, 4, 5, 9, 22})
    assert all(len(owner) == 1 for owner in owners.values())
    # the unfinished shards of machine 1 (1, 7, 10, 13, 16, 19) alternate between its two processes
    assert [owners[shard][0][1] for shard in (1, 7, 10, 13, 16, 19)] == [0, 1, 0, 1, 0, 1]


def test_merge_checks_every_item_exactly_once(tmp_path):
    job = make_job(tmp_path)
    wanted = job.start()
    assert [shard for shard in range(4) if wanted(shard)] == [0, 1, 2, 3]
    for shard in (0, 1, 3):
        job.write_jsonl_shard(shard, [{"row": row, "value": row / 7} for row in job.shard_rows(shard, 10)])
    with pytest.raises(JobStateError, match=r"shards \[2\] of 4 are missing: rerun the same command"):
        list(job.merged_rows(10, job.read_jsonl_shard))
    job.write_jsonl_shard(2, [{"row": 6}, {"row": 6}, {"row": 8}])
    with pytest.raises(JobStateError, match="shard 2 has row 6 where row 7 belongs"):
        list(job.merged_rows(10, job.read_jsonl_shard))
    job.write_jsonl_shard(2, [{"row": row, "value": row / 7} for row in (6, 7, 8)])
    assert [row["value"] for row in job.merged_rows(10, job.read_jsonl_shard)] == [row / 7 for row in range(10)]
    with pytest.raises(JobStateError, match="the shards hold 10 rows, the input 11"):
        list(job.merged_rows(11, job.read_jsonl_shard))
    # a restarted job does not redo finished shards
    assert not any(make_job(tmp_path).start()(shard) for shard in range(4))


def test_manifest_refuses_a_different_run_naming_what_changed(tmp_path):
    make_job(tmp_path).start()
    assert json.loads((tmp_path / "job" / "manifest.json").read_text()) == {
        "input": "numbers",
        "shard_size": 3,
        "shard_records": "blake2b-256",
    }
    other = ShardedJob(tmp_path / "job", {"input": "letters", "seed": 1}, shard_size=4)
    with pytest.raises(
        JobStateError,
        match=r"holds shards of a different run \(input: 'numbers' -> 'letters', seed: None -> 1, shard_size: 3 -> 4\)",
    ):
        other.start()


def test_atomic_writes_leave_nothing_on_failure_and_readers_see_whole_files(tmp_path):
    target = tmp_path / "shard.bin"
    with pytest.raises(RuntimeError, match="writer crashed"):
        with atomic_path(target) as temporary:
            temporary.write_bytes(b"half")
            raise RuntimeError("writer crashed")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target) as temporary:
        temporary.write_bytes(b"whole")
    assert target.read_bytes() == b"whole" and oct(target.stat().st_mode & 0o777) == "0o644"
    assert [path.name for path in tmp_path.iterdir()] == ["shard.bin"]


def test_shard_reader_and_fingerprints(tmp_path):
    rows = [{"x": index} for index in range(11)]
    blocks = [RowBlock(start, min(4, 11 - start), lambda a, b, s=start: rows[s + a : s + b]) for start in (0, 4, 8)]
    reader = ShardReader(blocks, shard_size=3, wanted=lambda shard: shard % 2 == 1)
    assert [(shard, [row["x"] for row in part]) for shard, part in reader] == [(1, [3, 4, 5]), (3, [9, 10])]
    assert reader.num_rows == 11
    with pytest.raises(ValueError, match="shard_size must be at least 1, got 0"):
        ShardReader(blocks, shard_size=0, wanted=bool)
    with pytest.raises(ValueError, match="need num_shards >= 1 and 0 <= shard_id < num_shards"):
        ShardedJob(tmp_path, {}, shard_size=2, machine_index=2, num_machines=2)

    import hashlib

    (tmp_path / "a.txt").write_bytes(b"caption")
    assert path_fingerprint(tmp_path / "a.txt") == "sha256:" + hashlib.sha256(b"caption").hexdigest()
    listing = path_fingerprint(tmp_path)
    (tmp_path / "a.txt").write_bytes(b"captions")
    assert path_fingerprint(tmp_path) != listing
    assert path_fingerprint("org/model-on-the-hub") is None


def test_a_non_empty_folder_that_is_not_a_job_is_refused(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "notes.txt").write_text("keep me")
    message = r"job is not empty \(\['notes.txt'\]\) and holds no manifest.json: it is not"
    with pytest.raises(JobStateError, match=message):
        make_job(tmp_path).start()
    assert [path.name for path in (tmp_path / "job").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"manifest.json is not valid JSON \(.*\): use a new output folder"),
        ("[1, 2]", r"manifest.json is not a job manifest \(a JSON object\): use a new output folder"),
    ],
)
def test_a_broken_manifest_is_an_exception_not_an_exit(tmp_path, text, message):
    """A notebook that runs a job gets a `JobStateError` (a `PacsError`) it can catch; the kernel never exits."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "manifest.json").write_text(text)
    with pytest.raises(JobStateError, match=message) as raised:
        make_job(tmp_path).start()
    assert isinstance(raised.value, PacsError) and not isinstance(raised.value, ValueError)


class FakeStream(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def test_progress_in_logs_writes_a_line_at_most_every_interval():
    times = iter([100.0, 101.0, 103.0, 105.5, 106.0, 111.0, 111.5])
    stream = FakeStream(terminal=False)
    progress = JobProgress(total=1000, done=100, stream=stream, interval=5.0, clock=lambda: next(times))
    for rows in (50, 50, 100, 100, 100, 50):  # at 101, 103, 105.5, 106, 111, 111.5 seconds
        progress.update(rows)
    progress.close()
    # lines at 105.5 s (>= 5 s after the start) and 111 s (>= 5 s after 105.5), and the last one at close
    rate_1, rate_2, rate_3 = 200 / 5.5, 400 / 11, 450 / 11.5
    assert stream.getvalue().splitlines() == [
        f"progress: 300/1000 rows (30.0%), {rate_1:.1f} rows/s, ETA {format_duration(700 / rate_1)}",
        f"progress: 500/1000 rows (50.0%), {rate_2:.1f} rows/s, ETA {format_duration(500 / rate_2)}",
        f"progress: 550/1000 rows (55.0%), {rate_3:.1f} rows/s, ETA {format_duration(450 / rate_3)}",
    ]
    assert format_duration(700 / rate_1) == "0:00:19" and format_duration(3725.2) == "1:02:05"


def test_progress_without_total_never_counts_past_it_and_can_be_off():
    times = iter(float(second) for second in range(10))
    stream = FakeStream(terminal=False)
    progress = JobProgress(total=None, stream=stream, interval=0.0, clock=lambda: next(times))
    progress.update(30)
    assert stream.getvalue() == "progress: 30 rows, 30.0 rows/s\n"
    clipped = JobProgress(total=10, done=8, stream=FakeStream(terminal=False), clock=lambda: 1.0)
    clipped.update(5)  # several processes are counted at the main process's pace: never past the total
    assert clipped.done == 10
    silent = FakeStream(terminal=True)
    progress = JobProgress(total=10, enabled=False, stream=silent)
    progress.update(10)
    progress.close()
    assert silent.getvalue() == ""


def test_progress_on_a_terminal_is_a_bar_with_rate_and_eta():
    stream = FakeStream(terminal=True)
    progress = JobProgress(total=100, done=20, stream=stream)
    progress.update(30)
    progress.close()
    text = stream.getvalue()
    assert "50/100" in text and "rows/s" in text and "<" in text  # tqdm: elapsed<remaining


# ---------------------------------------------------------------------------------------------------- damaged shards
def finished_job(tmp_path, num_items: int = 10) -> ShardedJob:
    job = make_job(tmp_path)
    job.start()
    for shard in range(job.num_shards(num_items)):
        job.write_jsonl_shard(shard, [{"row": row, "value": row / 7} for row in job.shard_rows(shard, num_items)])
    return job


def cut_last_line(path):
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))


SHARD_DAMAGES = {  # damage -> what the message says
    "truncated mid-line": (lambda path: path.write_bytes(path.read_bytes()[:7]), "truncated or extended"),
    "cut at a line boundary": (cut_last_line, "truncated or extended"),
    "emptied": (lambda path: path.write_bytes(b""), "truncated or extended"),
    "bytes flipped": (lambda path: path.write_bytes(path.read_bytes().replace(b"row", b"r\xffw")), "checksum mismatch"),
    "bytes appended": (lambda path: path.write_bytes(path.read_bytes() + b'{"row": 5}\n'), "truncated or extended"),
    "record deleted": (lambda path: record_path(path).unlink(), "has no checksum record"),
    "record corrupted": (lambda path: record_path(path).write_text("{"), "checksum record .* is unreadable"),
    "record emptied": (lambda path: record_path(path).write_text(""), "checksum record .* is unreadable"),
}


@pytest.mark.parametrize("damage", SHARD_DAMAGES)
def test_a_damaged_shard_is_never_merged_and_a_restart_recomputes_it(tmp_path, damage, caplog):
    job = finished_job(tmp_path)
    damage_shard, message = SHARD_DAMAGES[damage]
    path = job.shard_path(1)
    damage_shard(path)
    with pytest.raises(
        JobStateError, match=rf"shard 1 \(.*shard-0000001.jsonl\) is damaged: .*{message}.*; rerun the same"
    ):
        list(job.merged_rows(10, job.read_jsonl_shard))
    restarted = make_job(tmp_path)
    with caplog.at_level("WARNING", logger="modeling_pacs.jobs"):
        wanted = restarted.start()
    assert [shard for shard in range(4) if wanted(shard)] == [1]
    assert len(caplog.records) == 1
    assert re.fullmatch(
        rf"shard 1 \({re.escape(str(path))}\) is damaged: .*{message}.*; recomputing", caplog.messages[0]
    )
    restarted.write_jsonl_shard(1, [{"row": row, "value": row / 7} for row in (3, 4, 5)])
    assert [row["value"] for row in restarted.merged_rows(10, job.read_jsonl_shard)] == [row / 7 for row in range(10)]


def test_a_deleted_shard_whose_record_remains_is_named_and_recomputed(tmp_path, caplog):
    job = finished_job(tmp_path)
    job.shard_path(2).unlink()  # also what a kill between the record's rename and the shard's leaves
    with pytest.raises(JobStateError, match=r"shards \[2\] of 4 are missing"):
        list(job.merged_rows(10, job.read_jsonl_shard))
    with caplog.at_level("WARNING", logger="modeling_pacs.jobs"):
        wanted = make_job(tmp_path).start()
    assert [shard for shard in range(4) if wanted(shard)] == [2]
    assert "shard 2 (" in caplog.text and "its file is missing (its record is there); recomputing" in caplog.text


def test_records_hold_size_checksum_and_rows_and_are_written_before_the_shard(tmp_path, monkeypatch):
    import hashlib

    job = finished_job(tmp_path)
    path = job.shard_path(3)
    record = json.loads(record_path(path).read_text())
    digest = hashlib.blake2b(path.read_bytes(), digest_size=32).hexdigest()
    assert record == {"file": path.name, "bytes": path.stat().st_size, "checksum": f"blake2b:{digest}", "rows": 1}
    # a writer killed after the record's rename and before the shard's leaves a record, never an unrecorded shard
    import modeling_pacs.jobs as jobs

    def killed(*args):
        raise KeyboardInterrupt("killed")

    real_replace = jobs.os.replace
    monkeypatch.setattr(
        jobs.os, "replace", lambda source, target: (killed if target == path else real_replace)(source, target)
    )
    path.unlink()
    with pytest.raises(KeyboardInterrupt):
        job.write_jsonl_shard(3, [{"row": 9, "value": 9 / 7}])
    assert not path.exists() and record_path(path).is_file()


def test_an_older_versions_job_without_records_still_resumes(tmp_path, caplog):
    job = finished_job(tmp_path)
    manifest = tmp_path / "job" / "manifest.json"
    manifest.write_text(json.dumps({"input": "numbers", "shard_size": 3}))  # as the previous version wrote it
    for shard in range(4):
        record_path(job.shard_path(shard)).unlink()
    job.shard_path(0).write_text('{"row": 0, "value": 0.0}\n{"row": 1, "val')  # a damaged legacy shard
    job.shard_path(3).unlink()
    modified = {shard: job.shard_path(shard).stat().st_mtime_ns for shard in (1, 2)}
    resumed = make_job(tmp_path)
    with caplog.at_level("WARNING", logger="modeling_pacs.jobs"):
        wanted = resumed.start()
    assert [shard for shard in range(4) if wanted(shard)] == [0, 3]
    assert "shard 0 (" in caplog.text and "it cannot be read (JSONDecodeError" in caplog.text
    for shard in (0, 3):
        resumed.write_jsonl_shard(shard, [{"row": row, "value": row / 7} for row in resumed.shard_rows(shard, 10)])
    assert [row["value"] for row in resumed.merged_rows(10, job.read_jsonl_shard)] == [row / 7 for row in range(10)]
    assert {shard: job.shard_path(shard).stat().st_mtime_ns for shard in (1, 2)} == modified
    assert json.loads(manifest.read_text()) == {"input": "numbers", "shard_size": 3}  # still an older version's job
    # a legacy shard that parses but is short is not merged either
    cut_last_line(job.shard_path(1))
    record_path(job.shard_path(1)).unlink(missing_ok=True)
    with pytest.raises(JobStateError, match="shard 2 has row 6 where row 5 belongs"):
        list(resumed.merged_rows(10, job.read_jsonl_shard))


def test_the_next_successful_run_removes_the_temporaries_of_killed_writers_and_merges(tmp_path):
    job = finished_job(tmp_path)
    leftovers = [
        tmp_path / "job" / ".scores.jsonl.a1b2c3.tmp",  # a killed merge
        tmp_path / "job" / ".summary.json.a1b2c3.tmp",
        tmp_path / "job" / "shards" / ".shard-0000001.jsonl.a1b2c3.tmp",  # a killed shard writer
        tmp_path / "job" / "shards" / ".shard-0000001.jsonl.checksum.json.a1b2c3.tmp",
    ]
    for leftover in leftovers:
        leftover.write_text("half")
    (tmp_path / "job" / "notes.tmp").write_text("not the engine's: kept")
    assert [row["row"] for row in make_job(tmp_path).merged_rows(10, job.read_jsonl_shard)] == list(range(10))
    job.remove_temporaries()
    assert not any(leftover.exists() for leftover in leftovers)
    assert (tmp_path / "job" / "notes.tmp").exists()


def test_nan_in_a_jsonl_shard_is_null_on_disk_and_nan_when_read_back(tmp_path):
    """JSON has no NaN (a judge's unparsable answer): the shard holds null and lists the keys; reading restores them.
    A shard of corpus scoring's older list (`_failed_scores`) reads back the same way."""
    import math

    job = make_job(tmp_path)
    job.start()
    rows = [{"row": 0, "score": math.nan, "count": 1}, {"row": 1, "score": 0.25, "count": 0},
            {"row": 2, "score": math.nan, "other": math.nan}]  # fmt: skip
    job.write_jsonl_shard(0, rows)
    on_disk = [json.loads(line) for line in job.shard_path(0).read_text().splitlines()]
    assert on_disk == [{"row": 0, "score": None, "count": 1, "_nan": ["score"]}, {"row": 1, "score": 0.25, "count": 0},
                       {"row": 2, "score": None, "other": None, "_nan": ["score", "other"]}]  # fmt: skip
    read = list(job.merged_rows(3, job.read_jsonl_shard))
    assert [list(row) for row in read] == [["row", "score", "count"], ["row", "score", "count"],
                                           ["row", "score", "other"]]  # fmt: skip
    assert math.isnan(read[0]["score"]) and read[1]["score"] == 0.25 and read[0]["count"] == 1
    assert math.isnan(read[2]["score"]) and math.isnan(read[2]["other"])
    older = tmp_path / "older.jsonl"
    older.write_text(json.dumps({"row": 0, "score": None, "failed_answers": 1, "_failed_scores": ["score"]}) + "\n")
    (row,) = ShardedJob.read_jsonl_shard(older)
    assert list(row) == ["row", "score", "failed_answers"] and math.isnan(row["score"])
    with pytest.raises(ValueError, match="may not have the key '_nan'"):
        nan_as_null({"row": 0, "score": math.nan, "_nan": []})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        job.write_jsonl_shard(1, [{"row": 3, "score": math.inf}])
