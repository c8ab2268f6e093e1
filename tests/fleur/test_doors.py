"""FLEUR through the doors: unparsable answers counted in `pacs-score`'s summary line and `evaluate-captions`'
footer (read from the spec's `OutputField.summary`, nothing FLEUR-specific in the doors)."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_pacs.cli.score import score_main
from modeling_pacs.evaluation.captions import answered_mean, evaluate_captions
from modeling_pacs.metric_spec import OutputField
from modeling_pacs.results import ResultColumn, summary_counts

REPO_ROOT = Path(__file__).resolve().parents[2]
COUNTED = "unparsable answers (NaN, left out of the means)"


@pytest.fixture(scope="module")
def failing_judge(tmp_path_factory):
    """The tiny judge cut to 5 new tokens: it prints `0.85` without the stop string, which the authors' parser
    (the text without its last 4 characters) cannot read, so every answer fails."""
    pytest.importorskip("sentencepiece")
    from modeling_pacs.loading import load_model

    judge = load_model("tiny:fleur")
    source = Path(judge.config._name_or_path)
    directory = tmp_path_factory.mktemp("fleur") / "judge"
    shutil.copytree(source, directory)
    config = json.loads((directory / "config.json").read_text())
    config["max_new_tokens"] = 5
    (directory / "config.json").write_text(json.dumps(config))
    return directory, judge


def test_pacs_score_counts_unparsable_answers_in_its_summary_line(failing_judge, tmp_path, capsys):
    failing_judge, _ = failing_judge
    rows = [json.loads(line) for line in (REPO_ROOT / "examples" / "captions.jsonl").read_text().splitlines()]
    del rows[2]["references"]  # 2 items with references (2 answers each), 1 without (1 answer)
    (tmp_path / "captions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "images").symlink_to(REPO_ROOT / "examples" / "images")
    score_main([str(tmp_path / "captions.jsonl"), "--model", str(failing_judge), "--no-progress"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"3 captions scored with {failing_judge}: mean FLEUR nan, RefFLEUR nan; {COUNTED}: 5"


def test_evaluate_captions_counts_them_in_its_footer(failing_judge):
    failing_judge, _ = failing_judge
    images = ["red_circle.png", "blue_square.png", "green_triangle.png"]
    items = [{"image_id": name, "image": str(REPO_ROOT / "examples" / "images" / name), "caption": f"a shape {i}",
              "references": [f"a figure {i}"]} for i, name in enumerate(images)]  # fmt: skip
    evaluation = evaluate_captions(items, [str(failing_judge)], progress=False)
    assert evaluation.footer().splitlines() == [
        "3 items scored, 0 rows skipped",
        f"{failing_judge}/failed_answers: {COUNTED}: 6",
    ]
    assert [item[f"{failing_judge}/failed_answers"] for item in evaluation.items] == [2, 2, 2]
    assert math.isnan(evaluation.corpus[f"{failing_judge}/score"])


def test_only_counts_that_declare_a_summary_are_reported():
    truncation = OutputField.truncation("caption tokens past the encoder's context")
    assert summary_counts([ResultColumn(truncation, "truncated_tokens", [3, 0], None)]) == ""
    failed = OutputField("failed", "failed", "answers without a score", kind="count", summary="failed answers")
    assert summary_counts([ResultColumn(failed, "failed", [1, None, 2], None)]) == "; failed answers: 3"
    assert answered_mean([0.5, math.nan, 0.7]) == pytest.approx(0.6, abs=1e-12) and math.isnan(
        answered_mean([math.nan])
    )


def test_progress_bar_of_answers_with_the_time_left(failing_judge, capsys):
    _, judge = failing_judge
    images = [str(REPO_ROOT / "examples" / "images" / "red_circle.png")] * 3
    judge.score(images, ["a", "b", "c"], references=[["x"]] * 3, progress=True, batch_size=2)
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    assert any(
        line.startswith("judging captions: 100%") and "6/6 [" in line and "<" in line and "answer" in line
        for line in bar
    )
    judge.score(images, ["a", "b", "c"])  # 3 answers: below the threshold, quiet by default
    assert "judging captions" not in capsys.readouterr().err


def test_the_benchmark_harness_scores_with_the_judge_and_names_failed_answers(failing_judge, tmp_path):
    """`tiny:fleur` through `pacs-pp evaluate-benchmarks`: the rows' Kendall taus equal scipy's on the judge's own
    scores; a judge whose answers give no score stops the benchmark with the items named, not a JSON error."""
    import scipy.stats

    from modeling_pacs.cli import evaluate_benchmarks
    from modeling_pacs.evaluation import load_benchmark
    from tests.fixtures.benchmark_files import write_crowdflower_json

    failing_directory, judge = failing_judge
    pool = ["a red dog runs", "a small cat sits", "a red bird sits", "a small dog runs"]
    data = write_crowdflower_json(tmp_path / "cf", images=2, captions_per_image=3, seed=0, pool=pool)
    results = evaluate_benchmarks.main(["--benchmark", "flickr8k_cf", "--data-dir", str(data), "--model", "tiny:fleur",
                                        "--output-dir", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    items = load_benchmark("flickr8k_cf", data).items
    output = judge.score([item["image"] for item in items], [item["candidate"] for item in items],
                         [item["references"] for item in items])  # fmt: skip
    human = [item["human"] for item in items]
    rows = results["benchmarks"]["flickr8k_cf"]["rows"]
    assert [row["column"] for row in rows] == ["score", "ref_score"]
    for row, scores in zip(rows, (output.scores, output.ref_scores), strict=True):
        expected = 100 * scipy.stats.kendalltau(scores.tolist(), human, variant="c")[0]
        assert row["statistics"]["kendall_tau_c"] == pytest.approx(expected, abs=1e-4, nan_ok=True)
    failing = ["--benchmark", "flickr8k_cf", "--data-dir", data, "--model", failing_directory, "--output-dir",
               tmp_path / "failed", "--quiet"]  # fmt: skip
    with pytest.raises(SystemExit, match=r"score of item '.*' is nan \(and 5 more item\(s\)\): scores must be finite"):
        evaluate_benchmarks.main([str(argument) for argument in failing])
    cached = (tmp_path / "failed" / "cache" / "flickr8k_cf").rglob("shard-*.jsonl")
    assert all(json.loads(line)["score"] is None for path in cached for line in path.read_text().splitlines())


def test_the_package_exports_the_judge_lazily():
    import modeling_pacs
    from modeling_pacs.models.configuration_fleur import FleurConfig
    from modeling_pacs.models.modeling_fleur import FleurModel, FleurOutput

    assert {"FleurConfig", "FleurModel", "FleurOutput"} <= set(modeling_pacs.__all__) & set(dir(modeling_pacs))
    assert (modeling_pacs.FleurConfig, modeling_pacs.FleurModel) == (FleurConfig, FleurModel)
    assert modeling_pacs.FleurOutput is FleurOutput
    light = subprocess.run([sys.executable, "-c", "import sys, modeling_pacs; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True, cwd=REPO_ROOT)  # fmt: skip
    assert light.stdout.strip() == "False"  # `import modeling_pacs` stays light
