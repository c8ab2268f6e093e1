"""The table "Accepted but unusual inputs" of docs/concepts/bad-input.md: one test per row, named by the row's id
(`@policy("id")`), each trying the row's case and its generated neighbours; the last test checks that the table and
the tests list the same ids.

Expected values come from outside the code under test where there is one: the token ids of the text the row says is
read, the cosine of embeddings computed from the texts the row names, an image decoded by Pillow itself.
"""

import io
import json
import logging
import re
import shutil
import threading
import unicodedata
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch

from modeling_pacs import PACSModel
from modeling_pacs.caption_files import read_items
from modeling_pacs.cli import score_main
from modeling_pacs.loading import load_model
from modeling_pacs.models.artifacts import CorruptArtifactError
from modeling_pacs.testing.pacs import make_tiny_model, tiny_clip_config
from tests.fixtures.helpers import SCORE_TOLERANCE, assert_scores_close, random_image

POLICY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "bad-input.md"
TABLE_TITLE = "## Accepted but unusual inputs"
POLICIES: dict[str, object] = {}


def policy(row_id: str):
    """Mark a test as the one that checks the table row `row_id`."""

    def register(test):
        assert row_id not in POLICIES, f"two tests for row {row_id}"
        POLICIES[row_id] = test
        return test

    return register


@pytest.fixture(scope="module")
def image():
    return random_image(0, (64, 48))


def token_ids(model, caption: str) -> list[int]:
    return model.tokenize([caption])["input_ids"][0].tolist()


def content_ids(model, text: str) -> list[int]:
    """The tokenizer's ids of `text` as written (no cleaning, no prompt, no special tokens)."""
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


def cosines(model, image, captions: list[str]) -> torch.Tensor:
    return model.score([image] * len(captions), captions).image_text_cosines


# ------------------------------------------------------------------------------------------------------ text
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060"]


@policy("zero-width-caption")
def test_a_zero_width_caption_is_scored_as_written(tiny_model, image):
    captions = [*ZERO_WIDTH, "\u200b\u200b", "\u200b\u200c\u200d\u2060", " \u200b "]
    prompt = content_ids(tiny_model, "a photo depicts")
    for caption in captions:
        ids = token_ids(tiny_model, caption)
        assert ids[1:-1] == prompt + content_ids(tiny_model, caption.strip())  # its bytes, as the tokenizer reads them
        # U+FEFF is a control character to the cleaning: a caption of it alone is the empty caption
        as_feff = "".join("\ufeff" if character in ZERO_WIDTH else character for character in caption)
        assert token_ids(tiny_model, as_feff) == token_ids(tiny_model, "") != ids
    scores = cosines(tiny_model, image, ["", *captions])
    assert all(abs(score - scores[0]) > 1e-4 for score in scores[1:])


def control_class(character: str) -> str:
    """What the row says the cleaning does with one control character."""
    code = ord(character)
    if character in "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85":
        return "separates"
    if code <= 0x1F or code == 0x7F or character in "\ufeff\ufff9\ufffa\ufffb\u206a":
        return "removed"
    if 0x80 <= code <= 0x9F:
        return "kept" if code in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else "cp1252"
    raise AssertionError(character)


CONTROLS = [chr(code) for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]] + list("\ufeff\ufff9\ufffa\ufffb\u206a")


@policy("control-characters")
def test_control_characters_follow_the_cleaning(tiny_model):
    for character in CONTROLS:
        prepared = tiny_model.prepare_texts([f"a{character}b"], "")[0]
        kind = control_class(character)
        if kind == "cp1252":  # ftfy also uncurls the quotes it decodes
            uncurl = str.maketrans("\u2018\u2019\u201a\u201c\u201d\u201e", "'''\"\"\"")
            expected = "a" + bytes([ord(character)]).decode("cp1252").translate(uncurl) + "b"
        else:
            expected = {"separates": "a b", "removed": "ab", "kept": f"a{character}b"}[kind]
        assert prepared == expected, f"U+{ord(character):04X}: {prepared!r}"
    assert tiny_model.prepare_texts(["a\x93quoted\x94 dog"], "")[0] == 'a"quoted" dog'


