"""COCO Karpathy splits (`dataset_coco.json`): the one reader behind PAC-S++ training, the captioner and synthetic data.

The file is one JSON object, `{"images": [{"cocoid", "filepath", "filename", "split", "sentences": [{"sentid",
"raw", "tokens", ...}, ...]}, ...], "dataset": "coco"}` (140 MB for COCO). `json.loads` would turn it into over a
GiB of Python objects, tokens included; here each image entry is decoded on its own and its captions go straight into
Arrow columns, so the peak is the file's text and those columns.

Example:

```python
>>> import json, tempfile
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / "dataset_coco.json"
>>> entry = {"filepath": "val2014", "filename": "a.jpg", "split": "val", "cocoid": 7,
...          "sentences": [{"raw": "A cat.", "sentid": 1}, {"raw": "A pet.", "sentid": 2}]}
>>> _ = path.write_text(json.dumps({"images": [entry], "dataset": "coco"}))
>>> read_karpathy(path, "/coco", ["val"]).to_pylist()[1]
{'image': '/coco/val2014/a.jpg', 'caption': 'A pet.', 'cocoid': 7, 'sentid': 2, 'split': 'val'}
```
"""

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from ..errors import InputError

# One row per human caption, in file order.
KARPATHY_SCHEMA = pa.schema(
    [
        ("image", pa.string()),
        ("caption", pa.string()),
        ("cocoid", pa.int64()),
        ("sentid", pa.int64()),
        ("split", pa.string()),
    ]
)
EXPECTED_LAYOUT = '{"images": [{"cocoid", "filepath", "filename", "split", "sentences": [{"sentid", "raw"}]}]}'
KARPATHY_SPLITS = ("train", "restval", "val", "test")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_BATCH_ROWS = 65_536


class KarpathyFormatError(InputError):
    """The file is not a Karpathy `dataset_coco.json`; the message names the file, the entry and the layout."""


class _JSONStream:
    """A JSON text read 1 MiB at a time: values are decoded from a window that grows only across a value that straddles
    its end, so memory stays at one image entry, not the whole file (140 MB of text for COCO)."""

    def __init__(self, handle, path: Path):
        self.handle, self.path = handle, path
        self.text, self.position, self.offset, self.at_end = "", 0, 0, False
        self.decoder = json.JSONDecoder()

    def more(self) -> bool:
        chunk = self.handle.read(1 << 20)
        if not chunk:
            self.at_end = True
            return False
        self.offset += self.position
        self.text, self.position = self.text[self.position :] + chunk, 0
        return True

    def peek(self) -> str:
        """The next character that is not whitespace ('' at the end of the file)."""
        while True:
            self.position = _WHITESPACE.match(self.text, self.position).end()
            if self.position < len(self.text) or not self.more():
                return self.text[self.position : self.position + 1]

    def expect(self, characters: str) -> str:
        found = self.peek()
        if not found or found not in characters:
            shown = repr(self.text[self.position : self.position + 20]) if found else "the end of the file"
            raise KarpathyFormatError(
                f"{self.path}: not a Karpathy dataset_coco.json (expected {' or '.join(map(repr, characters))} at "
                f"character {self.offset + self.position}, found {shown}); expected {EXPECTED_LAYOUT}"
            )
        self.position += 1
        return found

    def value(self):
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.text, self.position)
            except json.JSONDecodeError as error:
                if self.more():
                    continue
                raise KarpathyFormatError(
                    f"{self.path}: not a Karpathy dataset_coco.json ({error.msg} at character "
                    f"{self.offset + error.pos}); expected {EXPECTED_LAYOUT}"
                ) from None
            if end == len(self.text) and not self.at_end and self.more():
                continue  # a number may go on in the next chunk
            self.position = end
            return value


