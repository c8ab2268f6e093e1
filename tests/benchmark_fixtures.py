"""Tiny benchmark copies in the ORIGINAL release formats, written by the tests (BENCHMARKS.md §1-§9)."""

import json
import pickle
from pathlib import Path

import numpy as np
import scipy.io

from tests.helpers import random_image

TOKENS = {
    "img1": [
        "A dog runs on grass .",
        "A brown dog running .",
        "A dog plays outside .",
        "A dog in a field .",
        "A dog runs on grass .",
    ],
    "img2": [
        "Two kids   play soccer .",
        "Children playing ball .",
        "Kids on a field .",
        "A soccer game .",
        "Two children run .",
    ],
    "img3": [
        "A man rides a bike .",
        "A cyclist on a road .",
        "A person biking .",
        "A man on a bicycle .",
        "Someone cycles .",
    ],
}


def write_images(folder: Path, names: list[str], size=(40, 30)):
    folder.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        random_image(index, size).save(folder / name)


def write_flickr8k_raw(root: Path) -> Path:
    """Hodosh text files + images. Expert: img1's second pair is one of its references (skipped, SPICE rule).
    CF: img1's candidates include two of its references, one of them duplicated in the references."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"{image}.jpg#{k}\t{caption}" for image, captions in TOKENS.items() for k, caption in enumerate(captions)]
    (root / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    expert = [
        "img1.jpg\timg2.jpg#1\t1\t2\t1",
        "img1.jpg\timg1.jpg#2\t4\t4\t4",  # the candidate is img1's own reference: skipped
        "img2.jpg\timg3.jpg#0\t1\t1\t2",
        "img3.jpg\timg3.jpg#0\t4\t3\t4",  # img3's own reference: skipped
        "img3.jpg\timg2.jpg#2\t2\t1\t1",
    ]
    (root / "ExpertAnnotations.txt").write_text("\n".join(expert) + "\n")
    crowdflower = [
        "img1.jpg\timg1.jpg#0\t1.0\t3\t0",  # removes the first "A dog runs on grass ." only
        "img1.jpg\timg2.jpg#3\t0.0\t0\t3",
        "img1.jpg\timg1.jpg#3\t0.6666666666666666\t2\t1",  # removes "A dog in a field ."
        "img2.jpg\timg3.jpg#1\t0.3333333333333333\t1\t2",
        "img2.jpg\timg2.jpg#1\t1.0\t3\t0",
    ]
    (root / "CrowdFlowerAnnotations.txt").write_text("\n".join(crowdflower) + "\n")
    write_images(root / "Flicker8k_Dataset", ["img1.jpg", "img2.jpg", "img3.jpg"])
    return root


def write_flickr8k_json(root: Path) -> Path:
    """clipscore's flickr8k.json with a NaN rating (json.dumps writes the bare NaN token), images in images/."""
    root.mkdir(parents=True, exist_ok=True)
    index = {
        "img1": {
            "image_id": "img1",
            "image_path": "Flicker8k_Dataset/img1.jpg",
            "ground_truth": TOKENS["img1"],
            "human_judgement": [
                {"image_id": "img1", "caption": "Two  kids play .", "rating": rating}
                for rating in (1.0, float("nan"), 2.0)
            ],
        },
        "img2": {
            "image_id": "img2",
            "image_path": "Flicker8k_Dataset/img2.jpg",
            "ground_truth": TOKENS["img2"],
            "human_judgement": [{"image_id": "img2", "caption": "Kids play .", "rating": r} for r in (4.0, 3.0, 4.0)],
        },
    }
    (root / "flickr8k.json").write_text(json.dumps(index))
    write_images(root / "images", ["img1.jpg", "img2.jpg"])
    return root


def write_rated_csv(root: Path, file_name: str, rows: list[tuple[str, list[str], float, str]]) -> Path:
    import csv

    root.mkdir(parents=True, exist_ok=True)
    with (root / file_name).open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mt", "refs", "score", "imgid"])
        for candidate, references, score, image in rows:
            writer.writerow([candidate, repr(references), score, image])
    write_images(root / "images", sorted({row[3] for row in rows}))
    return root