BIDI_CONTROLS = [*(chr(code) for code in range(0x202A, 0x202F)), *(chr(code) for code in range(0x2066, 0x206A)),
                 "\u200e", "\u200f", "\u061c"]  # fmt: skip


@policy("bidi-controls")
@pytest.mark.parametrize("control", BIDI_CONTROLS, ids=lambda character: f"U+{ord(character):04X}")
def test_bidirectional_controls_are_kept_in_stored_order(tiny_model, control):
    name = unicodedata.name(control)
    assert unicodedata.category(control) == "Cf"
    assert any(word in name for word in ("MARK", "EMBEDDING", "OVERRIDE", "ISOLATE", "POP")), name
    caption = f"a {control}dog on grass"
    assert tiny_model.prepare_texts([caption], "")[0] == caption
    assert token_ids(tiny_model, caption)[4:-1] == content_ids(tiny_model, caption)
    assert token_ids(tiny_model, caption) != token_ids(tiny_model, "a dog on grass")


SURROGATE_CASES = [("a\ud800b", "a\ufffdb"), ("\udfff", "\ufffd"), ("x\udbff\udbffy", "x\ufffd\ufffdy"),
                   ("a\ud83d\ude00b", "a\U0001f600b"), ("\udc00 dog \ud800", "\ufffd dog \ufffd")]  # fmt: skip


@policy("lone-surrogates")
@pytest.mark.parametrize(("caption", "mended"), SURROGATE_CASES, ids=repr)
def test_surrogates_are_mended_for_every_backbone(tiny_model, siglip_model, image, caption, mended):
    for model in (tiny_model, siglip_model):
        output = model.score([image, image], [caption, mended], references=[[caption], [mended]])
        assert_scores_close(output.image_text_cosines[0], output.image_text_cosines[1])
        assert_scores_close(output.reference_similarities[0], output.reference_similarities[1])


@pytest.fixture(scope="module")
def siglip_model():
    return make_tiny_model(variant="pac_s", seed=2, backbone="siglip")


@policy("typed-end-of-text")
def test_a_typed_end_of_text_ends_the_caption(tiny_model, image):
    eot, sot = tiny_model.tokenizer.eos_token_id, tiny_model.tokenizer.bos_token_id
    captions = [f"a dog<|endoftext|>{after}" for after in ("a cat", "", " <|endoftext|> more", "!")]
    for caption in captions:
        ids = token_ids(tiny_model, caption)
        assert ids[: ids.index(eot) + 1] == token_ids(tiny_model, "a dog")  # read as the token itself
    scores = cosines(tiny_model, image, ["a dog", *captions])
    assert_scores_close(scores[1:], scores[:1].expand(len(captions)))
    assert token_ids(tiny_model, "<|startoftext|>a dog")[4] == sot


# ------------------------------------------------------------------------------------------------ references
@policy("empty-reference")
def test_an_empty_reference_is_the_prompt_alone(tiny_model, image):
    references = [[""], [" "], ["\t\n "]]
    output = tiny_model.score([image] * 3, ["a dog on grass"] * 3, references=references)
    candidate, prompt_alone = torch.nn.functional.normalize(tiny_model.encode_texts(["a dog on grass", ""]), dim=-1)
    expected = max(float(candidate @ prompt_alone), 0.0)
    assert_scores_close(output.reference_similarities, torch.full((3,), expected))


@policy("many-references")
def test_a_thousand_references_are_all_read(tiny_model, image):
    references = [f"{count} dogs and {count % 7} cats" for count in range(1000)]
    references[777] = "three dogs"  # the candidate itself, past the first text batch: cosine 1 if nothing was cut
    output = tiny_model.score([image, image], ["three dogs"] * 2, references=[references, references[:500]],
                              text_batch_size=500)  # fmt: skip
    assert output.reference_similarities[0].item() == pytest.approx(1.0, abs=SCORE_TOLERANCE)
    assert output.reference_similarities[1].item() < 1 - 1e-3  # the other 999 do not reach it


