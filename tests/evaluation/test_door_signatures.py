"""The reproducibility signature appears in the `evaluate` module's result and in the benchmark harness's report, and
equals the one `evaluate_captions` (`pacs-pp evaluate-captions`) gives for the same model, settings and references."""

from pathlib import Path

import evaluate
import pytest

from modeling_pacs.evaluation import load_benchmark
from modeling_pacs.evaluation.benchmark import BenchmarkOptions
from modeling_pacs.evaluation.captions import evaluate_captions
from modeling_pacs.evaluation.harness import HarnessConfig, run
from modeling_pacs.evaluation.report import format_table
from tests.fixtures.benchmark_files import write_crowdflower_json

METRIC_DIR = str(Path(__file__).resolve().parents[2] / "metric" / "pacs_pp")


@pytest.fixture(scope="module")
def crowdflower(tmp_path_factory):
    folder = write_crowdflower_json(tmp_path_factory.mktemp("cf"), images=2, captions_per_image=2, seed=0)
    items = load_benchmark("flickr8k_cf", folder).items
    rows = [{"image_id": item["id"], "image": item["image"], "caption": item["candidate"],
             "references": item["references"]} for item in items]  # fmt: skip
    return folder, items, rows


def captions_signature(rows, entry: str, **settings) -> str:
    return evaluate_captions(rows, metrics=[entry], progress=False, **settings).signatures[entry]


def test_the_evaluate_module_returns_evaluate_captions_signature(crowdflower, tmp_path):
    _, items, rows = crowdflower
    metric = evaluate.load(METRIC_DIR, model="tiny:clip_s", cache_dir=str(tmp_path / "evaluate"))
    images, captions = [item["image"] for item in items], [item["candidate"] for item in items]
    with_references = metric.compute(predictions=captions, images=images, references=[i["references"] for i in items])
    expected = captions_signature(rows, "tiny:clip_s")
    assert with_references["signature"] == expected and "|refs:3|" in expected
    assert expected.startswith("CLIP-S|model:tiny:clip_s|weights:sha256:")
    without = metric.compute(predictions=captions, images=images)["signature"]
    assert without == expected.replace("|refs:3|", "|refs:0|")


def test_the_harness_report_carries_evaluate_captions_signature(crowdflower, tmp_path):
    folder, _, rows = crowdflower
    config = HarnessConfig(benchmarks=["flickr8k_cf"], data_dir=folder, models=["tiny:clip_s"],
                           long_captions=["truncate", "chunks"], progress=False)  # fmt: skip
    result = run(config, BenchmarkOptions())["benchmarks"]["flickr8k_cf"]
    signatures = {row["name"]: row["signature"] for row in result["rows"]}
    assert signatures["tiny:clip_s"] == captions_signature(rows, "tiny:clip_s")
    assert signatures["tiny:clip_s (chunks)"] == captions_signature(rows, "tiny:clip_s", long_captions="chunks")
    assert signatures["tiny:clip_s"] != signatures["tiny:clip_s (chunks)"]
    table = format_table(result)
    for name, signature in signatures.items():
        assert f"signature {name}: {signature}" in table.splitlines()
