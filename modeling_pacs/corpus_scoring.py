"""Corpus scoring's library part: streaming readers of caption corpora (JSON lines, CSV, parquet, `datasets`) as row
blocks for the job engine, reference cells, and the exactly-once merge of finished shards (`scripts/score_corpus.py`,
`modeling_pacs.cli.score_corpus`, drives them)."""

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from .caption_files import csv_records, name_row, row_lines, utf8_errors
from .errors import InputError, name_item
from .jobs import RowBlock, ShardedJob, write_text_atomically


class CorpusError(InputError):
    """A corpus row that cannot be scored; the message names the row (the CLI exits with it)."""


# Rows read from the input at a time; independent of the shard size, so reading never holds more than this.
READ_BLOCK_ROWS = 4096


def jsonl_blocks(path: Path) -> Iterator[RowBlock]:
    def decode(lines: list[tuple[int, str]], first_row: int) -> Callable[[int, int], list[dict]]:
        def rows(begin: int, end: int) -> list[dict]:
            decoded = []
            for offset, (line_number, line) in enumerate(lines[begin:end]):
                try:
                    decoded.append(json.loads(line))
                except json.JSONDecodeError as error:
                    where = f"row {first_row + begin + offset} (line {line_number})"
                    raise CorpusError(f"{path}: {where} is not valid JSON: {error}") from None
            return decoded

        return rows

    start = 0
    lines: list[tuple[int, str]] = []
    with utf8_errors(path), path.open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue  # blank lines are not rows
            lines.append((line_number, line))
            if len(lines) == READ_BLOCK_ROWS:
                yield RowBlock(start, len(lines), decode(lines, start))
                start, lines = start + len(lines), []
    if lines:
        yield RowBlock(start, len(lines), decode(lines, start))


def jsonl_row_count(path: Path) -> int:
    """Rows of a JSON lines file as `jsonl_blocks` reads them (blank lines are not rows)."""
    with utf8_errors(path), path.open(encoding="utf-8-sig") as handle:
        return sum(1 for line in handle if line.strip())


def list_blocks(rows: Iterator[dict]) -> Iterator[RowBlock]:
    """Blocks over an iterator of already decoded rows (CSV, streamed `datasets`)."""
    start = 0
    block: list[dict] = []
    for row in rows:
        block.append(row)
        if len(block) == READ_BLOCK_ROWS:
            yield RowBlock(start, len(block), lambda begin, end, block=block: block[begin:end])
            start, block = start + len(block), []
    if block:
        yield RowBlock(start, len(block), lambda begin, end, block=block: block[begin:end])


def csv_rows(path: Path) -> Iterator[dict]:
    # utf-8-sig: a byte-order mark (Excel writes one) must not rename the first column
    with utf8_errors(path), path.open(newline="", encoding="utf-8-sig") as handle:
        yield from (record for _, record in csv_records(handle))


def name_item_row(message: str, source: Path, first_row: int) -> str | None:
    """The core's error about item i of a call whose items are the input rows from `first_row` on, naming the input
    row instead: `image 34 ('a.png') does not exist` -> `row 1234 (line 1236 of corpus.csv): image ('a.png') does not
    exist`. None when the message names no item."""
    return name_item(message, lambda index: name_row(source, first_row + index))


def parquet_blocks(path: Path, columns: list[str]) -> Iterator[RowBlock]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    available = set(parquet.schema_arrow.names)
    start = 0
    for batch in parquet.iter_batches(batch_size=READ_BLOCK_ROWS, columns=[c for c in columns if c in available]):
        yield RowBlock(
            start, batch.num_rows, lambda begin, end, batch=batch: batch.slice(begin, end - begin).to_pylist()
        )
        start += batch.num_rows