def _struct(rows: list[tuple], names: tuple[str, ...]) -> np.ndarray:
    array = np.empty((1, len(rows)), dtype=[(name, object) for name in names])
    for index, row in enumerate(rows):
        array[0, index] = row
    return array


def _cell(text: str) -> np.ndarray:
    cell = np.empty((1, 1), dtype=object)
    cell[0, 0] = text
    return cell


# Pascal-50S pairs: (image, caption A, caption B, category, new_data codes, votes for A out of 48)
PASCAL_PAIRS = [
    ("2008_000001.jpg", "a cat on a mat ", "a cat sitting on a rug", 1, (6, 6), 30),  # HC: codes sum 12
    ("2008_000002.jpg", "a red bus", "a dog in a park", 2, (6, 7), 40),  # HI: sum 13
    ("2008_000003.jpg", "a plane in the sky", "an airplane flying", 3, (2, 7), 24),  # HM, a vote tie
    ("2008_000004.jpg", "two men talk", "people talking", 4, (1, 3), 10),  # MM
]


def write_pascal50s(root: Path) -> Path:
    folder = root / "pyCIDErConsensus"
    folder.mkdir(parents=True, exist_ok=True)
    pairs = _struct([(image, a, b) for image, a, b, *_ in PASCAL_PAIRS], ("image", "a", "b"))
    scipy.io.savemat(
        folder / "pair_pascal.mat",
        {
            "new_input": pairs,
            "category": np.array([[pair[3] for pair in PASCAL_PAIRS]], dtype=np.float64),
            "new_data": np.array([pair[4] for pair in PASCAL_PAIRS], dtype=np.float64),
        },
    )
    triplets = []
    for index, (_, a, b, _, _, votes_a) in enumerate(PASCAL_PAIRS):
        for k in range(48):
            winner = 1 if k < votes_a else 2  # caption 1 is A (with the file's stray whitespace), caption 2 is B
            triplets.append((_cell(f" reference {k} of pair {index} "), _cell(a), _cell(b), np.array([[winner]])))
    scipy.io.savemat(folder / "consensus_pascal.mat", {"triplets": _struct(triplets, ("ref", "c1", "c2", "win"))})
    write_images(root / "VOCdevkit" / "VOC2010" / "JPEGImages", [pair[0] for pair in PASCAL_PAIRS])
    return root


