"""Polos and Pearl through `pacs-score`, `pacs-pp score-corpus` and the evaluate module: the truncated_tokens column
equals the engine's count, and one printed warning gives the number of truncated captions and Polos/Pearl's fix."""

import csv
import json
import warnings
from pathlib import Path

import pytest

from modeling_pacs.cli import score_corpus, score_main
from modeling_pacs.loading import load_model
from modeling_pacs.models.inputs import SHORTEN_FIX, TRUNCATION_FIX, LongCaptionWarning

LONG_CAPTION = " ".join(f"Picture {index} shows a small dog that runs across a wide green field." for index in range(9))
METRIC_DIR = str(Path(__file__).resolve().parents[2] / "metric" / "pacs_pp")


@pytest.fixture(scope="module", params=["tiny:polos", "tiny:pearl"])
def model_name(request):
    return request.param


@pytest.fixture(scope="module")
def engine(model_name):
    return load_model(model_name, device="cpu")


def captions_file(image_folder, directory: Path, short_only: bool = False) -> tuple[Path, list[dict]]:
    rows = [
        {
            "image": str(path),
            "caption": LONG_CAPTION if index == 0 and not short_only else f"caption {index}",
            "references": [f"a reference {index}", LONG_CAPTION if index == 2 and not short_only else "another"],
        }
        for index, path in enumerate(image_folder)
    ]
    source = directory / "captions.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return source, rows


def expected_output(engine, rows):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongCaptionWarning)
        return engine.score(
            [row["image"] for row in rows], [row["caption"] for row in rows], [row["references"] for row in rows]
        )


def test_pacs_score_writes_the_column_and_prints_the_fix_once(model_name, engine, image_folder, tmp_path, capsys):
    source, rows = captions_file(image_folder, tmp_path)
    output = tmp_path / "scores.jsonl"
    score_main([str(source), "--model", model_name, "--output", str(output), "--no-progress"])
    items = [json.loads(line) for line in output.read_text().splitlines()]
    expected = expected_output(engine, rows)
    assert [item["truncated_tokens"] for item in items] == expected.truncated_tokens.tolist()
    assert items[0]["truncated_tokens"] > 0 and all(item["truncated_tokens"] == 0 for item in items[1:])
    printed = capsys.readouterr()
    warning_lines = [line for line in printed.err.splitlines() if line.startswith("warning:") and "RANDOM" not in line]
    assert warning_lines == [
        "warning: 1 of 6 captions (and the references of 1 items) were longer than the text encoder's context and "
        f"were truncated (column truncated_tokens): {SHORTEN_FIX}"
    ]
    assert TRUNCATION_FIX not in printed.out and "LongCaptionWarning" not in printed.err


def test_pacs_score_short_captions_print_no_warning(model_name, image_folder, tmp_path, capsys):
    source, _ = captions_file(image_folder, tmp_path, short_only=True)
    output = tmp_path / "scores.csv"
    score_main([str(source), "--model", model_name, "--output", str(output), "--no-progress"])
    with output.open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [row["truncated_tokens"] for row in table] == ["0"] * 6 + [""]  # the last row holds the means
    assert "warning: " not in capsys.readouterr().err.replace("warning: model", "")


def test_score_corpus_counts_the_rows_and_prints_the_fix(model_name, engine, image_folder, tmp_path, capsys):
    source, rows = captions_file(image_folder, tmp_path)
    summary = score_corpus.main(
        [str(source), "--output-dir", str(tmp_path / "out"), "--model", model_name, "--references-column", "references"]
    )
    results = [json.loads(line) for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    expected = expected_output(engine, rows)
    assert [result["truncated_tokens"] for result in results] == expected.truncated_tokens.tolist()
    assert summary["num_truncated"] == 1
    printed = capsys.readouterr().err  # warnings go to stderr (modeling_pacs/logs.py)
    assert "warning: 1 of 6 captions were longer than the text encoder's context" in printed
    assert printed.count("warning: 1 of") == 1 and SHORTEN_FIX in printed


def test_evaluate_module_reports_the_counts(model_name, engine, image_folder, tmp_path):
    import evaluate

    _, rows = captions_file(image_folder, tmp_path)
    metric = evaluate.load(METRIC_DIR, model=model_name, cache_dir=str(tmp_path / "evaluate"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = metric.compute(
            predictions=[row["caption"] for row in rows],
            images=[row["image"] for row in rows],
            references=[row["references"] for row in rows],
        )
    expected = expected_output(engine, rows)
    assert results["truncated_tokens"] == expected.truncated_tokens.tolist() and results["num_truncated"] == 1
    long_warnings = [str(warning.message) for warning in caught if warning.category is LongCaptionWarning]
    assert len(long_warnings) == 2 and all(message.endswith(SHORTEN_FIX) for message in long_warnings)