# ------------------------------------------------------------------------------------------------ call shapes
@policy("zero-items")
def test_zero_items_give_nan_means(tiny_model):
    output = tiny_model.score([], [], references=[])
    assert output.scores.shape == (0,) and output.ref_scores.shape == (0,)
    assert np.isnan(output.mean_score) and np.isnan(output.mean_ref_score)


def single_images(image_path: Path):
    image = PIL.Image.open(image_path)
    array = np.array(image.convert("RGB"))
    return {
        "path": str(image_path), "Path": image_path, "bytes": image_path.read_bytes(), "PIL image": image,
        "datasets.Image dict": {"bytes": image_path.read_bytes(), "path": None}, "HxWxC array": array,
        "HxW array": array[..., 0], "CxHxW tensor": torch.from_numpy(array).permute(2, 0, 1),
    }  # fmt: skip


@pytest.fixture(scope="module")
def polos_and_pearl():
    return {"Polos": load_model("tiny:polos"), "Pearl": load_model("tiny:pearl")}


def single_videos(image_path: Path, image):
    frames = np.stack([np.asarray(image)] * 3)  # (T, H, W, C)
    return {
        "path": str(image_path.parent), "Path": image_path.parent, "(T, H, W, C) array": frames,
        "(T, C, H, W) tensor": torch.from_numpy(frames).permute(0, 3, 1, 2), "(T, D) embeddings": torch.ones(3, 32),
        "3-D array": frames[..., 0], "PIL image": image, "bytes": image_path.read_bytes(),
    }  # fmt: skip


SINGLE_IMAGE = r"images must be a list with one image per candidate, got a single image \(.*\): wrap it in a list"
SINGLE_VIDEO = r"videos must be a list with one video per candidate, got a single video \(.*\): wrap it in a list"


@policy("single-item")
def test_a_single_caption_or_image_is_refused_everywhere(tiny_model, polos_and_pearl, image, tmp_path):
    image.save(tmp_path / "one.png")
    for model in (tiny_model, *polos_and_pearl.values()):  # PAC-S++ (and CLIP-S, PAC-S: one class), Polos, Pearl
        with pytest.raises(TypeError, match="got a single string: wrap it in a list"):
            model.score([tmp_path / "one.png"], "a dog", [["a puppy"]])
        for single in single_images(tmp_path / "one.png").values():
            with pytest.raises(TypeError, match=SINGLE_IMAGE):
                model.score(single, ["a dog"], [["a puppy"]])
    batch = torch.from_numpy(np.stack([np.asarray(image)] * 2)).permute(0, 3, 1, 2)  # 4-D: one image per candidate
    for model in (tiny_model, *polos_and_pearl.values()):
        expected = model.score([image, image], ["a", "b"], [["c"], ["d"]]).scores
        assert_scores_close(model.score(batch, ["a", "b"], [["c"], ["d"]]).scores, expected)
    # Videos: a video is a path, a frame folder, a list of frames, a (T, H, W, C) array or (T, D) embeddings, so an
    # array of at most 4 dimensions is one video, and a 5-D array a batch of (T, H, W, C) videos
    with pytest.raises(TypeError, match="got a single string: wrap it in a list"):
        tiny_model.score_videos([tmp_path], "a dog")
    for single in single_videos(tmp_path / "one.png", image).values():
        with pytest.raises(TypeError, match=SINGLE_VIDEO):
            tiny_model.score_videos(single, ["a dog"])
    frames = single_videos(tmp_path / "one.png", image)["(T, H, W, C) array"]
    other = np.stack([np.asarray(random_image(1, (64, 48)))] * 3)
    expected = tiny_model.score_videos([frames, other], ["a", "b"], idf=False).scores
    assert_scores_close(tiny_model.score_videos(np.stack([frames, other]), ["a", "b"], idf=False).scores, expected)
    with pytest.raises(TypeError, match=r"video 0 has unsupported type Image: .* \(the frames of one video are one "
                                        r"list: wrap that list in a list\)"):  # fmt: skip
        tiny_model.score_videos([image, image], ["a", "b"])


