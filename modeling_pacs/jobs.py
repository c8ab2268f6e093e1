"""One job engine for sharded, resumable, exactly-once work: corpus scoring, synthetic data, benchmarks, SCST eval.

A job turns N items into shards of `shard_size` consecutive items; shard k is written once, atomically, to
`OUTPUT_DIR/shards/shard-KKKKKKK<suffix>`. A rerun skips the shards already there, so an interrupted job resumes
without redoing or losing work (a process killed mid-write leaves only a hidden `.*.tmp` file, never a shard).
`OUTPUT_DIR/manifest.json` pins what the shards were computed from (input content, image root, model, options); a
rerun with anything different is refused with a message naming what changed. The merge reads the shards in order and
checks that every item is there exactly once.

Work is split two ways, which compose:
- `machine_index / num_machines` (independent machines, e.g. `--shard-id/--num-shards`): shard k belongs to machine
  `k % num_machines`; no communication, so a machine may start, stop and resume on its own.
- `process_index / num_processes` (processes that meet at a barrier, e.g. `accelerate launch`): the machine's
  unfinished shards are dealt out round-robin, which keeps a resumed run balanced. Every process lists the finished
  shards before the barrier and none writes before it, so all agree on the deal.

Example:

```python
>>> import json, tempfile
>>> from pathlib import Path
>>> job = ShardedJob(Path(tempfile.mkdtemp()), {"input": "squares", "shard_size": 4}, shard_size=4)
>>> wanted = job.start()
>>> items = list(range(10))
>>> for shard in filter(wanted, range(job.num_shards(len(items)))):
...     rows = [{"row": i, "square": items[i] ** 2} for i in job.shard_rows(shard, len(items))]
...     job.write_jsonl_shard(shard, rows)
>>> [row["square"] for row in job.merged_rows(len(items), job.read_jsonl_shard)][-3:]
[49, 64, 81]
```
"""

import bisect
import contextlib
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

SHARD_DIGITS = 7
MANIFEST_NAME = "manifest.json"


# ---------------------------------------------------------------------------------------------------- atomic files
@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it is fsynced, made 0644 and renamed onto `path`.

    Readers (and a crash) see the whole file or none of it; on an error the temporary file is removed.

    Example:

    ```python
    >>> import tempfile
    >>> from pathlib import Path
    >>> target = Path(tempfile.mkdtemp()) / "data.bin"
    >>> with atomic_path(target) as temporary:
    ...     _ = temporary.write_bytes(b"all or nothing")
    >>> target.read_bytes()
    b'all or nothing'
    ```
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(temporary)
        with open(temporary, "rb") as file:
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomically(path: str | os.PathLike, chunks: Iterable[str]):
    """Write text chunks to `path` atomically (see `atomic_path`): readers (and a crash) see the whole file or none of
    it; the file is fsynced and world-readable."""
    with atomic_path(Path(path)) as temporary, temporary.open("w", encoding="utf-8", newline="") as file:
        for chunk in chunks:
            file.write(chunk)


