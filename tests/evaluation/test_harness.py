"""scripts/evaluate_benchmarks.py end to end on tiny fixtures with a tiny random model."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from modeling_pacs.captioning.grammar import grammar_measures
from modeling_pacs.loading import load_model
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.benchmark_files import (
    write_activitynet_foil,
    write_crowdflower_json,
    write_images,
    write_pascal50s,
    write_vatex_eval,
)
from tests.fixtures.helpers import assert_scores_close

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "evaluate_benchmarks.py"
POOL = [
    f"a {color} {animal} {verb}"
    for color in ("red", "small")
    for animal in ("dog", "cat", "bird")
    for verb in ("runs", "sits")
]


from modeling_pacs.cli import evaluate_benchmarks  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("tiny") / "model"
    make_tiny_model(directory, seed=2)  # mostly positive cosines: scores are not all clipped to 0
    return str(directory)


@pytest.fixture(scope="module")
def model(model_dir):
    return load_model(model_dir)


@pytest.fixture(scope="module")
def crowdflower_dir(tmp_path_factory) -> Path:
    """CF-shaped: 4 images x 6 judged captions drawn from one pool (texts repeat across images), 3 references each."""
    return write_crowdflower_json(tmp_path_factory.mktemp("cf"), images=4, captions_per_image=6, seed=0, pool=POOL)


def run(*argv) -> dict:
    return evaluate_benchmarks.main([str(arg) for arg in argv])


def cached_scores(output: Path, benchmark: str, model_dir: str) -> list[dict]:
    folder = output / "cache" / benchmark / model_dir.replace("/", "--")
    shards = sorted((folder / "shards").glob("shard-*.jsonl"))
    return [json.loads(line) for path in shards for line in path.read_text().splitlines()]


def test_model_table_counts_encodings_and_matches_an_independent_computation(
    crowdflower_dir, model_dir, model, tmp_path, capsys
):
    output = tmp_path / "out"
    cf_run = ("--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--model", model_dir, "--output-dir", output)
    results = run(*cf_run, "--chunk-size", 10, "--quiet")
    (record,) = results["runs"]
    from modeling_pacs.evaluation import load_benchmark

    items = load_benchmark("flickr8k_cf", crowdflower_dir).items
    unique_texts = {text for item in items for text in [item["candidate"], *item["references"]]}
    # 24 items sorted by image into chunks of 10: each image's items fall in at most 2 chunks (4 images + 2 splits).
    assert record["naive_image_encodings"] == 24 and record["image_encodings"] == 6
    assert record["naive_text_encodings"] == 24 * 4 and record["text_encodings"] <= 3 * len(unique_texts)
    # Independent: each item scored alone, then scipy.
    alone = [model.score([item["image"]], [item["candidate"]], [item["references"]]) for item in items]
    human = [item["human"] for item in items]
    table = results["benchmarks"]["flickr8k_cf"]
    for row, values in zip(table["rows"], ([o.scores[0] for o in alone], [o.ref_scores[0] for o in alone])):
        values = [float(v) for v in values]
        assert row["statistics"]["kendall_tau_b"] == pytest.approx(
            100 * scipy.stats.kendalltau(values, human)[0], abs=1e-6
        )
        assert row["statistics"]["kendall_tau_c"] == pytest.approx(
            100 * scipy.stats.kendalltau(values, human, variant="c")[0], abs=1e-6
        )
    cached = {row["id"]: row["score"] for row in cached_scores(output, "flickr8k_cf", model_dir)}
    assert_scores_close([cached[item["id"]] for item in items], [float(o.scores[0]) for o in alone])
    written = json.loads((output / "results.json").read_text())
    assert written["benchmarks"]["flickr8k_cf"]["rows"][0]["statistics"] == pytest.approx(
        table["rows"][0]["statistics"]
    )
    assert written["benchmarks"]["flickr8k_cf"]["rows"][0]["w"] == model.config.w == 2.5
    assert written["benchmarks"]["flickr8k_cf"]["rows"][0]["dtype"] == "float32"
    assert (
        written["benchmarks"]["flickr8k_cf"]["files"]["crowdflower_flickr8k.json"]
        == __import__("hashlib").sha256((crowdflower_dir / "crowdflower_flickr8k.json").read_bytes()).hexdigest()
    )
    assert (output / "plot_flickr8k_cf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Flickr8k-CF" in (output / "results.md").read_text()
    console = capsys.readouterr().out
    assert "== Flickr8k-CF ==" in console and f"{model_dir}:ref_score w=2.5 float32" in console

    # Resume: every chunk is cached, so nothing is encoded again and the table is the same.
    resumed = run(*cf_run, "--chunk-size", 10, "--resume", "--quiet")
    assert resumed["runs"][0]["image_encodings"] == 0 and resumed["runs"][0]["text_encodings"] == 0
    assert resumed["benchmarks"]["flickr8k_cf"]["rows"][0]["statistics"] == table["rows"][0]["statistics"]
    # An interrupted run: one chunk missing. Only its 10 items (images 1, 2 and 3) are scored again.
    before = cached_scores(output, "flickr8k_cf", model_dir)
    (output / "cache" / "flickr8k_cf" / model_dir.replace("/", "--") / "shards" / "shard-0000001.jsonl").unlink()
    partial = run(*cf_run, "--chunk-size", 10, "--resume", "--quiet")
    assert partial["runs"][0]["image_encodings"] == 3
    after = cached_scores(output, "flickr8k_cf", model_dir)
    assert [row["id"] for row in after] == [row["id"] for row in before]  # nothing lost, nothing twice
    assert_scores_close([row["score"] for row in after], [row["score"] for row in before])
    with pytest.raises(SystemExit, match="is not empty: pass --resume"):
        run(*cf_run)
    with pytest.raises(SystemExit, match=r"holds shards of a different run \(shard_size: 10 -> 7\)"):
        run(*cf_run, "--chunk-size", 7, "--resume", "--quiet")

    # --scores with the model's own scores gives the same table, with no model loaded.
    scores_file = tmp_path / "own.jsonl"
    scores_file.write_text("".join(json.dumps(row) + "\n" for row in cached_scores(output, "flickr8k_cf", model_dir)))
    external = run(
        "--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--scores", f"{model_dir}={scores_file}"
    )
    external_rows = external["benchmarks"]["flickr8k_cf"]["rows"]
    assert [(r["column"], r["statistics"]) for r in external_rows] == [
        (r["column"], r["statistics"]) for r in table["rows"]
    ]
    assert external["runs"] == []


def test_dump_items_and_scores_rows_beside_the_papers_numbers(crowdflower_dir, tmp_path):
    dump = tmp_path / "items.jsonl"
    run("--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--dump-items", dump)
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(lines) == 24 and lines[0]["benchmark"] == "flickr8k_cf"
    assert set(lines[0]) == {"id", "image", "candidate", "references", "human", "benchmark"}
    assert Path(lines[0]["image"]).is_absolute() and Path(lines[0]["image"]).is_file()
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps({"id": row["id"], "score": row["human"]}) + "\n" for row in lines))
    results = run(
        "--benchmark",
        "flickr8k_cf",
        "--data-dir",
        crowdflower_dir,
        "--scores",
        f"PAC-S++={scores}",
        "--output-dir",
        tmp_path / "out",
    )
    (row,) = results["benchmarks"]["flickr8k_cf"]["rows"]
    assert row["statistics"]["kendall_tau_b"] == pytest.approx(100)  # the human scores themselves
    assert row["paper"] == {"kendall_tau_b": 37.0, "kendall_tau_c": 19.1}
    assert row["difference"]["kendall_tau_b"] == pytest.approx(100 - 37.0)
    assert "100.00 (37.0, +63.00)" in (tmp_path / "out" / "results.md").read_text()
    constant = tmp_path / "constant.jsonl"
    constant.write_text("".join(json.dumps({"id": line["id"], "score": 1.0}) + "\n" for line in lines))
    run(
        "--benchmark",
        "flickr8k_cf",
        "--data-dir",
        crowdflower_dir,
        "--scores",
        constant,
        "--output-dir",
        tmp_path / "c",
    )
    text = (tmp_path / "c" / "results.json").read_text()
    written = json.loads(text, parse_constant=lambda token: pytest.fail(f"results.json holds {token}"))
    assert written["benchmarks"]["flickr8k_cf"]["rows"][0]["statistics"]["kendall_tau_b"] is None


def test_bad_arguments_and_scores_files_are_named(crowdflower_dir, model_dir, tmp_path):
    with pytest.raises(SystemExit, match="--w must be a finite number > 0, got 0.0"):
        run("--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--model", model_dir, "--w", 0)
    with pytest.raises(SystemExit, match="--chunk-size must be > 0, got 0"):
        run("--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--model", model_dir, "--chunk-size", 0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "flickr8k_cf/img0.jpg/0", "score": 0.5}\n{"id": "x", "score": NaN}\n')
    with pytest.raises(SystemExit, match=r"bad.jsonl:2: score of 'x' is nan, not a finite number"):
        run("--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--scores", bad)
    partial = tmp_path / "partial.jsonl"
    partial.write_text('{"id": "flickr8k_cf/img0.jpg/0", "score": 0.5}\n')
    with pytest.raises(SystemExit, match="no score for item 'flickr8k_cf/img0.jpg/1'"):
        run("--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--scores", partial)
    with pytest.raises(SystemExit, match="flickr8k.json: file not found"):
        run("--benchmark", "flickr8k_expert", "--data-dir", crowdflower_dir, "--scores", partial)


def test_pascal_with_a_model_and_with_its_scores(tmp_path, model_dir):
    root = write_pascal50s(tmp_path / "pascal")
    output = tmp_path / "out"
    results = run(
        "--benchmark", "pascal50s", "--data-dir", root, "--model", model_dir, "--output-dir", output, "--quiet"
    )
    table = results["benchmarks"]["pascal50s"]
    assert set(table["rows"][0]["statistics"]) == {
        "accuracy_HC",
        "accuracy_HI",
        "accuracy_HM",
        "accuracy_MM",
        "accuracy_mean",
    }
    assert results["runs"][0]["image_encodings"] == 4  # 8 items, 4 images
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps(row) + "\n" for row in cached_scores(output, "pascal50s", model_dir)))
    external = run("--benchmark", "pascal50s", "--data-dir", root, "--scores", f"{model_dir}={scores}")
    assert [r["statistics"] for r in external["benchmarks"]["pascal50s"]["rows"]] == [
        r["statistics"] for r in table["rows"]
    ]


def test_video_benchmark_with_scores_and_missing_videos_named(tmp_path, model_dir):
    root, human = write_vatex_eval(tmp_path / "vatex")
    metric = np.linspace(0.1, 0.9, 6) ** 2
    scores = tmp_path / "scores.jsonl"
    scores.write_text(
        "".join(
            json.dumps({"id": f"vatex_eval/{i}/{v}", "score": metric[i], "ref_score": metric[::-1][i]}) + "\n"
            for i in range(6)
            for v in ("1ref", "9ref")
        )
    )
    results = run("--benchmark", "vatex_eval", "--data-dir", root, "--scores", f"PAC-S++={scores}")
    rows = results["benchmarks"]["vatex_eval"]["rows"]
    expected = round(
        float(np.mean([scipy.stats.kendalltau(np.around(metric, 4), human[:, k])[0] for k in range(3)])), 4
    )
    assert rows[0]["statistics"]["kendall_tau_b"] == pytest.approx(100 * expected)
    assert rows[0]["paper"] == {"kendall_tau_b": 28.1, "spearman": 36.4}
    assert rows[1]["paper_name"] == "RefPAC-S++" and "kendall_tau_b_9ref" in rows[1]["statistics"]
    with pytest.raises(SystemExit, match=r"3 videos not found, first: .*videos/video0_000001_000011.mp4"):
        run("--benchmark", "vatex_eval", "--data-dir", root, "--model", model_dir)


def test_system_level_rows(tmp_path, model_dir, model, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycocoevalcap", None)  # as if not installed: a note, never a crash
    images = [f"im{i}.jpg" for i in range(3)]
    write_images(tmp_path, images)
    systems = {
        "base": ["a dog on a sofa", "a red bird sits", "a cat and a cat and"],
        "scst": ["a dog dog dog on a", "a bird", "a cat on the"],
    }
    for name, captions in systems.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(dict(zip(images, captions))))
    references = {image: [f"reference {i}", "an animal"] for i, image in enumerate(images)}
    (tmp_path / "refs.json").write_text(json.dumps(references))
    results = run(
        "--captions",
        f"base={tmp_path / 'base.json'}",
        "--captions",
        f"scst={tmp_path / 'scst.json'}",
        "--references",
        tmp_path / "refs.json",
        "--model",
        model_dir,
    )
    rows = results["systems"]["rows"]
    assert [row["system"] for row in rows] == ["base", "scst"]
    for row, captions in zip(rows, systems.values()):
        grammar = grammar_measures(captions)
        assert (
            row["measures"]["Rep-1"] == grammar["rep_1"]
            and row["measures"]["%Incorrect"] == grammar["incorrect_percent"]
        )
        expected = model.score([str(tmp_path / image) for image in images], captions, list(references.values()))
        assert row["measures"][model_dir] == pytest.approx(expected.mean_score, abs=1e-6)
        assert row["measures"][f"Ref{model_dir}"] == pytest.approx(expected.mean_ref_score, abs=1e-6)
    assert rows[1]["measures"]["%Incorrect"] == pytest.approx(200 / 3)
    assert results["systems"]["notes"] == [
        "Computing BLEU-4/METEOR/ROUGE-L/CIDEr/SPICE needs pycocoevalcap: pip install 'pacs-pp[captioning]' "
        "(and Java for METEOR/SPICE); those columns are absent"
    ]
    assert "CIDEr" not in rows[0]["measures"]


def test_coco_caption_columns_when_pycocoevalcap_is_installed():
    pytest.importorskip("pycocoevalcap", reason="optional: the COCO caption columns need pycocoevalcap")
    from modeling_pacs.evaluation.systems import coco_caption_metrics

    items = [
        {"caption": "a dog runs on the grass", "references": ["a dog runs on the grass", "a dog on grass"]},
        {"caption": "a cat sleeps", "references": ["a cat sleeps", "a sleeping cat"]},
    ]
    measures, notes = coco_caption_metrics(items, ("Bleu_4", "ROUGE_L"))
    if notes:  # no Java for the PTB tokenizer: the note says so
        assert "PTB tokenizer failed" in notes[0] and measures == {}
    else:  # every candidate is one of its references: BLEU-4 and ROUGE-L are 100
        assert measures == pytest.approx({"Bleu_4": 100.0, "ROUGE_L": 100.0}, abs=1e-3)


def test_benchmark_all_runs_every_present_folder(tmp_path, caplog):
    write_pascal50s(tmp_path / "data" / "pascal50s")
    write_vatex_eval(tmp_path / "data" / "vatex_eval")
    dump = tmp_path / "items.jsonl"
    run("--benchmark", "all", "--data-dir", tmp_path / "data", "--dump-items", dump)
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert [line["benchmark"] for line in lines] == ["pascal50s"] * 8 + ["vatex_eval"] * 12
    assert "video" in lines[-1] and "image" not in lines[-1]
    assert "no folder for activitynet_foil, composite, detailcaps, flickr8k_cf" in caplog.text
    with pytest.raises(SystemExit, match="no benchmark folder found"):
        run("--benchmark", "all", "--data-dir", tmp_path, "--dump-items", dump)


@pytest.mark.parametrize("family", ["tiny:polos", "tiny:pearl", "tiny-siglip"])
def test_every_metric_family_runs_a_benchmark(crowdflower_dir, family, tmp_path):
    """Polos, Pearl and SigLIP-based models are selectable with --model: the table's correlations equal scipy's on
    the model's own per-item scores (items scored one at a time)."""
    results = run(
        "--benchmark", "flickr8k_cf", "--data-dir", crowdflower_dir, "--model", family,
        "--output-dir", tmp_path / "out", "--quiet",
    )  # fmt: skip
    from modeling_pacs.evaluation import load_benchmark

    items = load_benchmark("flickr8k_cf", crowdflower_dir).items
    model = load_model(family)
    alone = [model.score([item["image"]], [item["candidate"]], [item["references"]]) for item in items]
    human = [item["human"] for item in items]
    columns = {"score": [float(o.scores[0]) for o in alone]}
    if getattr(alone[0], "ref_scores", None) is not None:  # Polos is reference-based only: one column
        columns["ref_score"] = [float(o.ref_scores[0]) for o in alone]
    rows = results["benchmarks"]["flickr8k_cf"]["rows"]
    assert len(rows) == len(columns)
    cached = {row["id"]: row for row in cached_scores(tmp_path / "out", "flickr8k_cf", family.replace(":", "-"))}
    for (column, values), row in zip(columns.items(), rows):
        assert_scores_close([cached[item["id"]][column] for item in items], values, what=column)
        expected = 100 * scipy.stats.kendalltau(values, human, variant="c")[0]  # NaN when the scores are constant
        assert row["statistics"]["kendall_tau_c"] == pytest.approx(expected, abs=1e-6, nan_ok=True)


