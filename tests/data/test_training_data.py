"""Training data that stays on disk (issue 22): the Karpathy + synthetic join in Arrow, images read per batch.

The reference is the pipeline it replaced (tests/references/training_data.py, kept verbatim): on a small corpus in the
generator's own format the new pipeline must give the same rows, the same synthetic image bytes per row and the same
order for a seed. The memory property is tested as a mechanism: preparation reads no image byte and nothing builds a
table from values that carry bytes; a batch reads only the row groups of its rows.
"""

import io
import json
import os
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import TrainingArguments

from modeling_pacs.data import (
    KarpathyFormatError,
    ParquetSource,
    SyntheticDataError,
    image_presence,
    open_source,
    read_karpathy,
    refuse_bytes,
    write_row_table,
)
from modeling_pacs.data import sources as sources_module
from modeling_pacs.jobs import ShardedJob
from modeling_pacs.pacs.training import (
    RECIPES,
    PACSDataCollator,
    PACSEncoderForTraining,
    PACSTrainer,
    load_training_data,
    prepare_model_for_training,
    required_columns,
)
from modeling_pacs.synthetic.generation import ROW_GROUP_ROWS, item_seed, rewrite_row_groups, write_parquet
from modeling_pacs.testing.pacs import make_tiny_model
from tests.references.training_data import old_training_splits

REPO_ROOT = Path(__file__).resolve().parents[2]
SPLITS = ["train", "train", "restval", "val", "test", "train", "val", "restval"]  # image i has SPLITS[i % 8]
NUM_IMAGES = 40


