"""The training-data pipeline of train_pacs.py before it was memory-mapped (kept verbatim as the equivalence reference).

It read every synthetic row into Python (`list(shards)`), joined the Karpathy rows in Python and built an in-memory
table with `datasets.Dataset.from_list`: exact on small data, and what the new pipeline must reproduce row for row.
Do not use it on large data: it holds every image in memory (and overflows Arrow's 2 GiB offsets).
"""

import json
from pathlib import Path

import datasets

# The column names the old pipeline used (modeling_pacs/pacs/training.py and data/synthetic_pairs.py before 0536827).
IMAGE_COLUMN = "image"
SYNTHETIC_IMAGE_COLUMN = "synthetic_image"
ROW_INDEX_COLUMN = "row_index"


def check_training_columns(column_names, columns, what="training dataset"):
    column_names = list(column_names)
    missing = [column for column in columns if column not in column_names]
    if missing:
        raise ValueError(
            f"the {what} lacks column(s) {missing}: expected columns {columns} (images as paths, bytes or "
            f"datasets.Image; captions as strings), found {column_names}. Rename columns with "
            "dataset.rename_column, or set the loss weight of a missing synthetic column to 0"
        )


def prepare_training_dataset(dataset, columns, what="training dataset"):
    """The old `modeling_pacs.pacs.training.prepare_training_dataset`, inlined: a reference shares no code with the
    pipeline it checks (the new one calls the package's function)."""
    check_training_columns(dataset.column_names, columns, what)
    for column in (IMAGE_COLUMN, SYNTHETIC_IMAGE_COLUMN):
        feature = dataset.features.get(column)
        if isinstance(feature, datasets.Image) and feature.decode:
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
    if ROW_INDEX_COLUMN not in dataset.column_names:
        dataset = dataset.add_column(ROW_INDEX_COLUMN, list(range(len(dataset))))
    return dataset


def load_karpathy_rows(karpathy_json, image_root, splits):
    splits = set(splits)
    data = json.loads(Path(karpathy_json).read_text())
    rows = []
    for image in data["images"]:
        if image["split"] not in splits:
            continue
        path = str(Path(image_root) / image.get("filepath", "") / image["filename"])
        for sentence in image["sentences"]:
            rows.append(
                {"image": path, "caption": sentence["raw"], "cocoid": image["cocoid"], "sentid": sentence["sentid"]}
            )
    return rows


def attach_synthetic_data(rows, synthetic_rows, synthetic_root: Path):
    images_by_sentence, captions_by_image = {}, {}
    for synthetic in synthetic_rows:
        if synthetic.get("synthetic_image") is not None and synthetic.get("sentid") is not None:
            image = synthetic["synthetic_image"]
            if isinstance(image, str) and not Path(image).is_absolute():
                image = str(synthetic_root / image)
            images_by_sentence[synthetic["sentid"]] = image
        if synthetic.get("synthetic_caption") is not None and synthetic.get("cocoid") is not None:
            captions_by_image[synthetic["cocoid"]] = synthetic["synthetic_caption"]
    for row in rows:
        row["synthetic_image"] = images_by_sentence.get(row["sentid"])
        row["synthetic_caption"] = captions_by_image.get(row["cocoid"])
    return rows


def load_synthetic_rows(path: Path) -> list[dict]:
    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        shards = datasets.load_from_disk(str(path))
        if isinstance(shards, datasets.DatasetDict):
            shards = datasets.concatenate_datasets(list(shards.values()))
    else:
        parquet, jsonl = sorted(path.glob("**/*.parquet")), sorted(path.glob("**/*.jsonl"))
        files = [str(file) for file in (parquet or jsonl)]
        shards = datasets.load_dataset("parquet" if parquet else "json", data_files=files, split="train")
    for column, feature in shards.features.items():
        if isinstance(feature, datasets.Image):
            shards = shards.cast_column(column, datasets.Image(decode=False))
    return list(shards)


def old_training_splits(karpathy_json, image_root, synthetic_data, columns):
    """(train, validation) exactly as the old `load_dataset_splits` built them from Karpathy + synthetic shards."""
    synthetic = load_synthetic_rows(Path(synthetic_data))
    built = {}
    for name, karpathy_splits in {"train": ("train", "restval"), "validation": ("val",)}.items():
        rows = load_karpathy_rows(karpathy_json, image_root, karpathy_splits)
        rows = attach_synthetic_data(rows, synthetic, Path(synthetic_data))
        complete = [row for row in rows if all(row.get(column) is not None for column in columns)]
        built[name] = prepare_training_dataset(datasets.Dataset.from_list(complete), columns)
    return built["train"], built["validation"]
