"""Row sources: tables whose image bytes stay on disk until a batch asks for its rows.

A training set of the paper's size holds hundreds of GiB of images (566k Stable Diffusion PNGs of ~400 KiB). A
[`RowSource`] gives what preparation needs without touching those bytes: the small columns (ids, captions, scores),
which rows hold an image at all, and, for a batch, the image values of just its rows. Two kinds:

- [`ParquetSource`]: parquet files read in place. Small columns are read alone (parquet is columnar); which rows hold
  an image is read from the image column's `path` field and the row groups' null counts, so no image byte is read for
  files whose rows either hold bytes or are null (the generator's shards). A batch reads only the row groups that
  hold its rows: parquet's unit of random access, so files written with small row groups
  (`generate_synthetic.py` writes 8 rows a group) read little more than the batch's images. Files with large row
  groups are read correctly but slowly, and a warning names them.
- [`ArrowSource`]: an Arrow table, in memory or memory-mapped (a `datasets` folder from `save_to_disk`, a dataset
  from `load_dataset`): random access is free.

Image values come back as `datasets.Image` stores them: `{"bytes": ..., "path": ...}` dicts, or path strings for a
column of paths.
"""

import json
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .validation import EMPTY_FIX, data_error

logger = logging.getLogger(__name__)

# A row group whose images exceed this is read whole for every row a batch takes from it: worth a warning.
LARGE_ROW_GROUP_BYTES = 64 * 2**20
_OPEN_FILES = 16


def is_bytes_type(data_type: pa.DataType) -> bool:
    """Whether an Arrow type is or contains binary data (image bytes), at any depth."""
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type) or pa.types.is_fixed_size_binary(data_type):
        return True
    if pa.types.is_struct(data_type):
        return any(is_bytes_type(data_type.field(index).type) for index in range(data_type.num_fields))
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        return is_bytes_type(data_type.value_type)
    return False


