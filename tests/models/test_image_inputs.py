"""The one image validator (`inputs.load_image`) over the cross product of containers (NumPy, torch, PIL,
`datasets.Image` dict) x every dtype the two libraries have x layouts x special values: each generated case either
scores like its 8-bit RGB equivalent (within 1e-6, and decodes to exactly its pixels) or is refused with an
`ImageInputError` naming the item, its dtype and shape. The expected outcome of each case is read from the rule
structures of `inputs` (`PIXEL_RULES`, `ARRAY_LAYOUTS`), which docs/concepts/image-inputs.md also shows; the 8-bit
equivalents are computed here with NumPy, independently of the validator."""

import io
import re
import struct
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch

from modeling_pacs.models.embedding_cache import EmbeddingCache
from modeling_pacs.models.inputs import (
    ARRAY_LAYOUTS,
    PIXEL_RULE_OF_DTYPE,
    ImageInputError,
    image_input_table,
    load_image,
)
from modeling_pacs.models.video import check_video, iter_video_frames
from tests.fixtures.helpers import assert_scores_close, random_image

REPO_ROOT = Path(__file__).resolve().parents[2]
HEIGHT, WIDTH = 6, 5  # neither is a channel count (1, 3, 4): every layout has one reading
RNG = np.random.default_rng(0)
BASE = RNG.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
BASE[0, 0], BASE[-1, -1] = 0, 255
BASE16 = RNG.integers(0, 65536, (HEIGHT, WIDTH, 3), dtype=np.uint16)
BASE16.reshape(-1)[:6] = [0, 383, 384, 385, 386, 65535]  # where v >> 8 and round(v / 257) part ways

NUMPY_DTYPES = sorted({np.dtype(kind).name for kind in set(np.sctypeDict.values())})
TORCH_DTYPES = sorted(
    {str(value).removeprefix("torch.") for value in vars(torch).values() if isinstance(value, torch.dtype)}
)
LAYOUTS = ("HWC", "CHW", "HW", "batch1", "batch2", "empty")
SPECIALS = {"in-range": None, "NaN": np.nan, "+inf": np.inf, "-inf": -np.inf, "-1": -1, "256": 256, "65535": 65535}
SPECIALS["1.5"] = 1.5  # a float above 1
CAPTION = "a photo of a thing"


