"""Input validation and the exact text and image pipelines of the official PAC-S code (docs/spec/pacs.md#metric).

Images: any PIL mode is converted to RGB first, then resized (shorter side, bicubic), center-cropped and normalised
exactly as torchvision's `Resize` / `CenterCrop` / `ToTensor` / `Normalize` do in the official code. transformers'
`CLIPImageProcessor` crops with `int()` where torchvision rounds, so it differs by one pixel row on some sizes.
"""

import copy
import functools
import hashlib
import html
import importlib.util
import io
import os
import re
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Union

import numpy as np
import PIL.Image
import torch
from transformers.utils import logging

from .media import URL_SCHEMES, is_url  # noqa: F401 (re-exported: the engine's names for them)

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
    return [fix_surrogates(caption) for caption in captions]


SURROGATE = re.compile("[\ud800-\udfff]")


def fix_surrogates(text: str) -> str:
    """`text` with UTF-16 surrogates mended, as ftfy does for CLIP's tokenizer: a pair becomes its character, a lone
    one U+FFFD. Such strings (from JSON escapes like "\\ud800") are no UTF-8 text, and Rust tokenizers refuse them."""
    if not SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


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
        checked.append([fix_surrogates(reference) for reference in item_references])
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
# Polos and Pearl have no piecewise mode: their encoders (RoBERTa, BLIP-2, BEiT-3, Stella) were trained and the heads
# fitted on whole captions, and a piecewise mean would be a different metric.
SHORTEN_FIX = (
    "shorten the captions, or use a PAC-S++/CLIP-S model with long_captions='chunks' or a Long-CLIP model "
    "(pacs-pp convert-longclip, 248 tokens)"
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
# The one validator of image inputs is `load_image`: every container (path, bytes, PIL image, NumPy array, torch
# tensor, `datasets.Image` dict) is decoded to 8-bit RGB by the rules below, or refused with an `ImageInputError`
# naming the item, what it is and what to pass instead. docs/concepts/image-inputs.md shows `image_input_table()`
# (tests/models/test_image_inputs.py keeps the page, the table and the behaviour in step).
@dataclass(frozen=True)
class PixelRule:
    """How arrays and tensors of some dtypes become 8-bit pixels: accepted when every value is finite and lies in
    `[low, high]`, then mapped by `to_uint8`; `values` and `scaling` say the same in words for the docs table."""

    dtypes: tuple[str, ...]
    low: float
    high: float
    values: str
    scaling: str
    to_uint8: Callable[[np.ndarray], np.ndarray]
    fix: str = ""  # what to do with values outside the range, for the error message


PIXEL_RULES = (
    PixelRule(("uint8",), 0, 255, values="0-255", scaling="used as is", to_uint8=lambda array: array),
    # Pillow decodes 16-bit RGB(A)/LA PNG files to their high byte; 16-bit grayscale (mode I;16) gets the same here.
    PixelRule(
        ("uint16",), 0, 65535, values="0-65535", scaling="high byte kept (v >> 8), as 16-bit PNG files are decoded",
        to_uint8=lambda array: (array >> 8).astype(np.uint8),
    ),
    PixelRule(
        ("int8", "int16", "int32", "int64", "uint32", "uint64"), 0, 255, values="0-255", scaling="used as is",
        to_uint8=lambda array: array.astype(np.uint8),
        fix="convert to uint8 (values 0-255), or pass uint16 for 16-bit data",
    ),
    PixelRule(
        ("float16", "bfloat16", "float32", "float64"), 0.0, 1.0, values="[0, 1]",
        scaling="round(v * 255), half to even",
        to_uint8=lambda array: np.round(array.astype(np.float64) * 255).astype(np.uint8),
        fix="divide 0-255 values by 255 (or pass uint8), and clip or rescale other ranges",
    ),
)  # fmt: skip
PIXEL_RULE_OF_DTYPE = {dtype: rule for rule in PIXEL_RULES for dtype in rule.dtypes}
ACCEPTED_DTYPES = tuple(PIXEL_RULE_OF_DTYPE)
CHANNELS = (1, 3, 4)  # grayscale, RGB, RGBA (alpha dropped, or composited onto white for SigLIP)
# Each container's convention (NumPy and PIL: channels last; torch and torchvision: channels first). A shape that
# the convention does not explain is refused, naming both readings, never guessed.
ARRAY_LAYOUTS = {
    "NumPy array": ("HxW", "HxWxC", "1xHxWxC"),
    "torch tensor": ("HxW", "CxHxW", "1xCxHxW"),
}
REFUSED_LAYOUTS = (
    ("{other}, the other container's layout", "refused, naming both readings and the conversion"),
    ("a batch Nx... with N > 1", "refused: pass one image per caption, as a list"),
    ("a dimension of 0", "refused: an empty image"),
    ("C not in 1, 3, 4, or another number of dimensions", "refused"),
)
# (container, dtype or mode, values, layout, what happens) beyond arrays and tensors.
OTHER_IMAGE_RULES = (
    ("PIL image", "modes 1, L, P, LA, RGB, RGBA, CMYK, YCbCr, ...", "any", "-", "converted to RGB by Pillow"),
    ("PIL image", "modes I;16, I;16B, I;16L", "0-65535", "-", "the uint16 rule (v >> 8)"),
    ("PIL image", "mode I decoded from a file", "0-65535", "-", "the uint16 rule (v >> 8)"),
    ("PIL image", "mode I made in memory", "0-255", "-", "the int32 rule (used as is)"),
    ("PIL image", "mode F", "[0, 1]", "-", "the float32 rule (round(v * 255))"),
    ("PIL image", "modes I, F", "outside the mode's range, NaN, +-inf", "-", "refused"),
    ("PIL image", "closed, unreadable, or 0 pixels", "-", "-", "refused"),
    ("path, bytes", "an image file Pillow reads", "-", "-", "decoded by Pillow, then the PIL image rules"),
    ("path", "a URL (http://, s3://, hf://, ...)", "-", "-", "refused: nothing is downloaded"),
    ("path", "a missing file", "-", "-", "FileNotFoundError"),
    ("datasets.Image dict", "{'bytes': b, ...}", "-", "-", "b, by the bytes rule"),
    ("datasets.Image dict", "{'bytes': None, 'path': p}", "-", "-", "p, by the path rule"),
    ("datasets.Image dict", "no usable bytes or path, or a URL", "-", "-", "refused"),
)
WHAT_TO_PASS = "pass uint8 values in 0-255 or floats in [0, 1]"


def image_input_table() -> list[tuple[str, str, str, str, str]]:
    """The rules of `load_image` as rows (container, dtype, values, layout, what happens): docs/concepts/image-inputs.md
    shows exactly these rows."""
    rows = []
    for container, layouts in ARRAY_LAYOUTS.items():
        accepted = ", ".join(layouts)
        other = next(other[1] for name, other in ARRAY_LAYOUTS.items() if name != container)
        for rule in PIXEL_RULES:
            rows.append((container, ", ".join(rule.dtypes), rule.values, accepted, rule.scaling))
        rows.append((container, "any of the above", "outside its range, NaN, +-inf", "any", "refused"))
        rows.append((container, "bool, complex, object, float128, float8, any other", "any", "any", "refused"))
        rows.extend(
            (container, "any", "any", layout.format(other=other), outcome) for layout, outcome in REFUSED_LAYOUTS
        )
    rows.extend(OTHER_IMAGE_RULES)
    return rows


class ImageInputError(ValueError):
    """An image input that the rules of `load_image` refuse; the message names the item, what it is and the fix."""


def describe_image(image: Any) -> str:
    """A short description of an image input for error messages."""
    if isinstance(image, (str, os.PathLike)):
        return f"'{os.fspath(image)}'"
    if isinstance(image, (bytes, bytearray, memoryview)):
        return f"{len(image)} bytes"
    if isinstance(image, dict):
        return f"dict with keys {sorted(map(str, image))}"
    if isinstance(image, PIL.Image.Image):
        return f"a PIL image, mode {image.mode}, {image.size[0]}x{image.size[1]}"
    if isinstance(image, (np.ndarray, torch.Tensor)):
        container = "torch tensor" if isinstance(image, torch.Tensor) else "NumPy array"
        dtype = dtype_name(image)
        return f"{'an' if dtype[0] in 'io' else 'a'} {dtype} {container} of shape {tuple(image.shape)}"
    return type(image).__name__


def image_source(image: Any, name: str) -> Any:
    """What an image input refers to: a `datasets.Image` dict becomes its bytes or its path, a path stays a path.

    Refused with an `ImageInputError`: a dict with neither usable bytes nor a path, a dict or path naming a URL
    (nothing is downloaded).
    """
    if isinstance(image, dict):
        unknown = sorted(map(str, set(image) - {"bytes", "path"}))
        data, path = image.get("bytes"), image.get("path")
        if unknown and data is None and path is None:
            raise ImageInputError(
                f"{name} is a dict with keys {sorted(map(str, image))}: an image dict is a datasets.Image value "
                "{'bytes': ..., 'path': ...}; pass the image itself (a path, bytes, a PIL image or an array)"
            )
        if data is not None:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise ImageInputError(
                    f"{name} is a datasets.Image dict whose 'bytes' is {type(data).__name__}, not bytes: store the "
                    "encoded file (PNG, JPEG, ...) there, or pass the image itself"
                )
            return data
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip():
            raise ImageInputError(
                f"{name} is a datasets.Image dict with no bytes and no path ({describe_image(image)}, bytes=None, "
                f"path={path!r}): the dataset row holds no image; drop the row or store the image's bytes or path"
            )
        image = path
    if isinstance(image, (str, os.PathLike)) and is_url(os.fspath(image)):
        raise ImageInputError(
            f"{name} ('{os.fspath(image)}') is a URL: images are never downloaded; download the file and pass its "
            "local path (or its bytes)"
        )
    return image


def image_key(image: Any) -> Any:
    """A key under which identical images collide, so each distinct image is encoded once per call. Never raises:
    an input that cannot be keyed gets a key of its own, and `load_image` reports what is wrong with it."""
    try:
        image = image_source(image, "image")
    except ImageInputError:
        return ("object", id(image))
    if isinstance(image, (str, os.PathLike)):
        return ("path", os.path.abspath(os.fspath(image)))
    if isinstance(image, (bytes, bytearray, memoryview)):
        return ("bytes", hashlib.blake2b(bytes(image), digest_size=16).digest())
    if isinstance(image, PIL.Image.Image):
        return ("pil", id(image))
    if isinstance(image, (np.ndarray, torch.Tensor)):
        try:
            array = tensor_to_numpy(image, "image") if isinstance(image, torch.Tensor) else image
            digest = hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).digest()
        except (ImageInputError, TypeError, ValueError, RuntimeError):
            return ("object", id(image))
        # A tensor is CxHxW and an array HxWxC: the same bytes and shape are different images.
        container = "tensor" if isinstance(image, torch.Tensor) else "array"
        return (container, array.shape, str(array.dtype), digest)
    return ("object", id(image))