def png(seed: int) -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def write_corpus(root: Path) -> dict:
    """A COCO-shaped Karpathy file, its images on disk, and the generator's output folder for train/restval/val:
    4 images a shard (row groups of 8 rows), some images flagged by the safety checker (no synthetic image), one
    unreadable source image (no synthetic data at all)."""
    (root / "coco" / "train2014").mkdir(parents=True)
    images, sentid = [], 0
    for index in range(NUM_IMAGES):
        folder = "train2014"
        name = f"COCO_{folder}_{index:012d}.jpg"
        PIL.Image.fromarray(np.full((20, 24, 3), index * 6, np.uint8)).save(root / "coco" / folder / name)
        sentences = []
        for _ in range(6 if index % 7 == 0 else 5):
            sentences.append({"raw": f"caption {sentid} of image {index}", "sentid": 1000 + sentid, "tokens": ["x"]})
            sentid += 1
        images.append({"filepath": folder, "filename": name, "cocoid": 500 + 3 * index, "imgid": index,
                       "split": SPLITS[index % len(SPLITS)], "sentences": sentences})  # fmt: skip
    (root / "dataset_coco.json").write_text(json.dumps({"images": images, "dataset": "coco"}))
    sources = [image for image in images if image["split"] in ("train", "restval", "val")]
    job = ShardedJob(root / "synthetic", {"input": "test"}, shard_size=4, shard_suffix=".parquet")
    wanted = job.start()
    row = 0
    for shard in range(job.num_shards(len(sources))):
        rows = []
        for image in sources[shard * 4 : (shard + 1) * 4]:
            unreadable = image["imgid"] == 9
            for sentence in image["sentences"]:
                flagged = sentence["sentid"] % 13 == 0
                rows.append(
                    {
                        "row": row,
                        "sentid": sentence["sentid"],
                        "cocoid": image["cocoid"],
                        "image": {"bytes": None, "path": str(root / "coco" / image["filepath"] / image["filename"])},
                        "caption": sentence["raw"],
                        "synthetic_image": None if flagged or unreadable else {"bytes": png(row), "path": None},
                        "synthetic_caption": None if unreadable else f"blip caption of {image['cocoid']}",
                        "split": image["split"],
                        "seed": item_seed(0, sentence["sentid"]),
                        "safety_flagged": None if unreadable else flagged,
                        "error": "image 9 could not be decoded" if unreadable else None,
                        "captioner": "c", "captioner_revision": None, "caption_decoding": "{}", "generator": "g",
                        "generator_revision": None, "scheduler": "default", "steps": 2, "guidance_scale": 7.5,
                        "height": 64, "width": 64, "dtype": "fp32", "global_seed": 0,
                    }
                )  # fmt: skip
                row += 1
        if wanted(shard):
            job.write_shard(shard, lambda path, rows=rows: write_parquet(rows, path))
    return {"karpathy": root / "dataset_coco.json", "images": root / "coco", "synthetic": root / "synthetic"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny")
    model = make_tiny_model(directory, variant="clip_s")
    return prepare_model_for_training(model, RECIPES["pac_s_pp"]).train()


def synthetic_formats(corpus, folder: Path) -> dict[str, Path]:
    """The same synthetic rows as the generator's parquet shards, as a save_to_disk folder, and as JSON lines whose
    images are PNG files named relative to the folder."""
    shards = sorted(str(path) for path in (corpus["synthetic"] / "shards").glob("*.parquet"))
    loaded = datasets.load_dataset("parquet", data_files=shards, split="train")
    loaded.save_to_disk(str(folder / "save_to_disk"))
    (folder / "jsonl").mkdir()
    with (folder / "jsonl" / "part-0.jsonl").open("w") as handle:
        for row in pq.read_table(shards).to_pylist():
            image = None
            if row["synthetic_image"] is not None:
                image = f"png/{row['sentid']}.png"
                (folder / "jsonl" / "png").mkdir(exist_ok=True)
                (folder / "jsonl" / image).write_bytes(row["synthetic_image"]["bytes"])
            entry = {"sentid": row["sentid"], "cocoid": row["cocoid"], "synthetic_image": image,
                     "synthetic_caption": row["synthetic_caption"]}  # fmt: skip
            handle.write(json.dumps(entry) + "\n")
    return {"parquet": corpus["synthetic"], "save_to_disk": folder / "save_to_disk", "jsonl": folder / "jsonl"}


class RowRecorder:
    """A collator that records, per batch, each row's identity and its synthetic image as the trainer would read it
    (through `PACSDataCollator.batch_images` where the rows hold references)."""

    def __init__(self, collator: PACSDataCollator | None = None):
        self.collator = collator
        self.batches = []

    def __call__(self, rows):
        images = [row["synthetic_image"] for row in rows]
        if self.collator is not None:
            images = self.collator.batch_images(rows, [row["row_index"] for row in rows], "synthetic_image")
        self.batches.append(
            [
                (row["sentid"], row["caption"], row["image"], row["synthetic_caption"], image)
                for row, image in zip(rows, images)
            ]  # fmt: skip
        )
        return {"row_index": torch.tensor([row["row_index"] for row in rows])}


def data_order(model, dataset, recorder: RowRecorder, output_dir: Path, seed: int) -> list:
    """Every batch of one epoch in the order the PACSTrainer's dataloader yields them for `seed`."""
    arguments = TrainingArguments(
        str(output_dir), per_device_train_batch_size=5, report_to="none", use_cpu=True, seed=seed, data_seed=seed
    )
    trainer = PACSTrainer(
        model=PACSEncoderForTraining(model), args=arguments, train_dataset=dataset, data_collator=recorder
    )
    for _ in trainer.get_train_dataloader():
        pass
    return recorder.batches


# ----------------------------------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("layout", ["parquet", "save_to_disk", "jsonl"])
def test_new_pipeline_yields_the_old_rows_bytes_and_order(corpus, tiny_model, tmp_path, layout):
    synthetic = synthetic_formats(corpus, tmp_path)[layout]
    columns = required_columns()
    old_train, old_validation = old_training_splits(corpus["karpathy"], corpus["images"], synthetic, columns)
    new = load_training_data(
        columns, tmp_path / "rows", karpathy_json=str(corpus["karpathy"]), image_root=str(corpus["images"]),
        synthetic_data=str(synthetic),
    )  # fmt: skip
    collator = PACSDataCollator(tiny_model, image_sources=new.image_sources)
    # Rows lacking synthetic data are skipped: 5 flagged captions in these splits and image 9's 5 captions.
    assert len(new.train) == len(old_train) and len(new.validation) == len(old_validation)
    assert len(old_train) + len(old_validation) < sum(
        len(image["sentences"]) for image in json.loads(corpus["karpathy"].read_text())["images"]
        if image["split"] in ("train", "restval", "val")
    )  # fmt: skip
    for old, rows in ((old_train, new.train), (old_validation, new.validation)):
        expected, actual = RowRecorder(), RowRecorder(collator)
        expected([old[index] for index in range(len(old))])
        actual([rows[index] for index in range(len(rows))])
        assert actual.batches == expected.batches
    # The same order for a seed (and another order for another seed).
    first = data_order(tiny_model, old_train, RowRecorder(), tmp_path / "a", seed=3)
    assert data_order(tiny_model, new.train, RowRecorder(collator), tmp_path / "b", seed=3) == first
    assert data_order(tiny_model, new.train, RowRecorder(collator), tmp_path / "c", seed=4) != first


def test_generator_shards_are_written_for_random_access(corpus):
    """The generator writes row groups of 8 rows (a batch reads ~8 images per image it needs), no dictionary pages
    for the image columns, and the `datasets` features in the schema."""
    shard = sorted((corpus["synthetic"] / "shards").glob("*.parquet"))[0]
    metadata = pq.read_metadata(shard)
    assert [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)] == [8, 8, 5]
    encodings = {
        metadata.row_group(0).column(index).path_in_schema: metadata.row_group(0).column(index).encodings
        for index in range(metadata.num_columns)
    }
    assert not any("RLE_DICTIONARY" in encodings[leaf] for leaf in ("synthetic_image.bytes", "image.path"))
    assert "RLE_DICTIONARY" in encodings["captioner"]
    features = datasets.Features.from_arrow_schema(pq.read_schema(shard))
    assert isinstance(features["synthetic_image"], datasets.Image)


