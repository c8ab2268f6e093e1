"""Composite from the original AMT_eval files (docs/spec/benchmarks.md#composite), written here in the release's layout;
expected items are spelled out by hand from the documented rules and statistics checked against scipy."""

import hashlib
import json
from pathlib import Path

import pytest
import scipy.stats

from modeling_pacs.cli import evaluate_benchmarks
from modeling_pacs.evaluation import BenchmarkDataError, BenchmarkOptions, load_benchmark
from tests.fixtures.benchmark_files import write_images, write_rated_csv

HEADER_8K = (
    "HITId;Title;Input.image_url;Input.text1;Input.text2;Input.text3;"
    "Answer.Q1Answer;Answer.Q2Answer;Answer.Q3Answer;Approve;Reject"
)
HEADER_4 = (
    "HITId;Title;Input.image_url;Input.text1;Input.text2;Input.text3;Input.text4;"
    "Answer.Q1Answer;Answer.Q2Answer;Answer.Q3Answer;Answer.Q4Answer;Approve;Reject"
)
URL = "http://example.org/{}/{}"
# subset -> (header, [(image, captions, correctness ratings, thoroughness ratings)])
ROWS = {
    "8k": (
        HEADER_8K,
        [
            ("8a.jpg", ["A dog runs on grass .", "a cat  sleeps", "two dogs play"], ["5", "1", "4"], ["4", "2", "4"]),
            ("8b.jpg", ["a man rides a bike", "a bird", "people walk"], ["3", "", "2"], ["3", "5", "1"]),
        ],
    ),
    "30k": (
        HEADER_4,
        [("30a.jpg", ["a red car", "a boat", "kids, at play", "a tree"], ["2", "5", "3", "NaN"], ["1", "4", "4", "2"])],
    ),
    "coco": (
        HEADER_4,
        [
            (
                "COCO_val2014_000000000042.jpg",
                ["a pizza", '"a plate; with food"', "a fork", "A plate  with food."],
                ["1", "2", "3", "4"],
                ["2", "", "3", "5"],
            )
        ],
    ),
}
REFERENCES_8K = {
    "8a.jpg": ["A dog runs on grass .", "A brown dog .", "A dog outside ."],
    "8b.jpg": ["A man on a bicycle .", "Someone cycles ."],
}
REFERENCES_30K = {"30a.jpg": ["A car parked .", "A red vehicle ."]}
COCO_REFERENCES = ["A plate with food. ", "Food on a table"]


