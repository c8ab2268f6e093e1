"""DetailCaps-4870: the loader on fixtures in the release's own layouts, the consistency statistics against scipy and
NumPy, and the harness (--model, --scores, --dump-items, the paper's numbers) end to end."""

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from modeling_pacs.evaluation import BenchmarkDataError, BenchmarkOptions, detailcaps, load_benchmark
from modeling_pacs.evaluation.protocols import grouped_kendall_tau, one_minus_r_squared
from tests.evaluation.test_harness import cached_scores, run
from tests.fixtures.benchmark_files import detailcaps_rows, encoded_png, write_detailcaps
from tests.fixtures.helpers import assert_scores_close

EXPECTED_IDS = [
    *(f"detailcaps/0/{model}" for model in ("CogVLM", "ShareCaptioner", "LLaVA_v15")),
    *(f"detailcaps/2/{model}" for model in ("CogVLM", "ShareCaptioner", "LLaVA_v15")),
    *(f"detailcaps/3/{model}" for model in ("CogVLM", "ShareCaptioner", "LLaVA_v15")),
    "detailcaps/4/CogVLM",  # no LLaVA_v15 score, an empty ShareCaptioner caption
    *(f"detailcaps/5/{model}" for model in ("CogVLM", "ShareCaptioner", "LLaVA_v15")),
]
EXPECTED_HUMAN = [8, 6, 3, 5, 7.5, 6, 4, 4, 4, 9, 3, 5, 7]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PACS_PP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_hub_parquet_as_it_ships(tmp_path, cache, caplog):
    root = write_detailcaps(tmp_path / "detailcaps")
    benchmark = load_benchmark("detailcaps", root)
    items = {item["id"]: item for item in benchmark.items}
    assert [item["id"] for item in benchmark.items] == EXPECTED_IDS
    assert [item["human"] for item in benchmark.items] == EXPECTED_HUMAN
    rows = detailcaps_rows()
    first = items["detailcaps/0/ShareCaptioner"]
    assert first["candidate"] == rows[0]["ShareCaptioner"]
    assert first["references"] == [rows[0][name] for name in detailcaps.REFERENCES]  # lmms-eval order
    assert (first["row"], first["model"], first["source"]) == (0, "ShareCaptioner", "COCO")
    assert first["image_identifier"] == rows[0]["image"]
    # Bytes from `binary`, written once under the cache; the LAION row has none and is found by its URL's file name.
    for number in (0, 3, 4, 5):
        path = Path(items[f"detailcaps/{number}/CogVLM"]["image"])
        assert path.is_relative_to(cache) and path.suffix == ".png" and path.read_bytes() == encoded_png(number)
    assert items["detailcaps/2/CogVLM"]["image"] == str((root / "images" / "LAION" / "laion_cat.jpg").resolve())
    assert benchmark.files == [root / "DetailCaps-4870.parquet"]
    assert benchmark.human_field == "human" and benchmark.modality == "image"
    assert "1 rows with a null GPT4_Eval and 2 captions without a score or text skipped" in benchmark.protocol["items"]
    assert "averaged over the 3 images the judge does not tie" in benchmark.protocol["statistic"]
    assert "1 rows without a judgement and 2 captions without a score or text skipped" in caplog.text


def test_a_second_load_reads_no_image_bytes_and_a_replaced_file_gets_a_fresh_cache(tmp_path, cache, monkeypatch):
    root = write_detailcaps(tmp_path / "detailcaps")
    first = load_benchmark("detailcaps", root)
    requested = []
    original = detailcaps.parquet_release

    def recording(*args):
        release = original(*args)
        read = release.batches
        release.batches = lambda columns: (requested.append(list(columns)), read(columns))[1]
        return release

    monkeypatch.setattr(detailcaps, "parquet_release", recording)
    again = load_benchmark("detailcaps", root)
    assert [item["image"] for item in again.items] == [item["image"] for item in first.items]
    assert ["binary"] not in requested  # the cache's index.json said every image is there
    rows = detailcaps_rows()
    rows[0]["binary"] = encoded_png(99)
    write_detailcaps(root, rows)
    replaced = load_benchmark("detailcaps", root)
    assert ["binary"] in requested
    new_image = Path(replaced.items[0]["image"])
    assert new_image.parent != Path(first.items[0]["image"]).parent and new_image.read_bytes() == encoded_png(99)


