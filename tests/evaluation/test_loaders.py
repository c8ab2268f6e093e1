"""Each loader on a tiny copy of its ORIGINAL files, with the awkward cases docs/spec/benchmarks.md lists; expected
items are written out by hand from the official code's rules."""

import pickle
import random
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from modeling_pacs.evaluation import BenchmarkDataError, BenchmarkOptions, load_benchmark
from tests.fixtures.benchmark_files import (
    write_activitynet_foil,
    write_flickr8k_json,
    write_flickr8k_raw,
    write_foil,
    write_pascal50s,
    write_rated_csv,
    write_vatex_eval,
)


def by_id(benchmark):
    return {item["id"]: item for item in benchmark.items}


def test_flickr8k_expert_from_raw_files_skips_candidates_that_are_references(tmp_path):
    root = write_flickr8k_raw(tmp_path / "flickr8k")
    benchmark = load_benchmark("flickr8k_expert", root)
    items = benchmark.items
    assert [item["id"] for item in items] == [f"flickr8k_expert/img{i}/{k}" for i in (1, 2, 3) for k in range(3)]
    assert [item["human"] for item in items] == [1, 2, 1, 1, 1, 2, 2, 1, 1]
    assert [item["candidate"] for item in items[::3]] == [
        "Children playing ball .",
        "A man rides a bike .",
        "Kids on a field .",
    ]
    assert items[3]["references"][0] == "Two kids play soccer ."  # whitespace normalised as pacscore does
    assert items[0]["image"] == str((root / "Flicker8k_Dataset" / "img1.jpg").resolve())
    assert [path.name for path in benchmark.files] == ["Flickr8k.token.txt", "ExpertAnnotations.txt"]


def test_flickr8k_cf_reproduces_the_accumulated_first_occurrence_reference_removal(tmp_path):
    root = write_flickr8k_raw(tmp_path / "flickr8k")
    items = by_id(load_benchmark("flickr8k_cf", root))
    assert list(items) == [f"flickr8k_cf/img1.jpg/{k}" for k in range(3)] + [
        f"flickr8k_cf/img2.jpg/{k}" for k in range(2)
    ]
    img1_references = ["A brown dog running .", "A dog plays outside .", "A dog runs on grass ."]
    assert all(items[f"flickr8k_cf/img1.jpg/{k}"]["references"] == img1_references for k in range(3))
    assert items["flickr8k_cf/img2.jpg/0"]["references"] == [
        "Two kids play soccer .",
        "Kids on a field .",
        "A soccer game .",
        "Two children run .",
    ]
    assert [item["human"] for item in items.values()] == pytest.approx([1.0, 0.0, 2 / 3, 1 / 3, 1.0])


def test_flickr8k_json_skips_nan_ratings_and_uses_the_images_folder(tmp_path):
    root = write_flickr8k_json(tmp_path / "flickr8k")
    benchmark = load_benchmark("flickr8k_expert", root)
    assert [item["id"] for item in benchmark.items] == [
        "flickr8k_expert/img1/0",
        "flickr8k_expert/img1/2",
        "flickr8k_expert/img2/0",
        "flickr8k_expert/img2/1",
        "flickr8k_expert/img2/2",
    ]
    assert benchmark.items[0]["candidate"] == "Two kids play ."
    assert benchmark.items[0]["image"] == str((root / "images" / "img1.jpg").resolve())
    human = [item["human"] for item in benchmark.items]
    metric = [0.1, 0.3, 0.2, 0.5, 0.4]
    statistics = benchmark.evaluate(dict(zip([item["id"] for item in benchmark.items], metric)))
    assert statistics["kendall_tau_c"] == pytest.approx(100 * scipy.stats.kendalltau(metric, human, variant="c")[0])
    assert statistics["kendall_tau_b"] == pytest.approx(100 * scipy.stats.kendalltau(metric, human)[0])


