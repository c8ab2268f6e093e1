"""The supervised-training pieces Polos and Pearl share (modeling_pacs/supervised/): one reader, one set of
correlation metrics, one early-stopping and argument check, each system's recipe as arguments."""

import csv
import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from transformers import EarlyStoppingCallback

from modeling_pacs.data import ImageReference, resolve_references
from modeling_pacs.pearl.training import PearlTrainer, compute_pearl_metrics, pearl_training_arguments
from modeling_pacs.polos.training import PolosTrainer, polos_training_arguments, read_polaris, regression_metrics
from modeling_pacs.supervised import (
    SupervisedMetricTrainer,
    check_training_settings,
    correlation_metrics,
    early_stopping_callback,
)
from modeling_pacs.supervised.data import RowError, check_references, read_rows, rows_from_records, split_paths
from tests.fixtures.helpers import random_image

# (candidate, references, score, image): what the test writes, the expected rows, independent of the reader.
POLARIS_ROWS = [
    ("a cat on a sofa", ["a cat sleeping on a couch", "a grey cat"], 0.75, "img_0.jpg"),
    ("a dog, running", ["a dog runs in a park"], 0.25, "img_1.jpg"),
    ('two "people" riding horses', ["riders on horses", "two horses", "people outside"], 1.0, "img_2.jpg"),
    ("", ["a plate of food"], 0.0, "img_0.jpg"),
]