# ---------------------------------------------------------------------------------------------------- fingerprints
def file_sha256(path: Path) -> str:
    """`sha256:<hex>` of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def path_fingerprint(path: str | Path) -> str | None:
    """What a resumed job compares to know its input or model is unchanged.

    A file: the sha256 of its content. A folder: the sha256 of every file's relative path, size and modification
    time (hashing gigabytes of images on every start would cost minutes). Anything else (a Hub id): `None`, and the
    name alone identifies it.
    """
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
            stat = file.stat()
            digest.update(f"{file.relative_to(path).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return f"listing-sha256:{digest.hexdigest()}"
    return None


def describe_source(name: str | Path) -> dict:
    """`{"name": resolved path or id, "fingerprint": path_fingerprint}`: the identity of an input or a model."""
    path = Path(os.path.expanduser(str(name)))
    if path.exists():
        return {"name": str(path.resolve()), "fingerprint": path_fingerprint(path)}
    return {"name": str(name), "fingerprint": None}


# ---------------------------------------------------------------------------------------------------- streaming rows
@dataclass
class RowBlock:
    """`size` consecutive rows starting at row `start`; `rows(a, b)` decodes rows `start+a .. start+b-1` only."""

    start: int
    size: int
    rows: Callable[[int, int], list[dict]]


class ShardReader:
    """Cuts a stream of row blocks into shards of `shard_size` rows and decodes only the shards `wanted(k)` accepts.

    After the iteration, `num_rows` holds the stream's length (every process scans the whole stream, so each knows it).

    Example:

    ```python
    >>> rows = [{"x": i} for i in range(5)]
    >>> reader = ShardReader([RowBlock(0, 5, lambda a, b: rows[a:b])], shard_size=2, wanted=lambda k: k != 1)
    >>> [(shard, [row["x"] for row in part]) for shard, part in reader], reader.num_rows
    ([(0, [0, 1]), (2, [4])], 5)
    ```
    """

    def __init__(self, blocks: Iterable[RowBlock], shard_size: int, wanted: Callable[[int], bool]):
        if shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, got {shard_size}")
        self.blocks = blocks
        self.shard_size = shard_size
        self.wanted = wanted
        self.num_rows = None

    def __iter__(self) -> Iterator[tuple[int, list[dict]]]:
        shard_rows: list[dict] = []
        row = 0
        for block in self.blocks:
            position = 0
            while position < block.size:
                row = block.start + position
                shard = row // self.shard_size
                end = min(block.size, (shard + 1) * self.shard_size - block.start)
                if self.wanted(shard):
                    shard_rows.extend(block.rows(position, end))
                position = end
                row = block.start + end
                if row % self.shard_size == 0 and shard_rows:
                    yield shard, shard_rows
                    shard_rows = []
        if shard_rows:
            yield (row - 1) // self.shard_size, shard_rows
        self.num_rows = row


# ---------------------------------------------------------------------------------------------------- the job
def launch_state(cpu: bool = False):
    """`accelerate.PartialState` of this process, refusing a launch where the processes would not meet.

    `accelerate launch --num_processes N` on a machine without GPUs starts N processes that each believe they are
    alone (so each would do everything) unless `--cpu` makes them join through gloo.
    """
    from accelerate import PartialState

    state = PartialState(cpu=cpu)
    launched_processes = int(os.environ.get("WORLD_SIZE", "1"))
    if state.num_processes != launched_processes:
        raise SystemExit(
            f"launched as {launched_processes} processes but accelerate set up {state.num_processes}: on a machine "
            "without GPUs pass --cpu (so the processes join through gloo instead of each doing everything)"
        )
    return state


class ShardedJob:
    """Shard files, manifest guard, work split, resume and exactly-once merge of one job in `output_dir`.

    Args:
        output_dir: the job's folder; shards go to `output_dir/shards/`.
        manifest: JSON-serialisable values the shards depend on; a rerun must pass equal values.
        shard_size: items per shard (the unit of resumption). Part of the manifest.
        shard_suffix: file suffix of a shard (`.jsonl`, `.parquet`, ...).
        process_index, num_processes: this process among those that meet at `barrier`.
        machine_index, num_machines: this machine among independent machines (static split, no communication).
        barrier: waits for every process (e.g. `PartialState().wait_for_everyone`); a no-op for one process.

    Example:

    ```python
    >>> import tempfile
    >>> from pathlib import Path
    >>> job = ShardedJob(Path(tempfile.mkdtemp()), {"model": "tiny"}, shard_size=10, machine_index=1, num_machines=2)
    >>> wanted = job.start()
    >>> [shard for shard in range(6) if wanted(shard)]
    [1, 3, 5]
    ```
    """

    def __init__(
        self,
        output_dir: Path,
        manifest: dict,
        *,
        shard_size: int,
        shard_suffix: str = ".jsonl",
        process_index: int = 0,
        num_processes: int = 1,
        machine_index: int = 0,
        num_machines: int = 1,
        barrier: Callable[[], None] = lambda: None,
    ):
        if shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, got {shard_size}")
        if num_processes < 1 or not 0 <= process_index < num_processes:
            raise ValueError(f"process {process_index} of {num_processes}: need 0 <= process_index < num_processes")
        if num_machines < 1 or not 0 <= machine_index < num_machines:
            raise ValueError(
                f"shard id {machine_index} of {num_machines}: need num_shards >= 1 and 0 <= shard_id < num_shards"
            )
        self.output_dir = Path(output_dir)
        self.shard_dir = self.output_dir / "shards"
        self.manifest = {**manifest, "shard_size": shard_size}
        self.shard_size = shard_size
        self.shard_suffix = shard_suffix
        self.process_index, self.num_processes = process_index, num_processes
        self.machine_index, self.num_machines = machine_index, num_machines
        self.barrier = barrier

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    # ------------------------------------------------------------------------------------------ layout
    def shard_path(self, shard: int) -> Path:
        return self.shard_dir / f"shard-{shard:0{SHARD_DIGITS}d}{self.shard_suffix}"

    def finished_shards(self) -> list[int]:
        """Indices of the shards on disk, sorted (temporary files of killed writers are not shards)."""
        pattern = f"shard-{'[0-9]' * SHARD_DIGITS}{self.shard_suffix}"
        return sorted(int(path.name[6 : 6 + SHARD_DIGITS]) for path in self.shard_dir.glob(pattern))

    def num_shards(self, num_items: int) -> int:
        return math.ceil(num_items / self.shard_size)

    def shard_rows(self, shard: int, num_items: int) -> range:
        """The item indices of shard k."""
        return range(shard * self.shard_size, min((shard + 1) * self.shard_size, num_items))

    # ------------------------------------------------------------------------------------------ start
    def check_manifest(self):
        """Refuse shards of a different run (naming what changed) and a non-empty folder that is not a job's; the main
        process writes the manifest of a new job."""
        path = self.output_dir / MANIFEST_NAME
        if path.is_file():
            try:
                previous = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path} is not valid JSON ({error}): use a new output folder") from None
            keys = list(dict.fromkeys([*self.manifest, *previous]))
            changed = [key for key in keys if previous.get(key) != self.manifest.get(key)]
            if changed:
                details = ", ".join(f"{key}: {previous.get(key)!r} -> {self.manifest.get(key)!r}" for key in changed)
                raise SystemExit(
                    f"{self.output_dir} holds shards of a different run ({details}): rerun with the same input and "
                    "options to resume, or use a new output folder"
                )
        else:
            foreign = [
                entry.name
                for entry in (self.output_dir.iterdir() if self.output_dir.is_dir() else [])
                if entry.name != self.shard_dir.name and not entry.name.startswith(f".{MANIFEST_NAME}.")
            ]
            if foreign or self.finished_shards():
                raise SystemExit(
                    f"{self.output_dir} is not empty ({sorted(foreign)[:5] or 'shards'}) and holds no {MANIFEST_NAME}: "
                    "it is not this job's folder; use a new or empty output folder"
                )
            if self.is_main_process:
                write_text_atomically(path, [json.dumps(self.manifest, indent=2) + "\n"])

    def start(self) -> Callable[[int], bool]:
        """Create the folders, check the manifest, and return `wanted(k)`: whether this process does shard k."""
        self.check_manifest()
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        finished = [k for k in self.finished_shards() if k % self.num_machines == self.machine_index]
        self.barrier()  # every process has listed the finished shards before any writes a new one
        finished_set = set(finished)

        def wanted(shard: int) -> bool:
            if shard % self.num_machines != self.machine_index or shard in finished_set:
                return False
            machine_shards_before = (shard - self.machine_index) // self.num_machines
            unfinished_before = machine_shards_before - bisect.bisect_left(finished, shard)
            return unfinished_before % self.num_processes == self.process_index

        return wanted

    # ------------------------------------------------------------------------------------------ writing
    def write_shard(self, shard: int, write: Callable[[Path], None]):
        """Write shard k atomically: `write(path)` writes the whole shard to a temporary path in any format."""
        with atomic_path(self.shard_path(shard)) as temporary:
            write(temporary)

    def write_jsonl_shard(self, shard: int, rows: Iterable[dict]):
        """Write shard k as JSON lines (no NaN or Infinity: they are not JSON)."""
        write_text_atomically(
            self.shard_path(shard), (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n" for row in rows)
        )

    @staticmethod
    def read_jsonl_shard(path: Path) -> Iterator[dict]:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                yield json.loads(line)

    # ------------------------------------------------------------------------------------------ merging
    def missing_shards(self, num_items: int) -> list[int]:
        on_disk = set(self.finished_shards())
        return [shard for shard in range(self.num_shards(num_items)) if shard not in on_disk]

    def merged_rows(
        self,
        num_items: int,
        read_shard: Callable[[Path], Iterable[dict]],
        id_key: str = "row",
        num_rows: int | None = None,
    ) -> Iterator[dict]:
        """Every shard's rows in order, checking that the i-th row has `id_key` i: each exactly once, none missing.

        `num_items` (the work units that were sharded) sets the number of shards; `num_rows` (default `num_items`)
        is the number of rows they hold together, for jobs whose unit yields several rows (an image's captions).
        """
        num_rows = num_items if num_rows is None else num_rows
        missing = self.missing_shards(num_items)
        if missing:
            raise SystemExit(
                f"shards {missing[:10]} of {self.num_shards(num_items)} are missing: rerun the same command to "
                "finish them"
            )
        expected = 0
        for shard in range(self.num_shards(num_items)):
            for row in read_shard(self.shard_path(shard)):
                if row[id_key] != expected:
                    raise SystemExit(f"shard {shard} has {id_key} {row[id_key]} where {id_key} {expected} belongs")
                expected += 1
                yield row
        if expected != num_rows:
            raise SystemExit(f"the shards hold {expected} rows, the input {num_rows}: delete {self.shard_dir}, rerun")

    def remove_temporaries(self):
        """Delete `.*.tmp` files left by processes killed mid-write; call once every writer has finished."""
        for stale in self.shard_dir.glob(".*.tmp"):
            stale.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------- progress
def format_duration(seconds: float) -> str:
    """`3725.2` -> `"1:02:05"`."""
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


class JobProgress:
    """Progress of a job over its whole input: rows done / total, rows per second and the time left.

    On a terminal it is a tqdm bar; when `stream` is not a terminal (a log file, a pipe) it writes one line at most
    every `interval` seconds, and a last one when the job ends:
    `progress: 4096/10000 rows (41.0%), 512.3 rows/s, ETA 0:00:11`. `enabled=False` shows nothing.
    `total=None` (a streamed input of unknown length) shows rows and rows/s without percentage or ETA. `done` counts
    rows finished before this run (a resumed job); the speed counts only this run's rows.

    Example:

    ```python
    >>> import io
    >>> progress = JobProgress(total=100, done=20, stream=io.StringIO(), clock=iter([0.0, 10.0, 10.0]).__next__)
    >>> progress.update(40)
    >>> progress.line()
    'progress: 60/100 rows (60.0%), 4.0 rows/s, ETA 0:00:10'
    ```
    """

    def __init__(
        self,
        total: int | None,
        done: int = 0,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.done, self.start_done = total, done, done
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self.start_time = self.last_line_time = self.now = clock()
        self.bar = None
        self.pending = False  # rows counted since the last line written
        if enabled and self.stream.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=done, unit=" rows", file=self.stream, dynamic_ncols=True)

    def update(self, rows: int):
        """Count `rows` more rows as done (never past the total)."""
        rows = rows if self.total is None else max(0, min(rows, self.total - self.done))
        self.done += rows
        if self.bar is not None:
            self.bar.update(rows)
            return
        self.now = self.clock()
        self.pending = True
        if self.enabled and self.now - self.last_line_time >= self.interval:
            self.write_line()

    def rate(self) -> float:
        """Rows per second of this run."""
        elapsed = self.now - self.start_time
        return (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        """`progress: DONE/TOTAL rows (P%), R rows/s, ETA H:MM:SS` (without total: `progress: DONE rows, R rows/s`)."""
        rate = self.rate()
        if self.total is None:
            return f"progress: {self.done} rows, {rate:.1f} rows/s"
        percent = 100 * self.done / self.total if self.total else 100.0
        eta = format_duration((self.total - self.done) / rate) if rate > 0 else "unknown"
        return f"progress: {self.done}/{self.total} rows ({percent:.1f}%), {rate:.1f} rows/s, ETA {eta}"

    def write_line(self):
        print(self.line(), file=self.stream, flush=True)
        self.last_line_time = self.now
        self.pending = False

    def close(self):
        """End the bar, or write the last line (when rows were counted since the previous one)."""
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.pending:
            self.write_line()


__all__ = [
    "JobProgress",
    "RowBlock",
    "ShardReader",
    "ShardedJob",
    "atomic_path",
    "describe_source",
    "file_sha256",
    "format_duration",
    "launch_state",
    "path_fingerprint",
    "write_text_atomically",
]