def test_missing_and_malformed_flickr_files_name_the_file_layout_and_docs(tmp_path):
    with pytest.raises(BenchmarkDataError) as error:
        load_benchmark("flickr8k_expert", tmp_path)
    message = str(error.value)
    assert f"{tmp_path / 'flickr8k.json'}: file not found" in message
    assert "Expected clipscore's flickr8k.json" in message and "ExpertAnnotations.txt" in message
    assert "see docs/guides/benchmark-releases.md, 'Flickr8k-Expert'" in message
    root = write_flickr8k_raw(tmp_path / "raw")
    (root / "ExpertAnnotations.txt").write_text("img1.jpg\timg2.jpg#1\t1\t2\n")
    with pytest.raises(BenchmarkDataError, match=r"ExpertAnnotations.txt: line 1 has 4 tab-separated fields"):
        load_benchmark("flickr8k_expert", root)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "flickr8k.json").write_text("{not json")
    with pytest.raises(BenchmarkDataError, match="flickr8k.json: not valid JSON"):
        load_benchmark("flickr8k_expert", tmp_path / "bad")
    (tmp_path / "bad" / "flickr8k.json").write_text(
        '{"img1": {"image_path": "a.jpg", "ground_truth": ["r"], "human_judgement": [{"caption": "c"}]}}'
    )
    with pytest.raises(BenchmarkDataError, match="flickr8k.json: 'img1' judgement 0 lacks caption or rating"):
        load_benchmark("flickr8k_expert", tmp_path / "bad")
    with pytest.raises(BenchmarkDataError, match="data directory not found"):
        load_benchmark("flickr8k_cf", tmp_path / "absent")


COMPOSITE_ROWS = [
    ("a man surfing", ["a man surfing", "a surfer rides a wave"], 4.0, "COCO_val2014_000000000042.jpg"),
    ("a dog", ["a dog sleeps", "a puppy"], 2.0, "COCO_val2014_000000000073.jpg"),
    ("two birds", ["birds on a wire", "two birds sit"], 5.0, "COCO_val2014_000000000042.jpg"),
]


def test_composite_csv_rows_with_the_papers_candidate_removal_as_option(tmp_path):
    root = write_rated_csv(tmp_path / "composite", "en_test_composite_da.csv", COMPOSITE_ROWS)
    official = load_benchmark("composite", root)
    assert [item["references"] for item in official.items] == [row[1] for row in COMPOSITE_ROWS]
    assert official.items[0]["image"] == str(root.resolve() / "images" / "COCO_val2014_000000000042.jpg")
    assert "as listed (official)" in official.protocol["references"]
    paper = load_benchmark("composite", root, BenchmarkOptions(composite_remove_candidate=True))
    assert paper.items[0]["references"] == ["a surfer rides a wave"]
    metric = {"composite/0": 0.5, "composite/1": 0.2, "composite/2": 0.9}
    statistics = official.evaluate(metric)
    values, human = list(metric.values()), [row[2] for row in COMPOSITE_ROWS]
    assert statistics["kendall_tau_c"] == pytest.approx(100 * scipy.stats.kendalltau(values, human, variant="c")[0])
    assert statistics["spearman"] == pytest.approx(100 * scipy.stats.spearmanr(values, human)[0])
    assert statistics["pearson"] == pytest.approx(100 * scipy.stats.pearsonr(values, human)[0])
    rounded = load_benchmark("composite", root, BenchmarkOptions(official_rounding=True)).evaluate(metric)
    assert rounded["kendall_tau_c"] == pytest.approx(
        100 * round(scipy.stats.kendalltau(values, human, variant="c")[0], 4)
    )


def test_polaris_and_nebula_csvs_and_malformed_rows(tmp_path):
    polaris = load_benchmark("polaris", write_rated_csv(tmp_path / "polaris", "polaris_test.csv", COMPOSITE_ROWS))
    assert [item["human"] for item in polaris.items] == [4.0, 2.0, 5.0]
    nebula = load_benchmark("nebula", write_rated_csv(tmp_path / "nebula", "nebula_test.csv", COMPOSITE_ROWS))
    assert "Spica" in nebula.protocol["annotations"]
    (tmp_path / "nebula" / "nebula_test.csv").write_text("mt,refs,score,imgid\na dog,['unclosed,3,x.jpg\n")
    with pytest.raises(BenchmarkDataError, match=r"nebula_test.csv: row 0 \(line 2\): unreadable refs or score"):
        load_benchmark("nebula", tmp_path / "nebula")
    (tmp_path / "nebula" / "nebula_test.csv").write_text("caption,score\na,1\n")
    with pytest.raises(BenchmarkDataError, match=r"columns \['imgid', 'mt', 'refs'\] are missing.*mt, refs"):
        load_benchmark("nebula", tmp_path / "nebula")


