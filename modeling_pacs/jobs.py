"""One job engine for sharded, resumable, exactly-once work: corpus scoring, synthetic data, benchmarks, SCST eval.

A job turns N items into shards of `shard_size` consecutive items; shard k is written once, atomically, to
`OUTPUT_DIR/shards/shard-KKKKKKK<suffix>`, beside a record `shard-KKKKKKK<suffix>.checksum.json` of its size, blake2b
checksum and row count, written before the shard is renamed into place. A rerun verifies every finished shard against
its record and skips the sound ones, so an interrupted job resumes without redoing or losing work (a process killed
mid-write leaves only a hidden `.*.tmp` file, never a shard); a truncated, corrupted or unrecorded shard is logged by
name and recomputed, and the merge verifies again, so a damaged shard is never merged (docs/concepts/recovery.md).
`OUTPUT_DIR/manifest.json` pins what the shards were computed from (input content, image root, model, options); a
rerun with anything different is refused with a message naming what changed. The merge reads the shards in order and
checks that every item is there exactly once. A folder, manifest or shard that does not fit the request raises
`JobStateError` (`modeling_pacs/errors.py`), whose message says what to rerun or delete.

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
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .errors import InputError, JobStateError

logger = logging.getLogger(__name__)

SHARD_DIGITS = 7
MANIFEST_NAME = "manifest.json"
RECORD_SUFFIX = ".checksum.json"
# A crash at a known point, for the kill-and-resume tests (tests/fixtures/processes.py): "N:MARKER" makes a process
# stop after writing its N-th shard, create the file MARKER and wait there until it is killed.
PAUSE_AFTER_SHARDS_VARIABLE = "PACS_PP_TEST_PAUSE_AFTER_SHARDS"
# Written into the manifest of a job whose every shard has a record; a manifest without it (an older version's job)
# still resumes, its unrecorded shards verified by reading them. Not compared on resume.
RECORDS_KEY = "shard_records"
RECORDS_VERSION = "blake2b-256"
# A JSON-lines shard row's keys whose value was NaN (a judge's unparsable answer): JSON has no NaN, so the shard holds
# null there and lists the keys under this one; `read_jsonl_shard` makes them NaN again.
NAN_KEYS = "_nan"
# The same list under the name corpus scoring's shards gave it before: such shards still read back with their NaN.
OLD_NAN_KEYS = ("_failed_scores",)


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


# ---------------------------------------------------------------------------------------------------- shard records
def file_blake2b(path: Path) -> str:
    """`blake2b:<hex>` (256 bits) of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.blake2b(digest_size=32)
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"blake2b:{digest.hexdigest()}"


def record_path(path: Path) -> Path:
    """Where the record of the shard at `path` lives: beside it, `<name>.checksum.json`."""
    path = Path(path)
    return path.with_name(path.name + RECORD_SUFFIX)


def write_recorded(path: str | os.PathLike, write: Callable[[Path], None], rows: int | None = None) -> dict:
    """Write a shard atomically with its record (size, checksum, row count) and return the record.

    `write(temporary)` writes the whole shard in any format. The record is renamed into place before the shard, so
    a shard on disk always has the record of its own bytes; a kill between the two leaves a record without a shard
    (or beside an older shard it does not match), which verification reports and the job recomputes.
    """
    path = Path(path)
    with atomic_path(path) as temporary:
        write(temporary)
        record = {"file": path.name, "bytes": temporary.stat().st_size, "checksum": file_blake2b(temporary)}
        record["rows"] = rows
        write_text_atomically(record_path(path), [json.dumps(record) + "\n"])
    return record