@pytest.mark.parametrize("layout", ["export", "saved"])
def test_a_parquet_export_or_a_save_to_disk_copy_gives_the_same_items(tmp_path, cache, layout):
    hub = load_benchmark("detailcaps", write_detailcaps(tmp_path / "hub"))
    copy = load_benchmark("detailcaps", write_detailcaps(tmp_path / layout, layout=layout))
    fields = ("id", "candidate", "references", "human", "row", "model", "source", "image_identifier")
    assert [[item[f] for f in fields] for item in copy.items] == [[item[f] for f in fields] for item in hub.items]
    assert [Path(a["image"]).read_bytes() for a in copy.items] == [Path(b["image"]).read_bytes() for b in hub.items]
    expected = {"export": ["0000.parquet"], "saved": ["data-00000-of-00001.arrow"]}[layout]
    assert [path.name for path in copy.files] == expected


def test_unverified_column_names_are_matched_by_spelling(tmp_path, cache):
    """The candidate and judgement columns are named only by third-party code: other spellings are accepted, the
    judgement may be a struct, and scores may be numeric strings."""
    rows = []
    for row in detailcaps_rows():
        judgement = json.loads(row.pop("GPT4_Eval")) if row["GPT4_Eval"] else None
        if judgement and "LLaVA_v15" in judgement:
            judgement["llava-1.5"] = str(judgement.pop("LLaVA_v15"))
        row["gpt4_eval"] = json.dumps(judgement) if judgement else None
        row["LLaVA-1.5"], row["cogvlm"] = row.pop("LLaVA_v15"), row.pop("CogVLM")
        rows.append(row)
    benchmark = load_benchmark("detailcaps", write_detailcaps(tmp_path / "renamed", rows))
    assert [item["id"] for item in benchmark.items] == EXPECTED_IDS
    assert [item["human"] for item in benchmark.items] == EXPECTED_HUMAN


def test_missing_files_and_columns_and_bad_values_are_named(tmp_path, cache, caplog):
    empty = tmp_path / "empty"
    (empty / "other").mkdir(parents=True)
    with pytest.raises(BenchmarkDataError, match=r"DetailCaps-4870.parquet: file not found\. Expected the Hub"):
        load_benchmark("detailcaps", empty)
    (empty / "other" / "x.parquet").write_bytes(b"")
    with pytest.raises(
        BenchmarkDataError, match=r"file not found \(parquet files in the folder: \['other/x.parquet'\]"
    ):
        load_benchmark("detailcaps", empty)

    rows = [{k: v for k, v in row.items() if k != "ShareCaptioner"} for row in detailcaps_rows()]
    with pytest.raises(
        BenchmarkDataError,
        match=r"no column\(s\) \['ShareCaptioner or ShareCaptioner-7B'\] \(its columns: \['binary', 'image', ",
    ):
        load_benchmark("detailcaps", write_detailcaps(tmp_path / "no_share", rows))

    rows = detailcaps_rows()
    rows[2]["GPT4_Eval"] = '{"CogVLM": 5,'
    with pytest.raises(BenchmarkDataError, match="row 2: GPT4_Eval is not JSON"):
        load_benchmark("detailcaps", write_detailcaps(tmp_path / "bad_json", rows))
    rows[2]["GPT4_Eval"] = '{"CogVLM": "good", "ShareCaptioner": 1, "LLaVA_v15": 2}'
    with pytest.raises(BenchmarkDataError, match="row 2: the score of CogVLM is 'good', not a finite number"):
        load_benchmark("detailcaps", write_detailcaps(tmp_path / "bad_score", rows))
    rows[2]["GPT4_Eval"] = "[5, 6, 7]"
    with pytest.raises(BenchmarkDataError, match=r"row 2: GPT4_Eval is \[5, 6, 7\], not an object of scores"):
        load_benchmark("detailcaps", write_detailcaps(tmp_path / "bad_shape", rows))

    # No bytes at all (as a copy without `binary` would be): images per source under images/, missing ones named.
    rows = [{k: v for k, v in row.items() if k != "binary"} for row in detailcaps_rows()]
    root = write_detailcaps(tmp_path / "no_bytes", rows)
    benchmark = load_benchmark("detailcaps", root)
    images = {item["row"]: item["image"] for item in benchmark.items}
    assert images[0] == str(root.resolve() / "images" / "coco" / "val2014" / "COCO_val2014_000000000042.jpg")
    assert images[2] == str(root.resolve() / "images" / "LAION" / "laion_cat.jpg")
    assert images[3] == str(root.resolve() / "images" / "flickr30k" / "1000092795.jpg")
    assert images[4] == str(root.resolve() / "images" / "SBU" / "4385058960_b0f291553e.jpg")
    assert "4 images are neither in 'binary' nor on disk (first: row 0, source COCO" in caplog.text
    assert "4 images not found" in benchmark.protocol["items"]

    dump_only = ("--benchmark", "detailcaps", "--data-dir", root, "--dump-items", tmp_path / "x")
    with pytest.raises(SystemExit, match="detailcaps_judge_scale must be a finite number > 0, got 0.0"):
        run(*dump_only, "--detailcaps-judge-scale", 0)