def dtype_name(image: Any) -> str:
    """`uint16`, `bfloat16`, `complex64`...: the same name for a NumPy array and a torch tensor of one dtype."""
    return str(image.dtype).removeprefix("torch.") if isinstance(image, torch.Tensor) else image.dtype.name


def refuse_dtype(name: str, description: str, dtype: str):
    raise ImageInputError(
        f"{name} is {description}: dtype {dtype} is not an image dtype (accepted: {', '.join(ACCEPTED_DTYPES)}); "
        f"{WHAT_TO_PASS}"
    )


def tensor_to_numpy(tensor: torch.Tensor, name: str) -> np.ndarray:
    """A torch tensor's values as a NumPy array (bfloat16 widened to float32, exactly). A dtype the rules refuse,
    or a tensor without readable values, is an `ImageInputError` naming the item."""
    tensor = tensor.detach()
    if dtype_name(tensor) not in PIXEL_RULE_OF_DTYPE:
        refuse_dtype(name, describe_image(tensor), dtype_name(tensor))
    if tensor.is_sparse or tensor.is_quantized or tensor.device.type == "meta":
        raise ImageInputError(
            f"{name} is {describe_image(tensor)} ({tensor.layout}, on {tensor.device}): pass a dense tensor with "
            f"values; {WHAT_TO_PASS}"
        )
    tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def to_hwc(array: np.ndarray, name: str, description: str, channels_first: bool) -> np.ndarray:
    """HxW or HxWxC with C in `CHANNELS`, by the container's convention (`ARRAY_LAYOUTS`: NumPy HxWxC, torch
    CxHxW); a leading batch dimension of 1 is dropped. A shape the convention does not explain is refused naming
    both readings, never guessed."""
    convention, other, fix = (
        ("CxHxW (torch's layout)", "HxWxC", "tensor.permute(2, 0, 1)")
        if channels_first
        else ("HxWxC (NumPy's and PIL's layout)", "CxHxW", "array.transpose(1, 2, 0)")
    )
    if array.ndim == 4:
        if array.shape[0] != 1:
            raise ImageInputError(
                f"{name} is {description}: a batch of {array.shape[0]} images where one image is expected; pass "
                "them as a list, one image per caption (a batch of one is accepted)"
            )
        array = array[0]
    if 0 in array.shape:
        raise ImageInputError(f"{name} is {description}: an empty image (a dimension of 0); drop it or fix its source")
    if array.ndim == 2:
        return array
    if array.ndim != 3:
        raise ImageInputError(
            f"{name} is {description}: expected HxW (grayscale) or {convention} with C in {CHANNELS}, optionally "
            "with a leading batch dimension of 1"
        )
    channel_axis, other_axis = (0, 2) if channels_first else (2, 0)
    if array.shape[channel_axis] not in CHANNELS:
        height, width = array.shape[1:] if channels_first else array.shape[:2]
        reading = f"read as {convention} it has {array.shape[channel_axis]} channels of {height}x{width} pixels"
        if array.shape[other_axis] in CHANNELS:
            reading += (
                f"; read as {other} it would be a {array.shape[other_axis]}-channel image, but {other} is not this "
                f"container's layout: convert it with {fix}"
            )
        raise ImageInputError(f"{name} is {description}: {reading}. Expected C in {CHANNELS}")
    return array.transpose(1, 2, 0) if channels_first else array