def write_amt(root: Path, subsets=("8k", "30k", "coco")) -> Path:
    """The six MTurk files (with two trailing summary rows each), the source corpora's references and images."""
    root.mkdir(parents=True, exist_ok=True)
    for subset in subsets:
        header, rows = ROWS[subset]
        for kind, column in (("correctness", 2), ("throughness", 3)):
            lines = [header]
            for number, (image, captions, *ratings) in enumerate(rows):
                url = URL.format(subset, image)
                fields = [f"HIT{number}", "Rate the captions", url, *captions, *ratings[column - 2]]
                lines.append(";".join([*fields, "", ""]))
            width = header.count(";") + 1
            lines += [";" * (width - 1), ";;;" + ";".join(["avg"] * (width - 3))]
            (root / f"{subset}_{kind}.csv").write_text("\n".join(lines) + "\n")
    tokens = [f"{image}#{k}\t{ref}" for image, refs in REFERENCES_8K.items() for k, ref in enumerate(refs)]
    (root / "Flickr8k.token.txt").write_text("\n".join(tokens) + "\n")
    tokens = [f"{image}#{k}\t{ref}" for image, refs in REFERENCES_30K.items() for k, ref in enumerate(refs)]
    (root / "results_20130124.token").write_text("\n".join(tokens) + "\n")
    coco = {
        "images": [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg"}, {"id": 7, "file_name": "other.jpg"}],
        "annotations": [{"image_id": 42, "caption": caption} for caption in COCO_REFERENCES]
        + [{"image_id": 7, "caption": "unrelated"}],
    }
    (root / "captions_val2014.json").write_text(json.dumps(coco))
    write_images(root / "Flicker8k_Dataset", ["8a.jpg", "8b.jpg"], size=(24, 16))
    write_images(root / "flickr30k-images", ["30a.jpg"], size=(24, 16))
    write_images(root / "val2014", ["COCO_val2014_000000000042.jpg"], size=(24, 16))
    return root


def expected_items(root: Path, rating: str = "correctness", keep: bool = False) -> list[tuple]:
    """(id, image, candidate, references, human) written out from the rules: whitespace normalised, exact-match
    removal, empty/NaN ratings skipped, the mean of the two ratings for 'mean'."""
    root = root.resolve()
    a8 = root / "Flicker8k_Dataset"
    refs_8a = REFERENCES_8K["8a.jpg"] if keep else ["A brown dog .", "A dog outside ."]
    refs_8b = REFERENCES_8K["8b.jpg"]
    refs_30a = REFERENCES_30K["30a.jpg"]
    coco_image = str(root / "val2014" / "COCO_val2014_000000000042.jpg")
    coco_refs = ["A plate with food.", "Food on a table"]
    all_8a = REFERENCES_8K["8a.jpg"]
    candidates = [
        ("composite/8k/8a/0", str(a8 / "8a.jpg"), "A dog runs on grass .", refs_8a),
        ("composite/8k/8a/1", str(a8 / "8a.jpg"), "a cat sleeps", all_8a),
        ("composite/8k/8a/2", str(a8 / "8a.jpg"), "two dogs play", all_8a),
        ("composite/8k/8b/0", str(a8 / "8b.jpg"), "a man rides a bike", refs_8b),
        ("composite/8k/8b/1", str(a8 / "8b.jpg"), "a bird", refs_8b),
        ("composite/8k/8b/2", str(a8 / "8b.jpg"), "people walk", refs_8b),
        ("composite/30k/30a/0", str(root / "flickr30k-images" / "30a.jpg"), "a red car", refs_30a),
        ("composite/30k/30a/1", str(root / "flickr30k-images" / "30a.jpg"), "a boat", refs_30a),
        ("composite/30k/30a/2", str(root / "flickr30k-images" / "30a.jpg"), "kids, at play", refs_30a),
        ("composite/30k/30a/3", str(root / "flickr30k-images" / "30a.jpg"), "a tree", refs_30a),
        ("composite/coco/COCO_val2014_000000000042/0", coco_image, "a pizza", coco_refs),
        ("composite/coco/COCO_val2014_000000000042/1", coco_image, "a plate; with food", coco_refs),
        ("composite/coco/COCO_val2014_000000000042/2", coco_image, "a fork", coco_refs),
        ("composite/coco/COCO_val2014_000000000042/3", coco_image, "A plate with food.", coco_refs[1:]),
    ]
    if keep:
        candidates[-1] = (*candidates[-1][:3], coco_refs)
    correctness = [5, 1, 4, 3, None, 2, 2, 5, 3, None, 1, 2, 3, 4]
    thoroughness = [4, 2, 4, 3, 5, 1, 1, 4, 4, 2, 2, None, 3, 5]
    if rating == "correctness":
        human = correctness
    elif rating == "thoroughness":
        human = thoroughness
    else:
        human = [None if a is None or b is None else (a + b) / 2 for a, b in zip(correctness, thoroughness)]
    return [(*candidate, float(value)) for candidate, value in zip(candidates, human) if value is not None]


def as_tuples(benchmark) -> list[tuple]:
    return [(i["id"], i["image"], i["candidate"], i["references"], i["human"]) for i in benchmark.items]


@pytest.fixture
def amt_dir(tmp_path) -> Path:
    return write_amt(tmp_path / "composite")


def test_amt_files_give_one_item_per_rated_caption_with_the_candidate_removed(amt_dir, caplog):
    caplog.set_level("INFO", logger="pacs_pp.benchmarks")
    benchmark = load_benchmark("composite", amt_dir)
    assert as_tuples(benchmark) == expected_items(amt_dir)
    assert [item["subset"] for item in benchmark.items] == ["8k"] * 5 + ["30k"] * 3 + ["coco"] * 4
    assert "8k_correctness.csv: 2 trailing summary rows without an image URL dropped" in caplog.text
    assert "2 captions with a missing or NaN rating skipped" in caplog.text
    assert "Composite: 12 rated captions, the papers report 11985 (3 per image;" in caplog.text
    assert benchmark.protocol["items"].endswith(
        "2 missing/NaN ratings skipped [paper-derived]; 12 items (papers: 11985)"
    )
    assert benchmark.protocol["layout"] == "original AMT_eval CSVs"
    assert benchmark.protocol["rating"] == "correctness (CLIPScore)"
    assert "minus exact matches of the candidate (2 removed" in benchmark.protocol["references"]
    assert [path.name for path in benchmark.files] == [
        "8k_correctness.csv",
        "Flickr8k.token.txt",
        "30k_correctness.csv",
        "results_20130124.token",
        "coco_correctness.csv",
        "captions_val2014.json",
    ]
    assert all(Path(item["image"]).is_file() for item in benchmark.items)


def test_known_answer_correlations_against_scipy(amt_dir):
    benchmark = load_benchmark("composite", amt_dir)
    human = [row[4] for row in expected_items(amt_dir)]
    metric = [0.3, 0.1, 0.9, 0.5, 0.2, 0.25, 0.8, 0.7, 0.4, 0.6, 0.65, 0.35]
    statistics = benchmark.evaluate({item["id"]: value for item, value in zip(benchmark.items, metric)})
    assert statistics["kendall_tau_b"] == pytest.approx(100 * scipy.stats.kendalltau(metric, human)[0], abs=1e-9)
    assert statistics["kendall_tau_c"] == pytest.approx(
        100 * scipy.stats.kendalltau(metric, human, variant="c")[0], abs=1e-9
    )
    assert statistics["spearman"] == pytest.approx(100 * scipy.stats.spearmanr(metric, human)[0], abs=1e-9)
    assert statistics["pearson"] == pytest.approx(100 * scipy.stats.pearsonr(metric, human)[0], abs=1e-9)
    identical = benchmark.evaluate({item["id"]: item["human"] for item in benchmark.items})
    assert identical["kendall_tau_b"] == pytest.approx(100)
    reversed_ = benchmark.evaluate({item["id"]: -item["human"] for item in benchmark.items})
    assert reversed_["kendall_tau_b"] == pytest.approx(-100)


@pytest.mark.parametrize("rating", ["thoroughness", "mean"])
def test_rating_variants(amt_dir, rating):
    benchmark = load_benchmark("composite", amt_dir, BenchmarkOptions(composite_rating=rating))
    assert as_tuples(benchmark) == expected_items(amt_dir, rating)
    assert benchmark.protocol["rating"].startswith(rating)
    assert [path.name for path in benchmark.files][:2] == (
        ["8k_throughness.csv", "Flickr8k.token.txt"]
        if rating == "thoroughness"
        else ["8k_correctness.csv", "8k_throughness.csv"]
    )


def test_keep_candidate_option_and_contradicting_options(amt_dir):
    benchmark = load_benchmark("composite", amt_dir, BenchmarkOptions(composite_keep_candidate=True))
    assert as_tuples(benchmark) == expected_items(amt_dir, keep=True)
    assert benchmark.protocol["references"] == "source-corpus references, candidate kept"
    with pytest.raises(ValueError, match="composite_rating must be one of .*got 'both'"):
        load_benchmark("composite", amt_dir, BenchmarkOptions(composite_rating="both"))
    with pytest.raises(ValueError, match="composite_keep_candidate and composite_remove_candidate contradict"):
        load_benchmark(
            "composite", amt_dir, BenchmarkOptions(composite_keep_candidate=True, composite_remove_candidate=True)
        )


DOCS = r"\(see docs/guides/benchmark-releases.md, 'Composite'\)"


def test_missing_and_malformed_amt_files_name_the_file_layout_and_docs(tmp_path):
    root = write_amt(tmp_path / "c")
    (root / "30k_correctness.csv").unlink()
    with pytest.raises(
        BenchmarkDataError,
        match=rf"AMT_eval/30k_correctness.csv: file not found \(looked for .*/c/AMT_eval/30k_correctness.csv, "
        rf".*/c/30k_correctness.csv;.*Expected the AMT.*{DOCS}",
    ):
        load_benchmark("composite", root)
    root = write_amt(tmp_path / "c")
    path = root / "8k_correctness.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0].replace(";Answer.Q3Answer", ";Other"), *lines[1:]]) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"8k_correctness.csv: columns \['Answer.Q3Answer'\] are missing"):
        load_benchmark("composite", root)
    path.write_text("\n".join([lines[0], lines[1].replace(";5;1;4;", ";5;abc;4;"), *lines[2:]]) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"8k_correctness.csv: line 2: Answer.Q2Answer is 'abc', not a"):
        load_benchmark("composite", root)
    path.write_text("\n".join([lines[0], lines[3], lines[1]]) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"line 2 has no image URL but rated rows follow it \(line 3\)"):
        load_benchmark("composite", root)
    path.write_text("\n".join([lines[0], lines[1] + ";extra"]) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"line 2 has 12 ';'-separated fields, the header 11"):
        load_benchmark("composite", root)
    path.write_text("image,caption\nx.jpg,a dog\n")
    with pytest.raises(BenchmarkDataError, match=rf"no Input.image_url column .*Expected the AMT_eval.*{DOCS}"):
        load_benchmark("composite", root)
    path.write_text("\n".join(lines) + "\n")
    (root / "Flickr8k.token.txt").write_text("8a.jpg#0\tA dog .\n")
    with pytest.raises(BenchmarkDataError, match=r"Flickr8k.token.txt: no references for image 8b.jpg"):
        load_benchmark("composite", root)
    (root / "Flickr8k.token.txt").write_text("8a.jpg#0 A dog .\n")
    with pytest.raises(BenchmarkDataError, match=r"Flickr8k.token.txt: line 1 has 1 tab-separated fields"):
        load_benchmark("composite", root)
    (root / "captions_val2014.json").write_text('{"images": []}')
    (root / "Flickr8k.token.txt").write_text("".join(f"{i}#0\tx\n" for i in REFERENCES_8K))
    with pytest.raises(BenchmarkDataError, match=r"captions_val2014.json: lacks 'annotations'"):
        load_benchmark("composite", root)


def test_deneb_csv_still_loads_and_says_so(tmp_path):
    rows = [("a dog", ["a dog", "a puppy"], 3.0, "x.jpg"), ("a cat", ["a kitten"], 1.0, "y.jpg")]
    root = write_rated_csv(tmp_path / "deneb", "en_test_composite_da.csv", rows)
    benchmark = load_benchmark("composite", root)
    assert [item["references"] for item in benchmark.items] == [["a dog", "a puppy"], ["a kitten"]]
    assert benchmark.protocol["layout"] == "DENEB CSV"


def test_script_prefers_the_amt_files_and_reports_layout_variant_and_checksums(amt_dir, tmp_path, capsys):
    write_rated_csv(amt_dir, "en_test_composite_da.csv", [("a dog", ["a dog"], 3.0, "x.jpg")])
    script = evaluate_benchmarks
    dump = tmp_path / "items.jsonl"
    script.main(["--benchmark", "composite", "--data-dir", str(amt_dir), "--dump-items", str(dump)])
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    dumped = [(r["id"], r["image"], r["candidate"], r["references"], r["human"]) for r in lines]
    assert dumped == expected_items(amt_dir)
    thoroughness = expected_items(amt_dir, "thoroughness")
    metric = [0.5, 0.1, 0.7, 0.2, 0.9, 0.3, 0.15, 0.6, 0.8, 0.4, 0.05, 0.35, 0.55]
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps({"id": row[0], "score": v}) + "\n" for row, v in zip(thoroughness, metric)))
    results = script.main(
        [
            *("--benchmark", "composite", "--data-dir", str(amt_dir), "--scores", f"PAC-S++={scores}"),
            *("--composite-rating", "thoroughness", "--output-dir", str(tmp_path / "out")),
        ]
    )
    result = results["benchmarks"]["composite"]
    assert result["protocol"]["layout"] == "original AMT_eval CSVs"
    assert result["protocol"]["rating"].startswith("thoroughness")
    assert result["num_items"] == len(thoroughness) == len(metric)
    expected_files = ["8k_throughness.csv", "Flickr8k.token.txt", "30k_throughness.csv"]
    expected_files += ["results_20130124.token", "coco_throughness.csv", "captions_val2014.json"]
    assert list(result["files"]) == expected_files
    for name, digest in result["files"].items():
        assert digest == hashlib.sha256((amt_dir / name).read_bytes()).hexdigest()
    (row,) = result["rows"]
    human = [row[4] for row in thoroughness]
    assert row["statistics"]["kendall_tau_c"] == pytest.approx(
        100 * scipy.stats.kendalltau(metric, human, variant="c")[0], abs=1e-9
    )
    assert row["paper"] == {"kendall_tau_b": 53.9, "kendall_tau_c": 58.3}
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["benchmarks"]["composite"]["protocol"]["layout"] == "original AMT_eval CSVs"
    assert "layout: original AMT_eval CSVs" in capsys.readouterr().out
    correctness_scores = tmp_path / "correctness.jsonl"
    correctness_scores.write_text("".join(json.dumps({"id": r["id"], "score": 1.0}) + "\n" for r in lines))
    with pytest.raises(SystemExit, match="no score for item 'composite/8k/8b/1'"):
        script.main(
            [
                *("--benchmark", "composite", "--data-dir", str(amt_dir), "--scores", str(correctness_scores)),
                *("--composite-rating", "thoroughness"),
            ]
        )