def write_foil(root: Path) -> Path:
    """Image 1: original 10 with two foils and original 11 with one; image 2: original 20 with one foil, whose COCO
    captions hold the original once exactly (removed) and once with an extra space (kept)."""
    root.mkdir(parents=True, exist_ok=True)
    images = [
        {"id": 1, "file_name": "COCO_val2014_000000000001.jpg"},
        {"id": 2, "file_name": "COCO_val2014_000000000002.jpg"},
    ]
    annotations = [
        {
            "id": 10,
            "image_id": 1,
            "caption": "A dog on a sofa.",
            "foil": False,
            "foil_word": "ORIG",
            "target_word": "ORIG",
        },
        {
            "id": 10,
            "image_id": 1,
            "caption": "A cat on a sofa.",
            "foil": True,
            "foil_word": "cat",
            "target_word": "dog",
        },
        {
            "id": 10,
            "image_id": 1,
            "caption": "A horse on a sofa.",
            "foil": True,
            "foil_word": "horse",
            "target_word": "dog",
        },
        {
            "id": 11,
            "image_id": 1,
            "caption": "A dog resting.",
            "foil": False,
            "foil_word": "ORIG",
            "target_word": "ORIG",
        },
        {
            "id": 11,
            "image_id": 1,
            "caption": "A bird resting.",
            "foil": True,
            "foil_word": "bird",
            "target_word": "dog",
        },
        {
            "id": 20,
            "image_id": 2,
            "caption": "A train at a station.",
            "foil": False,
            "foil_word": "ORIG",
            "target_word": "ORIG",
        },
        {
            "id": 20,
            "image_id": 2,
            "caption": "A bus at a station.",
            "foil": True,
            "foil_word": "bus",
            "target_word": "train",
        },
    ]
    (root / "foilv1.0_test_2017.json").write_text(
        json.dumps({"info": {}, "images": images, "annotations": annotations})
    )
    coco = [
        (1, "A dog on a sofa."),
        (1, "A dog lying on a couch."),
        (1, "A dog resting."),
        (1, "A puppy indoors."),
        (1, "A pet on furniture."),
        (2, "A train at a station."),
        (2, "A train  at a station."),
        (2, "A locomotive waits."),
        (2, "A train at a station."),
        (2, "Rail station with a train."),
    ]
    captions = [{"image_id": image, "id": 100 + k, "caption": caption} for k, (image, caption) in enumerate(coco)]
    (root / "captions_val2014.json").write_text(json.dumps({"annotations": captions}))
    karpathy = {"images": [{"cocoid": 1, "split": "restval"}, {"cocoid": 2, "split": "test"}]}
    (root / "dataset_coco.json").write_text(json.dumps(karpathy))
    write_images(root / "val2014", [image["file_name"] for image in images])
    return root