# ----------------------------------------------------------------------------------------------------- mechanism
def carries_bytes(value, depth: int = 0) -> bool:
    """Whether Python values hold bytes objects (Arrow arrays are views of their files and are not counted)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return True
    if depth > 4:
        return False
    if isinstance(value, dict):
        return any(carries_bytes(item, depth + 1) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(carries_bytes(item, depth + 1) for item in value[:1000])
    return False


@pytest.fixture
def guard_tables(monkeypatch):
    """`guard_tables()` makes every constructor that builds a table or array from Python values or arrays fail when
    they carry bytes (call it once the test has written its input files); it returns the list of calls seen."""
    calls = []

    def install():
        for owner, names in ((datasets.Dataset, ("from_list", "from_dict", "from_generator", "from_pandas")),
                             (pa, ("array", "table", "record_batch", "chunked_array"))):  # fmt: skip
            for name in names:
                original = getattr(owner, name)

                def guarded(*args, _original=original, _name=name, **kwargs):
                    calls.append(_name)
                    if carries_bytes(list(args)) or carries_bytes(kwargs):
                        raise AssertionError(f"{_name} was called with image bytes")
                    return _original(*args, **kwargs)

                monkeypatch.setattr(owner, name, guarded)
        return calls

    return install


def test_preparation_reads_no_image_byte_and_a_batch_reads_only_its_row_groups(
    corpus, tiny_model, tmp_path, guard_tables
):
    calls = guard_tables()
    # decode_images=False: the up-front image check (tests/data/test_validation.py) streams every image once.
    data = load_training_data(
        required_columns(), tmp_path / "rows", karpathy_json=str(corpus["karpathy"]),
        image_root=str(corpus["images"]), synthetic_data=str(corpus["synthetic"]), decode_images=False,
    )  # fmt: skip
    source = data.image_sources["synthetic_image"]
    assert isinstance(source, ParquetSource) and calls  # the guards saw the construction calls
    assert source.image_bytes_read == 0
    # Row tables refer to the synthetic images: an int64 row number, never bytes.
    assert data.train.features["synthetic_image"] == datasets.Value("int64")
    rows = [data.train[index] for index in (3, 17, 40)]
    batch = PACSDataCollator(tiny_model, image_sources=data.image_sources)(rows)
    assert batch["synthetic_pixel_values"].shape[0] == 3
    # Exactly the row groups that hold the three rows were read.
    groups = set()
    for row in rows:
        files, local = source.locate([row["synthetic_image"]])
        file, offset = int(files[0]), int(local[0])
        groups.add((file, int(np.searchsorted(source.group_starts[file], offset, side="right") - 1)))
    expected = sum(
        pq.ParquetFile(source.files[file]).read_row_group(group, columns=["synthetic_image"]).column(0).nbytes
        for file, group in groups
    )
    assert source.image_bytes_read == expected
    total = sum(pq.read_table(file, columns=["synthetic_image"]).column(0).nbytes for file in source.files)
    assert expected < total / 4


def test_row_tables_refuse_bytes(tmp_path):
    table = pa.table({"caption": ["a cat"], "image": pa.array([b"\x89PNG"], pa.binary())})
    with pytest.raises(TypeError, match=r"train: column\(s\) \['image'\] hold bytes; a row table refers to its images"):
        write_row_table(table, tmp_path, "train")
    nested = pa.table({"image": pa.array([{"bytes": b"x", "path": None}])})
    with pytest.raises(TypeError, match=r"column\(s\) \['image'\] hold bytes"):
        refuse_bytes(nested, "rows")
    path, digest = write_row_table(pa.table({"caption": ["a cat"], "image": [7]}), tmp_path, "train")
    assert path.name == f"train-{digest[:16]}.arrow" and oct(path.stat().st_mode & 0o777) == "0o644"
    assert write_row_table(pa.table({"caption": ["a cat"], "image": [7]}), tmp_path, "train") == (path, digest)
    assert not list(tmp_path.glob(".*.tmp"))


def test_other_trainers_readers_keep_images_on_disk(tmp_path, guard_tables):
    """The captioner's and Polos's readers and the generator's dataset reader leave image bytes in their files."""
    from modeling_pacs.captioning.training import CaptioningCollator, load_caption_dataset, one_caption_per_row
    from modeling_pacs.data import ImageReference, resolve_references
    from modeling_pacs.polos.training import PolarisCollator, read_polaris
    from modeling_pacs.synthetic.generation import dataset_images
    from modeling_pacs.tokenization import build_clip_tokenizer

    images = [png(seed) for seed in range(3)]
    # Captioner: one caption per row, images as bytes; rows 0 and 2 hold the same image and are grouped.
    rows = {"image": [{"bytes": images[0], "path": None}, {"bytes": images[1], "path": None},
                      {"bytes": images[0], "path": None}], "caption": ["one", "two", "three"]}  # fmt: skip
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "captions"))
    table = {"refs": [["a ref"]] * 3, "cand": ["x", "y", "z"], "human_score": [0.1, 0.5, 0.9],
             "img": [{"bytes": image, "path": None} for image in images]}  # fmt: skip
    pq.write_table(pa.Table.from_pydict(table), tmp_path / "polaris.parquet")
    guard_tables()
    loaded = load_caption_dataset(str(tmp_path / "captions"), data_dir=tmp_path / "rows")
    assert loaded.dataset.to_list() == [
        {"image": 0, "captions": ["one", "three"], "row_index": 0},
        {"image": 1, "captions": ["two"], "row_index": 1},
    ]
    assert [image["bytes"] for image in loaded.images] == [images[0], images[1]]
    xe_rows = one_caption_per_row(loaded.dataset)
    assert xe_rows.to_pylist() == [{"image": 0, "caption": "one"}, {"image": 0, "caption": "three"},
                                   {"image": 1, "caption": "two"}]  # fmt: skip
    collator = CaptioningCollator(build_clip_tokenizer(), 32, "scst", image_sources=loaded.image_sources)
    batch = collator([{"image": 1, "captions": ["two"], "row_index": 1}])
    assert batch["images"] == [{"bytes": images[1], "path": None}] and batch["pixel_values"].shape == (1, 3, 32, 32)
    # Polos: the Hub parquet layout.
    polaris = read_polaris(tmp_path / "polaris.parquet")
    assert all(isinstance(row["image"], ImageReference) for row in polaris)
    assert polaris[0]["image"].source.image_bytes_read == 0
    assert PolarisCollator()([polaris[2]])["images"] == [{"bytes": images[2], "path": None}]
    # The generator's datasets source.
    units = dataset_images(datasets.load_from_disk(str(tmp_path / "captions")), "image", "caption", "train")
    assert [unit.captions for unit in units] == [[(0, 0, "one")], [(1, 1, "two")], [(2, 2, "three")]]
    assert resolve_references([unit.image for unit in units]) == rows["image"]


