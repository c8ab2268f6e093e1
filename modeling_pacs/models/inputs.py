"""Input validation and the exact text and image pipelines of the official PAC-S code (SPEC §1).

Images: any PIL mode is converted to RGB first, then resized (shorter side, bicubic), center-cropped and normalised
exactly as torchvision's `Resize` / `CenterCrop` / `ToTensor` / `Normalize` do in the official code. transformers'
`CLIPImageProcessor` crops with `int()` where torchvision rounds, so it differs by one pixel row on some sizes.
"""

import functools
import hashlib
import html
import importlib.util
import io
import os
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, NamedTuple, Union

import numpy as np
import PIL.Image
import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# Images more elongated than this are refused (see `check_aspect_ratio`): the resize before the centre crop would
# otherwise cost memory in proportion to the ratio (a 51 KiB 1x15000 PNG needed 3 GiB).
MAX_ASPECT_RATIO = 200

ImageInput = Union[str, os.PathLike, bytes, bytearray, PIL.Image.Image, np.ndarray, torch.Tensor, dict]


# ----------------------------------------------------------------------------------------------------- numbers
def check_positive_int(value: Any, name: str) -> int:
    """Return `value` if it is an integer >= 1, else raise naming the parameter (e.g. a batch size of 0 or -1)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_positive_number(value: Any, name: str) -> float:
    """Return `value` as a float if it is a finite number > 0, else raise naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


# ----------------------------------------------------------------------------------------------------- texts
def check_captions(captions: Sequence[Any], what: str = "candidate") -> list[str]:
    """Return `captions` as a list of strings, or raise naming the first item that is not a string."""
    if isinstance(captions, str):
        raise TypeError(f"{what}s must be a list of strings, got a single string: wrap it in a list")
    captions = list(captions)
    for index, caption in enumerate(captions):
        if not isinstance(caption, str):
            raise TypeError(f"{what} {index} is {type(caption).__name__} ({caption!r}), expected a string")
    return captions


def check_references(
    references: Sequence[Any],
    num_candidates: int,
    empty_fix: str = "drop the item, or use the reference-free score",
    allow_empty: bool = False,
) -> list[list[str]]:
    """Validate references: one list of strings (or one string) per candidate.

    An empty list (or None) is an error naming `empty_fix`, what the user should do (metrics without a
    reference-free mode say so), unless `allow_empty` (Pearl: that item is scored reference-free).
    """
    if isinstance(references, str):
        raise TypeError("references must be a list with one list of reference strings per candidate")
    references = list(references)
    if len(references) != num_candidates:
        raise ValueError(
            f"got {len(references)} reference lists for {num_candidates} candidates: pass one list of references "
            "per candidate (or references=None for the reference-free score)"
        )
    checked = []
    for index, item_references in enumerate(references):
        if isinstance(item_references, str):
            item_references = [item_references]
        if item_references is None and allow_empty:
            item_references = []
        if item_references is not None and not isinstance(item_references, (list, tuple)):
            raise TypeError(f"references of item {index} are {type(item_references).__name__}, expected a list of str")
        if not allow_empty and (item_references is None or len(item_references) == 0):
            raise ValueError(
                f"item {index} has an empty reference list: a reference-based score needs at least one reference "
                f"per item ({empty_fix})"
            )
        for ref_index, reference in enumerate(item_references):
            if not isinstance(reference, str):
                raise TypeError(
                    f"reference {ref_index} of item {index} is {type(reference).__name__} ({reference!r}), "
                    "expected a string"
                )
        checked.append(list(item_references))
    return checked


def clean_text(text: str) -> str:
    """The original CLIP tokenizer's cleaning: ftfy, double html-unescape, whitespace collapse (case is left to BPE)."""
    if importlib.util.find_spec("ftfy") is not None:
        import ftfy  # optional, as in transformers 4's CLIP tokenizer; `pacs-pp` depends on it

        text = ftfy.fix_text(text)
    else:
        logger.warning_once("ftfy is not installed: text is not ftfy-cleaned, unlike the original CLIP tokenizer")
    return " ".join(html.unescape(html.unescape(text)).split())


def prepare_caption(caption: str, prompt_prefix: str) -> str:
    """Whitespace-normalise, prepend the prompt prefix, and clean as the original tokenizer does."""
    return clean_text(prompt_prefix + " ".join(caption.split()))


# ------------------------------------------------------------------------------------------------ long captions
# How captions longer than the text encoder's context are read (docs/guides/long-captions.md): "truncate" reads the
# first tokens only, as the official code does; "chunks" reads every token, in pieces that each fit.
LONG_CAPTION_MODES = ("truncate", "chunks")
# A word ending a sentence: . ! or ? possibly followed by closing quotes or brackets.
SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")
TRUNCATION_FIX = (
    "score them in pieces with long_captions='chunks' (command line: --long-captions chunks), or use a Long-CLIP "
    "model (pacs-pp convert-longclip, 248 tokens)"
)