def test_pascal50s_labels_references_and_tie_policies(tmp_path):
    root = write_pascal50s(tmp_path / "pascal")
    benchmark = load_benchmark("pascal50s", root)
    random.seed(42)  # the official label rule (Polos pascal50s.py), written out independently
    expected_labels = [0 if a > (48 - a) + random.random() - 0.5 else 1 for a in (30, 40, 24, 10)]
    items = benchmark.items
    assert [item["label"] for item in items[::2]] == expected_labels
    assert [item["category"] for item in items[::2]] == ["HC", "HI", "HM", "MM"]
    assert items[0]["candidate"] == "a cat on a mat" and items[1]["candidate"] == "a cat sitting on a rug"
    assert items[0]["references"] == [f"reference {k} of pair 0" for k in range(48)]
    assert items[0]["image"].endswith("VOCdevkit/VOC2010/JPEGImages/2008_000001.jpg")
    # A preferred everywhere; pair 3 a metric tie.
    scores = {f"pascal50s/{i}/{side}/draw0": value for i in range(4) for side, value in (("A", 0.9), ("B", 0.1))}
    scores["pascal50s/3/A/draw0"] = scores["pascal50s/3/B/draw0"] = 0.5
    official = benchmark.evaluate(scores)
    assert official["accuracy_HC"] == 100 and official["accuracy_HI"] == 100
    assert official["accuracy_HM"] == (100 if expected_labels[2] == 0 else 0)
    assert official["accuracy_MM"] == 100  # the tie counts as B, and humans preferred B
    assert official["accuracy_mean"] == pytest.approx(
        np.mean([official[f"accuracy_{c}"] for c in ("HC", "HI", "HM", "MM")])
    )
    wrong = load_benchmark("pascal50s", root, BenchmarkOptions(pascal_ties="wrong")).evaluate(scores)
    assert wrong["accuracy_MM"] == 0
    assert (
        "never correct"
        in load_benchmark("pascal50s", root, BenchmarkOptions(pascal_ties="wrong")).protocol["metric_ties"]
    )


def test_pascal50s_reference_draws_are_seeded_subsets(tmp_path):
    root = write_pascal50s(tmp_path / "pascal")
    options = BenchmarkOptions(pascal_references="draws", pascal_draws=3, pascal_per_draw=5, pascal_seed=1)
    first, again = load_benchmark("pascal50s", root, options), load_benchmark("pascal50s", root, options)
    assert len(first.items) == 3 * 8
    assert [item["references"] for item in first.items] == [item["references"] for item in again.items]
    other = load_benchmark("pascal50s", root, BenchmarkOptions(pascal_references="draws", pascal_seed=2))
    assert [item["references"] for item in other.items[:8]] != [item["references"] for item in first.items[:8]]
    for item in first.items:
        assert len(set(item["references"])) == 5
        assert set(item["references"]) <= {f"reference {k} of pair {item['pair']}" for k in range(48)}
    pairs = {}
    for item in first.items:  # A and B of a pair share the draw's references
        pairs.setdefault((item["pair"], item["draw"]), []).append(item["references"])
    assert all(a == b for a, b in pairs.values())
    assert "3 draws of 5" in first.protocol["references"] and "seed=1" in first.protocol["references"]


def test_pascal50s_bad_files_are_named(tmp_path):
    root = write_pascal50s(tmp_path / "pascal")
    (root / "pyCIDErConsensus" / "consensus_pascal.mat").unlink()
    with pytest.raises(BenchmarkDataError, match=r"consensus_pascal.mat: file not found.*triplets.*'Pascal-50S'"):
        load_benchmark("pascal50s", root)
    (root / "pyCIDErConsensus" / "pair_pascal.mat").write_bytes(b"garbage")
    with pytest.raises(BenchmarkDataError, match=r"pair_pascal.mat: not a readable MATLAB file"):
        load_benchmark("pascal50s", root)


