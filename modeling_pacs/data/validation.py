"""Check training data before any step runs: the path exists, the split has rows, captions are non-empty strings and
every image decodes, or, with an explicit skip policy, rows whose image does not decode are dropped, logged and counted.

Every training command (`train_pacs`, `train_polos`, `train_pearl`, `train_captioner`) calls these on its splits
right after reading them, before a model is built; a problem raises one [`TrainingDataError`] that names the file,
the split, the row, the column and the fix (docs/concepts/corrupt-files.md).

Image check: each image is opened with PIL and decoded, JPEGs in draft mode (DCT scaling to about
`IMAGE_CHECK_SIZE` pixels: 1/8 of the decoding work, and a truncated or garbled file still fails), in a streaming
pass over the rows (`IMAGE_CHECK_CHUNK` at a time, threads decode in parallel) with a progress bar; no image is
kept in memory.
"""

import io
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import PIL.Image

from ..errors import InputError

logger = logging.getLogger(__name__)

# JPEGs are decoded at the smallest DCT scale at or above this size: enough to find truncated or garbled data.
IMAGE_CHECK_SIZE = 64
# Rows read and checked per step of the streaming pass.
IMAGE_CHECK_CHUNK = 256
# Bad rows named in the skip log line.
ROWS_SHOWN = 10
EMPTY_FIX = "point to the file or split that holds the data"
CAPTION_FIX = "fill in the caption or drop the row"
SKIP_FIX = "replace or remove the file, or pass --skip_bad_images to drop rows whose image does not decode"


class TrainingDataError(InputError):
    """Training data that cannot be trained on; the message names the file, the split, the row and the fix."""


def data_error(
    file: Any, split: str, problem: str, fix: str, row: int | None = None, column: str | None = None
) -> TrainingDataError:
    where = f"{file} (split '{split}')"
    if row is not None:
        where += f", row {row}"
    if column is not None:
        where += f", column '{column}'"
    return TrainingDataError(f"{where}: {problem}. Fix: {fix}")


def check_data_path(path: str | os.PathLike | None, option: str) -> Path | None:
    """`path` as a Path; a path that does not exist raises naming the option."""
    if path is None:
        return None
    if not Path(path).exists():
        raise TrainingDataError(
            f"{option} '{path}' does not exist. Fix: check the path (relative paths start from {os.getcwd()})"
        )
    return Path(path)


def looks_like_local_path(name: str | os.PathLike) -> bool:
    """A name that can only be a local path (not a Hub id such as `owner/name`)."""
    text = os.fspath(name)
    return text.startswith((".", "/", "~")) or "\\" in text or text.count("/") > 1 or Path(text).exists()


def check_not_empty(count: int, file: Any, split: str) -> None:
    if count == 0:
        raise data_error(file, split, "the split has no rows", EMPTY_FIX)


def check_caption(value: Any, file: Any, split: str, row: int, column: str) -> str:
    """A non-empty caption string, else a `TrainingDataError` for its row."""
    if not isinstance(value, str):
        problem = f"expected a caption string, got {type(value).__name__} ({str(value)[:60]!r})"
        raise data_error(file, split, problem, CAPTION_FIX, row, column)
    if not value.strip():
        raise data_error(
            file, split, f"the caption is empty ({value!r})", "fill in the caption or drop the row", row, column
        )
    return value


def check_captions(rows: Iterable[tuple[int, Any]], file: Any, split: str, column: str, as_list: bool = False) -> None:
    """Check `(row, value)` pairs: a caption string each, or with `as_list` a non-empty list of them."""
    for row, value in rows:
        if not as_list:
            check_caption(value, file, split, row, column)
            continue
        if not isinstance(value, (list, tuple)) or not value:
            problem = f"expected a non-empty list of captions, got {str(value)[:60]!r}"
            raise data_error(file, split, problem, "give each image at least one caption or drop the row", row, column)
        for caption in value:
            check_caption(caption, file, split, row, column)