def png_bytes(seed: int) -> bytes:
    import io

    from tests.fixtures.helpers import random_image

    buffer = io.BytesIO()
    random_image(seed, (20, 12)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_parquet(path: Path, columns: dict):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def test_hugging_face_copies_with_the_verified_columns_splits_and_configs(tmp_path, monkeypatch):
    monkeypatch.setenv("PACS_PP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # yuwd/Polaris as the Hub stores it: data/{train,validation,test}-*.parquet, columns refs, cand, img, human_score.
    for split, score in (("train", 0.1), ("validation", 0.2), ("test", 0.9)):
        write_parquet(
            tmp_path / "polaris" / "data" / f"{split}-00000-of-00001.parquet",
            {
                "refs": [[f"{split} ref"]],
                "cand": [f"{split} caption"],
                "img": [{"bytes": png_bytes(0), "path": f"{split}.png"}],
                "human_score": [score],
            },
        )
    polaris = load_benchmark("polaris", tmp_path / "polaris")
    assert [(i["candidate"], i["references"], i["human"]) for i in polaris.items] == [
        ("test caption", ["test ref"], 0.9)
    ]
    assert [path.name for path in polaris.files] == ["test-00000-of-00001.parquet"]
    # yuwd/Composite through the Hub's parquet export (default/test/0000.parquet): said so in the report.
    write_parquet(
        tmp_path / "composite" / "default" / "test" / "0000.parquet",
        {
            "refs": [["a dog"]],
            "cand": ["a dog"],
            "img": [{"bytes": png_bytes(1), "path": "c.png"}],
            "human_score": [2.0],
        },
    )
    composite = load_benchmark("composite", tmp_path / "composite", BenchmarkOptions(composite_remove_candidate=True))
    assert composite.protocol["layout"] == "Hugging Face copy" and composite.items[0]["references"] == []
    # yuwd/Flickr8k-HumanEval with both configs side by side: each benchmark reads its own config.
    for config, rating in (("crowdflower", 0.5), ("expert", 3.0)):
        write_parquet(
            tmp_path / "f8k" / config / "test" / "0000.parquet",
            {
                "imgid": [f"{config}.jpg"],
                "img": [{"bytes": png_bytes(2), "path": None}],
                "refs": ["['a ref']"],
                "mt": [f"{config} caption"],
                "score": [rating],
            },
        )
    expert = load_benchmark("flickr8k_expert", tmp_path / "f8k")
    crowdflower = load_benchmark("flickr8k_cf", tmp_path / "f8k")
    assert [(i["candidate"], i["human"]) for i in expert.items] == [("expert caption", 3.0)]
    assert [(i["candidate"], i["human"]) for i in crowdflower.items] == [("crowdflower caption", 0.5)]
    assert Path(expert.items[0]["image"]).name == "000000_expert.jpg"
    # An unknown layout is refused with the columns found.
    write_parquet(tmp_path / "odd" / "test-0.parquet", {"text": ["x"], "img": [{"bytes": png_bytes(3), "path": None}]})
    with pytest.raises(BenchmarkDataError, match=r"no candidate column \(one of .*found \['text', 'img'\]\)"):
        load_benchmark("nebula", tmp_path / "odd")


def test_mean_needs_both_ratings_of_the_same_captions_and_old_encodings_are_read(tmp_path, caplog):
    root = write_amt(tmp_path / "c")
    path = root / "8k_throughness.csv"
    header, row_8a, _row_8b, *summary = path.read_text().splitlines()
    path.write_text("\n".join([header, row_8a, *summary]) + "\n")
    benchmark = load_benchmark("composite", root, BenchmarkOptions(composite_rating="mean"))
    expected = [row for row in expected_items(root, "mean") if not row[0].startswith("composite/8k/8b/")]
    assert as_tuples(benchmark) == expected
    assert "8k_correctness.csv: 1 rows have no thoroughness row for their image: skipped" in caplog.text
    path.write_text("\n".join([header, row_8a.replace("two dogs play", "two dogs run"), *summary]) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"8k_throughness.csv: line 2: the captions differ from 8k_corr"):
        load_benchmark("composite", root, BenchmarkOptions(composite_rating="mean"))
    path = root / "8k_correctness.csv"
    path.write_bytes(path.read_text().replace("a cat  sleeps", "a caf\u00e9 cat").encode("cp1252"))
    benchmark = load_benchmark("composite", root)
    assert benchmark.items[1]["candidate"] == "a caf\u00e9 cat"
    assert "8k_correctness.csv is not UTF-8: read as Windows-1252" in caplog.text


def test_model_scores_the_amt_items_and_its_scores_file_gives_the_same_table(amt_dir, tiny_model_dir, tmp_path):
    from tests.fixtures.helpers import assert_scores_close

    script = evaluate_benchmarks
    model_run = script.main(
        [*("--benchmark", "composite", "--data-dir", str(amt_dir), "--model", str(tiny_model_dir), "--quiet")]
        + ["--output-dir", str(tmp_path / "model")]
    )
    result = model_run["benchmarks"]["composite"]
    assert [row["column"] for row in result["rows"]] == ["score", "ref_score"]
    (run,) = model_run["runs"]
    assert (run["items"], run["image_encodings"], run["naive_image_encodings"]) == (12, 4, 12)
    folder = tmp_path / "model" / "cache" / "composite" / str(tiny_model_dir).replace("/", "--")
    cached = [json.loads(line) for path in sorted(folder.glob("shards/*.jsonl")) for line in path.open()]
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps({k: row[k] for k in ("id", "score", "ref_score")}) + "\n" for row in cached))
    external = script.main(["--benchmark", "composite", "--data-dir", str(amt_dir), "--scores", str(scores)])
    for ours, theirs in zip(result["rows"], external["benchmarks"]["composite"]["rows"]):
        names = sorted(ours["statistics"])
        assert names == sorted(theirs["statistics"])
        assert_scores_close([ours["statistics"][k] for k in names], [theirs["statistics"][k] for k in names])