def image_presence(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which values hold an image: bytes (even empty ones: a corrupt image, which the collator reports by row), a
    non-empty path string, or a struct with either. This is what parquet's null counts tell without reading bytes."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    data_type = values.type
    if pa.types.is_struct(data_type):
        present = np.zeros(len(values), dtype=bool)
        for name in ("bytes", "path"):
            if data_type.get_field_index(name) >= 0:
                present |= image_presence(pc.struct_field(values, name))
        return present & values.is_valid().to_numpy(zero_copy_only=False)
    if is_bytes_type(data_type):
        return values.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        lengths = pc.fill_null(pc.binary_length(values), 0)
        return lengths.to_numpy(zero_copy_only=False) > 0
    if pa.types.is_null(data_type):
        return np.zeros(len(values), dtype=bool)
    raise TypeError(f"a column of {data_type} does not hold images: expected paths, bytes or {{bytes, path}} structs")


def struct_field(values: pa.Array | pa.ChunkedArray, name: str) -> pa.Array | pa.ChunkedArray:
    """A field of a struct column, chunked or not, as a view (no data is copied)."""
    if isinstance(values, pa.ChunkedArray):
        field_type = values.type.field(name).type
        return pa.chunked_array([pc.struct_field(chunk, name) for chunk in values.chunks], field_type)
    return pc.struct_field(values, name)


def path_field(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The path of image values: the `path` field of structs, the values of a string column, nulls for bytes."""
    if pa.types.is_struct(values.type):
        if values.type.get_field_index("path") < 0:
            return pa.nulls(len(values), pa.string())
        return struct_field(values, "path")
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values
    return pa.nulls(len(values), pa.string())


@dataclass(frozen=True)
class ImageReference:
    """An image left in its source: row `row` of `column`. Row lists hold these instead of image bytes; a collator
    turns a batch's references into images with [`resolve_references`]."""

    source: "RowSource"
    column: str
    row: int


def resolve_references(values: Sequence[Any]) -> list[Any]:
    """The values with every [`ImageReference`] replaced by its image, read one batch per source and column."""
    resolved = list(values)
    requests: dict[tuple[int, str], list[int]] = {}
    for position, value in enumerate(values):
        if isinstance(value, ImageReference):
            requests.setdefault((id(value.source), value.column), []).append(position)
    for positions in requests.values():
        first = values[positions[0]]
        images = first.source.take_images(first.column, [values[position].row for position in positions])
        for position, image in zip(positions, images):
            resolved[position] = image
    return resolved


class RowSource:
    """Rows of one or more tables, numbered from 0 in order. Subclasses read them; see the module docstring."""

    root: Path | None = None  # relative image paths are resolved against it
    num_rows: int
    column_names: list[str]

    def read(self, columns: Sequence[str], image_column: str | None = None) -> tuple[pa.Table, np.ndarray | None]:
        """Every row of `columns`, which must not hold bytes (ids, captions, scores, paths), and, for `image_column`,
        a boolean per row: whether it holds an image there (told without reading image bytes where possible). One
        pass over the data."""
        raise NotImplementedError

    def read_columns(self, columns: Sequence[str]) -> pa.Table:
        return self.read(columns)[0]

    def has_image(self, column: str) -> np.ndarray:
        return self.read([], column)[1]

    def take_images(self, column: str, rows: Sequence[int]) -> list[Any]:
        """The image values of `column` at `rows` (global row numbers), in that order; relative paths resolved."""
        raise NotImplementedError

    def image_paths(self, column: str) -> list[str | None]:
        """The path of each row's image (the `path` field of `{bytes, path}` values), without reading bytes."""
        raise NotImplementedError

    def describe_row(self, row: int) -> str:
        """Where a row comes from, for messages: `shard-00003.parquet row 17`."""
        raise NotImplementedError

    def check_small_columns(self, columns: Sequence[str], schema: pa.Schema):
        missing = [column for column in columns if column not in schema.names]
        if missing:
            raise KeyError(f"{self}: no column(s) {missing} (it has {schema.names})")
        binary = [column for column in columns if is_bytes_type(schema.field(column).type)]
        if binary:
            raise TypeError(
                f"{self}: column(s) {binary} hold bytes; read images with take_images, for the rows a batch needs"
            )

    def resolve(self, value: Any) -> Any:
        """A relative path (alone or in a `{bytes, path}` value without bytes) joined to the source's folder."""
        if self.root is None:
            return value
        if isinstance(value, str) and value and not Path(value).is_absolute():
            return str(self.root / value)
        if isinstance(value, dict) and value.get("bytes") is None and value.get("path"):
            path = value["path"]
            return {"bytes": None, "path": path if Path(path).is_absolute() else str(self.root / path)}
        return value


class ArrowSource(RowSource):
    """Rows of an Arrow table: in memory (JSON lines) or memory-mapped (`datasets`' own files).

    Example:

    ```python
    >>> import pyarrow as pa
    >>> table = pa.table({"sentid": [4, 5], "synthetic_image": [None, "b.png"]})
    >>> source = ArrowSource(table, name="toy", root="/data")
    >>> source.has_image("synthetic_image").tolist(), source.take_images("synthetic_image", [1])
    ([False, True], ['/data/b.png'])
    ```
    """

    def __init__(self, table: pa.Table, name: str, root: str | Path | None = None):
        self.table = table
        self.name = name
        self.root = Path(root) if root is not None else None
        self.num_rows = table.num_rows
        self.column_names = list(table.column_names)

    @classmethod
    def from_dataset(cls, dataset, name: str, root: str | Path | None = None) -> "ArrowSource":
        """The table under a `datasets.Dataset` (memory-mapped when it was loaded from files), without a copy."""
        if getattr(dataset, "_indices", None) is not None:
            raise ValueError(
                f"{name}: the dataset has an indices mapping (from select, shuffle or filter): save it with "
                "save_to_disk (which writes the selected rows) and load that folder instead"
            )
        return cls(dataset.data.table, name, root)

    def __str__(self) -> str:
        return self.name

    def read(self, columns: Sequence[str], image_column: str | None = None) -> tuple[pa.Table, np.ndarray | None]:
        self.check_small_columns(columns, self.table.schema)
        presence = None if image_column is None else image_presence(self.table.column(image_column))
        return self.table.select(list(columns)), presence

    def take_images(self, column: str, rows: Sequence[int]) -> list[Any]:
        values = self.table.column(column).take(pa.array(rows, type=pa.int64())).to_pylist()
        return [self.resolve(value) for value in values]

    def image_paths(self, column: str) -> list[str | None]:
        return path_field(self.table.column(column)).to_pylist()

    def describe_row(self, row: int) -> str:
        return f"{self.name} row {row}"


class ParquetSource(RowSource):
    """Parquet files read in place, as one table (rows numbered across the files in the given order).

    Example:

    ```python
    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    >>> schema = pa.schema([("sentid", pa.int64()), ("synthetic_image", image)])
    >>> rows = [{"sentid": 1, "synthetic_image": {"bytes": b"PNG1", "path": None}},
    ...         {"sentid": 2, "synthetic_image": None}]
    >>> pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "shard-0.parquet", row_group_size=1)
    >>> source = ParquetSource([folder / "shard-0.parquet"], root=folder)
    >>> source.read_columns(["sentid"]).column(0).to_pylist(), source.has_image("synthetic_image").tolist()
    ([1, 2], [True, False])
    >>> source.take_images("synthetic_image", [0]), source.image_bytes_read
    ([{'bytes': b'PNG1', 'path': None}], 4)
    ```
    """

    def __init__(self, files: Sequence[str | Path], root: str | Path | None = None, name: str | None = None):
        if not files:
            raise ValueError("no parquet files given")
        self.files = [Path(file) for file in files]
        self.root = Path(root) if root is not None else None
        self.name = name or (str(self.root) if self.root else str(self.files[0].parent))
        layouts = self.map_files(self.file_layout)
        self.schema, leaves = pq.read_schema(self.files[0]), layouts[0][0]
        for file, (file_leaves, _) in zip(self.files, layouts):
            if file_leaves != leaves:
                raise ValueError(
                    f"{file}: its columns {file_leaves} differ from {self.files[0].name}'s {leaves}: the folder mixes "
                    "files of different layouts"
                )
        self.column_names = list(self.schema.names)
        self.leaf_index = {leaf: index for index, leaf in enumerate(leaves)}  # "synthetic_image.bytes" -> 5
        # Global row number of each file's first row, and of each row group's first row within its file.
        self.group_starts = [np.cumsum([0, *group_rows]) for _, group_rows in layouts]
        self.file_starts = np.cumsum([0] + [int(starts[-1]) for starts in self.group_starts])
        self.num_rows = int(self.file_starts[-1])
        self.open_files: OrderedDict[int, pq.ParquetFile] = OrderedDict()
        self.open_files_pid = os.getpid()
        self.image_bytes_read = 0  # image bytes this process has read (tests and benchmarks check it)

    def __str__(self) -> str:
        return self.name

    def file_layout(self, index: int) -> tuple[list[str], list[int]]:
        """(leaf column paths, rows per row group) of one file, from its footer. The footer's `schema` is not
        touched: in pyarrow 26 each access to it keeps about 1 MiB alive, gigabytes over the paper's shards."""
        metadata = pq.read_metadata(self.files[index])
        groups = [metadata.row_group(group) for group in range(metadata.num_row_groups)]
        leaves = [groups[0].column(leaf).path_in_schema for leaf in range(metadata.num_columns)] if groups else []
        return leaves, [group.num_rows for group in groups]

    def map_files(self, function) -> list:
        """`function(file_index)` for every file, in file order, on a few threads (pyarrow releases the GIL)."""
        workers = min(8, len(self.files), 2 * (os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(function, range(len(self.files))))

    def group_rows(self, file: int, group: int) -> slice:
        starts = self.group_starts[file]
        return slice(int(starts[group]), int(starts[group + 1]))

    def leaf_statistics(self, metadata: pq.FileMetaData, leaf: str, group: int) -> tuple[int | None, int]:
        """(null count or None where not recorded, compressed size) of a leaf column's chunk in one row group."""
        chunk = metadata.row_group(group).column(self.leaf_index[leaf])
        nulls = chunk.statistics.null_count if chunk.is_stats_set and chunk.statistics.has_null_count else None
        return nulls, chunk.total_compressed_size

    # ------------------------------------------------------------------------------------------ preparation
    def read(self, columns: Sequence[str], image_column: str | None = None) -> tuple[pa.Table, np.ndarray | None]:
        self.check_small_columns(columns, self.schema)
        if image_column is not None and image_column not in self.column_names:
            raise KeyError(f"{self}: no column '{image_column}' (it has {self.column_names})")
        parts = self.map_files(lambda file: self.read_file(file, list(columns), image_column))
        table = pa.concat_tables([table for table, *_ in parts])
        if image_column is None:
            return table, None
        self.image_bytes_read += sum(read for _, _, read, _ in parts)
        self.warn_if_slow(image_column, [sizes for *_, sizes in parts])
        return table, np.concatenate([present for _, present, _, _ in parts])

    def read_file(
        self, file: int, columns: list[str], image_column: str | None
    ) -> tuple[pa.Table, np.ndarray | None, int, tuple[int, int]]:
        """One file's small columns and, for `image_column`, which rows hold an image, the image bytes read to tell,
        and (row groups over `LARGE_ROW_GROUP_BYTES`, the largest's size).

        Which rows hold an image comes from the struct's validity and `path` field (small) and each row group's null
        count of the bytes: a row group's bytes are read only when that count cannot tell which valid rows lack
        them (never for the generator's shards, whose rows hold bytes or are null).
        """
        handle = pq.ParquetFile(self.files[file])
        if image_column is None:
            return handle.read(columns=columns), None, 0, (0, 0)
        data_type = self.schema.field(image_column).type
        if not is_bytes_type(data_type):  # a column of paths
            data = handle.read(columns=[*columns, image_column])
            return data.select(columns), image_presence(data.column(image_column)), 0, (0, 0)
        is_struct = pa.types.is_struct(data_type)
        path_leaf = f"{image_column}.path" if is_struct and data_type.get_field_index("path") >= 0 else None
        bytes_leaf = f"{image_column}.bytes" if is_struct else image_column
        data = handle.read(columns=[*columns, *([path_leaf] if path_leaf else [])])
        num_rows = int(self.group_starts[file][-1])
        valid, has_path = np.ones(num_rows, dtype=bool), np.zeros(num_rows, dtype=bool)
        if path_leaf:
            paths = data.column(image_column).combine_chunks()
            valid = paths.is_valid().to_numpy(zero_copy_only=False)
            has_path = image_presence(pc.struct_field(paths, "path")) & valid
        present, read, sizes = has_path.copy(), 0, []
        for group in range(handle.metadata.num_row_groups):
            rows = self.group_rows(file, group)
            bytes_nulls, size = self.leaf_statistics(handle.metadata, bytes_leaf, group)
            sizes.append(size)
            struct_nulls = (rows.stop - rows.start) - int(valid[rows].sum())
            if bytes_nulls is not None and bytes_nulls == struct_nulls:  # every valid row holds bytes
                present[rows] = valid[rows]
            elif bytes_nulls is not None and bytes_nulls == rows.stop - rows.start:  # no bytes in this group
                continue
            else:  # some valid rows lack bytes: read this group's bytes to tell which
                values = handle.read_row_group(group, columns=[bytes_leaf]).column(0).combine_chunks()
                read += values.nbytes
                values = pc.struct_field(values, "bytes") if is_struct else values
                present[rows] |= image_presence(values) & valid[rows]
        return data.select(columns), present, read, summarise_sizes(sizes)

    def warn_if_slow(self, column: str, sizes: list[tuple[int, int]]):
        """Warn when row groups hold so many images that every row a batch takes from them reads megabytes."""
        large = sum(count for count, _ in sizes)
        if large:
            largest, file = max((size, file) for file, (_, size) in enumerate(sizes))
            logger.warning(
                f"{self}: {large} row groups hold more than {LARGE_ROW_GROUP_BYTES >> 20} MiB of '{column}' each (up "
                f"to {largest / 2**20:.0f} MiB, in {self.files[file].name}); parquet reads a whole row group for any "
                "of its rows, so batches read these slowly (correctly). Rewrite them with small row groups: python "
                "scripts/generate_synthetic.py --rewrite-row-groups FOLDER"
            )

    # ------------------------------------------------------------------------------------------ batches
    def parquet_file(self, index: int) -> pq.ParquetFile:
        """An open file, from a small per-process cache (DataLoader workers fork: handles are not shared)."""
        if self.open_files_pid != os.getpid():
            self.open_files, self.open_files_pid = OrderedDict(), os.getpid()
        handle = self.open_files.pop(index, None) or pq.ParquetFile(self.files[index])
        self.open_files[index] = handle
        while len(self.open_files) > _OPEN_FILES:
            self.open_files.popitem(last=False)
        return handle

    def locate(self, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(file index, row within the file) of each global row number."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.num_rows):
            bad = int(rows[(rows < 0) | (rows >= self.num_rows)][0])
            raise IndexError(f"{self}: row {bad} is out of range (the files hold {self.num_rows} rows)")
        files = np.searchsorted(self.file_starts, rows, side="right") - 1
        return files, rows - self.file_starts[files]

    def take_images(self, column: str, rows: Sequence[int]) -> list[Any]:
        files, local = self.locate(rows)
        groups = [
            int(np.searchsorted(self.group_starts[file], row, side="right") - 1)
            for file, row in zip(files.tolist(), local.tolist())
        ]
        requests: dict[tuple[int, int], list[int]] = {}
        for position, key in enumerate(zip(files.tolist(), groups)):
            requests.setdefault(key, []).append(position)
        values: list[Any] = [None] * len(groups)
        for (file, group), positions in requests.items():
            data = self.parquet_file(file).read_row_group(group, columns=[column]).column(0)
            self.image_bytes_read += data.nbytes
            offsets = pa.array([int(local[p]) - int(self.group_starts[file][group]) for p in positions], pa.int64())
            for position, value in zip(positions, data.take(offsets).to_pylist()):
                values[position] = self.resolve(value)
        return values

    def image_paths(self, column: str) -> list[str | None]:
        data_type = self.schema.field(column).type
        leaf = [f"{column}.path"] if pa.types.is_struct(data_type) else [column]
        return [
            path
            for table in self.map_files(lambda file: pq.read_table(self.files[file], columns=leaf))
            for path in path_field(table.column(0)).to_pylist()
        ]

    def describe_row(self, row: int) -> str:
        files, local = self.locate([row])
        return f"{self.files[int(files[0])].name} row {int(local[0])}"


def summarise_sizes(sizes: list[int]) -> tuple[int, int]:
    """(how many row groups exceed `LARGE_ROW_GROUP_BYTES`, the largest size)."""
    return sum(size > LARGE_ROW_GROUP_BYTES for size in sizes), max(sizes, default=0)


class SourceImages(Sequence):
    """A row table's image column as a sequence of images: paths as they are, row numbers read from their source
    on access (iteration and slices read a batch of rows at a time).

    Example:

    ```python
    >>> import pyarrow as pa
    >>> source = ArrowSource(pa.table({"image": ["a.jpg", "b.jpg"]}), name="toy")
    >>> list(SourceImages([1, 0], source, "image"))
    ['b.jpg', 'a.jpg']
    ```
    """

    def __init__(self, references: Sequence[Any], source: "RowSource | None", column: str, batch_size: int = 256):
        self.references = references
        self.source = source
        self.column = column
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.references)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.read(self.references[index])
        return self.read([self.references[index]])[0]

    def __iter__(self):
        for start in range(0, len(self), self.batch_size):
            yield from self.read(self.references[start : start + self.batch_size])

    def read(self, references: Sequence[Any]) -> list[Any]:
        if self.source is None:
            return list(references)
        return self.source.take_images(self.column, list(references))


def is_saved_dataset(folder: str | Path) -> bool:
    """Whether `folder` holds a `datasets` `save_to_disk` dataset (a `Dataset` or a `DatasetDict`)."""
    folder = Path(folder)
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def load_datasets(name: str | Path):
    """A `save_to_disk` folder (memory-mapped: a `Dataset` or `DatasetDict`) or anything `datasets.load_dataset`
    reads (a Hub id, a folder of data files: a `DatasetDict`, converted once into `datasets`' cache)."""
    import datasets

    if not is_saved_dataset(name):
        return datasets.load_dataset(str(name))
    try:
        return datasets.load_from_disk(str(name))
    except IndexError:  # datasets cannot load a split saved with no rows (0 shards)
        empty = [state.parent.name for state in sorted(Path(name).glob("*/state.json"))
                 if not json.loads(state.read_text(encoding="utf-8")).get("_data_files")]  # fmt: skip
        split = empty[0] if empty else Path(name).name
        raise data_error(name, split, "the split has no rows (saved with 0 shards)", EMPTY_FIX) from None


def select_split(loaded, split: str, name: str | Path):
    """The split `split` of a `DatasetDict` (a `Dataset` is returned as it is); an absent split names those present."""
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(f"split '{split}' is not in {name} (it has {sorted(loaded)}): choose another split")
        return loaded[split]
    return loaded


def open_source(path: str | Path, what: str = "data") -> RowSource:
    """A folder of parquet files (searched recursively, read in place), of JSON lines (read into memory: paths and
    text only), or a `datasets` `save_to_disk` folder (memory-mapped; a `DatasetDict`'s splits are concatenated)."""
    import datasets

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} '{path}' does not exist")
    if is_saved_dataset(path):
        loaded = datasets.load_from_disk(str(path))
        splits = list(loaded.values()) if isinstance(loaded, datasets.DatasetDict) else [loaded]
        tables = [ArrowSource.from_dataset(split, str(path)).table for split in splits]
        return ArrowSource(pa.concat_tables(tables, promote_options="default"), str(path), root=path)
    parquet = sorted(path.glob("**/*.parquet")) if path.is_dir() else [path] * (path.suffix == ".parquet")
    if parquet:
        return ParquetSource(parquet, root=path if path.is_dir() else path.parent)
    jsonl = sorted(path.glob("**/*.jsonl")) if path.is_dir() else [path] * (path.suffix == ".jsonl")
    if jsonl:
        import pyarrow.json as pajson

        tables = []
        for file in jsonl:
            try:
                tables.append(pajson.read_json(file))
            except pa.ArrowInvalid as error:
                raise ValueError(f"{file}: not JSON lines ({error})") from None
        return ArrowSource(pa.concat_tables(tables, promote_options="permissive"), str(path), root=path)
    raise FileNotFoundError(
        f"{what} '{path}': no save_to_disk dataset, .parquet or .jsonl files found (scripts/generate_synthetic.py "
        "writes shards/shard-*.parquet)"
    )


__all__ = [
    "LARGE_ROW_GROUP_BYTES",
    "ArrowSource",
    "ImageReference",
    "ParquetSource",
    "RowSource",
    "SourceImages",
    "image_presence",
    "is_bytes_type",
    "is_saved_dataset",
    "load_datasets",
    "open_source",
    "path_field",
    "resolve_references",
    "select_split",
    "struct_field",
]