class LongCaptionWarning(UserWarning):
    """A caption or reference was longer than the text encoder's context and was truncated."""


def check_long_captions(mode: Any) -> str:
    """`mode` if it is one of `LONG_CAPTION_MODES`, else a `ValueError` naming them."""
    if mode not in LONG_CAPTION_MODES:
        raise ValueError(
            f"long_captions must be one of {list(LONG_CAPTION_MODES)}, got {mode!r}: 'truncate' reads the first "
            "tokens as the official code does, 'chunks' reads every token in pieces (docs/guides/long-captions.md)"
        )
    return mode


def sentence_starts(words: Sequence[str]) -> list[bool]:
    """For each whitespace word, whether a sentence begins with it (the first word, or one after . ! or ?)."""
    return [index == 0 or bool(SENTENCE_END.search(words[index - 1])) for index in range(len(words))]


class CaptionPiece(NamedTuple):
    """One piece of a long caption: it is read from word `first_word` on, truncated to the context like any caption
    (`end_word` is the first word it cannot reach), and brings `new_tokens` tokens that no earlier piece read."""

    first_word: int
    end_word: int
    new_tokens: int


def plan_caption_pieces(
    word_tokens: Sequence[int], starts: Sequence[bool], capacity: int
) -> tuple[list[CaptionPiece], int]:
    """Cut a caption of words (`word_tokens[i]` tokens each) into pieces of at most `capacity` tokens.

    The first piece is the caption itself, truncated exactly as the encoder truncates it. Each further piece begins at
    the start of the sentence that holds the first unread token, when that re-reads at most half a window; otherwise
    (a run-on sentence) at the start of that token's word. A word too long to reach from its own start is skipped
    (its unread tokens are dropped). Pieces depend only on the words before their end, so appending words never
    changes an earlier piece: a caption that fits is one piece, and one more token adds a piece of weight 1.

    Returns:
        The pieces, and how many tokens no piece reads (0 unless a single word is longer than `capacity`).
    """
    positions = np.concatenate([[0], np.cumsum(word_tokens, dtype=np.int64)])
    total = int(positions[-1])
    num_words = len(word_tokens)
    first_word, covered, dropped, pieces = 0, 0, 0, []
    while True:
        reach = int(positions[first_word]) + capacity
        end_word = min(int(np.searchsorted(positions, reach, side="left")), num_words)
        end_word = max(end_word, first_word + 1)
        pieces.append(CaptionPiece(first_word, end_word, min(reach, total) - covered))
        covered = min(reach, total)
        if covered >= total:
            return pieces, dropped
        word = int(np.searchsorted(positions, covered, side="right")) - 1
        sentence = word
        while not starts[sentence]:
            sentence -= 1
        if covered - positions[sentence] <= capacity // 2:
            first_word = sentence
        elif covered - positions[word] < capacity:
            first_word = word
        else:
            first_word = word + 1
            dropped += int(positions[first_word]) - covered
            covered = int(positions[first_word])
            if covered >= total:
                return pieces, dropped


# ----------------------------------------------------------------------------------------------------- images
def describe_image(image: Any) -> str:
    """A short description of an image input for error messages."""
    if isinstance(image, (str, os.PathLike)):
        return f"'{os.fspath(image)}'"
    if isinstance(image, (bytes, bytearray, memoryview)):
        return f"{len(image)} bytes"
    if isinstance(image, dict):
        return f"dict with keys {sorted(image)}"
    shape = getattr(image, "shape", None) or getattr(image, "size", None)
    return f"{type(image).__name__} {tuple(shape) if shape is not None else ''}".strip()


def image_key(image: Any) -> Any:
    """A key under which identical images collide, so each distinct image is encoded once per call."""
    if isinstance(image, (str, os.PathLike)):
        return ("path", os.path.abspath(os.fspath(image)))
    if isinstance(image, dict) and image.get("bytes") is None and image.get("path"):
        return ("path", os.path.abspath(image["path"]))
    if isinstance(image, dict):
        return ("bytes", hashlib.blake2b(bytes(image["bytes"]), digest_size=16).digest())
    if isinstance(image, (bytes, bytearray, memoryview)):
        return ("bytes", hashlib.blake2b(bytes(image), digest_size=16).digest())
    if isinstance(image, PIL.Image.Image):
        return ("pil", id(image))
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).digest()
        return ("array", image.shape, str(image.dtype), digest)
    return ("object", id(image))