def pixels_to_uint8(array: np.ndarray, name: str, description: str) -> np.ndarray:
    """Values -> uint8 by `PIXEL_RULES`: other dtypes, non-finite values and values outside the dtype's range are
    refused with an `ImageInputError` naming the item, its dtype and the fix. The whole array is checked."""
    rule = PIXEL_RULE_OF_DTYPE.get(array.dtype.name)  # "uint16" for either byte order
    if rule is None:
        refuse_dtype(name, description, array.dtype.name)
    if array.size == 0:
        return rule.to_uint8(array)
    if array.dtype.kind == "f":
        finite = np.isfinite(array)
        if not finite.all():  # NaN compares False with everything: `min() < 0` would let it through
            bad = array[~finite]
            kinds = sorted({"NaN" if np.isnan(value) else "+inf" if value > 0 else "-inf" for value in bad[:1000]})
            raise ImageInputError(
                f"{name} is {description} holding {bad.size} non-finite value(s) ({', '.join(kinds)}): NaN and "
                "infinity are not pixels; replace them (e.g. np.nan_to_num) or drop the image"
            )
    low, high = array.min(), array.max()
    if low < rule.low or high > rule.high:
        found = f"{float(low):.6g} to {float(high):.6g}" if array.dtype.kind == "f" else f"{int(low)} to {int(high)}"
        raise ImageInputError(
            f"{name} is {description} with values from {found}: {array.dtype.name} images must lie within "
            f"{rule.values}; {rule.fix}"
        )
    return rule.to_uint8(array)