@policy("iterables")
def test_any_iterable_is_scored_as_the_same_list(tiny_model, image):
    images, captions, references = [image, random_image(1, (40, 40))], ["a dog", "a cat"], [["a puppy"], ["a kitten"]]
    expected = tiny_model.score(images, captions, references)
    for shaped in (tuple, iter, lambda values: (value for value in values)):
        output = tiny_model.score(shaped(images), shaped(captions), shaped(references))
        assert_scores_close(output.image_text_cosines, expected.image_text_cosines)
        assert_scores_close(output.reference_similarities, expected.reference_similarities)


# ------------------------------------------------------------------------------------------------ precision, threads
@policy("half-precision-on-cpu")
@pytest.mark.parametrize("dtype", ["fp16", "bfloat16"])
def test_half_precision_on_a_cpu_warns_once(tiny_model_dir, dtype, caplog):
    with caplog.at_level(logging.WARNING, logger="modeling_pacs"):
        model = load_model(str(tiny_model_dir), device="cpu", dtype=dtype)
    assert model.dtype in (torch.float16, torch.bfloat16)
    warnings = [record.getMessage() for record in caplog.records if "on a CPU is emulated" in record.getMessage()]
    assert warnings == [
        f"dtype {dtype!r} on a CPU is emulated: it runs slower than fp32 and its scores are about 1e-3 away from the "
        "reference numbers; use fp32 (the default) on a CPU, and fp16/bf16 on a GPU"
    ]


@policy("concurrent-score")
@pytest.mark.filterwarnings("ignore::modeling_pacs.models.inputs.LongCaptionWarning")  # the long caption is counted
def test_score_on_six_threads_equals_one_call(tiny_model):
    images = [random_image(seed, (40, 30)) for seed in range(3)]
    captions, references = ["a dog", "a red circle on a white background", "x " * 90], [["a"], ["b", "c"], ["d"]]
    expected = tiny_model.score(images, captions, references)
    results, failures = [], []

    def work():
        try:
            for _ in range(5):
                results.append(tiny_model.score(images, captions, references))
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(results) == 30
    for output in results:
        assert_scores_close(output.image_text_cosines, expected.image_text_cosines)
        assert_scores_close(output.reference_similarities, expected.reference_similarities)
        assert output.truncated_tokens.tolist() == expected.truncated_tokens.tolist()


# ------------------------------------------------------------------------------------------------ model folders
@pytest.fixture(scope="module")
def model_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy_models")
    make_tiny_model(root / "own", seed=0)
    make_tiny_model(root / "other", seed=1)
    make_tiny_model(root / "wide", seed=2, clip_config=tiny_clip_config(hidden_size=64))
    return root


@pytest.fixture(scope="module")
def own_cosines(model_folders, image):
    return image_cosines(model_folders / "own", image)


def copy_with(source: Path, target: Path, config: dict | None = None, adapter_config: dict | None = None) -> Path:
    shutil.copytree(source, target)
    for path, changes in (
        (target / "config.json", config),
        (target / "adapter" / "adapter_config.json", adapter_config),
    ):
        if changes:
            values = json.loads(path.read_text())
            values.update({key: value for key, value in changes.items() if value is not None})
            for key in [key for key, value in changes.items() if value is None]:
                values.pop(key, None)
            path.write_text(json.dumps(values))
    return target


def image_cosines(folder: Path, image) -> torch.Tensor:
    model = load_model(str(folder), device="cpu")
    return cosines(model, image, ["a dog", "two cats"])