def iter_karpathy_entries(path: str | Path) -> Iterator[dict]:
    """The image entries of a Karpathy JSON file, decoded one at a time (the top-level keys may come in any order)."""
    path = Path(path)
    try:
        handle = path.open(encoding="utf-8")
    except OSError as error:
        raise KarpathyFormatError(f"{path}: cannot be read ({error})") from None
    with handle:
        stream = _JSONStream(handle, path)
        try:
            stream.expect("{")
            found_images = False
            while stream.peek() != "}":
                key = stream.value()
                stream.expect(":")
                if key == "images":
                    found_images = True
                    stream.expect("[")
                    if stream.peek() == "]":
                        stream.expect("]")
                    else:
                        while True:
                            yield stream.value()
                            if stream.expect(",]") == "]":
                                break
                else:
                    stream.value()
                if stream.expect(",}") == "}":
                    break
        except UnicodeDecodeError as error:
            raise KarpathyFormatError(f"{path}: not UTF-8 text ({error})") from None
    if not found_images:
        raise KarpathyFormatError(
            f"{path}: not a Karpathy dataset_coco.json (no 'images' list); expected {EXPECTED_LAYOUT}"
        )


def read_karpathy(path: str | Path, image_root: str | Path, splits: Iterable[str]) -> pa.Table:
    """One row per human caption of the images in `splits`, in file order (`KARPATHY_SCHEMA`).

    `image` is `image_root / filepath / filename` (`filepath` may be absent, as in the Flickr files); `cocoid` falls
    back to `imgid` for files without COCO ids. `restval` is a split of its own: PAC-S++ and the captioner train on
    `("train", "restval")`. An entry without the fields this needs is an error naming the entry.
    """
    return pa.Table.from_batches(list(iter_karpathy_batches(path, image_root, splits)), schema=KARPATHY_SCHEMA)


def iter_karpathy_batches(
    path: str | Path, image_root: str | Path, splits: Iterable[str], batch_rows: int = _BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """[`read_karpathy`]'s rows as Arrow batches of at most `batch_rows` rows, so a caller can stream them."""
    path, image_root, splits = Path(path), Path(image_root), set(splits)
    unknown = splits - set(KARPATHY_SPLITS)
    if unknown:
        raise ValueError(f"unknown Karpathy split(s) {sorted(unknown)}: expected some of {list(KARPATHY_SPLITS)}")
    columns: dict[str, list] = {name: [] for name in KARPATHY_SCHEMA.names}
    for position, entry in enumerate(iter_karpathy_entries(path)):
        try:
            if entry["split"] not in splits:
                continue
            image = str(image_root / entry.get("filepath", "") / entry["filename"])
            cocoid = entry["cocoid"] if "cocoid" in entry else entry["imgid"]
            for sentence in entry["sentences"]:
                columns["image"].append(image)
                columns["caption"].append(sentence["raw"])
                columns["cocoid"].append(cocoid)
                columns["sentid"].append(sentence["sentid"])
                columns["split"].append(entry["split"])
        except (KeyError, TypeError) as error:
            raise KarpathyFormatError(
                f"{path}: image entry {position} lacks {error} (each needs cocoid, filename, split and sentences with "
                "sentid and raw)"
            ) from None
        if len(columns["caption"]) >= batch_rows:
            yield karpathy_batch(columns, path)
    if columns["caption"]:
        yield karpathy_batch(columns, path)


def karpathy_batch(columns: dict[str, list], path: Path) -> pa.RecordBatch:
    """The accumulated rows as one Arrow batch (the lists are emptied)."""
    try:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(columns[field.name], field.type) for field in KARPATHY_SCHEMA], schema=KARPATHY_SCHEMA
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
        raise KarpathyFormatError(
            f"{path}: a caption entry has a value of the wrong type ({error}): 'raw' must be a string, 'sentid' and "
            "'cocoid' integers"
        ) from None
    for values in columns.values():
        values.clear()
    return batch


__all__ = [
    "KARPATHY_SCHEMA",
    "KARPATHY_SPLITS",
    "KarpathyFormatError",
    "iter_karpathy_batches",
    "iter_karpathy_entries",
    "read_karpathy",
]