def test_video_benchmarks_score_with_a_model(tmp_path, model_dir, model):
    """VATEX-EVAL and ActivityNet-FOIL with --model: real (tiny) videos through PACSModel.score_videos. VATEX's
    reference-free row equals the per-annotator protocol on a direct score_videos call; ActivityNet-FOIL runs end to
    end on two paired videos (the third has no file and is left out), so its accuracy is 0, 50 or 100."""
    from modeling_pacs.evaluation import load_benchmark
    from tests.models.test_video import random_frames, write_video

    root, human = write_vatex_eval(tmp_path / "vatex")
    (root / "videos").mkdir()
    for k in range(3):
        write_video(
            root / "videos" / f"video{k}_000001_000011.mp4", random_frames(12, k), codec="mpeg4", pix_fmt="yuv420p"
        )
    results = run("--benchmark", "vatex_eval", "--data-dir", root, "--model", model_dir)
    benchmark = load_benchmark("vatex_eval", root)
    items = benchmark.items
    direct = model.score_videos(
        [item["video"] for item in items],
        [item["candidate"] for item in items],
        [item["references"] for item in items],
        num_frames=benchmark.options.get("num_frames"),
    )
    free = {item["id"]: float(value) for item, value in zip(items, direct.video_scores)}
    metric = np.array([free[f"vatex_eval/{i}/1ref"] for i in range(6)])
    expected = np.mean([scipy.stats.kendalltau(np.around(metric, 4), human[:, k])[0] for k in range(3)])
    row = results["benchmarks"]["vatex_eval"]["rows"][0]
    assert row["statistics"]["kendall_tau_b"] == pytest.approx(100 * round(float(expected), 4), abs=1e-6, nan_ok=True)

    anet = write_activitynet_foil(tmp_path / "anet")
    for video, count in (("v1", 50), ("v2", 25)):  # 25 fps: 2 s and 1 s clips (durations in the JSON are larger)
        write_video(anet / "videos" / f"{video}.mp4", random_frames(count, 7), codec="mpeg4", pix_fmt="yuv420p")
    results = run("--benchmark", "activitynet_foil", "--data-dir", anet, "--model", model_dir)
    (row, *_) = results["benchmarks"]["activitynet_foil"]["rows"]
    assert row["statistics"]["accuracy"] in (0.0, 50.0, 100.0)