def write_vatex_eval(root: Path, count: int = 6) -> tuple[Path, np.ndarray]:
    """EMScore's pickles: N candidates, N x 9 references, 3N human scores annotator-major, N video ids."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, (3, count)).astype(np.float64)  # [annotator, item]
    arrays = {
        "candidates_list": np.array([f"candidate {i}" for i in range(count)]),
        "gts_list": np.array([[f"reference {i}.{k}" for k in range(9)] for i in range(count)]),
        "human_scores": human.ravel(),
        "video_ids": np.array([f"video{i // 2}_000001_000011" for i in range(count)]),
    }
    for name, array in arrays.items():
        (root / f"{name}.pkl").write_bytes(pickle.dumps(array))
    return root, human.T


def write_activitynet_foil(root: Path) -> Path:
    """Videos v1, v2 with files; v3 in both submissions but without a video file (left out)."""
    root.mkdir(parents=True, exist_ok=True)
    test_1 = {
        "v1": {"duration": 20.0, "timestamps": [[2.7, 5.2], [10.0, 15.0]], "sentences": ["s1", "s2"]},
        "v2": {"duration": 10.0, "timestamps": [[0.0, 4.0]], "sentences": ["s"]},
        "v3": {"duration": 10.0, "timestamps": [[0.0, 4.0]], "sentences": ["s"]},
    }
    test_2 = {
        "v1": {"duration": 20.0, "timestamps": [[0, 9], [9.5, 16.0]], "sentences": ["ref a", "ref b"]},
        "v2": {"duration": 10.0, "timestamps": [[6.0, 9.0]], "sentences": ["ref c"]},
        "v3": {"duration": 10.0, "timestamps": [[0.0, 4.0]], "sentences": ["ref d"]},
    }
    right = {
        "results": {
            v: [{"sentence": f"right {v} {i}", "timestamp": [0, 1]} for i in range(n)]
            for v, n in (("v1", 2), ("v2", 1), ("v3", 1))
        }
    }
    foil = {
        "results": {
            v: [{"sentence": f"foil {v} {i}", "timestamp": [0, 1]} for i in range(n)]
            for v, n in (("v3", 1), ("v2", 1), ("v1", 2))
        }
    }
    for name, data in (
        ("anet_entities_test_1.json", test_1),
        ("anet_entities_test_2.json", test_2),
        ("final_right_video_sentences.json", right),
        ("final_foil_video_sentences.json", foil),
    ):
        (root / name).write_text(json.dumps(data))
    (root / "videos").mkdir(exist_ok=True)
    for video in ("v1", "v2"):
        (root / "videos" / f"{video}.mp4").write_bytes(b"not decoded by these tests")
    return root


# DetailCaps-4870 rows with the release's column names (docs-drafts/detailcaps.md): row 1's GPT4_Eval is null, row 2
# (LAION) has no bytes (its image is found under images/LAION/ by its URL's file name), row 3's judge ties every
# caption, row 4's judgement lacks LLaVA_v15 and its ShareCaptioner caption is empty.
DETAILCAPS_JUDGEMENTS = [
    '{"CogVLM": 8, "ShareCaptioner": 6, "LLaVA_v15": 3}',
    None,
    '{"CogVLM": 5, "ShareCaptioner": 7.5, "LLaVA_v15": 6}',
    '{"CogVLM": 4, "ShareCaptioner": 4, "LLaVA_v15": 4}',
    '{"CogVLM": 9, "ShareCaptioner": 2}',
    '{"CogVLM": 3, "ShareCaptioner": 5, "LLaVA_v15": 7}',
]
DETAILCAPS_SOURCES = [
    ("COCO", "coco/val2014/COCO_val2014_000000000042.jpg"),
    ("SAM", "223750"),
    ("LAION", "https://example.org/photos/laion_cat.jpg?size=large"),
    ("Flikr", "flickr30k/1000092795.jpg"),
    ("SBU", "http://static.flickr.com/2723/4385058960_b0f291553e.jpg"),
    ("Coyo", "https://example.com/coyo/7.png"),
]


def encoded_png(seed: int, size=(32, 24)) -> bytes:
    import io

    buffer = io.BytesIO()
    random_image(seed, size).save(buffer, format="PNG")
    return buffer.getvalue()


def detailcaps_rows() -> list[dict]:
    """Six rows as the Hub parquet holds them (image bytes in `binary`, GPT4_Eval a JSON string)."""
    rows = []
    for number, ((source, identifier), judgement) in enumerate(zip(DETAILCAPS_SOURCES, DETAILCAPS_JUDGEMENTS)):
        rows.append(
            {
                "binary": None if source == "LAION" else encoded_png(number),
                "image": identifier,
                "source": source,
                "GT_Caption_GPT4O": f"GPT-4o: a detailed scene {number} with a red dog on green grass.",
                "GT_Caption_GPT4V": f"GPT-4V: the picture {number} shows a dog lying on a lawn.",
                "GT_Caption_Gemini15Pro": f"Gemini: image {number}, an animal resting outdoors in the sun.",
                "CogVLM": f"a dog on the grass in picture {number}",
                "ShareCaptioner": "" if number == 4 else f"a small cat sits near a window {number}",
                "LLaVA_v15": f"two birds fly over a lake {number}",
                "GPT4_Eval": judgement,
            }
        )
    return rows


def write_detailcaps(root: Path, rows: list[dict] | None = None, layout: str = "hub") -> Path:
    """The release in one of its layouts: `hub` (DetailCaps-4870.parquet), `export` (default/test/0000.parquet)
    or `saved` (a save_to_disk DatasetDict); plus the LAION row's image under images/LAION/."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = detailcaps_rows() if rows is None else rows
    root.mkdir(parents=True, exist_ok=True)
    types = {"binary": pa.binary()}
    schema = pa.schema([(name, types.get(name, pa.string())) for name in rows[0]])
    table = pa.Table.from_pylist(rows, schema=schema)
    if layout == "hub":
        pq.write_table(table, root / "DetailCaps-4870.parquet", row_group_size=4)
    elif layout == "export":
        (root / "default" / "test").mkdir(parents=True)
        pq.write_table(table, root / "default" / "test" / "0000.parquet")
    else:
        import datasets

        datasets.DatasetDict({"test": datasets.Dataset(table)}).save_to_disk(str(root))
    write_images(root / "images" / "LAION", ["laion_cat.jpg"])
    return root