@pytest.fixture(scope="module")
def polaris_files(tmp_path_factory):
    """The same Polaris split twice: the original CSV (mt, refs, score, imgid) and the Hub parquet layout."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("polaris")
    (folder / "images").mkdir()
    for index in range(3):
        random_image(index, (40, 32)).save(folder / "images" / f"img_{index}.jpg")
    with (folder / "polaris_train.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mt", "refs", "score", "imgid"])
        writer.writerows([(mt, repr(refs), score, image) for mt, refs, score, image in POLARIS_ROWS])
    table = pa.table({
        "refs": [refs for _, refs, _, _ in POLARIS_ROWS],
        "cand": [mt for mt, _, _, _ in POLARIS_ROWS],
        "img": [{"bytes": None, "path": image} for _, _, _, image in POLARIS_ROWS],
        "human_score": pa.array([score for _, _, score, _ in POLARIS_ROWS], type=pa.float64()),
    })  # fmt: skip
    pq.write_table(table, folder / "train.parquet")
    return folder


def expected_rows(image):
    return [
        {"row": row, "image": image(name), "candidate": mt, "references": refs, "score": score}
        for row, (mt, refs, score, name) in enumerate(POLARIS_ROWS)
    ]


def test_polos_and_pearl_readers_give_identical_rows_for_the_same_polaris_csv(polaris_files):
    images = polaris_files / "images"
    polos = read_polaris(polaris_files / "polaris_train.csv")
    pearl = read_rows(polaris_files / "polaris_train.csv", "polaris_csv", image_root=images)
    assert polos == pearl == expected_rows(lambda name: str(images / name))
    # Pearl's own recipe keeps the image names (its feature-cache keys); everything else is the same.
    by_name = read_rows(polaris_files / "polaris_train.csv", "polaris_csv")
    assert by_name == expected_rows(lambda name: name)
    assert split_paths(polaris_files, "polaris_csv") == {"train": polaris_files / "polaris_train.csv"}


def test_polos_and_pearl_readers_give_identical_rows_for_the_same_polaris_parquet(polaris_files):
    polos = read_polaris(polaris_files / "train.parquet")
    pearl = read_rows(polaris_files / "train.parquet", "polaris")
    # Polos's images stay in the file until a batch reads them (relative paths resolve against the file's folder).
    images = resolve_references([row["image"] for row in polos])
    assert images == [{"bytes": None, "path": str(polaris_files / name)} for *_, name in POLARIS_ROWS]
    assert all(isinstance(row["image"], ImageReference) for row in polos)
    assert [{**row, "image": image} for row, image in zip(polos, images)] == expected_rows(
        lambda name: {"bytes": None, "path": str(polaris_files / name)}
    )
    assert pearl == expected_rows(lambda name: name)


def test_reference_policy_is_each_systems_recipe(tmp_path):
    records = [{"img": "a.jpg", "cand": "x", "refs": refs, "human_score": 0.5} for refs in ("[]", "['NO REFS!!!']")]
    pearl = rows_from_records(records, "polaris", "p.jsonl")
    assert [row["references"] for row in pearl] == [[], []]
    for record in records:
        with pytest.raises(RowError) as error:
            rows_from_records([record], "polaris", "p.jsonl", references_required=True)
        assert str(error.value) == (
            f"p.jsonl: row 0, column 'refs': expected a non-empty list of reference strings, got {record['refs']!r}: "
            "this metric has no reference-free mode, drop the row"
        )
    assert check_references(["a", "b"], "s", 0) == ["a", "b"]
    assert check_references(None, "s", 0, required=False) == []


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"imgid": "a.jpg", "mt": 3, "refs": "[]", "score": 0.5},
            "d.jsonl: row 0, column 'mt': expected a string, got 3",
        ),
        (
            {"imgid": "", "mt": "x", "refs": "[]", "score": 0.5},
            "d.jsonl: row 0, column 'imgid': expected an image file",
        ),
        ({"imgid": "a.jpg", "mt": "x", "refs": "[]", "score": "nan"}, "row 0, column 'score': 'nan' is not a finite"),
        ({"imgid": "a.jpg", "mt": "x", "refs": "[]", "score": "high"}, "row 0, column 'score': 'high' is not a number"),
        ({"imgid": "a.jpg", "mt": "x", "refs": "[1]", "score": 0.5}, "column 'refs': '[1]' must be a list of strings"),
    ],
)
def test_malformed_rows_name_file_row_and_column(tmp_path, record, message):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"imgid": "ok.jpg", "mt": "ok", "refs": "[]", "score": 0.5}) + "\n" + json.dumps(record))
    with pytest.raises(RowError, match=re.escape(message.replace("row 0", "row 1 (line 2)"))):  # JSON lines' line
        read_rows(path, "spica")
    with pytest.raises(ValueError, match=re.escape("unknown layout 'coco': expected one of")):
        read_rows(path, "coco")
    with pytest.raises(ValueError, match=re.escape("unsupported format '.txt'")):
        (tmp_path / "d.txt").write_text("x")
        read_rows(tmp_path / "d.txt")


def test_missing_image_and_missing_columns_are_named(polaris_files, tmp_path):
    path = tmp_path / "polaris_val.csv"
    path.write_text("mt,refs,score,imgid\nx,['a'],0.5,missing.jpg\n", encoding="utf-8")
    with pytest.raises(
        RowError, match=r"polaris_val.csv: row 0 \(line 2\), column 'imgid': image '.*missing.jpg' does not exist"
    ):
        read_polaris(path, image_root=polaris_files / "images")
    path.write_text("mt,refs,imgid\n", encoding="utf-8")
    with pytest.raises(RowError, match=re.escape("polaris_val.csv: missing columns ['score'] (the polaris_csv layout")):
        read_rows(path, "polaris_csv")


def numpy_ranks(values):
    """Average ranks (ties share the mean of their positions), by NumPy alone."""
    values = np.asarray(values)
    ranks = np.empty(len(values))
    for value in np.unique(values):
        positions = np.flatnonzero(values == value)
        ranks[positions] = np.mean([np.sum(values < value) + 1 + k for k in range(len(positions))])
    return ranks


def numpy_kendall(predictions, targets):
    """Kendall tau-b and Stuart's tau-c counted pair by pair."""
    n = len(predictions)
    concordant = discordant = tied_x = tied_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(predictions[i] - predictions[j]), np.sign(targets[i] - targets[j])
            concordant += dx * dy > 0
            discordant += dx * dy < 0
            tied_x += dx == 0 and dy != 0
            tied_y += dy == 0 and dx != 0
    tau_b = (concordant - discordant) / math.sqrt(
        (concordant + discordant + tied_x) * (concordant + discordant + tied_y)
    )
    m = min(len(set(predictions)), len(set(targets)))
    tau_c = 2 * (concordant - discordant) / (n**2 * (m - 1) / m)
    return tau_b, tau_c


