"""Row tables: the training rows as ids, text and references into row sources, memory-mapped from disk.

A row table never holds image bytes ([`refuse_bytes`] enforces it): an image is a path, or the row number of its
image in a [`RowSource`](sources.md), read by the collator for the rows of a batch. It is written once as an Arrow
file named by the SHA-256 of its content and memory-mapped through `datasets.Dataset.from_file`, so it costs no
memory, needs no fingerprint hashing, and the digest tells a resumed run whether its rows are the ones it started on.
"""

import hashlib
import os
import tempfile
from pathlib import Path

import pyarrow as pa

from .sources import is_bytes_type


def refuse_bytes(table: pa.Table | pa.Schema, name: str):
    """Raise if a column holds bytes: row tables refer to images, they never carry them."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    binary = [field.name for field in schema if is_bytes_type(field.type)]
    if binary:
        raise TypeError(
            f"{name}: column(s) {binary} hold bytes; a row table refers to its images (a path, or a row number in a "
            "RowSource read by the collator) so that no split is held in memory"
        )


class RowTableWriter:
    """Writes a row table batch by batch to `directory/{name}-{digest[:16]}.arrow` (an Arrow stream, as `datasets`
    stores its tables), so no split needs to be in memory at once. `path` and `digest` (the file's SHA-256) are set
    on a successful exit.

    The write is atomic (temporary file, fsync, rename), so processes that prepare the same rows at once (every rank
    of a distributed run) all end with the same complete file.

    Example:

    ```python
    >>> import tempfile, pyarrow as pa
    >>> with RowTableWriter(tempfile.mkdtemp(), "train", pa.schema([("caption", pa.string())])) as writer:
    ...     writer.write(pa.table({"caption": ["a cat"]}))
    >>> writer.num_rows, writer.path.name.startswith("train-")
    (1, True)
    ```
    """

    def __init__(self, directory: str | Path, name: str, schema: pa.Schema):
        refuse_bytes(schema, name)
        self.directory, self.name, self.schema = Path(directory), name, schema
        self.path: Path | None = None
        self.digest: str | None = None
        self.num_rows = 0

    def __enter__(self) -> "RowTableWriter":
        self.directory.mkdir(parents=True, exist_ok=True)
        handle, self.temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{self.name}.", suffix=".tmp")
        os.close(handle)
        self.sink = pa.OSFile(self.temporary, "wb")
        self.writer = pa.ipc.new_stream(self.sink, self.schema)
        return self

    def write(self, rows: pa.Table | pa.RecordBatch):
        self.writer.write_table(pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows, 65_536)
        self.num_rows += rows.num_rows

    def __exit__(self, kind, error, traceback):
        try:
            self.writer.close()
            self.sink.close()
            if kind is None:
                digest = hashlib.sha256()
                with open(self.temporary, "rb") as file:
                    for block in iter(lambda: file.read(1 << 20), b""):
                        digest.update(block)
                    os.fsync(file.fileno())
                self.digest = digest.hexdigest()
                self.path = self.directory / f"{self.name}-{self.digest[:16]}.arrow"
                os.chmod(self.temporary, 0o644)
                os.replace(self.temporary, self.path)
        finally:
            Path(self.temporary).unlink(missing_ok=True)


def write_row_table(table: pa.Table, directory: str | Path, name: str) -> tuple[Path, str]:
    """Write a whole row table with [`RowTableWriter`]; returns (path, sha256 of the file)."""
    with RowTableWriter(directory, name, table.schema) as writer:
        writer.write(table)
    return writer.path, writer.digest


def memory_mapped_rows(table: pa.Table, directory: str | Path | None, name: str):
    """`(datasets.Dataset, sha256)`: the row table written by [`write_row_table`] and memory-mapped from it; with
    `directory=None` (library calls on small data) it stays in memory, fingerprinted by the same digest.

    Example:

    ```python
    >>> import tempfile, pyarrow as pa
    >>> rows, digest = memory_mapped_rows(pa.table({"caption": ["a cat"], "image": [0]}), tempfile.mkdtemp(), "train")
    >>> rows[0], len(digest)
    ({'caption': 'a cat', 'image': 0}, 64)
    ```
    """
    import datasets

    if directory is None:
        refuse_bytes(table, name)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=65_536)
        digest = hashlib.sha256(sink.getvalue()).hexdigest()
        return datasets.Dataset(datasets.table.InMemoryTable(table), fingerprint=digest[:16]), digest
    path, digest = write_row_table(table, directory, name)
    return datasets.Dataset.from_file(str(path)), digest


__all__ = ["RowTableWriter", "memory_mapped_rows", "refuse_bytes", "write_row_table"]