@policy("adapter-of-another-backbone")
def test_an_adapter_of_another_backbone_warns_or_is_refused(model_folders, own_cosines, tmp_path, image, caplog):
    named = "openai/clip-vit-large-patch14"
    folder = copy_with(model_folders / "own", tmp_path / "own", adapter_config={"base_model_name_or_path": named})
    with caplog.at_level(logging.WARNING, logger="modeling_pacs"):
        assert_scores_close(image_cosines(folder, image), own_cosines)
    warned = [record.getMessage() for record in caplog.records if "LoRA adapter" in record.getMessage()]
    assert len(warned) == 1 and f"was trained on '{named}'" in warned[0]
    assert "this model's backbone is 'openai/clip-vit-base-patch32' (config base_model_id)" in warned[0]
    # the weights do not fit: refused, naming both models
    wide = copy_with(model_folders / "wide", tmp_path / "wide")
    shutil.rmtree(wide / "adapter")
    shutil.copytree(folder / "adapter", wide / "adapter")
    refusal = (
        rf"adapter_config.json'.*trained on '{re.escape(named)}', but this model's backbone is 'openai/clip-vit-base"
    )
    with pytest.raises(CorruptArtifactError, match=refusal + r"-patch32'.*do not fit"):
        load_model(str(wide), device="cpu")


@policy("adapter-path-of-another-model")
def test_an_absolute_adapter_path_loads_that_adapter(model_folders, own_cosines, tmp_path, image):
    other_adapter = str(model_folders / "other" / "adapter")
    folder = copy_with(model_folders / "own", tmp_path / "own", config={"adapter_path": other_adapter})
    shutil.rmtree(folder / "adapter")
    borrowed = image_cosines(folder, image)
    expected = PACSModel.from_pretrained(model_folders / "own", load_adapter=False, dtype=torch.float32).eval()
    expected.load_lora_adapter(str(model_folders / "other"))  # its config's relative 'adapter', in that folder
    assert_scores_close(borrowed, cosines(expected, image, ["a dog", "two cats"]))
    assert not torch.allclose(borrowed, own_cosines, atol=1e-4)


@policy("config-without-model-type")
def test_a_config_without_model_type_or_auto_map_loads_as_pac_s_pp(model_folders, own_cosines, tmp_path, image):
    folder = copy_with(model_folders / "own", tmp_path / "own", config={"model_type": None, "auto_map": None})
    assert not {"model_type", "auto_map"} & set(json.loads((folder / "config.json").read_text()))
    assert_scores_close(image_cosines(folder, image), own_cosines)


# ------------------------------------------------------------------------------------------------ files
def animated(kind: str) -> tuple[bytes, PIL.Image.Image]:
    """An animated file of three different frames, and its first frame as Pillow decodes it."""
    frames = [random_image(seed, (48, 40)) for seed in (3, 4, 5)]
    buffer = io.BytesIO()
    extra = {"GIF": {"duration": 100, "loop": 0}, "PNG": {"duration": 100}, "WEBP": {"lossless": True}, "TIFF": {}}
    frames[0].save(buffer, format=kind, save_all=True, append_images=frames[1:], **extra[kind])
    decoded = PIL.Image.open(io.BytesIO(buffer.getvalue()))
    assert getattr(decoded, "n_frames", 1) == 3
    decoded.seek(0)
    return buffer.getvalue(), decoded.convert("RGB")


@policy("animated-image")
@pytest.mark.parametrize("kind", ["GIF", "PNG", "WEBP", "TIFF"])
def test_an_animated_image_scores_its_first_frame(tiny_model, kind):
    data, first_frame = animated(kind)
    later = PIL.Image.open(io.BytesIO(data))
    later.seek(2)
    output = tiny_model.score([data, first_frame, later.convert("RGB")], ["a dog"] * 3).image_text_cosines
    assert_scores_close(output[0], output[1])
    assert abs(output[0] - output[2]) > 1e-4