def to_rgb(image: PIL.Image.Image) -> PIL.Image.Image:
    """Convert any PIL mode to 8-bit RGB; 16/32-bit integer images are rescaled rather than clipped."""
    if image.mode == "RGB":
        return image
    if image.mode.startswith("I"):
        values = np.asarray(image).astype(np.float64)
        image = PIL.Image.fromarray(np.clip(np.round(values / 257.0), 0, 255).astype(np.uint8))
    elif image.mode == "F":
        image = PIL.Image.fromarray(np.clip(np.round(np.asarray(image)), 0, 255).astype(np.uint8))
    return image.convert("RGB")


def array_to_pil(array: np.ndarray, index: int) -> PIL.Image.Image:
    """HWC or HW array (uint8 0-255, or float 0-1) -> PIL image; CHW tensors of 1 or 3 channels are transposed."""
    if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3, 4):
        array = array.transpose(1, 2, 0)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        raise ValueError(f"image {index} is an array of shape {array.shape}: expected HxW, HxWx3 or HxWx4 (or 3xHxW)")
    if np.issubdtype(array.dtype, np.floating):
        if array.size and (array.min() < 0 or array.max() > 1):
            raise ValueError(f"image {index} is a float array with values outside [0, 1]: scale it or pass uint8")
        array = np.round(array * 255)
    return PIL.Image.fromarray(np.clip(array, 0, 255).astype(np.uint8))