def test_local_images_follow_the_cards_identity_table(tmp_path):
    images = tmp_path / "images"
    (images / "SAM").mkdir(parents=True)
    (images / "SAM" / "sa_223750.jpg").write_bytes(b"x")
    assert detailcaps.local_image(images, "SAM", "223750") == (images / "SAM" / "sa_223750.jpg", True)
    assert detailcaps.local_image(images, "sam", "9") == (images / "SAM" / "9", False)
    url = "https://example.org/a/b/photo.jpg?x=1"
    assert detailcaps.local_image(images, "Coyo", url) == (images / "Coyo" / "photo.jpg", False)
    assert detailcaps.local_image(images, "Flikr", "../../etc/x.jpg") == (images / "Flickr" / "x.jpg", False)
    assert detailcaps.local_image(images, "COCO", "a/b.jpg") == (images / "a" / "b.jpg", False)
    assert detailcaps.local_image(images, "../x", "/etc/b.jpg") == (images / "___x" / "b.jpg", False)


def test_consistency_statistics_agree_with_scipy_and_numpy():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 3)
    human = rng.integers(1, 6, 120).astype(float)  # GPT-4-like integer scores: ties within images
    human[:3] = 3.0  # an image the judge ties: no tau
    metric = np.round(rng.random(120) + 0.1 * human, 1)
    metric[3:6] = 0.5  # an image the metric ties: no tau
    taus = []
    for image in range(40):
        chosen = groups == image
        tau = scipy.stats.kendalltau(metric[chosen], human[chosen]).statistic
        if np.isfinite(tau):
            taus.append(tau)
    mean_tau, used = grouped_kendall_tau(metric, human, groups, "b")
    assert used == len(taus) <= 38
    assert mean_tau == pytest.approx(100 * np.mean(taus), abs=1e-9)
    # 1 - R^2 as 1 - sklearn.metrics.r2_score(metric, human), written out
    residual = sum((m - h) ** 2 for m, h in zip(metric, human))
    spread = sum((m - metric.mean()) ** 2 for m in metric)
    assert one_minus_r_squared(metric, human) == pytest.approx(residual / spread, rel=1e-12)
    assert one_minus_r_squared(human, human) == 0.0
    assert np.isnan(one_minus_r_squared([1, 1, 1], [1, 2, 3]))
    assert grouped_kendall_tau([1, 2], [1, 2], ["a", "b"]) != grouped_kendall_tau([1, 2], [1, 2], ["a", "a"])
    with pytest.raises(ValueError, match="got 2 group labels for 3 items"):
        grouped_kendall_tau([1, 2, 3], [1, 2, 3], [0, 0])


def test_benchmark_statistics_on_the_fixture(tmp_path, cache):
    root = write_detailcaps(tmp_path / "detailcaps")
    benchmark = load_benchmark("detailcaps", root)
    metric = {item_id: value for item_id, value in zip(EXPECTED_IDS, np.linspace(0.9, 0.1, 13) ** 2)}
    statistics = benchmark.evaluate(metric)
    x = np.array([metric[item_id] for item_id in EXPECTED_IDS])
    y = np.array(EXPECTED_HUMAN, dtype=float)
    rows = np.array([int(item_id.split("/")[1]) for item_id in EXPECTED_IDS])
    per_image = [scipy.stats.kendalltau(x[rows == r], y[rows == r]).statistic for r in (0, 2, 5)]  # 3: tied, 4: one
    assert list(statistics) == ["pearson", "one_minus_r2", "kendall_tau_b", "sample_kendall_tau_b", "kendall_tau_c"]
    assert statistics["pearson"] == pytest.approx(100 * scipy.stats.pearsonr(x, y).statistic, abs=1e-9)
    assert statistics["kendall_tau_b"] == pytest.approx(100 * scipy.stats.kendalltau(x, y).statistic, abs=1e-9)
    assert statistics["kendall_tau_c"] == pytest.approx(
        100 * scipy.stats.kendalltau(x, y, variant="c").statistic, abs=1e-9
    )
    assert statistics["sample_kendall_tau_b"] == pytest.approx(100 * np.mean(per_image), abs=1e-9)
    assert statistics["one_minus_r2"] == pytest.approx(((x - y) ** 2).sum() / ((x - x.mean()) ** 2).sum())
    scaled = detailcaps.load(root, BenchmarkOptions(detailcaps_judge_scale=10)).evaluate(metric)
    assert scaled["one_minus_r2"] == pytest.approx(((x - y / 10) ** 2).sum() / ((x - x.mean()) ** 2).sum())
    assert scaled["pearson"] == statistics["pearson"]  # correlations do not depend on the judge's scale
    with pytest.raises(ValueError, match="no score for item 'detailcaps/5/LLaVA_v15'"):
        benchmark.evaluate({k: v for k, v in metric.items() if k != "detailcaps/5/LLaVA_v15"})


