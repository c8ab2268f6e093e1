"""modeling_pacs.jobs: the one engine for sharded, resumable, exactly-once work."""

import io
import json

import pytest

from modeling_pacs.jobs import (
    JobProgress,
    RowBlock,
    ShardedJob,
    ShardReader,
    atomic_path,
    format_duration,
    path_fingerprint,
)


def make_job(tmp_path, **kwargs) -> ShardedJob:
    return ShardedJob(tmp_path / "job", {"input": "numbers"}, shard_size=3, **kwargs)


def test_machines_and_processes_split_every_shard_exactly_once(tmp_path):
    num_shards = 23
    make_job(tmp_path).start()
    for finished in (0, 4, 5, 9, 22):  # an interrupted earlier run
        (tmp_path / "job" / "shards" / f"shard-{finished:07d}.jsonl").write_text("")
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
    with pytest.raises(SystemExit, match=r"shards \[2\] of 4 are missing: rerun the same command"):
        list(job.merged_rows(10, job.read_jsonl_shard))
    job.write_jsonl_shard(2, [{"row": 6}, {"row": 6}, {"row": 8}])
    with pytest.raises(SystemExit, match="shard 2 has row 6 where row 7 belongs"):
        list(job.merged_rows(10, job.read_jsonl_shard))
    job.write_jsonl_shard(2, [{"row": row, "value": row / 7} for row in (6, 7, 8)])
    assert [row["value"] for row in job.merged_rows(10, job.read_jsonl_shard)] == [row / 7 for row in range(10)]
    with pytest.raises(SystemExit, match="the shards hold 10 rows, the input 11"):
        list(job.merged_rows(11, job.read_jsonl_shard))
    # a restarted job does not redo finished shards
    assert not any(make_job(tmp_path).start()(shard) for shard in range(4))


def test_manifest_refuses_a_different_run_naming_what_changed(tmp_path):
    make_job(tmp_path).start()
    assert json.loads((tmp_path / "job" / "manifest.json").read_text()) == {"input": "numbers", "shard_size": 3}
    other = ShardedJob(tmp_path / "job", {"input": "letters", "seed": 1}, shard_size=4)
    with pytest.raises(
        SystemExit,
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
    with pytest.raises(SystemExit, match=r"job is not empty \(\['notes.txt'\]\) and holds no manifest.json: it is not"):
        make_job(tmp_path).start()
    assert [path.name for path in (tmp_path / "job").iterdir()] == ["notes.txt"]


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