def decode_image(image: Any) -> None:
    """Open and decode one image (a path, bytes, a `datasets.Image` dict or a PIL image); raise on failure."""
    if isinstance(image, dict):
        image = image["bytes"] if image.get("bytes") is not None else image.get("path")
    if isinstance(image, PIL.Image.Image):
        return
    if isinstance(image, (bytes, bytearray, memoryview)):
        handle = io.BytesIO(bytes(image))
    elif isinstance(image, (str, os.PathLike)):
        if not Path(image).is_file():
            raise FileNotFoundError(f"image '{image}' does not exist")
        handle = image
    else:
        raise TypeError(f"expected an image (path, bytes or datasets.Image), got {type(image).__name__}")
    with PIL.Image.open(handle) as opened:
        opened.draft("RGB", (IMAGE_CHECK_SIZE, IMAGE_CHECK_SIZE))
        opened.load()


def image_problem(image: Any) -> str | None:
    try:
        decode_image(image)
    except (OSError, ValueError, TypeError, SyntaxError, PIL.Image.DecompressionBombError) as error:
        shown = f"'{image}'" if isinstance(image, (str, os.PathLike)) else describe(image)
        return f"image {shown} could not be decoded ({type(error).__name__}: {error})"
    return None


def describe(image: Any) -> str:
    if isinstance(image, dict) and image.get("path"):
        return f"'{image['path']}'"
    if isinstance(image, (bytes, bytearray, memoryview)) or isinstance(image, dict):
        size = len(image) if not isinstance(image, dict) else len(image.get("bytes") or b"")
        return f"of {size} bytes"
    return type(image).__name__


def check_images(
    rows: Sequence[int],
    read: Callable[[Sequence[int]], list[Any]],
    file: Any,
    split: str,
    column: str,
    skip_bad_images: bool = False,
    workers: int | None = None,
) -> list[int]:
    """Decode the image of every row in a streaming pass; return the rows whose image does not decode.

    `read(positions)` gives the images at those positions of `rows` (paths, bytes or dicts), one chunk at a time.
    Without `skip_bad_images` the first bad image raises a `TrainingDataError`; with it, bad rows are collected,
    logged with their count, and returned for the caller to drop.
    """
    from tqdm.auto import tqdm

    workers = workers or min(8, os.cpu_count() or 1)
    bad = []
    progress = tqdm(total=len(rows), desc=f"checking images of {split} ({column})", unit="img", leave=False)
    with ThreadPoolExecutor(workers) as pool:
        for start, problems in chunked_problems(rows, read, pool):
            for offset, problem in enumerate(problems):
                if problem is None:
                    continue
                row = rows[start + offset]
                if not skip_bad_images:
                    progress.close()
                    raise data_error(file, split, problem, SKIP_FIX, row, column)
                bad.append(row)
            progress.update(len(problems))
    progress.close()
    if bad:
        logger.warning(
            f"{file} (split '{split}'): skipped {len(bad)} of {len(rows)} rows whose '{column}' image does not decode "
            f"(--skip_bad_images); first rows: {bad[:ROWS_SHOWN]}"
        )
    return bad


def chunked_problems(
    rows: Sequence[int], read: Callable[[Sequence[int]], list[Any]], pool: ThreadPoolExecutor
) -> Iterator[tuple[int, list[str | None]]]:
    for start in range(0, len(rows), IMAGE_CHECK_CHUNK):
        positions = range(start, min(start + IMAGE_CHECK_CHUNK, len(rows)))
        yield start, list(pool.map(image_problem, read(positions)))


__all__ = [
    "IMAGE_CHECK_SIZE",
    "TrainingDataError",
    "check_caption",
    "check_captions",
    "check_data_path",
    "check_images",
    "check_not_empty",
    "data_error",
    "decode_image",
    "looks_like_local_path",
]