def test_one_correlation_implementation_serves_both_systems():
    predictions = np.array([0.1, 0.4, 0.35, 0.8, 0.7, 0.2, 0.4, 0.9])
    targets = np.array([0.0, 0.5, 0.5, 1.0, 0.75, 0.25, 0.25, 0.75])
    tau_b, tau_c = numpy_kendall(predictions, targets)
    pearson = np.corrcoef(predictions, targets)[0, 1]
    spearman = np.corrcoef(numpy_ranks(predictions), numpy_ranks(targets))[0, 1]
    polos = regression_metrics(predictions, targets)
    assert polos.keys() == {"pearson", "kendall", "spearman"}
    np.testing.assert_allclose([polos["pearson"], polos["kendall"], polos["spearman"]], [pearson, tau_c, spearman],
                               rtol=0, atol=1e-12)  # fmt: skip
    pearl = compute_pearl_metrics(SimpleNamespace(predictions=predictions, label_ids=targets))
    assert pearl.keys() == {"kendall_c", "kendall_b"}
    np.testing.assert_allclose([pearl["kendall_c"], pearl["kendall_b"]], [100 * tau_c, 100 * tau_b], rtol=0, atol=1e-9)
    # Undefined correlations are 0, never NaN (JSON cannot hold NaN).
    assert regression_metrics([0.5] * 4, targets[:4]) == {"pearson": 0.0, "kendall": 0.0, "spearman": 0.0}
    assert compute_pearl_metrics(SimpleNamespace(predictions=[0.3], label_ids=[0.2])) == {
        "kendall_c": 0.0,
        "kendall_b": 0.0,
    }
    with pytest.raises(ValueError, match="got 2 predictions for 3 targets"):
        correlation_metrics([0.1, 0.2], [0.1, 0.2, 0.3], {"p": "pearson"})
    with pytest.raises(ValueError, match="correlation must be one of"):
        correlation_metrics([0.1, 0.2], [0.1, 0.3], {"k": "kendall_a"})
    with pytest.raises(ValueError, match="scale must be a finite number > 0, got 0"):
        correlation_metrics([0.1, 0.2], [0.1, 0.3], {"p": "pearson"}, scale=0)


def test_early_stopping_and_arguments_keep_each_recipe(tmp_path):
    polos_args, polos_callback = polos_training_arguments(tmp_path / "polos")
    pearl_args = pearl_training_arguments(str(tmp_path / "pearl"))
    assert (polos_args.metric_for_best_model, polos_callback.early_stopping_patience) == ("kendall", 5)
    assert polos_training_arguments(tmp_path / "code", early_stopping="code")[0].metric_for_best_model == "pearson"
    assert pearl_args.metric_for_best_model == "kendall_c"
    for args in (polos_args, pearl_args):
        assert args.load_best_model_at_end and args.greater_is_better
        assert (args.eval_strategy, args.save_strategy) == ("epoch", "epoch")
    assert (polos_args.learning_rate, polos_args.lr_scheduler_type) == (3e-5, "constant")
    assert (pearl_args.learning_rate, pearl_args.warmup_steps, pearl_args.lr_scheduler_type) == (1e-5, 1000, "linear")
    assert issubclass(PolosTrainer, SupervisedMetricTrainer) and issubclass(PearlTrainer, SupervisedMetricTrainer)
    callback, metric = early_stopping_callback(("kendall_c", 1))
    assert isinstance(callback, EarlyStoppingCallback) and (metric, callback.early_stopping_patience) == (
        "kendall_c",
        1,
    )
    with pytest.raises(ValueError, match="early stopping patience must be an integer >= 1, got 0"):
        early_stopping_callback(("kendall_c", 0))
    with pytest.raises(ValueError, match=re.escape("early stopping policy must be one of ['code', 'paper'], got 'x'")):
        polos_training_arguments(tmp_path / "x", early_stopping="x")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"learning_rate": float("nan")}, "learning_rate must be > 0, got nan"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be > 0, got 0"),
        ({"num_train_epochs": -1}, "num_train_epochs must be > 0, got -1"),
        ({"max_grad_norm": 0}, "max_grad_norm must be > 0, got 0"),
        ({"gradient_accumulation_steps": 1.5}, "gradient_accumulation_steps must be a positive integer, got 1.5"),
        ({"warmup_steps": -2}, "warmup_steps must be >= 0, got -2"),
    ],
)
def test_training_settings_are_checked(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_training_settings(settings)


def test_a_zero_learning_rate_is_polos_recipe_only(tmp_path):
    check_training_settings({"learning_rate": 0}, zero_learning_rate=True)
    assert polos_training_arguments(tmp_path / "polos", learning_rate=0.0)[0].learning_rate == 0.0
    with pytest.raises(ValueError, match="learning_rate must be > 0, got 0"):
        pearl_training_arguments(str(tmp_path / "pearl"), learning_rate=0)
    with pytest.raises(ValueError, match="per_device_train_batch_size must be > 0, got 0"):
        polos_training_arguments(tmp_path / "polos", per_device_train_batch_size=0)