def to_rgb_on_white(image: PIL.Image.Image) -> PIL.Image.Image:
    """transformers' `convert_to_rgb`: transparency is composited onto white; other modes go through `to_rgb`."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        image = image.convert("RGBA")
        background = PIL.Image.new("RGBA", image.size, (255, 255, 255, 255))
        return PIL.Image.alpha_composite(background, image).convert("RGB")
    return to_rgb(image)


def load_image(image: ImageInput, index: int = 0, composite_alpha: bool = False) -> PIL.Image.Image:
    """Decode one image input (path, bytes, PIL image, array, or a `datasets.Image` dict) into RGB.

    Transparency is dropped, as torchvision does, or with `composite_alpha=True` composited onto white, as
    transformers' image processors do. Errors name the item index and the input, e.g.
    `image 3 ('cat.jpg') does not exist`.
    """
    convert = to_rgb_on_white if composite_alpha else to_rgb
    if isinstance(image, dict):
        image = image["bytes"] if image.get("bytes") is not None else image.get("path")
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.is_file():
            raise FileNotFoundError(f"image {index} ('{path}') does not exist or is not a file")
        try:
            with PIL.Image.open(path) as opened:
                opened.load()
                return convert(opened)
        except (OSError, ValueError, PIL.Image.DecompressionBombError) as error:
            raise ValueError(f"image {index} ('{path}') could not be decoded: {error}") from error
    if isinstance(image, (bytes, bytearray, memoryview)):
        try:
            with PIL.Image.open(io.BytesIO(bytes(image))) as opened:
                opened.load()
                return convert(opened)
        except (OSError, ValueError, PIL.Image.DecompressionBombError) as error:
            raise ValueError(f"image {index} ({len(image)} bytes) could not be decoded: {error}") from error
    if isinstance(image, PIL.Image.Image):
        return convert(image)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        return convert(array_to_pil(image, index))
    raise TypeError(
        f"image {index} has unsupported type {type(image).__name__}: pass a path, bytes, a PIL image or an array"
    )


def preprocess_image(image: PIL.Image.Image, size: int) -> torch.Tensor:
    """torchvision `Resize(size, BICUBIC)` + `CenterCrop(size)` + `ToTensor` + `Normalize` on an RGB PIL image."""
    width, height = image.size
    if width <= height:
        new_width, new_height = size, int(size * height / width)
    else:
        new_width, new_height = int(size * width / height), size
    if (new_width, new_height) != (width, height):
        image = image.resize((new_width, new_height), PIL.Image.BICUBIC)
    top = int(round((new_height - size) / 2.0))
    left = int(round((new_width - size) / 2.0))
    image = image.crop((left, top, left + size, top + size))
    pixels = np.asarray(image, dtype=np.uint8)
    table = normalisation_table()
    normalised = np.empty((3, size, size), dtype=np.float32)
    for channel in range(3):
        np.take(table[channel], pixels[:, :, channel], out=normalised[channel])
    return torch.from_numpy(normalised)


@functools.cache
def normalisation_table() -> np.ndarray:
    """`[3, 256]` float32: `(value / 255 - mean) / std` per channel for every 8-bit value, computed with the same fp32
    operations as `ToTensor` + `Normalize`, so a lookup gives bit-identical pixels.

    A lookup in NumPy runs on the calling thread: the per-pixel torch operations it replaces started torch's
    intra-op thread pool for every image (from every decoder thread), which made preprocessing 10x slower than
    decoding on a loaded 2-core machine.
    """
    levels = torch.arange(256, dtype=torch.uint8).float().div_(255)
    mean = torch.tensor(OPENAI_CLIP_MEAN).view(3, 1)
    std = torch.tensor(OPENAI_CLIP_STD).view(3, 1)
    table = ((levels.view(1, 256) - mean) / std).numpy()
    table.flags.writeable = False
    return table


def check_aspect_ratio(image: PIL.Image.Image, index: int, description: str):
    """Refuse images so elongated that the resize (shorter side to 224) would allocate an enormous image.

    The exact pipeline resizes the whole image before the centre crop (torchvision's order); resampling only the
    cropped window would change pixels (Pillow's box path rounds differently), so extreme shapes are refused instead.
    """
    width, height = image.size
    ratio = max(width, height) / max(1, min(width, height))
    if ratio > MAX_ASPECT_RATIO:
        raise ValueError(
            f"image {index} ({description}) is {width}x{height}: its aspect ratio {ratio:.0f}:1 exceeds the limit of "
            f"{MAX_ASPECT_RATIO}:1 (resizing its shorter side to the model's input size would need "
            f"{ratio:.0f}x that size along the other side). Crop or pad it to a less extreme shape"
        )


def prefetch_batches(
    pool: Executor, function: Callable[[int], Any], batches: Sequence[Sequence[int]]
) -> Iterator[list]:
    """Yield `[function(i) for i in batch]` for each batch, in order, computed in `pool`; the next batch is already
    submitted while the caller works on the current one (decoding overlaps encoding). Errors are raised in order,
    when their batch is reached.
    """
    pending = deque()
    remaining = iter(batches)

    def submit_next():
        batch = next(remaining, None)
        if batch is not None:
            pending.append([pool.submit(function, index) for index in batch])

    submit_next()
    while pending:
        submit_next()
        yield [future.result() for future in pending.popleft()]


def load_and_preprocess(image: ImageInput, index: int, size: int) -> torch.Tensor:
    """Decode and preprocess one image into a `[3, size, size]` tensor."""
    decoded = load_image(image, index)
    check_aspect_ratio(decoded, index, describe_image(image))
    return preprocess_image(decoded, size)


def preprocess_image_squashed(
    image: PIL.Image.Image, height: int, width: int, mean: Sequence[float], std: Sequence[float]
) -> torch.Tensor:
    """SigLIP's pipeline on an RGB PIL image: bicubic resize to `height x width` (aspect ratio not kept, no crop),
    scale to `[0, 1]`, normalise; as `SiglipImageProcessor` does."""
    if height <= 0 or width <= 0:
        raise ValueError(f"the image size must be positive, got height={height}, width={width}")
    if image.size != (width, height):
        image = image.resize((width, height), PIL.Image.BICUBIC)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255)
    return (pixels - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


def load_and_preprocess_squashed(
    image: ImageInput, index: int, height: int, width: int, mean: Sequence[float], std: Sequence[float]
) -> torch.Tensor:
    """Decode (transparency onto white) and preprocess one image into a `[3, height, width]` tensor, SigLIP-style."""
    return preprocess_image_squashed(load_image(image, index, composite_alpha=True), height, width, mean, std)


def deduplicate(items: list, key) -> tuple[list, torch.Tensor, list[int]]:
    """Unique items in first-seen order, for each input item the index of its unique copy, and for each unique item
    the position of its first occurrence in `items`."""
    positions: dict = {}
    unique = []
    first_seen = []
    index = []
    for position, item in enumerate(items):
        item_key = key(item)
        if item_key not in positions:
            positions[item_key] = len(unique)
            unique.append(item)
            first_seen.append(position)
        index.append(positions[item_key])
    return unique, torch.tensor(index, dtype=torch.long), first_seen


def check_media_count(media: list, candidates: list[str], kind: str = "image", work: str = "encoded") -> None:
    """One image (or video) per candidate caption, or an error saying how to pass them."""
    if len(media) != len(candidates):
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(
            f"got {len(media)} {kind}s and {len(candidates)} candidates: pass exactly one {kind} per candidate "
            f"(repeat {article} {kind} for each of its captions; repeated {kind}s are {work} once)"
        )


__all__ = [
    "LONG_CAPTION_MODES",
    "TRUNCATION_FIX",
    "CaptionPiece",
    "LongCaptionWarning",
    "check_long_captions",
    "plan_caption_pieces",
    "sentence_starts",
    "check_media_count",
    "deduplicate",
    "OPENAI_CLIP_MEAN",
    "OPENAI_CLIP_STD",
    "check_captions",
    "check_positive_int",
    "check_positive_number",
    "check_references",
    "clean_text",
    "describe_image",
    "image_key",
    "load_and_preprocess",
    "load_and_preprocess_squashed",
    "load_image",
    "normalisation_table",
    "prefetch_batches",
    "prepare_caption",
    "preprocess_image",
    "preprocess_image_squashed",
    "to_rgb_on_white",
]