# ----------------------------------------------------------------------------------------------------- resume
def run_train_pacs(corpus, output_dir: Path, *extra: str, monkeypatch) -> list[list[int]]:
    """train_pacs.py's main on the corpus; returns the sentids of every batch it collated."""
    from modeling_pacs.cli import train_pacs

    batches = []
    original = PACSDataCollator.__call__

    def recording(self, rows):
        batches.append([row["sentid"] for row in rows])
        return original(self, rows)

    monkeypatch.setattr(PACSDataCollator, "__call__", recording)
    train_pacs.main([
        "--model_name_or_path", "tiny", "--karpathy_json", str(corpus["karpathy"]),
        "--image_root", str(corpus["images"]), "--synthetic_data", str(corpus["synthetic"]),
        "--output_dir", str(output_dir), "--per_device_train_batch_size", "4", "--report_to", "none", "--use_cpu",
        "--disable_tqdm", "true", "--eval_strategy", "no", "--max_eval_samples", "3", "--seed", "11", *extra,
    ])  # fmt: skip
    return batches


def test_resume_continues_with_the_same_data_order(corpus, tmp_path, monkeypatch):
    full = run_train_pacs(
        corpus, tmp_path / "full", "--max_steps", "4", "--save_strategy", "no", monkeypatch=monkeypatch
    )
    run_train_pacs(corpus, tmp_path / "cut", "--max_steps", "2", "--save_steps", "2", monkeypatch=monkeypatch)
    record = json.loads((tmp_path / "cut" / "checkpoint-2" / "training_data.json").read_text())
    old_train, _ = old_training_splits(corpus["karpathy"], corpus["images"], corpus["synthetic"], required_columns())
    assert record["train"]["rows"] == len(old_train) and len(record["train"]["sha256"]) == 64
    resumed = run_train_pacs(
        corpus, tmp_path / "cut", "--max_steps", "4", "--save_strategy", "no",
        "--resume_from_checkpoint", str(tmp_path / "cut" / "checkpoint-2"), monkeypatch=monkeypatch,
    )  # fmt: skip
    train_batches = [batch for batch in full if len(batch) == 4][:4]
    assert [batch for batch in resumed if len(batch) == 4][:2] == train_batches[2:]
    # Other rows (here: the first 100 only) would change the order: refused, naming what changed.
    with pytest.raises(SystemExit, match=r"the training data differs from the data .*checkpoint-2 was trained on "
                                         r"\(train: .*'first_rows': 100\}\): resuming would change"):  # fmt: skip
        run_train_pacs(
            corpus, tmp_path / "cut", "--max_steps", "4", "--max_train_samples", "100",
            "--resume_from_checkpoint", str(tmp_path / "cut" / "checkpoint-2"), monkeypatch=monkeypatch,
        )  # fmt: skip


