"""`pacs-score`: scores a folder of generated images and writes per-item scores and the mean."""

import csv
import json
import subprocess
import sys

import pytest

from modeling_pacs.cli import main, score_main
from modeling_pacs.errors import InputError


@pytest.fixture(scope="module")
def captions_file(image_folder, tmp_path_factory):
    folder = image_folder[0].parent
    mapping = {path.name: [f"generated caption {i}", "a photo of something"] for i, path in enumerate(image_folder)}
    path = folder / "captions.json"
    path.write_text(json.dumps(mapping))
    references = {path.name: [f"reference {i}", "another reference"] for i, path in enumerate(image_folder)}
    (folder / "references.json").write_text(json.dumps(references))
    return path


def test_cli_scores_a_folder_and_writes_json(captions_file, tiny_model_dir, tiny_model, tmp_path, capsys):
    output = tmp_path / "scores.json"
    score_main(
        [
            str(captions_file),
            "--model",
            str(tiny_model_dir),
            "--output",
            str(output),
            "--references",
            str(captions_file.parent / "references.json"),
        ]
    )
    result = json.loads(output.read_text())
    assert result["num_items"] == 12 and result["w"] == 2.5
    items = result["items"]
    expected = tiny_model.score(
        [captions_file.parent / item["image"] for item in items],
        [item["caption"] for item in items],
        references=[
            [f"reference {int(item['image'].split('_')[1].split('.')[0])}", "another reference"] for item in items
        ],
    )
    assert [item["PAC-S++"] for item in items] == pytest.approx(expected.scores.tolist(), abs=1e-6)
    assert [item["RefPAC-S++"] for item in items] == pytest.approx(expected.ref_scores.tolist(), abs=1e-6)
    assert result["mean"]["PAC-S++"] == pytest.approx(expected.mean_score, abs=1e-6)
    assert result["mean"]["RefPAC-S++"] == pytest.approx(expected.mean_ref_score, abs=1e-6)
    assert "12 captions scored" in capsys.readouterr().out


def test_cli_writes_csv_with_a_mean_row(captions_file, tiny_model_dir, tiny_model, tmp_path):
    output = tmp_path / "scores.csv"
    main(["score", str(captions_file), "--model", str(tiny_model_dir), "--output", str(output), "--no-progress"])
    rows = list(csv.DictReader(output.open()))
    assert len(rows) == 13 and rows[-1]["image"] == "MEAN"
    scores = [float(row["PAC-S++"]) for row in rows[:-1]]
    assert float(rows[-1]["PAC-S++"]) == pytest.approx(sum(scores) / 12, abs=1e-6)
    assert "RefPAC-S++" not in rows[0]


def test_cli_reads_jsonl_and_csv_with_references(image_folder, tiny_model_dir, tiny_model, tmp_path):
    rows = [
        {"image": str(path), "caption": f"cap {i}", "references": [f"ref {i}"]} for i, path in enumerate(image_folder)
    ]
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in rows))
    table = tmp_path / "items.csv"
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["image", "caption", "references"])
        writer.writeheader()
        writer.writerows({**row, "references": json.dumps(row["references"])} for row in rows)
    expected = tiny_model.score(image_folder, [r["caption"] for r in rows], [r["references"] for r in rows])
    for source in (jsonl, table):
        output = tmp_path / f"{source.stem}_{source.suffix[1:]}.json"
        score_main([str(source), "--model", str(tiny_model_dir), "--output", str(output)])
        result = json.loads(output.read_text())
        assert [item["RefPAC-S++"] for item in result["items"]] == pytest.approx(expected.ref_scores.tolist(), abs=1e-6)


def test_cli_errors_name_the_problem(captions_file, tiny_model_dir, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"missing.png": "a caption"}))
    with pytest.raises(
        SystemExit,
        match=r'pacs-score: error: row 0 \(bad\.json\["missing\.png"\]\): image \(\'.*missing\.png\'\) does not exist',
    ):
        score_main([str(bad), "--model", str(tiny_model_dir)])
    with pytest.raises(SystemExit, match="unsupported input format '.txt'"):
        other = tmp_path / "input.txt"
        other.write_text("x")
        score_main([str(other), "--model", str(tiny_model_dir)])
    with pytest.raises(SystemExit, match="is not an existing model directory"):
        score_main([str(captions_file), "--model", str(tmp_path / "no_model")])


def test_cli_help_documents_formats_and_models():
    result = subprocess.run(
        [sys.executable, "-m", "modeling_pacs.cli", "score", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    for expected in (
        "--model",
        "--references",
        "--output",
        "--batch-size",
        "--device",
        "--dtype",
        "JSONL",
        "pac_s_pp_vit_b32",
        "tiny",
    ):
        assert expected in result.stdout


LONG_CAPTION = " ".join(f"Picture {index} shows a small dog that runs across a wide green field." for index in range(9))


@pytest.mark.parametrize("mode", ["truncate", "chunks"])
def test_cli_reports_truncation_and_reads_long_captions_in_chunks(
    image_folder, tiny_model_dir, tiny_model, tmp_path, capsys, mode
):
    rows = [
        {"image": str(path), "caption": LONG_CAPTION if i == 0 else f"caption {i}"}
        for i, path in enumerate(image_folder)
    ]
    source = tmp_path / "captions.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "scores.jsonl"
    score_main([str(source), "--model", str(tiny_model_dir), "--output", str(output), "--long-captions", mode])
    items = [json.loads(line) for line in output.read_text().splitlines()]
    expected = tiny_model.score(image_folder, [row["caption"] for row in rows], long_captions=mode)
    assert [item["PAC-S++"] for item in items] == pytest.approx(expected.scores.tolist(), abs=1e-6)
    assert [item["truncated_tokens"] for item in items] == expected.truncated_tokens.tolist()
    printed = capsys.readouterr().err  # warnings go to stderr (modeling_pacs/logs.py)
    if mode == "truncate":
        assert items[0]["truncated_tokens"] == int(tiny_model.truncated_tokens([LONG_CAPTION])[0]) > 0
        assert "warning: 1 of 6 captions" in printed and "--long-captions chunks" in printed
    else:
        assert items[0]["truncated_tokens"] == 0 and "warning" not in printed


def test_models_that_only_truncate_refuse_the_chunk_mode_by_name():
    from types import SimpleNamespace

    from modeling_pacs.cli.arguments import long_captions_options

    for model_type, name in (("polos", "Polos"), ("pearl", "Pearl")):  # their specs declare no long_captions option
        model = SimpleNamespace(config=SimpleNamespace(model_type=model_type))
        assert long_captions_options(model, "truncate") == {}
        with pytest.raises(
            InputError,
            match=f"--long-captions: long captions mode 'chunks' applies to the metrics pac_s_pp, pac_s, clip_s, not "
            f"to {name}, which only truncates",
        ):
            long_captions_options(model, "chunks")