def parquet_row_count(path: Path) -> int:
    """Rows of a parquet file, from its footer (nothing is decoded)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def dataset_blocks(dataset) -> Iterator[RowBlock]:
    """Blocks over a map-style `datasets.Dataset`: rows are only read for the shards this process scores."""

    def rows(block_start: int) -> Callable[[int, int], list[dict]]:
        def decode(begin: int, end: int) -> list[dict]:
            columns = dataset[block_start + begin : block_start + end]
            return [dict(zip(columns, values)) for values in zip(*columns.values())]

        return decode

    for start in range(0, len(dataset), READ_BLOCK_ROWS):
        yield RowBlock(start, min(READ_BLOCK_ROWS, len(dataset) - start), rows(start))


def undecoded_images(dataset, image_column: str):
    """`datasets.Image` columns as `{"bytes", "path"}` dicts: the core decodes them, and only once per image."""
    import datasets

    features = dataset.features or {}
    if isinstance(features.get(image_column), datasets.Image):
        return dataset.cast_column(image_column, datasets.Image(decode=False))
    return dataset


def parse_references(value, row: int, source: Path | None = None) -> list[str]:
    """A row's references: a list of strings, or a string (a JSON list, or one reference). An empty cell or an empty
    list is a row without references: its reference-based scores are null (`results.score_items`). An error names
    the row (and its line of `source`, a text file)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        except json.JSONDecodeError as error:
            where = name_row(source, row) if source else f"row {row}"
            raise CorpusError(f"{where}: references are not a valid JSON list: {error}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(reference, str) for reference in value):
        where = name_row(source, row) if source else f"row {row}"
        raise CorpusError(f"{where}: references must be a list of strings, got {json.dumps(value)[:80]}")
    return list(value)


def merge_shards(
    job: ShardedJob,
    num_rows: int,
    model_name: str,
    score_names: tuple,
    with_references: bool = False,
    counted: tuple = (),
) -> dict:
    """Concatenate the shard files in row order into scores.jsonl and write summary.json (streaming sums). A null
    score (a row without references, or an answer that gave no score: NaN in the shard) is left out of its mean;
    `with_references` adds the count of rows without references; `counted` names count columns (a judge's
    `failed_answers`) whose totals go in `totals`, and the null scores of failed answers in `num_failed`."""
    sums = dict.fromkeys(score_names, 0.0)
    counts = dict.fromkeys(score_names, 0)
    totals = dict.fromkeys(counted, 0)
    failed_scores = dict.fromkeys(score_names, 0)
    truncated = without_references = 0

    def merged_lines() -> Iterator[str]:
        nonlocal truncated, without_references
        for result in job.merged_rows(num_rows, job.read_jsonl_shard):
            failed = [name for name, value in result.items() if isinstance(value, float) and math.isnan(value)]
            result |= dict.fromkeys(failed)  # scores.jsonl is JSON: null, counted in summary.json's num_failed
            for name in failed:
                if name in failed_scores:
                    failed_scores[name] += 1
            for name in counted:
                totals[name] += result.get(name) or 0
            truncated += (result.get("truncated_tokens") or 0) > 0
            without_references += any(
                name in result and result[name] is None and name not in failed for name in score_names
            )
            for name in score_names:
                if result.get(name) is not None:
                    sums[name] += result[name]
                    counts[name] += 1
            yield json.dumps(result, ensure_ascii=False) + "\n"

    write_text_atomically(job.output_dir / "scores.jsonl", merged_lines())
    means = {name: sums[name] / counts[name] for name in score_names if counts[name]}
    summary = {
        "model": model_name,
        "num_items": num_rows,
        "num_shards": job.num_shards(num_rows),
        "mean": means,
        "num_truncated": truncated,  # rows whose caption the text encoder truncated
    }
    if with_references:
        summary["num_without_references"] = without_references  # their reference-based scores are null
    if counted:
        summary["totals"] = totals
        summary["num_failed"] = failed_scores  # per score, the rows whose answer gave none (null)
    write_text_atomically(job.output_dir / "summary.json", [json.dumps(summary, indent=2) + "\n"])
    job.remove_temporaries()  # left by a process killed mid-write; every writer has finished by now
    return summary


__all__ = [
    "CorpusError",
    "READ_BLOCK_ROWS",
    "csv_rows",
    "name_item_row",
    "name_row",
    "row_lines",
    "dataset_blocks",
    "jsonl_blocks",
    "jsonl_row_count",
    "list_blocks",
    "merge_shards",
    "parquet_blocks",
    "parquet_row_count",
    "parse_references",
    "undecoded_images",
]