def test_foil_pair_rules_and_reference_removal(tmp_path):
    root = write_foil(tmp_path / "foil")
    official = load_benchmark("foil", root)
    pairs = [(item["candidate"]) for item in official.items if item["variant"] == "4ref"]
    assert pairs == [
        "A dog on a sofa.",
        "A cat on a sofa.",
        "A dog on a sofa.",
        "A horse on a sofa.",
        "A dog resting.",
        "A bird resting.",
        "A train at a station.",
        "A bus at a station.",
    ]
    items = by_id(official)
    assert items["foil/0/orig/4ref"]["references"] == [
        "A dog lying on a couch.",
        "A dog resting.",
        "A puppy indoors.",
        "A pet on furniture.",
    ]
    assert items["foil/2/foil/4ref"]["references"] == [
        "A dog on a sofa.",
        "A dog lying on a couch.",
        "A puppy indoors.",
        "A pet on furniture.",
    ]
    # Both exact copies removed; the copy with a double space stays, and is the 1-ref reference.
    assert items["foil/3/orig/4ref"]["references"] == [
        "A train  at a station.",
        "A locomotive waits.",
        "Rail station with a train.",
    ]
    assert items["foil/3/orig/1ref"]["references"] == ["A train  at a station."]
    one = load_benchmark("foil", root, BenchmarkOptions(foil_pairs="one_per_image"))
    assert [item["candidate"] for item in one.items if item["variant"] == "1ref"] == [
        "A dog on a sofa.",
        "A cat on a sofa.",
        "A train at a station.",
        "A bus at a station.",
    ]
    subset = load_benchmark("foil", root, BenchmarkOptions(foil_pairs="subset8k", foil_four_refs="four"))
    assert [item["candidate"] for item in subset.items if item["variant"] == "1ref"] == [
        "A train at a station.",
        "A bus at a station.",
    ]
    assert [path.name for path in subset.files][-1] == "dataset_coco.json"
    scores = {item_id: 0.8 if "/orig/" in item_id else 0.5 for item_id in items}
    scores["foil/1/foil/1ref"] = 0.8  # a tie fails
    assert official.evaluate(scores) == {"accuracy_1ref": 75.0, "accuracy_4ref": 100.0}


def test_foil_group_with_two_originals_is_rejected(tmp_path):
    import json

    root = write_foil(tmp_path / "foil")
    data = json.loads((root / "foilv1.0_test_2017.json").read_text())
    data["annotations"].append({"id": 20, "image_id": 2, "caption": "Another original.", "foil": False})
    (root / "foilv1.0_test_2017.json").write_text(json.dumps(data))
    with pytest.raises(BenchmarkDataError, match="annotation id 20 has 2 originals"):
        load_benchmark("foil", root)
    (root / "captions_val2014.json").unlink()
    with pytest.raises(
        BenchmarkDataError,
        match=r"annotations/captions_val2014.json: file not found \(looked for .*/annotations/captions_val2014.json, "
        r".*/foil/captions_val2014.json",
    ):
        load_benchmark("foil", root)


def test_vatex_eval_pickles_per_annotator_protocol(tmp_path):
    root, human = write_vatex_eval(tmp_path / "vatex")
    benchmark = load_benchmark("vatex_eval", root)
    items = by_id(benchmark)
    assert len(items) == 12 and benchmark.modality == "video"
    assert items["vatex_eval/2/1ref"]["references"] == ["reference 2.0"]
    assert items["vatex_eval/2/9ref"]["references"] == [f"reference 2.{k}" for k in range(9)]
    assert items["vatex_eval/2/9ref"]["human_scores"] == human[2].tolist()
    assert items["vatex_eval/3/1ref"]["video"] == str((root / "videos" / "video1_000001_000011.mp4").resolve())
    metric = np.array([0.31234, 0.31231, 0.5, 0.2, 0.7, 0.4])
    scores = {f"vatex_eval/{i}/{v}": float(metric[i]) for i in range(6) for v in ("1ref", "9ref")}
    rounded = np.around(metric, 4)
    expected = round(float(np.mean([scipy.stats.kendalltau(rounded, human[:, k])[0] for k in range(3)])), 4)
    statistics = benchmark.evaluate(scores, "score")
    assert statistics["kendall_tau_b"] == pytest.approx(100 * expected)
    assert set(benchmark.evaluate(scores, "ref_score")) == {
        "kendall_tau_b_1ref",
        "spearman_1ref",
        "kendall_tau_b_9ref",
        "spearman_9ref",
    }


def test_vatex_pickles_that_are_not_arrays_are_refused(tmp_path):
    root, _ = write_vatex_eval(tmp_path / "vatex")
    (root / "gts_list.pkl").write_bytes(pickle.dumps(OrderedDict(a=1)))
    with pytest.raises(
        BenchmarkDataError, match=r"gts_list.pkl: not a pickled NumPy array \(refusing to load collections.OrderedDict"
    ):
        load_benchmark("vatex_eval", root)