def test_model_and_its_scores_give_the_same_table_beside_the_paper(tmp_path, cache, capsys):
    """--model scores every item (equal to scoring each alone), --scores with those scores gives the same table, any
    number of --scores rows sit side by side, and a row named after a CAPTURE README metric carries its numbers."""
    from modeling_pacs.loading import load_model
    from modeling_pacs.testing.pacs import make_tiny_model

    model_dir = str(tmp_path / "tiny")
    make_tiny_model(model_dir, seed=2)
    root = write_detailcaps(tmp_path / "detailcaps")
    dump = tmp_path / "items.jsonl"
    output = tmp_path / "out"
    results = run(
        "--benchmark", "detailcaps", "--data-dir", root, "--model", model_dir, "--output-dir", output,
        "--dump-items", dump, "--quiet",
    )  # fmt: skip
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert [line["id"] for line in lines] == EXPECTED_IDS
    assert set(lines[0]) == {
        "id", "image", "candidate", "references", "human", "row", "model", "source", "image_identifier", "benchmark",
    }  # fmt: skip
    assert all(Path(line["image"]).is_absolute() and Path(line["image"]).is_file() for line in lines)
    table = results["benchmarks"]["detailcaps"]
    assert [row["column"] for row in table["rows"]] == ["score", "ref_score"]
    assert results["runs"][0]["image_encodings"] == 5  # 5 judged images, each encoded once

    model = load_model(model_dir)
    alone = [model.score([line["image"]], [line["candidate"]], [line["references"]]) for line in lines]
    cached = {row["id"]: row for row in cached_scores(output, "detailcaps", model_dir)}
    for column, attribute in (("score", "scores"), ("ref_score", "ref_scores")):
        values = [float(getattr(output_, attribute)[0]) for output_ in alone]
        assert_scores_close([cached[item_id][column] for item_id in EXPECTED_IDS], values, what=column)
    x = np.array([cached[item_id]["score"] for item_id in EXPECTED_IDS])
    expected_pearson = 100 * scipy.stats.pearsonr(x, np.array(EXPECTED_HUMAN, dtype=float)).statistic
    assert table["rows"][0]["statistics"]["pearson"] == pytest.approx(expected_pearson, abs=1e-6)

    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps(row) + "\n" for row in cached_scores(output, "detailcaps", model_dir)))
    variants = {"truncate": own, "chunks": tmp_path / "chunks.jsonl", "CAPTURE": tmp_path / "capture.jsonl"}
    judge_as_scores = "".join(json.dumps({"id": line["id"], "score": line["human"]}) + "\n" for line in lines)
    for name in ("chunks", "CAPTURE"):
        variants[name].write_text(judge_as_scores)
    external = run(
        "--benchmark", "detailcaps", "--data-dir", root, "--output-dir", tmp_path / "external",
        *(argument for name, path in variants.items() for argument in ("--scores", f"{name}={path}")),
    )  # fmt: skip
    rows = external["benchmarks"]["detailcaps"]["rows"]
    assert [(row["name"], row["column"]) for row in rows] == [
        ("truncate", "score"), ("truncate", "ref_score"), ("chunks", "score"), ("CAPTURE", "score"),
    ]  # fmt: skip
    for row, reference in zip(rows[:2], table["rows"]):
        assert row["statistics"] == pytest.approx(reference["statistics"], abs=1e-6)
    assert external["runs"] == []
    capture = rows[3]
    assert capture["statistics"]["pearson"] == pytest.approx(100) and capture["statistics"]["one_minus_r2"] == 0.0
    assert capture["paper"] == {
        "pearson": 50.91, "one_minus_r2": 8.29, "kendall_tau_b": 38.61, "sample_kendall_tau_b": 60.18,
    }  # fmt: skip
    assert capture["difference"]["sample_kendall_tau_b"] == pytest.approx(100 - 60.18)
    assert rows[0]["paper"] == {} and rows[2]["paper"] == {}
    markdown = (tmp_path / "external" / "results.md").read_text()
    assert "## DetailCaps-4870" in markdown and "100.00 (60.2, +39.82)" in markdown
    assert "the average of DetailCaps-100 and DetailCaps-4870" in markdown
    assert (tmp_path / "external" / "plot_detailcaps.png").is_file()
    assert "== DetailCaps-4870 ==" in capsys.readouterr().out


