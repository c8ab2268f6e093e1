"""scripts/train_captioner.py end to end on tiny models: both stages run, the report's measures equal an independent
recomputation from the written captions, and a non-empty output folder is refused."""

import json
from pathlib import Path

import datasets
import pytest

from modeling_pacs.captioning.grammar import grammar_measures
from modeling_pacs.cli import train_captioner
from modeling_pacs.loading import load_model
from tests.fixtures.helpers import assert_scores_close, caption_rows

CAPTIONS = [["a red dog on grass", "a dog"], ["a blue cat on a sofa"], ["two birds in the sky"], ["a green car"]]


@pytest.fixture(scope="module")
def toy_dataset_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy_dataset")
    rows = caption_rows(folder, CAPTIONS)
    splits = datasets.DatasetDict(train=datasets.Dataset.from_list(rows), test=datasets.Dataset.from_list(rows[:2]))
    splits.save_to_disk(str(folder / "dataset"))
    return folder / "dataset"


def run(*argv: str) -> int:
    return train_captioner.main(["--tiny", "--device", "cpu", "--batch_size", "2", "--max_new_tokens", "5", *argv])


def test_xe_then_scst_with_report(toy_dataset_dir, tmp_path):
    xe_dir = tmp_path / "xe"
    assert (
        run(
            "--stage",
            "xe",
            "--dataset",
            str(toy_dataset_dir),
            "--output_dir",
            str(xe_dir),
            "--max_steps",
            "1",
            "--test_split",
            "none",
            "--feature_cache",
            str(tmp_path / "features"),
        )
        == 0
    )
    assert (xe_dir / "final" / "model.safetensors").is_file() and not (xe_dir / "eval_report.json").exists()

    scst_dir = tmp_path / "scst"
    argv = [
        "--stage",
        "scst",
        "--model_name_or_path",
        str(xe_dir / "final"),
        "--reward",
        "ref_pac_s_pp",
        "--dataset",
        str(toy_dataset_dir),
        "--output_dir",
        str(scst_dir),
        "--max_steps",
        "1",
    ]
    assert run(*argv) == 0
    report = json.loads((scst_dir / "eval_report.json").read_text())
    captions = [json.loads(line)["caption"] for line in (scst_dir / "test_captions.jsonl").read_text().splitlines()]
    assert len(captions) == report["num_captions"] == 2
    for key, value in grammar_measures(captions).items():
        assert report[key] == value
    scores = load_model("tiny").score(
        [str(Path(toy_dataset_dir).parent / f"{i}.png") for i in range(2)], captions, CAPTIONS[:2]
    )
    assert_scores_close([report["pac_s_pp"], report["ref_pac_s_pp"]], [scores.mean_score, scores.mean_ref_score])
    assert (report["stage"], report["reward"]) == ("scst", "ref_pac_s_pp")

    with pytest.raises(SystemExit, match="is not empty: continue with --resume_from_checkpoint last"):
        run(*argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stage", "scst", "--output_dir", "x"], "starts from an XE-trained captioner"),
        (["--stage", "xe", "--output_dir", "x", "--batch_size", "0"], "must be a positive integer, got 0"),
        (["--stage", "xe", "--output_dir", "x", "--learning_rate", "nan"], "must be a finite number > 0, got"),
        (
            ["--stage", "scst", "--model_name_or_path", "x", "--output_dir", "x", "--num_beams", "1"],
            "at least 2 for scst",
        ),
    ],
)
def test_arguments_are_validated(argv, message, capsys):
    with pytest.raises(SystemExit):
        train_captioner.parse_args(argv)
    assert message in capsys.readouterr().err