# ----------------------------------------------------------------------------------------------------- cases
def logical_values(dtype: str, special: str) -> np.ndarray | None:
    """HxWx3 values (float64) for `dtype`: in its accepted range, with the special value at pixel (0, 0, 0); `None`
    where the dtype cannot hold the special value (no case is generated)."""
    rule = PIXEL_RULE_OF_DTYPE.get(dtype)
    if rule is None:
        return BASE.astype(np.float64) if special == "in-range" else None
    values = {"uint16": BASE16, "int8": BASE // 2}.get(dtype, BASE).astype(np.float64)  # int8 holds 0-127
    if rule.high == 1.0:
        values = values / 255
    if SPECIALS[special] is not None:
        values = values.copy()
        values[0, 0, 0] = SPECIALS[special]
    return values


def arrange(values, layout: str, channels_first: bool):
    """`values` (HxWx3, NumPy or torch) in `layout`; the batch and empty layouts use the container's own layout.
    Only views: torch cannot copy tensors of some dtypes."""
    channels_first_values = values.permute(2, 0, 1) if isinstance(values, torch.Tensor) else values.transpose(2, 0, 1)
    own = channels_first_values if channels_first else values
    if layout == "HWC":
        return values
    if layout == "CHW":
        return channels_first_values
    if layout == "HW":
        return values[..., 0]
    if layout == "batch1":
        return own[None]
    if layout == "batch2":
        return own[None].expand(2, *own.shape) if isinstance(own, torch.Tensor) else np.stack([own, own])
    return own[:, :0] if channels_first else own[:0]  # empty: height 0


def layout_name(layout: str, channels_first: bool) -> str:
    """The layout's name as `ARRAY_LAYOUTS` spells it."""
    own = "CxHxW" if channels_first else "HxWxC"
    return {"HWC": "HxWxC", "CHW": "CxHxW", "HW": "HxW", "batch1": f"1x{own}", "batch2": f"2x{own}"}.get(layout)


def held_values(made) -> np.ndarray:
    """The values an array or tensor of an accepted dtype holds, as float64 (bfloat16 widens exactly)."""
    if isinstance(made, torch.Tensor):
        made = (made.float() if made.dtype == torch.bfloat16 else made).numpy()
    return made.astype(np.float64)


def can_hold(dtype: str, made, values: np.ndarray) -> bool:
    """Integers must hold the values exactly (-1 in uint8 wraps: no case); floats hold them as they round (65535
    in float16 is +inf, a value the rules refuse)."""
    if dtype not in PIXEL_RULE_OF_DTYPE or PIXEL_RULE_OF_DTYPE[dtype].high == 1.0:
        return True
    return np.array_equal(held_values(made), values)


def make_numpy(dtype: str, values: np.ndarray) -> np.ndarray | None:
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            array = values.astype(dtype)
    except (TypeError, ValueError):
        return None
    return array if can_hold(dtype, array, values) else None


def make_torch(dtype: str, values: np.ndarray) -> torch.Tensor | None:
    """A tensor of `values` (or of zeros, for dtypes torch cannot convert to), `None` where torch cannot make one
    (quantized and sub-byte dtypes) or cannot hold the values."""
    torch_dtype = getattr(torch, dtype)
    try:
        tensor = torch.from_numpy(values).to(torch_dtype)
    except (TypeError, RuntimeError, ValueError):
        assert dtype not in PIXEL_RULE_OF_DTYPE, f"torch cannot convert float64 values to {dtype}"
        try:
            tensor = torch.zeros(values.shape, dtype=torch_dtype)
        except (TypeError, RuntimeError, ValueError):
            return None
    return tensor if can_hold(dtype, tensor, values) else None


def png_bytes(array: np.ndarray) -> bytes:
    """A PNG file of a uint8 or uint16 HxW / HxWx3 array; 16-bit files are written by hand (Pillow cannot write
    16-bit RGB), so the decoding under test is Pillow's own."""
    if array.dtype == np.uint8:
        buffer = io.BytesIO()
        PIL.Image.fromarray(array).save(buffer, format="PNG")
        return buffer.getvalue()
    height, width = array.shape[:2]
    color_type = 0 if array.ndim == 2 else 2
    rows = b"".join(b"\x00" + array[row].astype(">u2").tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def equivalent(dtype: str, values: np.ndarray) -> np.ndarray:
    """The 8-bit RGB image an accepted case stands for, computed with NumPy: uint16 keeps its high byte (as Pillow
    decodes 16-bit PNG files), floats are scaled by 255 and rounded, other integers are their values."""
    if dtype == "uint16":
        pixels = values.astype(np.int64) // 256
    elif PIXEL_RULE_OF_DTYPE[dtype].high == 1.0:
        pixels = np.rint(values * 255)
    else:
        pixels = values
    pixels = pixels.astype(np.uint8)
    return np.repeat(pixels[..., None], 3, axis=2) if pixels.ndim == 2 else pixels


def array_outcome(container: str, dtype: str, layout: str, held: np.ndarray | None):
    """("accepted", rule dtype) or ("refused", what the message must say), from the rule structures; checks in the
    validator's order: dtype, layout, values."""
    rule = PIXEL_RULE_OF_DTYPE.get(dtype)
    channels_first = container == "torch tensor"
    if rule is None:
        return "refused", "is not an image dtype"
    if layout == "empty":
        return "refused", "an empty image"
    if layout == "batch2":
        return "refused", "a batch of 2 images"
    if layout_name(layout, channels_first) not in ARRAY_LAYOUTS[container]:
        return "refused", "read as"
    if not np.isfinite(held).all():
        return "refused", "non-finite"
    if held.min() < rule.low or held.max() > rule.high:
        return "refused", "must lie within"
    return "accepted", dtype


def generate_cases() -> list[dict]:
    """Every case: {"id", "container", "input", "outcome", "expect"} with `expect` the 8-bit RGB equivalent of an
    accepted case or the message fragment of a refused one."""
    cases = []
    for container, dtypes in (("NumPy array", NUMPY_DTYPES), ("torch tensor", TORCH_DTYPES)):
        channels_first = container == "torch tensor"
        for dtype in dtypes:
            for special in SPECIALS:
                values = logical_values(dtype, special)
                if values is None:
                    continue
                made = make_torch(dtype, values) if channels_first else make_numpy(dtype, values)
                if made is None:
                    continue
                held = held_values(made) if dtype in PIXEL_RULE_OF_DTYPE else None
                for layout in LAYOUTS:
                    image = arrange(made, layout, channels_first)
                    outcome, detail = array_outcome(container, dtype, layout, held)
                    expect = detail
                    if outcome == "accepted":
                        expect = equivalent(dtype, held[..., 0] if layout == "HW" else held)
                    case_id = f"{container}-{dtype}-{layout}-{special}"
                    cases.append(
                        dict(id=case_id, container=container, input=image, outcome=outcome, expect=expect, dtype=dtype)
                    )
    cases += pil_cases() + dict_cases()
    return cases


# A PIL image's mode -> the dtype rule it follows (docs/concepts/image-inputs.md, "PIL image" rows).
PIL_MODE_DTYPE = {"L": "uint8", "RGB": "uint8", "I;16": "uint16", "I": "int32", "F": "float32"}


def pil_cases() -> list[dict]:
    """PIL images made from every NumPy case that Pillow can hold (HxW and HxWx3): the mode decides the rule."""
    cases = []
    for dtype in NUMPY_DTYPES:
        for special in SPECIALS:
            values = logical_values(dtype, special)
            array = None if values is None else make_numpy(dtype, values)
            if array is None:
                continue
            for layout, data in (("HWC", array), ("HW", array[..., 0])):
                try:
                    image = PIL.Image.fromarray(data)
                except (TypeError, ValueError, KeyError):
                    continue  # Pillow has no mode for it
                case = dict(id=f"PIL-{dtype}-{image.mode}-{layout}-{special}", container="PIL image", input=image)
                if image.mode == "1":  # Pillow's bilevel mode: black and white, as Pillow converts it
                    case.update(outcome="accepted", expect=np.asarray(image.convert("RGB")), dtype=dtype)
                    cases.append(case)
                    continue
                rule_dtype = PIL_MODE_DTYPE[image.mode]
                rule = PIXEL_RULE_OF_DTYPE[rule_dtype]
                held = np.asarray(image).astype(np.float64)
                if not np.isfinite(held).all():
                    case.update(outcome="refused", expect="non-finite")
                elif held.min() < rule.low or held.max() > rule.high:
                    case.update(outcome="refused", expect="must lie within")
                else:
                    case.update(outcome="accepted", expect=equivalent(rule_dtype, held))
                case["dtype"] = rule_dtype
                cases.append(case)
    return cases


def dict_cases() -> list[dict]:
    """`datasets.Image` dicts holding 8-bit and 16-bit PNG files (grayscale and RGB, Pillow decodes them): each
    equals the array of the same data; then every malformed dict."""
    cases = []
    for dtype in ("uint8", "uint16"):
        for special in ("in-range", "256", "65535"):
            values = logical_values(dtype, special)
            array = make_numpy(dtype, values)
            if array is None:
                continue
            for layout, data in (("HWC", array), ("HW", array[..., 0])):
                expect = equivalent(dtype, data.astype(np.float64))
                value = {"bytes": png_bytes(data), "path": None}
                case_id = f"dict-{dtype}-{layout}-{special}"
                cases.append(
                    dict(id=case_id, container="dict", input=value, outcome="accepted", expect=expect, dtype=dtype)
                )
    malformed = {
        "no-bytes-no-path": ({"bytes": None, "path": None}, "no bytes and no path"),
        "empty-path": ({"path": ""}, "no bytes and no path"),
        "empty-dict": ({}, "no bytes and no path"),
        "url": ({"bytes": None, "path": "https://example.com/cat.png"}, "is a URL: images are never downloaded"),
        "s3-url": ({"path": "s3://bucket/cat.png"}, "is a URL"),
        "bytes-not-bytes": ({"bytes": "cat.png", "path": None}, "whose 'bytes' is str, not bytes"),
        "bytes-not-an-image": ({"bytes": b"not an image", "path": None}, "could not be decoded"),
        "other-keys": ({"image": b"...", "label": 3}, "pass the image itself"),
    }
    for name, (value, message) in malformed.items():
        cases.append(dict(id=f"dict-{name}", container="dict", input=value, outcome="refused", expect=message))
    return cases


CASES = generate_cases()
ACCEPTED = [case for case in CASES if case["outcome"] == "accepted"]
REFUSED = [case for case in CASES if case["outcome"] == "refused"]


# ----------------------------------------------------------------------------------------------------- tests
def test_the_cross_product_is_generated_in_full():
    counts = Counter((case["container"], case["outcome"]) for case in CASES)
    print("generated cases per class:", dict(sorted(counts.items())), "total", len(CASES))
    for container in ("NumPy array", "torch tensor", "PIL image", "dict"):
        assert counts[(container, "accepted")] > 0 and counts[(container, "refused")] > 0, container
    # Every dtype of both libraries is generated (torch's sub-byte and quantized dtypes cannot make a tensor here).
    generated = {(case["container"], case["dtype"]) for case in CASES if "dtype" in case}
    assert {dtype for container, dtype in generated if container == "NumPy array"} == set(NUMPY_DTYPES)
    torch_missing = set(TORCH_DTYPES) - {dtype for container, dtype in generated if container == "torch tensor"}
    assert all(re.fullmatch(r"(u?int[1-7]|q.*|bits.*|float4.*)", dtype) for dtype in torch_missing), torch_missing
    for dtype in ("bool", "complex64", "float16", "bfloat16", "uint16", "int64"):
        assert ("torch tensor", dtype) in generated, dtype


def test_accepted_cases_decode_to_and_score_like_their_8bit_rgb_equivalent(tiny_model):
    for case in ACCEPTED:
        np.testing.assert_array_equal(np.asarray(load_image(case["input"])), case["expect"], err_msg=case["id"])
    inputs = [case["input"] for case in ACCEPTED]
    equivalents = [case["expect"] for case in ACCEPTED]
    captions = [CAPTION] * len(ACCEPTED)
    scores = tiny_model.score(inputs, captions).scores
    expected = tiny_model.score(equivalents, captions).scores
    assert_scores_close(scores, expected, what="scores of accepted inputs vs their 8-bit RGB equivalents")


def test_refused_cases_raise_an_error_naming_the_item_and_what_it_is(tiny_model):
    good = BASE
    for case in REFUSED:
        with pytest.raises(ImageInputError) as raised:
            tiny_model.encode_images([good, case["input"]])
        message = str(raised.value)
        assert message.startswith("image 1"), (case["id"], message)
        assert case["expect"] in message, (case["id"], message)
        if case["container"] in ("NumPy array", "torch tensor"):
            image = case["input"]
            dtype = str(image.dtype).removeprefix("torch.") if isinstance(image, torch.Tensor) else image.dtype.name
            assert f"{dtype} {case['container']} of shape {tuple(image.shape)}" in message, (case["id"], message)


def test_a_uint16_array_scores_like_the_16_bit_png_of_the_same_data(tiny_model, tmp_path):
    """Grayscale (mode I;16) and RGB 16-bit PNGs, decoded by Pillow, equal the uint16 array of the same data."""
    files = []
    for name, data in (("gray", BASE16[..., 0]), ("rgb", BASE16)):
        path = tmp_path / f"{name}16.png"
        path.write_bytes(png_bytes(data))
        files += [path, data, torch.from_numpy(data if data.ndim == 2 else data.transpose(2, 0, 1).copy())]
    for path, array, tensor in zip(files[::3], files[1::3], files[2::3]):
        decoded = np.asarray(load_image(path))
        np.testing.assert_array_equal(decoded, np.asarray(load_image(array)))
        np.testing.assert_array_equal(decoded, np.asarray(load_image(tensor)))
    scores = tiny_model.score(files, [CAPTION] * len(files)).scores
    assert_scores_close(scores[1::3], scores[0::3], what="uint16 arrays vs their 16-bit PNG files")
    assert_scores_close(scores[2::3], scores[0::3], what="uint16 tensors vs their 16-bit PNG files")


def test_closed_and_empty_pil_images_are_refused_by_name(tmp_path):
    path = tmp_path / "cat.png"
    random_image(0, (8, 6)).save(path)
    with PIL.Image.open(path) as opened:
        pass
    in_memory = random_image(1, (8, 6))
    in_memory.close()
    for closed in (opened, in_memory):
        with pytest.raises(ImageInputError, match=r"^image 4 is a closed PIL image: pass it before closing it"):
            load_image(closed, 4)
    with pytest.raises(ImageInputError, match=r"^image 2 is a PIL image, mode RGB, 0x5: an empty image"):
        load_image(PIL.Image.new("RGB", (0, 5)), 2)
    for url in ("https://example.com/cat.png", "HF://datasets/x/cat.png"):
        with pytest.raises(ImageInputError, match=r"^image 0 \('.*'\) is a URL: images are never downloaded"):
            load_image(url)


# ----------------------------------------------------------------------------------------------------- videos
def test_video_frames_follow_the_image_rules_and_are_named_by_frame():
    frames = np.stack([BASE / 255] * 6).astype(np.float32)  # (T, H, W, C)
    frames[5, 1, 1, 0] = np.nan
    for video in (frames, torch.from_numpy(frames), torch.from_numpy(frames).permute(0, 3, 1, 2)):
        with pytest.raises(ImageInputError, match=r"^video 2, frame 5 is a frame of a float32 .* non-finite"):
            check_video(video, 2)
    frames[5, 1, 1, 0] = 0.5
    expected = [np.asarray(load_image(frame)) for frame in frames]
    for video in (frames, torch.from_numpy(frames), torch.from_numpy(frames).permute(0, 3, 1, 2)):
        check_video(video, 2)
        decoded = [np.asarray(frame) for frame in iter_video_frames(video, 2, None)]
        np.testing.assert_array_equal(np.stack(decoded), np.stack(expected))
    layout_error = r"^video 0 is a float32 NumPy array of shape \(6, 3, 6, 5\): .*transpose\(0, 2, 3, 1\)"
    with pytest.raises(ImageInputError, match=layout_error):
        check_video(frames.transpose(0, 3, 1, 2), 0)
    listed = [BASE, BASE, np.full((HEIGHT, WIDTH), 300, np.int32)]
    with pytest.raises(ImageInputError, match=r"^video 1, frame 2 is an int32 NumPy array .* must lie within 0-255"):
        list(iter_video_frames(listed, 1, None))
    with pytest.raises(ImageInputError, match=r"^video 3, frame 1 is a bool torch tensor of shape \(3, 6, 5\)"):
        list(iter_video_frames([BASE, torch.zeros(3, HEIGHT, WIDTH, dtype=torch.bool)], 3, None))


# ----------------------------------------------------------------------------------------------------- recovery
def test_a_failed_call_leaves_the_model_and_its_cache_correct(tiny_model_dir):
    """A score call or cache lookup that fails on a bad image stores and counts nothing, and the next call gives
    the same values as a fresh model (issue 25 §5)."""
    from modeling_pacs import PACSModel

    model = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    fresh = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    good = [random_image(seed, (12, 10)) for seed in range(3)]
    captions = ["a dog", "a cat", "a car"]
    expected = fresh.score(good, captions)
    model.embedding_cache = cache = EmbeddingCache()
    bad = [good[0], np.full((10, 12, 3), np.nan, np.float32), good[2]]
    for attempt in range(2):
        with pytest.raises(ImageInputError, match=r"^image 1 is a float32 NumPy array .* non-finite"):
            model.score(bad, captions)
        with pytest.raises(ImageInputError, match=r"^image 1 is a float32 NumPy array .* non-finite"):
            model.encode_images(bad)
        assert (len(cache), cache.hits, cache.misses) == (0, 0, 0), attempt
    first = model.score(good, captions)
    assert (cache.hits, cache.misses) == (0, 6)
    second = model.score(good, captions)
    assert (cache.hits, cache.misses) == (6, 6)
    for result in (first, second):
        assert_scores_close(result.scores, expected.scores, what="scores after a failed call")
    with pytest.raises(ImageInputError):
        model.score([good[0], {"bytes": None, "path": None}], captions[:2])
    assert (len(cache), cache.hits, cache.misses) == (6, 6, 6)
    assert_scores_close(model.score(good, captions).scores, expected.scores, what="scores after a failed hit")
    assert not model.training and not cache.is_filling()


# ----------------------------------------------------------------------------------------------------- the docs
def render_table(rows) -> str:
    lines = ["| Container | dtype or mode | Values | Layout | What happens |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def test_the_docs_page_shows_the_rule_table():
    page = (REPO_ROOT / "docs" / "concepts" / "image-inputs.md").read_text(encoding="utf-8")
    table = render_table(image_input_table())
    assert table in page, f"docs/concepts/image-inputs.md must contain the rule table, exactly:\n\n{table}\n"
    # The table's rows are the validator's: every accepted dtype, both containers' layouts.
    rows = image_input_table()
    for container, layouts in ARRAY_LAYOUTS.items():
        dtypes = ", ".join(row[1] for row in rows if row[0] == container and row[3] == ", ".join(layouts))
        assert sorted(dtypes.split(", ")) == sorted(PIXEL_RULE_OF_DTYPE), container


# ----------------------------------------------------------------------------------------------------- the rule
# Where image pixels may be decoded or converted outside `inputs.load_image`: (file, code) -> (how many times, why).
# Anything else is a second decode path and fails this test: route it through `load_image`.
DECODING = re.compile(
    r"Image\.open\(|Image\.fromarray\(|Image\.frombytes\(|Image\.frombuffer\(|\.convert\([\"']RGB[\"']\)"
    r"|\.to_image\(\)|np\.(?:asarray|array)\((?:image|frame|picture|pil)|torchvision\.io\.(?:read|decode)_image"
    r"|import cv2|import imageio"
)
ALLOWED_DECODING = {
    ("modeling_pacs/models/video.py", ".to_image()"): (2, "PyAV frames of a video file: always 8-bit RGB (rgb24)"),
    ("modeling_pacs/models/video.py", '.convert("RGB")'): (2, "the same PyAV frames"),
    ("modeling_pacs/encoders/base.py", "np.asarray(image"): (1, "the pixels of an image load_image returned"),
    ("modeling_pacs/captioning/grpo.py", "Image.fromarray("): (1, "random uint8 smoke images it makes, not inputs"),
    ("space/app.py", "Image.open("): (1, "the header only, for the size limits, before load_image decodes it"),
    ("modeling_pacs/evaluation/captions.py", "Image.open("): (
        1,
        "evaluate-captions decodes each file once per chunk and hands the PIL image, in the file's own mode, to every "
        "model, whose load_image validates and converts it as it would the path (scores equal pacs-score's, 1e-6)",
    ),
    ("modeling_pacs/data/validation.py", "Image.open("): (
        1,
        "training data's up-front decodability check (a reduced JPEG draft decode whose pixels are discarded); "
        "the collators decode with load_image",
    ),
}


def test_images_are_decoded_only_by_the_one_validator():
    found = Counter()
    for folder in ("modeling_pacs", "space", "metric", "scripts"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if relative.startswith(("modeling_pacs/testing/", "modeling_pacs/models/inputs.py")) or path.is_symlink():
                continue
            found.update((relative, match.group(0)) for match in DECODING.finditer(path.read_text(encoding="utf-8")))
    allowed = {place: count for place, (count, _) in ALLOWED_DECODING.items()}
    assert dict(found) == allowed, (
        "image pixels decoded outside modeling_pacs.models.inputs.load_image: route them through it, or add the "
        f"place to ALLOWED_DECODING with the reason. Found {dict(found)}, allowed {allowed}"
    )