LONG_DETAIL = " ".join(
    f"Part {index} of the picture shows a dog with brown fur lying on the green grass beside a red ball."
    for index in range(8)
)  # about 160 CLIP tokens, as DetailCaps' detailed captions run


@pytest.mark.filterwarnings("ignore:some .* are longer than the text encoder")
def test_truncation_chunks_and_longclip_side_by_side(tmp_path, cache):
    """--long-captions truncate chunks gives one row per mode for each --model; a Long-CLIP directory is one more
    --model; the paper's numbers sit beside a truncating CLIP-S row only (the README's CLIPScore truncates)."""
    from modeling_pacs.evaluation.report import PAPER_NUMBERS, paper_name
    from modeling_pacs.loading import load_model
    from modeling_pacs.pacs.convert_longclip import convert_longclip_checkpoint
    from modeling_pacs.testing.pacs import make_tiny_model
    from tests.references.longclip import build_longclip_state_dict

    rows = detailcaps_rows()
    for row in rows:
        row["CogVLM"] = LONG_DETAIL + f" It is image {row['image']}."
        row["GT_Caption_GPT4O"] = LONG_DETAIL
    root = write_detailcaps(tmp_path / "detailcaps", rows)
    clip_dir = str(tmp_path / "clip")
    make_tiny_model(clip_dir, variant="clip_s", seed=2)
    checkpoint = tmp_path / "longclip.pt"
    torch.save(build_longclip_state_dict(seed=0), checkpoint)
    longclip_dir = tmp_path / "longclip"
    convert_longclip_checkpoint(
        checkpoint, longclip_dir, weight_precision="fp32", allow_other_geometry=True, log=lambda message: None
    )
    output = tmp_path / "out"
    results = run(
        "--benchmark", "detailcaps", "--data-dir", root, "--model", clip_dir, "--model", longclip_dir,
        "--long-captions", "truncate", "chunks", "--output-dir", output, "--dump-items", tmp_path / "items.jsonl",
        "--quiet",
    )  # fmt: skip
    table = results["benchmarks"]["detailcaps"]["rows"]
    names = [(row["name"], row["column"]) for row in table]
    expected_names = [clip_dir, f"{clip_dir} (chunks)", str(longclip_dir), f"{longclip_dir} (chunks)"]
    assert names == [(name, column) for name in expected_names for column in ("score", "ref_score")]

    lines = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    model = load_model(clip_dir)
    assert int(model.truncated_tokens([lines[0]["candidate"]])[0]) > 0
    for mode in ("truncate", "chunks"):
        expected = model.score(
            [line["image"] for line in lines],
            [line["candidate"] for line in lines],
            [line["references"] for line in lines],
            long_captions=mode,
        )
        label = clip_dir.replace("/", "--") + ("" if mode == "truncate" else "--chunks")
        cached = {row["id"]: row for row in cached_scores(output, "detailcaps", label)}
        assert_scores_close([cached[line["id"]]["score"] for line in lines], expected.scores, what=mode)
        assert_scores_close([cached[line["id"]]["ref_score"] for line in lines], expected.ref_scores, what=mode)
    assert all(row["paper"] == {} for row in table)  # tiny directories are no paper metric
    assert paper_name("clip_s_vit_b32", "score") in PAPER_NUMBERS["detailcaps"]
    assert paper_name("clip_s_vit_b32 (chunks)", "score") not in PAPER_NUMBERS["detailcaps"]