# ----------------------------------------------------------------------------------------------------- Karpathy
def test_karpathy_reader_streams_entries_across_chunks(tmp_path):
    """Entries straddle the reader's 1 MiB windows (long captions, numbers at the end of a window); the rows equal
    a json.loads reading of the same file."""
    rng = np.random.default_rng(0)
    entries = []
    for index in range(300):
        sentences = [{"raw": "é" * int(rng.integers(1, 9000)) + f" {index}", "sentid": 10 * index + k}
                     for k in range(int(rng.integers(1, 4)))]  # fmt: skip
        entries.append({"cocoid": index, "filename": f"{index}.jpg", "split": ["train", "val", "restval"][index % 3],
                        "sentences": sentences, **({"filepath": "val2014"} if index % 2 else {})})  # fmt: skip
    text = json.dumps({"dataset": "coco", "n": 123456789, "images": entries, "tail": [1, 2.5, None]}, indent=1)
    (tmp_path / "k.json").write_text(text, encoding="utf-8")
    assert len(text.encode()) > 3 * 2**20
    expected = [
        {"image": str(tmp_path / entry.get("filepath", "") / entry["filename"]), "caption": sentence["raw"],
         "cocoid": entry["cocoid"], "sentid": sentence["sentid"], "split": entry["split"]}
        for entry in json.loads(text)["images"] if entry["split"] in ("train", "restval")
        for sentence in entry["sentences"]
    ]  # fmt: skip
    assert read_karpathy(tmp_path / "k.json", tmp_path, ["train", "restval"]).to_pylist() == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"images": [{"cocoid": 1, "filename": "a.jpg", "split": "train"}]}', r"image entry 0 lacks 'sentences'"),
        ('{"images": [{"cocoid": 1, "filename": "a.jpg", "split": "train", "sentences": [{"raw": 5, "sentid": 1}]}]}',
         r"a caption entry has a value of the wrong type .*'raw' must be a string"),
        ('{"images": [{"cocoid": 1, "filename": "a.jpg", "split": "val", "sentences": []}, ',
         r"k.json: not a Karpathy dataset_coco.json \(Expecting value at character 81\); expected \{\"images\""),
        ('{"annotations": []}', r"k.json: not a Karpathy dataset_coco.json \(no 'images' list\)"),
        ("[1, 2]", r"k.json: not a Karpathy dataset_coco.json \(expected '\{' at character 0, found '\[1, 2\]'\)"),
        ('{"images": [] "x": 1}', r"k.json: not a Karpathy dataset_coco.json \(expected ',' or '\}' at character 14"),
    ],
)  # fmt: skip
def test_karpathy_reader_names_the_problem(tmp_path, text, message):
    (tmp_path / "k.json").write_text(text)
    with pytest.raises(KarpathyFormatError, match=message):
        read_karpathy(tmp_path / "k.json", tmp_path, ["train"])