@policy("16-bit-array")
def test_sixteen_bit_pixels_keep_their_high_byte(tiny_model, tmp_path):
    pixels = np.random.default_rng(0).integers(0, 65536, (40, 48, 3)).astype(np.uint16)
    gray = pixels[..., 0]
    PIL.Image.fromarray(gray).save(tmp_path / "gray16.png")
    inputs = [pixels, torch.from_numpy(pixels.astype(np.int32)).permute(2, 0, 1).to(torch.uint16),
              PIL.Image.fromarray(gray), tmp_path / "gray16.png"]  # fmt: skip
    high_bytes = [(pixels >> 8).astype(np.uint8)] * 2 + [np.repeat((gray >> 8).astype(np.uint8)[..., None], 3, 2)] * 2
    actual = tiny_model.score(inputs, ["a dog"] * 4).image_text_cosines
    expected = tiny_model.score([PIL.Image.fromarray(array) for array in high_bytes], ["a dog"] * 4)
    assert_scores_close(actual, expected.image_text_cosines)


ITEMS = [("a.png", "a dog"), ("b.png", "two cats")]


def write_input(path: Path, suffix: str, blank: str = "") -> Path:
    if suffix == ".csv":
        text = "image,caption\n" + "".join(f"{image},{caption}\n" for image, caption in ITEMS)
    elif suffix == ".jsonl":
        text = blank + blank.join(json.dumps({"image": image, "caption": caption}) + "\n" for image, caption in ITEMS)
    else:
        text = json.dumps(dict(ITEMS))
    path.write_text(text, encoding="utf-8")
    return path


@policy("byte-order-mark")
@pytest.mark.parametrize("suffix", [".csv", ".json", ".jsonl"])
def test_a_byte_order_mark_is_ignored(tmp_path, suffix):
    plain = write_input(tmp_path / f"plain{suffix}", suffix)
    marked = tmp_path / f"marked{suffix}"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    expected = [(item["image"], item["caption"]) for item in read_items(plain, tmp_path)]
    assert expected == ITEMS
    assert [(item["image"], item["caption"]) for item in read_items(marked, tmp_path)] == expected


@policy("jsonl-blank-lines")
@pytest.mark.parametrize("blank", ["\n", "   \n", "\t\n\n", "\r\n"])
def test_blank_lines_of_jsonl_are_skipped_and_still_counted(tmp_path, blank):
    path = write_input(tmp_path / "items.jsonl", ".jsonl", blank)
    assert [(item["image"], item["caption"]) for item in read_items(path, tmp_path)] == ITEMS
    lines = path.read_text().splitlines(keepends=True)
    bad_line = len(lines) + 1
    path.write_text("".join(lines) + blank + "{broken\n")
    bad_line += blank.count("\n")
    with pytest.raises(ValueError, match=rf"line {bad_line} is not valid JSON"):
        read_items(path, tmp_path)


@policy("jsonl-output")
def test_jsonl_output_is_json_lines(tiny_model_dir, tmp_path, capsys):
    for name in ("a.png", "b.png"):
        random_image(len(name), (32, 32)).save(tmp_path / name)
    source = write_input(tmp_path / "captions.jsonl", ".jsonl")
    output = tmp_path / "scores.jsonl"
    assert score_main([str(source), "--model", str(tiny_model_dir), "--output", str(output)]) in (None, 0)
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(row["image"], row["caption"]) for row in rows] == ITEMS and all("PAC-S++" in row for row in rows)
    with pytest.raises(SystemExit):
        score_main(["--help"])
    assert "(.json, .jsonl or .csv; not an input)" in " ".join(capsys.readouterr().out.split())


# ------------------------------------------------------------------------------------------------ the table
def table_ids() -> list[str]:
    text = POLICY_PAGE.read_text()
    table = text[text.index(TABLE_TITLE) :].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9-]+)` \|", table, flags=re.M)


def test_every_row_of_the_table_has_a_test_and_every_test_a_row():
    ids = table_ids()
    assert len(ids) == len(set(ids)) == 20
    assert ids == list(POLICIES), "the table's rows and the tests (in this file's order) must match"