def shard_damage(
    path: str | os.PathLike,
    *,
    require_record: bool = True,
    expected_rows: int | None = None,
    count_rows: Callable[[Path], int] | None = None,
) -> str | None:
    """Why the shard at `path` cannot be trusted, or `None` when it is sound.

    A recorded shard is sound when its size and blake2b checksum equal its record's (and its recorded row count is
    `expected_rows`, when given). A shard without a record is damaged when `require_record`; otherwise (a shard
    written by an older version) it is verified as far as possible: `count_rows(path)` must read it whole and give
    `expected_rows`.
    """
    path = Path(path)
    record_file = record_path(path)
    if not path.is_file():
        return "its file is missing" + (" (its record is there)" if record_file.is_file() else "")
    if not record_file.is_file():
        if require_record:
            return f"it has no checksum record ({record_file.name} is missing)"
        if count_rows is None:
            return None
        try:
            rows = count_rows(path)
        except Exception as error:  # any reader's failure means the same: the shard is unreadable
            return f"it cannot be read ({type(error).__name__}: {str(error)[:200]})"
        if expected_rows is not None and rows != expected_rows:
            return f"it holds {rows} rows where {expected_rows} belong"
        return None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        recorded_size, recorded_checksum = int(record["bytes"]), str(record["checksum"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"its checksum record {record_file.name} is unreadable ({type(error).__name__})"
    size = path.stat().st_size
    if size != recorded_size:
        return f"it is truncated or extended ({size} bytes, {recorded_size} recorded)"
    if file_blake2b(path) != recorded_checksum:
        return "checksum mismatch (its bytes changed since it was written)"
    if expected_rows is not None and record.get("rows") not in (None, expected_rows):
        return f"its record counts {record['rows']} rows where {expected_rows} belong"
    return None


def remove_stale_temporaries(*folders: Path):
    """Delete the `.*.tmp` files that writers killed mid-write (`atomic_path`) left in `folders`; call once every
    writer has finished."""
    for folder in folders:
        for stale in Path(folder).glob(".*.tmp"):
            if stale.is_file():
                stale.unlink(missing_ok=True)


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
    """`accelerate.PartialState` of this process, refusing (`InputError`) a launch where the processes would not meet.

    `accelerate launch --num_processes N` on a machine without GPUs starts N processes that each believe they are
    alone (so each would do everything) unless `--cpu` makes them join through gloo.
    """
    from accelerate import PartialState

    state = PartialState(cpu=cpu)
    launched_processes = int(os.environ.get("WORLD_SIZE", "1"))
    if state.num_processes != launched_processes:
        raise InputError(
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
        read_shard: reads a shard's rows; verifies shards an older version wrote without a record (default: JSON
            lines for `.jsonl` shards; without one such shards are trusted as they are).

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
        read_shard: Callable[[Path], Iterable[dict]] | None = None,
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
        if read_shard is None and shard_suffix == ".jsonl":
            read_shard = self.read_jsonl_shard
        self.read_shard = read_shard
        self.records_required = None  # known once the manifest is read: False for an older version's job
        self.shards_written = 0

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    # ------------------------------------------------------------------------------------------ layout
    def shard_path(self, shard: int) -> Path:
        return self.shard_dir / f"shard-{shard:0{SHARD_DIGITS}d}{self.shard_suffix}"

    def finished_shards(self) -> list[int]:
        """Indices of the shards on disk, sorted (temporary files of killed writers are not shards); `start` and the
        merge verify them (`verify_shards`)."""
        pattern = f"shard-{'[0-9]' * SHARD_DIGITS}{self.shard_suffix}"
        return sorted(int(path.name[6 : 6 + SHARD_DIGITS]) for path in self.shard_dir.glob(pattern))

    def recorded_shards(self) -> list[int]:
        """Indices of the shards that have a record on disk (with or without their shard file), sorted."""
        pattern = f"shard-{'[0-9]' * SHARD_DIGITS}{self.shard_suffix}{RECORD_SUFFIX}"
        return sorted(int(path.name[6 : 6 + SHARD_DIGITS]) for path in self.shard_dir.glob(pattern))

    def shard_damage(self, shard: int) -> str | None:
        """Why shard k cannot be trusted (`shard_damage`), or `None` when it is sound."""
        if self.records_required is None:
            self.records_required = self.manifest_records_shards()
        read_shard = self.read_shard
        return shard_damage(
            self.shard_path(shard),
            require_record=self.records_required,
            count_rows=None if read_shard is None else lambda path: sum(1 for _ in read_shard(path)),
        )

    def verify_shards(self, shards: Iterable[int]) -> tuple[list[int], dict[int, str]]:
        """Split shards into the sound ones (sorted) and `{shard: why}` for the damaged ones."""
        sound, damaged = [], {}
        for shard in sorted(shards):
            problem = self.shard_damage(shard)
            if problem is None:
                sound.append(shard)
            else:
                damaged[shard] = problem
        return sound, damaged

    def num_shards(self, num_items: int) -> int:
        return math.ceil(num_items / self.shard_size)

    def shard_rows(self, shard: int, num_items: int) -> range:
        """The item indices of shard k."""
        return range(shard * self.shard_size, min((shard + 1) * self.shard_size, num_items))

    # ------------------------------------------------------------------------------------------ start
    def manifest_records_shards(self) -> bool:
        """Whether this job's manifest says every shard has a record (false for a job of an older version)."""
        path = self.output_dir / MANIFEST_NAME
        if not path.is_file():
            return True
        try:
            return json.loads(path.read_text(encoding="utf-8")).get(RECORDS_KEY) == RECORDS_VERSION
        except (OSError, ValueError, AttributeError):
            return True

    def check_manifest(self):
        """Refuse shards of a different run (naming what changed) and a non-empty folder that is not a job's; the main
        process writes the manifest of a new job."""
        path = self.output_dir / MANIFEST_NAME
        if path.is_file():
            try:
                previous = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise JobStateError(f"{path} is not valid JSON ({error}): use a new output folder") from None
            if not isinstance(previous, dict):
                raise JobStateError(f"{path} is not a job manifest (a JSON object): use a new output folder")
            self.records_required = previous.pop(RECORDS_KEY, None) == RECORDS_VERSION
            keys = list(dict.fromkeys([*self.manifest, *previous]))
            changed = [key for key in keys if previous.get(key) != self.manifest.get(key)]
            if changed:
                details = ", ".join(f"{key}: {previous.get(key)!r} -> {self.manifest.get(key)!r}" for key in changed)
                raise JobStateError(
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
                raise JobStateError(
                    f"{self.output_dir} is not empty ({sorted(foreign)[:5] or 'shards'}) and holds no {MANIFEST_NAME}: "
                    "it is not this job's folder; use a new or empty output folder"
                )
            self.records_required = True
            if self.is_main_process:
                manifest = {**self.manifest, RECORDS_KEY: RECORDS_VERSION}
                write_text_atomically(path, [json.dumps(manifest, indent=2) + "\n"])

    def start(self) -> Callable[[int], bool]:
        """Create the folders, check the manifest, verify this machine's finished shards, and return `wanted(k)`:
        whether this process does shard k (a damaged shard is logged by name and counts as unfinished)."""
        self.check_manifest()
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        on_disk = set(self.finished_shards()) | set(self.recorded_shards())
        finished, damaged = self.verify_shards(k for k in on_disk if k % self.num_machines == self.machine_index)
        if self.is_main_process:
            for shard, problem in damaged.items():
                logger.warning("shard %d (%s) is damaged: %s; recomputing", shard, self.shard_path(shard), problem)
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
    def write_shard(self, shard: int, write: Callable[[Path], None], rows: int | None = None):
        """Write shard k atomically with its record: `write(path)` writes the whole shard to a temporary path in any
        format; `rows` (the number of rows it holds) is recorded and checked by the merge."""
        write_recorded(self.shard_path(shard), write, rows)
        self.shards_written += 1
        pause_if_asked(self.shards_written)

    def write_jsonl_shard(self, shard: int, rows: Iterable[dict]):
        """Write shard k as JSON lines; a NaN value is written null, its key listed under `NAN_KEYS`
        (`read_jsonl_shard` restores it). Infinity is refused: it is not JSON."""
        rows = list(rows)

        def write(path: Path):
            with path.open("w", encoding="utf-8", newline="") as file:
                for row in rows:
                    file.write(json.dumps(nan_as_null(row), ensure_ascii=False, allow_nan=False) + "\n")

        self.write_shard(shard, write, rows=len(rows))

    @staticmethod
    def read_jsonl_shard(path: Path) -> Iterator[dict]:
        """The rows of a JSON-lines shard, the NaN values that `write_jsonl_shard` wrote null restored."""
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                yield null_as_nan(json.loads(line))

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
            raise JobStateError(
                f"shards {missing[:10]} of {self.num_shards(num_items)} are missing: rerun the same command to "
                "finish them"
            )
        expected = 0
        for shard in range(self.num_shards(num_items)):
            for row in self.verified_rows(shard, read_shard):
                if row[id_key] != expected:
                    raise JobStateError(f"shard {shard} has {id_key} {row[id_key]} where {id_key} {expected} belongs")
                expected += 1
                yield row
        if expected != num_rows:
            raise JobStateError(
                f"the shards hold {expected} rows, the input {num_rows}: delete {self.shard_dir}, rerun"
            )

    def verified_rows(self, shard: int, read_shard: Callable[[Path], Iterable[dict]]) -> list[dict]:
        """Shard k's rows, after verifying it again: a damaged shard stops the merge with a message naming it."""
        path = self.shard_path(shard)
        advice = "rerun the same command to recompute it"
        problem = self.shard_damage(shard)
        if problem is not None:
            raise JobStateError(f"shard {shard} ({path}) is damaged: {problem}; {advice}")
        try:
            rows = list(read_shard(path))
        except Exception as error:  # any reader's failure means the same: the shard is unreadable
            raise JobStateError(
                f"shard {shard} ({path}) is damaged: it cannot be read ({type(error).__name__}: {str(error)[:200]}); "
                f"{advice}"
            ) from None
        try:
            recorded = json.loads(record_path(path).read_text(encoding="utf-8")).get("rows")
        except FileNotFoundError:
            recorded = None  # an older version's shard, verified by reading it
        if recorded is not None and recorded != len(rows):
            raise JobStateError(f"shard {shard} ({path}) holds {len(rows)} rows, its record {recorded}; {advice}")
        return rows

    def remove_temporaries(self):
        """Delete the `.*.tmp` files that processes killed mid-write left (shards, records, and the merged outputs
        and manifest in the job's folder); call once every writer has finished."""
        remove_stale_temporaries(self.shard_dir, self.output_dir)


def nan_as_null(row: dict) -> dict:
    """The row as a JSON-lines shard holds it: each NaN value null, the keys listed under `NAN_KEYS`.

    Example:

    ```python
    >>> nan_as_null({"row": 3, "score": float("nan"), "answer": "?"})
    {'row': 3, 'score': None, 'answer': '?', '_nan': ['score']}
    >>> null_as_nan(nan_as_null({"row": 3, "score": float("nan")}))
    {'row': 3, 'score': nan}
    ```
    """
    nan = [key for key, value in row.items() if isinstance(value, float) and math.isnan(value)]
    if NAN_KEYS in row:
        raise ValueError(f"a shard row may not have the key {NAN_KEYS!r}: it lists the row's NaN values")
    return {**row, **dict.fromkeys(nan), NAN_KEYS: nan} if nan else row


def null_as_nan(row: dict) -> dict:
    """`nan_as_null` undone (and the list of an older corpus-scoring shard, `OLD_NAN_KEYS`): the listed keys NaN."""
    for key in (NAN_KEYS, *OLD_NAN_KEYS):
        for name in row.pop(key, None) or ():
            row[name] = math.nan
    return row


# ---------------------------------------------------------------------------------------------------- progress
def pause_if_asked(shards_written: int):
    """The test hook of `PAUSE_AFTER_SHARDS_VARIABLE`: after the N-th shard, touch the marker and wait to be killed
    (for 10 minutes at most, then exit with status 75 so that a forgotten process does not linger)."""
    setting = os.environ.get(PAUSE_AFTER_SHARDS_VARIABLE)
    if not setting:
        return
    count, _, marker = setting.partition(":")
    if shards_written == int(count):
        Path(marker).touch()
        time.sleep(600)
        os._exit(75)


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
    "NAN_KEYS",
    "JobProgress",
    "RowBlock",
    "ShardReader",
    "ShardedJob",
    "atomic_path",
    "describe_source",
    "file_blake2b",
    "file_sha256",
    "format_duration",
    "launch_state",
    "nan_as_null",
    "null_as_nan",
    "path_fingerprint",
    "record_path",
    "remove_stale_temporaries",
    "shard_damage",
    "write_recorded",
    "write_text_atomically",
]