def test_karpathy_reader_refuses_unknown_splits(tmp_path):
    (tmp_path / "k.json").write_text('{"images": []}')
    with pytest.raises(ValueError, match=r"unknown Karpathy split\(s\) \['validation'\]: expected some of"):
        read_karpathy(tmp_path / "k.json", tmp_path, ["validation"])


# ----------------------------------------------------------------------------------------------------- sources
IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
# Every kind of image value a `datasets.Image` column can hold, and whether it holds an image.
IMAGE_VALUES = [
    (None, False),
    ({"bytes": b"PNG-a", "path": None}, True),
    ({"bytes": None, "path": "rel/b.png"}, True),
    ({"bytes": None, "path": None}, False),
    ({"bytes": b"PNG-c", "path": "c.png"}, True),
    ({"bytes": b"", "path": None}, True),  # present, and corrupt: the collator names its row
    ({"bytes": None, "path": ""}, False),
]


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("pattern", ["generator", "mixed", "paths_only", "all_null"])
def test_parquet_presence_and_batches_match_the_values(tmp_path, pattern, statistics):
    """`has_image` equals a reading of every value; `take_images` returns the values (relative paths resolved);
    files whose rows hold bytes or are null (the generator's) are told apart without reading a byte."""
    rng = np.random.default_rng(len(pattern) + statistics)
    choices = {"generator": [0, 1], "mixed": range(len(IMAGE_VALUES)), "paths_only": [2, 6], "all_null": [0]}[pattern]
    files, values = [], []
    for file in range(3):
        kinds = rng.choice(list(choices), size=int(rng.integers(1, 30)))
        column = [IMAGE_VALUES[kind][0] for kind in kinds]
        table = pa.table({"key": pa.array(range(len(values), len(values) + len(column))),
                          "image": pa.array(column, IMAGE_STRUCT)})  # fmt: skip
        files.append(tmp_path / f"part-{file}.parquet")
        pq.write_table(table, files[-1], row_group_size=int(rng.integers(1, 9)), write_statistics=statistics)
        values += column
    source = ParquetSource(files, root=tmp_path)
    keys, present = source.read(["key"], "image")
    assert keys.column("key").to_pylist() == list(range(len(values)))
    expected = [value is not None and (value["bytes"] is not None or bool(value["path"])) for value in values]
    assert present.tolist() == expected
    if pattern in ("generator", "paths_only", "all_null") and statistics:
        assert source.image_bytes_read == 0
    rows = rng.permutation(len(values))[:12].tolist()
    taken = source.take_images("image", rows)
    assert taken == [source.resolve(values[row]) for row in rows]
    resolved = [value for value in taken if value and value["bytes"] is None and value["path"]]
    assert all(value["path"].startswith(str(tmp_path)) for value in resolved)


