"""Training refuses bad data before it trains: for each training command (train_pacs, train_polos, train_pearl,
train_captioner) x each bad case (truncated image, None caption, empty caption, missing column, wrong type, empty
dataset, missing path), the command's main exits with one message naming the file, the split, the row and the fix,
and writes no checkpoint. The skip policy drops and counts undecodable images (docs/concepts/corrupt-files.md)."""

import csv
import logging
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest

from modeling_pacs.data.validation import TrainingDataError, check_images, decode_image
from tests.fixtures.helpers import random_image

NUM_ROWS = 6
BAD_ROW = 2
CAPTIONS = ["a red dog on grass", "a blue cat on a sofa", "two birds in the sky", "a green car", "a boat", "a tree"]
CASES = ["truncated_image", "none_caption", "empty_caption", "missing_column", "wrong_type", "empty_dataset",
         "missing_path"]  # fmt: skip


def write_images(folder: Path) -> list[Path]:
    """JPEGs (row BAD_ROW's is cut to half its bytes by the truncated_image case)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(NUM_ROWS):
        path = folder / f"img_{index}.jpg"
        random_image(index, (64 + 8 * index, 48)).save(path, quality=90)
        paths.append(path)
    return paths


def truncate(path: Path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def assert_refused_before_training(run, output: Path, *words: str):
    with pytest.raises(SystemExit) as exit:
        run()
    message = str(exit.value.code)
    for word in words:
        assert word in message, (word, message)
    assert "Traceback" not in message
    written = [path.name for path in output.glob("*")] if output.exists() else []
    assert not [name for name in written if name.startswith("checkpoint") or name in ("model", "final", "best")]


# ----------------------------------------------------------------------------------------------------- PAC-S++
def pacs_rows(images: list[Path]) -> list[dict]:
    return [
        {"image": str(image), "caption": caption, "synthetic_image": str(images[-1 - index]),
         "synthetic_caption": f"generated {caption}"}
        for index, (image, caption) in enumerate(zip(images, CAPTIONS))
    ]  # fmt: skip


def pacs_case(tmp_path: Path, case: str) -> tuple[list[str], tuple[str, ...]]:
    images = write_images(tmp_path / "images")
    rows = pacs_rows(images)
    where = ("split 'train'", f"row {BAD_ROW}", "Fix:")
    expected = {
        "truncated_image": (*where, "column 'image'", "img_2.jpg", "could not be decoded", "--skip_bad_images"),
        "none_caption": (*where, "column 'caption'", "got NoneType"),
        "empty_caption": (*where, "column 'caption'", "the caption is empty"),
        "missing_column": ("split 'train'", "lacks column(s) ['synthetic_caption']", "Rename columns"),
        "wrong_type": ("split 'train'", "row 0", "column 'caption'", "got int"),
        "empty_dataset": ("split 'train'", "has no rows", "Fix:"),
        "missing_path": ("--dataset", "does not exist", "Fix:"),
    }[case]
    if case == "truncated_image":
        truncate(images[BAD_ROW])
    elif case in ("none_caption", "empty_caption"):
        rows[BAD_ROW]["caption"] = None if case == "none_caption" else "   "
    elif case == "wrong_type":
        for index, row in enumerate(rows):
            row["caption"] = index
    train = datasets.Dataset.from_list(rows)
    if case == "missing_column":
        train = train.remove_columns(["synthetic_caption"])
    elif case == "empty_dataset":
        train = train.select([])
    data = tmp_path / "data"
    datasets.DatasetDict(train=train, validation=datasets.Dataset.from_list(pacs_rows(images)[:2])).save_to_disk(data)
    dataset = str(tmp_path / "no_such_folder" / "data") if case == "missing_path" else str(data)
    return ["--dataset", dataset], (str(data) if case != "missing_path" else dataset, *expected)


@pytest.mark.parametrize("case", CASES)
def test_train_pacs_refuses_bad_data_before_any_step(tmp_path, case):
    from modeling_pacs.cli import train_pacs

    arguments, expected = pacs_case(tmp_path, case)
    output = tmp_path / "out"
    argv = ["--model_name_or_path", "tiny:clip_s", *arguments, "--output_dir", str(output), "--max_steps", "1",
            "--report_to", "none", "--use_cpu"]  # fmt: skip
    assert_refused_before_training(lambda: train_pacs.main(argv), output, *expected)


# ----------------------------------------------------------------------------------------------- Polos / Pearl
def write_csv(path: Path, rows: list[dict], fieldnames: list[str]):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)


def supervised_case(folder: Path, case: str, file_name: str, image_column: str) -> tuple[Path, tuple[str, ...]]:
    """A human-judgement CSV (`mt`, `refs`, `score` and the image column), damaged as `case` says."""
    images = write_images(folder / "images")
    rows = [{image_column: image.name, "refs": repr([CAPTIONS[(index + 1) % NUM_ROWS]]), "score": "0.5",
             "mt": caption} for index, (image, caption) in enumerate(zip(images, CAPTIONS))]  # fmt: skip
    # `mt` last: a row cut short before it reads as None, the None caption of a CSV.
    fieldnames = [image_column, "refs", "score", "mt"]
    # every error names the file, the split, the row (where there is one) and the fix
    where = (file_name, "split 'train'", f"row {BAD_ROW}", "column 'mt'", "Fix:")
    expected = {
        "truncated_image": (file_name, "split 'train'", f"row {BAD_ROW}", "img_2.jpg", "could not be decoded",
                            "--skip_bad_images"),
        "none_caption": (*where, "expected a string, got None"),
        "empty_caption": (*where, "the caption is empty"),
        "missing_column": (file_name, "split 'train'", "missing columns ['score']", "Fix:"),
        "wrong_type": (file_name, "split 'train'", f"row {BAD_ROW}", "column 'score'", "'abc' is not a number",
                       "Fix:"),
        "empty_dataset": (file_name, "split 'train'", "has no rows", "Fix:"),
        "missing_path": ("does not exist",),
        "none": (),
    }[case]  # fmt: skip
    if case == "truncated_image":
        truncate(images[BAD_ROW])
    elif case == "empty_caption":
        rows[BAD_ROW]["mt"] = ""
    elif case == "missing_column":
        fieldnames.remove("score")
        for row in rows:
            del row["score"]
    elif case == "wrong_type":
        rows[BAD_ROW]["score"] = "abc"
    elif case == "empty_dataset":
        rows = []
    path = folder / file_name
    write_csv(path, rows, fieldnames)
    if case == "none_caption":
        lines = path.read_text().splitlines()
        lines[1 + BAD_ROW] = lines[1 + BAD_ROW].rsplit(",", 1)[0]
        path.write_text("\n".join(lines) + "\n")
    if case == "missing_path":
        path.unlink()
    return path, expected


@pytest.mark.parametrize("case", CASES)
def test_train_polos_refuses_bad_data_before_any_step(tmp_path, case):
    from modeling_pacs.cli import train_polos

    train, expected = supervised_case(tmp_path / "train", case, "polaris_train.csv", "imgid")
    validation, _ = supervised_case(tmp_path / "validation", "none", "polaris_val.csv", "imgid")
    if case == "missing_path":
        expected = ("--train", str(train), "does not exist", "Fix:")
    output = tmp_path / "out"
    argv = ["--model_name_or_path", "tiny:polos", "--train", str(train), "--validation", str(validation),
            "--output_dir", str(output), "--num_train_epochs", "1"]  # fmt: skip
    assert_refused_before_training(lambda: train_polos.main(argv), output, *expected)


@pytest.mark.parametrize("case", [case for case in CASES if case != "truncated_image"])
def test_train_pearl_refuses_bad_data_before_any_step(tmp_path, case):
    """Pearl trains on cached features, not images: its image check is that every row has features in the cache
    (test_pearl_rows_must_be_in_the_feature_cache)."""
    from modeling_pacs.cli import train_pearl

    data = tmp_path / "data"
    data.mkdir()
    _, expected = supervised_case(data, case, "spica_train.csv", "imgid")
    supervised_case(data, "none", "spica_val.csv", "imgid")
    (tmp_path / "cache").mkdir()
    (tmp_path / "init").mkdir()
    if case == "missing_path":
        data = tmp_path / "no_such_folder"
        expected = ("--data", str(data), "does not exist", "Fix:")
    output = tmp_path / "out"
    argv = ["--data", str(data), "--cache", str(tmp_path / "cache"), "--model_name_or_path", str(tmp_path / "init"),
            "--output_dir", str(output)]  # fmt: skip
    assert_refused_before_training(lambda: train_pearl.main(argv), output, *expected)


def test_pearl_rows_must_be_in_the_feature_cache():
    from modeling_pacs.pearl.training import check_rows_in_cache

    cache = SimpleNamespace(directory="cache/", image_index={"a.jpg": 0}, text_index={"a dog": 0, "a cat": 1})
    rows = [{"row": 0, "image": "a.jpg", "candidate": "a dog", "references": ["a cat"]},
            {"row": 1, "image": "b.jpg", "candidate": "a dog", "references": []}]  # fmt: skip
    with pytest.raises(
        TrainingDataError,
        match=r"spica_train.csv \(split 'train'\), row 1, column 'imgid': image "
        r"'b.jpg' has no features in the cache 'cache/'. Fix: run extract_pearl_features",
    ):
        check_rows_in_cache(rows, cache, "spica_train.csv", "train", "spica")
    rows[1]["image"], rows[1]["references"] = "a.jpg", ["a bird"]
    with pytest.raises(TrainingDataError, match=r"row 1, column 'refs': 'a bird' has no features"):
        check_rows_in_cache(rows, cache, "spica_train.csv", "train", "spica")


# ------------------------------------------------------------------------------------------------- captioner
@pytest.mark.parametrize("case", CASES)
def test_train_captioner_refuses_bad_data_before_any_step(tmp_path, case):
    from modeling_pacs.cli import train_captioner

    images = write_images(tmp_path / "images")
    rows = [{"image": str(image), "captions": [caption]} for image, caption in zip(images, CAPTIONS)]
    where = ("split 'train'", f"row {BAD_ROW}", "Fix:")
    expected = {
        "truncated_image": (*where, "column 'image'", "img_2.jpg", "could not be decoded", "--skip_bad_images"),
        "none_caption": (*where, "column 'captions'", "got NoneType"),
        "empty_caption": (*where, "column 'captions'", "the caption is empty"),
        "missing_column": ("split 'train'", "it needs 'image' and 'captions'", "Fix: rename the columns"),
        "wrong_type": ("split 'train'", "row 0", "column 'captions'", "got int"),
        "empty_dataset": ("split 'train'", "has no rows", "Fix:"),
        "missing_path": ("--dataset", "does not exist", "Fix:"),
    }[case]
    if case == "truncated_image":
        truncate(images[BAD_ROW])
    elif case in ("none_caption", "empty_caption"):
        rows[BAD_ROW]["captions"] = [None] if case == "none_caption" else [""]
    elif case == "wrong_type":
        for index, row in enumerate(rows):
            row["captions"] = [index]
    train = datasets.Dataset.from_list(rows)
    if case == "missing_column":
        train = train.remove_columns(["captions"])
    elif case == "empty_dataset":
        train = train.select([])
    data = tmp_path / "dataset"
    datasets.DatasetDict(train=train).save_to_disk(data)
    if case == "missing_path":
        data = tmp_path / "no_such_folder" / "dataset"
    output = tmp_path / "out"
    argv = ["--tiny", "--device", "cpu", "--stage", "xe", "--dataset", str(data), "--output_dir", str(output),
            "--max_steps", "1", "--test_split", "none"]  # fmt: skip
    assert_refused_before_training(lambda: train_captioner.main(argv), output, *expected)


# --------------------------------------------------------------------------------------------- the skip policy
def test_skip_bad_images_drops_and_counts_the_rows_and_logs_them(tmp_path, caplog):
    images = write_images(tmp_path / "images")
    truncate(images[1])
    images[4].write_text("not an image")
    rows = [10 + index for index in range(NUM_ROWS)]
    with pytest.raises(TrainingDataError, match=r"data.csv \(split 'train'\), row 11, column 'image': image '.*img_1"):
        check_images(rows, lambda positions: [images[p] for p in positions], "data.csv", "train", "image")
    with caplog.at_level(logging.WARNING):
        bad = check_images(
            rows, lambda positions: [images[p] for p in positions], "data.csv", "train", "image", skip_bad_images=True
        )
    assert bad == [11, 14]
    assert "skipped 2 of 6 rows whose 'image' image does not decode" in caplog.text
    assert "[11, 14]" in caplog.text


def test_the_pacs_split_keeps_the_rows_whose_images_decode(tmp_path):
    from modeling_pacs.pacs.training import prepare_training_dataset, required_columns, validate_training_split

    images = write_images(tmp_path / "images")
    truncate(images[BAD_ROW])
    rows = prepare_training_dataset(datasets.Dataset.from_list(pacs_rows(images)), required_columns())
    kept = validate_training_split(rows, required_columns(), {}, "data", "train", skip_bad_images=True)
    # Row BAD_ROW's real image and row NUM_ROWS - 1 - BAD_ROW's synthetic image are the truncated file.
    assert kept["row_index"] == [row for row in range(NUM_ROWS) if row not in (BAD_ROW, NUM_ROWS - 1 - BAD_ROW)]


def test_decoding_checks_catch_what_a_header_check_misses(tmp_path):
    """A truncated JPEG still opens (PIL reads the header lazily); the draft decode finds it, as do bad bytes."""
    import PIL.Image

    path = write_images(tmp_path / "images")[0]
    truncate(path)
    with PIL.Image.open(path) as opened:
        assert opened.size == (64, 48)  # the header is intact
    with pytest.raises(OSError, match="truncated"):
        decode_image(path)
    with pytest.raises(OSError):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    decode_image({"bytes": None, "path": str(write_images(tmp_path / "more")[1])})


def test_polos_parquet_images_are_checked_in_the_file_and_skipped_on_request(tmp_path, caplog):
    """The Hub layout keeps images as bytes in the parquet file: the check reads them chunk by chunk from there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from modeling_pacs.polos.training import read_polaris
    from modeling_pacs.supervised.data import validate_rows

    images = write_images(tmp_path / "images")
    contents = [image.read_bytes() for image in images]
    contents[BAD_ROW] = contents[BAD_ROW][: len(contents[BAD_ROW]) // 2]
    table = pa.table({
        "refs": [[CAPTIONS[(index + 1) % NUM_ROWS]] for index in range(NUM_ROWS)],
        "cand": CAPTIONS,
        "img": [{"bytes": content, "path": None} for content in contents],
        "human_score": pa.array([0.5] * NUM_ROWS, type=pa.float32()),
    })  # fmt: skip
    pq.write_table(table, tmp_path / "train.parquet")
    rows = read_polaris(tmp_path / "train.parquet")
    with pytest.raises(TrainingDataError, match=rf"train.parquet \(split 'train'\), row {BAD_ROW}, column 'img': image "
                       r"of \d+ bytes could not be decoded .*--skip_bad_images"):  # fmt: skip
        validate_rows(rows, "train.parquet", "train", "polaris", decode_images=True)
    with caplog.at_level(logging.WARNING):
        kept = validate_rows(rows, "train.parquet", "train", "polaris", decode_images=True, skip_bad_images=True)
    assert [row["row"] for row in kept] == [row for row in range(NUM_ROWS) if row != BAD_ROW]
    assert "skipped 1 of 6 rows" in caplog.text