def array_to_pil(array: np.ndarray, name: str, channels_first: bool = False, description: str | None = None):
    """A NumPy array (HxWxC, or CxHxW with `channels_first` for torch tensors) -> 8-bit PIL image (L, RGB or RGBA)
    by the rules above."""
    description = description or describe_image(array)
    if array.dtype.name not in PIXEL_RULE_OF_DTYPE:  # checked first, as for tensors: whatever the shape
        refuse_dtype(name, description, array.dtype.name)
    array = to_hwc(array, name, description, channels_first)
    array = pixels_to_uint8(array, name, description)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    return PIL.Image.fromarray(np.ascontiguousarray(array))


def pil_to_8bit(image: PIL.Image.Image, name: str) -> PIL.Image.Image:
    """A PIL image whose mode is not 8-bit (I;16*, I, F) -> mode L by `PIXEL_RULES`; others are returned as they
    are. Mode I decoded from a file holds 16-bit data (16-bit PGM, TIFF) and follows the uint16 rule; mode I made in
    memory (`Image.fromarray` of int32) the int32 rule; mode F the float32 rule."""
    if not (image.mode.startswith("I") or image.mode == "F"):
        return image
    values = np.asarray(image)
    if image.mode == "I" and image.format is not None:
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise ImageInputError(
                f"{name} is {describe_image(image)} with values from {values.min()} to {values.max()}: 16-bit "
                "images must lie within 0-65535; convert it to 8-bit (mode L or RGB) yourself"
            )
        values = values.astype(np.uint16)
    return PIL.Image.fromarray(pixels_to_uint8(values, name, describe_image(image)))