def test_plain_binary_and_path_columns(tmp_path):
    values = [b"x", None, b"", b"yy", None]
    pq.write_table(pa.table({"image": pa.array(values, pa.binary()), "name": ["a", None, "", "d", "e"]}),
                   tmp_path / "p.parquet", row_group_size=2)  # fmt: skip
    source = open_source(tmp_path)
    assert source.has_image("image").tolist() == [True, False, True, True, False]
    assert source.has_image("name").tolist() == [True, False, False, True, True]
    assert source.take_images("image", [3, 0]) == [b"yy", b"x"]
    assert image_presence(pa.array(["a", None])).tolist() == [True, False]
    with pytest.raises(TypeError, match=r"column\(s\) \['image'\] hold bytes; read images with take_images"):
        source.read_columns(["image"])
    with pytest.raises(IndexError, match=r"row 5 is out of range \(the files hold 5 rows\)"):
        source.take_images("image", [5])


def test_sources_name_bad_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--synthetic_data '.*nowhere' does not exist"):
        open_source(tmp_path / "nowhere", "--synthetic_data")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no save_to_disk dataset, .parquet or .jsonl files found"):
        open_source(tmp_path / "empty")
    pq.write_table(pa.table({"a": [1]}), tmp_path / "mixed-0.parquet")
    pq.write_table(pa.table({"b": [1]}), tmp_path / "mixed-1.parquet")
    with pytest.raises(ValueError, match=r"mixed-1.parquet: its columns \['b'\] differ from mixed-0.parquet's"):
        ParquetSource([tmp_path / "mixed-0.parquet", tmp_path / "mixed-1.parquet"])


def test_legacy_shards_are_flagged_and_rewritten(corpus, tmp_path, monkeypatch, caplog):
    """Shards of earlier versions hold one row group: read correctly, with a warning naming the fix, and
    `--rewrite-row-groups` turns them into 8-row groups without changing a value."""
    shard = sorted((corpus["synthetic"] / "shards").glob("*.parquet"))[1]
    table = pq.read_table(shard)
    legacy = tmp_path / "shard-0000001.parquet"
    pq.write_table(table, legacy)  # pyarrow's default: one row group
    monkeypatch.setattr(sources_module, "LARGE_ROW_GROUP_BYTES", 1000)
    with caplog.at_level("WARNING"):
        source = ParquetSource([legacy])
        assert source.has_image("synthetic_image").sum() > 0
    assert "1 row groups hold more than 0 MiB of 'synthetic_image'" in caplog.text
    assert "--rewrite-row-groups FOLDER" in caplog.text
    assert rewrite_row_groups(legacy) is True and rewrite_row_groups(legacy) is False
    rewritten = pq.ParquetFile(legacy)
    assert max(rewritten.metadata.row_group(g).num_rows for g in range(rewritten.num_row_groups)) == ROW_GROUP_ROWS
    assert rewritten.read().equals(table) and rewritten.schema_arrow.metadata == table.schema.metadata
    assert oct(os.stat(legacy).st_mode & 0o777) == "0o644"