def test_activitynet_foil_segments_references_and_alignment(tmp_path, caplog):
    root = write_activitynet_foil(tmp_path / "anet")
    benchmark = load_benchmark("activitynet_foil", root)
    assert "1 of 3 videos have no video or feature file" in caplog.text  # v3 left out
    items = by_id(benchmark)
    assert sorted({item["video_id"] for item in benchmark.items}) == ["v1", "v2"]
    assert items["activitynet_foil/v1/right/0"]["references"] == ["ref a", "ref b"]  # 40 % exactly: none -> all
    assert items["activitynet_foil/v1/foil/1"]["references"] == ["ref b"]
    assert items["activitynet_foil/v1/right/1"]["segment"] == [10.0, 15.0]  # from test_1, not the submission
    assert items["activitynet_foil/v2/right/0"]["references"] == ["ref c"]
    scores = {
        "activitynet_foil/v1/right/0": 0.9,
        "activitynet_foil/v1/right/1": 0.1,  # mean 0.5 > 0.4
        "activitynet_foil/v1/foil/0": 0.4,
        "activitynet_foil/v1/foil/1": 0.4,
        "activitynet_foil/v2/right/0": 0.3,
        "activitynet_foil/v2/foil/0": 0.3,  # tie: wrong
    }
    assert benchmark.evaluate(scores) == {"accuracy": 50.0}
    with pytest.raises(ValueError, match="no score for item 'activitynet_foil/v2/foil/0'"):
        benchmark.evaluate({k: v for k, v in scores.items() if k != "activitynet_foil/v2/foil/0"})


def test_hugging_face_parquet_and_save_to_disk_copies(tmp_path, monkeypatch):
    import io

    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.fixtures.helpers import random_image

    monkeypatch.setenv("PACS_PP_CACHE", str(tmp_path / "cache"))
    encoded = []
    for seed in range(2):
        buffer = io.BytesIO()
        random_image(seed, (24, 16)).save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    # Polaris-style parquet (CaptionEvalKit columns: refs, cand, img, human_score), refs as a list.
    (tmp_path / "polaris" / "data").mkdir(parents=True)
    table = pa.table(
        {
            "cand": ["a dog", "a cat"],
            "refs": [["a dog runs", "a puppy"], ["a cat sits"]],
            "img": [{"bytes": encoded[0], "path": "p0.png"}, {"bytes": encoded[1], "path": "p1.png"}],
            "human_score": [0.25, 0.75],
        }
    )
    pq.write_table(table, tmp_path / "polaris" / "data" / "test-00000-of-00001.parquet")
    polaris = load_benchmark("polaris", tmp_path / "polaris")
    assert [item["candidate"] for item in polaris.items] == ["a dog", "a cat"]
    assert [item["references"] for item in polaris.items] == [["a dog runs", "a puppy"], ["a cat sits"]]
    assert [item["human"] for item in polaris.items] == [0.25, 0.75]
    assert [Path(item["image"]).read_bytes() for item in polaris.items] == encoded
    assert "Hugging Face copy" in polaris.protocol["source"] and polaris.files[0].suffix == ".parquet"
    # Nebula-style save_to_disk (file_name, image, refs as a Python literal string, mt, human_score).
    features = datasets.Features(
        {
            "file_name": datasets.Value("string"),
            "image": datasets.Image(),
            "refs": datasets.Value("string"),
            "mt": datasets.Value("string"),
            "human_score": datasets.Value("float64"),
        }
    )
    rows = {
        "file_name": ["n0.png", "n1.png"],
        "image": [{"bytes": encoded[1], "path": None}, {"bytes": encoded[0], "path": None}],
        "refs": ["['two birds', 'birds on a wire']", "['a train']"],
        "mt": ["birds", "a bus"],
        "human_score": [3.0, 1.0],
    }
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows, features=features)}).save_to_disk(
        str(tmp_path / "nebula")
    )
    nebula = load_benchmark("nebula", tmp_path / "nebula")
    assert [item["references"] for item in nebula.items] == [["two birds", "birds on a wire"], ["a train"]]
    assert Path(nebula.items[0]["image"]).name == "000000_n0.png"
    assert Path(nebula.items[0]["image"]).read_bytes() == encoded[1]
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchmarkDataError, match=r"nebula_test.csv: file not found"):
        load_benchmark("nebula", tmp_path / "empty")