def to_rgb(image: PIL.Image.Image) -> PIL.Image.Image:
    """Convert an 8-bit PIL mode to RGB (alpha dropped, as torchvision does); see `load_image` for the others."""
    if image.mode == "RGB":
        return image
    return pil_to_8bit(image, "image").convert("RGB")


def to_rgb_on_white(image: PIL.Image.Image) -> PIL.Image.Image:
    """transformers' `convert_to_rgb`: transparency is composited onto white; other modes go through `to_rgb`."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        image = image.convert("RGBA")
        background = PIL.Image.new("RGBA", image.size, (255, 255, 255, 255))
        return PIL.Image.alpha_composite(background, image).convert("RGB")
    return to_rgb(image)


def decode_pil(image: PIL.Image.Image, name: str, convert: Callable) -> PIL.Image.Image:
    """A PIL image (open file or in memory) -> RGB; closed, unreadable or empty images are refused by name."""
    try:
        image.load()
    except (ValueError, AssertionError):  # "Operation on closed image"; Pillow asserts on a closed, unread file
        raise ImageInputError(
            f"{name} is a closed PIL image: pass it before closing it (or leaving its `with` block), or pass its path"
        ) from None
    except (OSError, PIL.Image.DecompressionBombError) as error:
        raise ImageInputError(f"{name} ({describe_image(image)}) could not be decoded: {error}") from error
    if 0 in image.size:
        raise ImageInputError(f"{name} is {describe_image(image)}: an empty image (a dimension of 0); drop it")
    try:
        return convert(pil_to_8bit(image, name))
    except (OSError, ValueError) as error:
        if isinstance(error, ImageInputError):
            raise
        raise ImageInputError(
            f"{name} is {describe_image(image)}, which cannot be converted to RGB ({error}): convert it to RGB first"
        ) from error


def load_image(
    image: ImageInput, index: int = 0, composite_alpha: bool = False, name: str | None = None
) -> PIL.Image.Image:
    """Decode one image input (path, bytes, PIL image, array, tensor or `datasets.Image` dict) into 8-bit RGB.

    The one validator of image inputs (its rules are `image_input_table()`, shown in docs/concepts/image-inputs.md):
    NumPy arrays are HxW or HxWxC, torch tensors HxW or CxHxW (C = 1, 3 or 4; a leading batch dimension of 1 is
    dropped); uint8 is used as is, uint16 keeps its high byte as 16-bit PNG files do, other integers must lie within
    0-255 and floats within [0, 1]; NaN, infinity, empty images, other dtypes, URLs, dicts without an image and
    closed PIL images are refused with an `ImageInputError`. Transparency is dropped, as torchvision does, or with
    `composite_alpha=True` composited onto white, as transformers' image processors do. Errors name the item (`name`,
    default `image {index}`) and the input, e.g. `image 3 ('cat.jpg') does not exist`.
    """
    name = name or f"image {index}"
    convert = to_rgb_on_white if composite_alpha else to_rgb
    image = image_source(image, name)
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.is_file():
            raise FileNotFoundError(f"{name} ('{path}') does not exist or is not a file")
        try:
            with PIL.Image.open(path) as opened:
                opened.load()
                return decode_pil(opened, f"{name} ('{path}')", convert)
        except (OSError, ValueError, PIL.Image.DecompressionBombError) as error:
            if isinstance(error, ImageInputError):
                raise
            raise ImageInputError(f"{name} ('{path}') could not be decoded: {error}") from error
    if isinstance(image, (bytes, bytearray, memoryview)):
        try:
            with PIL.Image.open(io.BytesIO(bytes(image))) as opened:
                opened.load()
                return decode_pil(opened, f"{name} ({len(image)} bytes)", convert)
        except (OSError, ValueError, PIL.Image.DecompressionBombError) as error:
            if isinstance(error, ImageInputError):
                raise
            raise ImageInputError(f"{name} ({len(image)} bytes) could not be decoded: {error}") from error
    if isinstance(image, PIL.Image.Image):
        return decode_pil(image, name, convert)
    if isinstance(image, torch.Tensor):
        description = describe_image(image)
        return convert(array_to_pil(tensor_to_numpy(image, name), name, channels_first=True, description=description))
    if isinstance(image, np.ndarray):
        return convert(array_to_pil(image, name))
    raise TypeError(
        f"{name} has unsupported type {type(image).__name__}: pass a path, bytes, a PIL image, a NumPy array "
        "(HxWxC), a torch tensor (CxHxW) or a datasets.Image dict"
    )


def preprocess_image(
    image: PIL.Image.Image,
    size: int,
    mean: tuple[float, float, float] = OPENAI_CLIP_MEAN,
    std: tuple[float, float, float] = OPENAI_CLIP_STD,
) -> torch.Tensor:
    """torchvision `Resize(size, BICUBIC)` + `CenterCrop(size)` + `ToTensor` + `Normalize(mean, std)` on an RGB PIL
    image (OpenAI's mean and std unless an OpenCLIP checkpoint was trained with others)."""
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
    table = normalisation_table(tuple(mean), tuple(std))
    normalised = np.empty((3, size, size), dtype=np.float32)
    for channel in range(3):
        np.take(table[channel], pixels[:, :, channel], out=normalised[channel])
    return torch.from_numpy(normalised)


@functools.cache
def normalisation_table(
    mean: tuple[float, float, float] = OPENAI_CLIP_MEAN, std: tuple[float, float, float] = OPENAI_CLIP_STD
) -> np.ndarray:
    """`[3, 256]` float32: `(value / 255 - mean) / std` per channel for every 8-bit value, computed with the same fp32
    operations as `ToTensor` + `Normalize`, so a lookup gives bit-identical pixels.

    A lookup in NumPy runs on the calling thread: the per-pixel torch operations it replaces started torch's
    intra-op thread pool for every image (from every decoder thread), which made preprocessing 10x slower than
    decoding on a loaded 2-core machine.
    """
    levels = torch.arange(256, dtype=torch.uint8).float().div_(255)
    table = ((levels.view(1, 256) - torch.tensor(mean).view(3, 1)) / torch.tensor(std).view(3, 1)).numpy()
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
        raise ImageInputError(
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


def load_and_preprocess(
    image: ImageInput,
    index: int,
    size: int,
    mean: tuple[float, float, float] = OPENAI_CLIP_MEAN,
    std: tuple[float, float, float] = OPENAI_CLIP_STD,
) -> torch.Tensor:
    """Decode and preprocess one image into a `[3, size, size]` tensor."""
    decoded = load_image(image, index)
    check_aspect_ratio(decoded, index, describe_image(image))
    return preprocess_image(decoded, size, mean, std)


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


def check_media_list(media: Any, kind: str = "image", item_ndim: int = 3) -> list:
    """`media` (any iterable: a list, a tuple, a generator, a batch array) as a list of one image (or video) per
    candidate.

    A single image is refused as a single caption string is (`check_captions`): a path, bytes, a PIL image, a
    `datasets.Image` dict, or an array or tensor of at most `item_ndim` dimensions (3 for an image, 4 for a video's
    frames; iterating one would read its rows as items). An array of more dimensions is a batch, one item per candidate.
    """
    single = isinstance(media, (str, bytes, bytearray, os.PathLike, PIL.Image.Image, dict))
    if isinstance(media, (np.ndarray, torch.Tensor)) and media.ndim <= item_ndim:
        single = True
    if single:
        raise TypeError(
            f"{kind}s must be a list with one {kind} per candidate, got a single {kind} ({describe_image(media)}): "
            "wrap it in a list"
        )
    return list(media)


def check_media_count(media: list, candidates: list[str], kind: str = "image", work: str = "encoded") -> None:
    """One image (or video) per candidate caption, or an error saying how to pass them."""
    if len(media) != len(candidates):
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(
            f"got {len(media)} {kind}s and {len(candidates)} candidates: pass exactly one {kind} per candidate "
            f"(repeat {article} {kind} for each of its captions; repeated {kind}s are {work} once)"
        )


# ------------------------------------------------------------------------------------------------ token counting
# A fast tokenizer keeps its truncation and padding settings in state that every call rewrites when they differ from
# the last call's. Scoring tokenizes with the encoder's settings (padded, cut at the context); counting needs nothing
# cut or padded. Were both done on one tokenizer, a count on one thread could rewrite the settings while scoring
# tokenizes on another, and scoring would get a ragged or uncut batch (the Space scores requests on several threads).
# So every call with other settings than the encoder's goes to a private copy of the tokenizer, which only ever
# runs with these: `untruncated_token_ids` is the one door. (Slow, Python tokenizers keep no such state, and some
# cannot be copied once their vocabulary file is gone: they are used as they are.)
_COUNTING_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_COUNTING_LOCK = threading.Lock()


def untruncated_token_ids(tokenizer, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
    """The token ids of each text with nothing cut or padded, from a private copy of `tokenizer` (see above), so
    that counting never changes the settings scoring runs with, on any thread."""
    counting = tokenizer
    if getattr(tokenizer, "is_fast", False):  # slow (Python) tokenizers cut and pad per call: nothing is shared
        with _COUNTING_LOCK:
            counting = _COUNTING_TOKENIZERS.get(tokenizer)
            if counting is None:
                counting = _COUNTING_TOKENIZERS[tokenizer] = copy.deepcopy(tokenizer)
    if not texts:
        return []
    return counting(list(texts), truncation=False, padding=False, add_special_tokens=add_special_tokens, verbose=False)[
        "input_ids"
    ]


__all__ = [
    "untruncated_token_ids",
    "ACCEPTED_DTYPES",
    "ARRAY_LAYOUTS",
    "PIXEL_RULES",
    "ImageInputError",
    "array_to_pil",
    "LONG_CAPTION_MODES",
    "SHORTEN_FIX",
    "TRUNCATION_FIX",
    "CaptionPiece",
    "LongCaptionWarning",
    "check_long_captions",
    "plan_caption_pieces",
    "sentence_starts",
    "check_media_count",
    "image_input_table",
    "pixels_to_uint8",
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
    "image_source",
    "load_and_preprocess",
    "load_and_preprocess_squashed",
    "load_image",
    "normalisation_table",
    "prefetch_batches",
    "prepare_caption",
    "preprocess_image",
    "preprocess_image_squashed",
    "tensor_to_numpy",
    "to_rgb",
    "to_rgb_on_white",
]