# ----------------------------------------------------------------------------------------------------- join
def write_synthetic(folder: Path, rows: list[dict]):
    folder.mkdir()
    schema = pa.schema([("sentid", pa.int64()), ("cocoid", pa.int64()), ("synthetic_image", IMAGE_STRUCT),
                        ("synthetic_caption", pa.string())])  # fmt: skip
    for index in range(0, len(rows), 2):
        pq.write_table(pa.Table.from_pylist(rows[index : index + 2], schema=schema), folder / f"s-{index}.parquet")


def test_join_refuses_ambiguous_or_unrelated_synthetic_data(corpus, tmp_path):
    image = {"bytes": b"PNG", "path": None}
    karpathy = [(corpus["karpathy"], corpus["images"])]
    cases = {
        "duplicate": (
            [{"sentid": 1000, "cocoid": 500, "synthetic_image": image, "synthetic_caption": "c"},
             {"sentid": 1001, "cocoid": 500, "synthetic_image": image, "synthetic_caption": "c"},
             {"sentid": 1000, "cocoid": 500, "synthetic_image": image, "synthetic_caption": "c"}],
            r"sentid 1000 has two synthetic images \(s-0.parquet row 0 and s-2.parquet row 0; 1 duplicated sentids "
            r"in all\): the folder mixes generation runs",
        ),
        "conflict": (
            [{"sentid": 1000, "cocoid": 500, "synthetic_image": image, "synthetic_caption": "one"},
             {"sentid": 1001, "cocoid": 500, "synthetic_image": image, "synthetic_caption": "another"}],
            r"cocoid 500 has two different synthetic captions \(s-0.parquet row 0 and s-0.parquet row 1",
        ),
        "unrelated": (
            [{"sentid": 1, "cocoid": 2, "synthetic_image": image, "synthetic_caption": "c"}],
            r"train: none of the \d+ captions of the Karpathy split\(s\) \['train', 'restval'\] has its synthetic "
            r"data in .*unrelated: is it the synthetic data of this Karpathy file",
        ),
    }  # fmt: skip
    for name, (rows, message) in cases.items():
        write_synthetic(tmp_path / name, rows)
        with pytest.raises(SyntheticDataError, match=message):
            load_training_data(required_columns(), tmp_path / "rows", karpathy_json=str(karpathy[0][0]),
                               image_root=str(karpathy[0][1]), synthetic_data=str(tmp_path / name))  # fmt: skip
    (tmp_path / "captions_only").mkdir()
    captions_only = pa.table({"cocoid": [500, 509], "synthetic_caption": ["c", "c"]})  # image 0 (train), 3 (val)
    pq.write_table(captions_only, tmp_path / "captions_only" / "a.parquet")
    with pytest.raises(SyntheticDataError, match=r"no column\(s\) \['synthetic_image'\] .*Set the loss weight"):
        load_training_data(required_columns(), tmp_path / "rows", karpathy_json=str(karpathy[0][0]),
                           image_root=str(karpathy[0][1]), synthetic_data=str(tmp_path / "captions_only"))  # fmt: skip
    # With lambda_v = 0 the synthetic images are not needed.
    data = load_training_data(
        required_columns(use_synthetic_images=False), tmp_path / "rows", karpathy_json=str(karpathy[0][0]),
        image_root=str(karpathy[0][1]), synthetic_data=str(tmp_path / "captions_only"),
    )  # fmt: skip
    assert set(data.train["synthetic_caption"]) == {"c"} and len(data.train) == 6  # image 0's captions
    assert len(data.validation) == 5
