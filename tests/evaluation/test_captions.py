"""`evaluate_captions` and `pacs-pp evaluate-captions`: the n-gram columns equal pycocoevalcap's `COCOEvalCap` on the
same files (the same floats), each model column equals `pacs-score --model X` (1e-6), signatures pin exactly what
changes a number, and every bad input is an error naming it or a counted skip.

The Java-based steps (PTB tokenizer, METEOR) start slowly: one evaluation and one COCOEvalCap run serve every
assertion (module-scoped fixtures)."""

import contextlib
import importlib.util
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from modeling_pacs.cli import main, score_main
from modeling_pacs.errors import InputError, MissingExtraError, UnknownModelError
from modeling_pacs.evaluation import captions as captions_module
from modeling_pacs.evaluation.caption_inputs import read_coco_results
from modeling_pacs.evaluation.captions import evaluate_captions, parse_metrics
from modeling_pacs.signatures import package_version
from tests.fixtures.helpers import random_image

PYCOCOEVALCAP = importlib.util.find_spec("pycocoevalcap") is not None
needs_pycocoevalcap = pytest.mark.skipif(not PYCOCOEVALCAP, reason="pycocoevalcap (the captioning extra) missing")
JAVA = shutil.which("java") is not None and PYCOCOEVALCAP
needs_java = pytest.mark.skipif(
    not JAVA, reason="no Java (or no pycocoevalcap): pycocoevalcap's PTB tokenizer and METEOR run on Java"
)
MODELS = ("tiny", "tiny:clip_s", "tiny:polos")
NGRAMS = ("bleu", "meteor", "rouge_l", "cider")
IMAGE_IDS = (3, 7, 11, 19, 23)  # ascending, in the annotations' order: COCOEvalCap's (and SPICE's) order
REFERENCES = {
    3: ["A man riding a wave on top of a surfboard.", "A surfer rides a large wave.", "Someone surfing in the ocean."],
    7: ["Two dogs play in the grass.", "A pair of dogs running on a lawn!", "Dogs, playing outside.",
        "Two brown dogs chase each other."],
    11: ["A plate of food with broccoli and rice.", "Rice, broccoli and chicken on a white plate.",
         "A healthy meal on a plate.", "A dinner plate with vegetables.", "Food served on a dish."],
    19: ["A red bus driving down a city street.", "A double-decker bus in London.", "The bus is red.",
         "A bus on the road.", "A large red bus parked by the curb."],
    23: ["A cat sleeping on a couch.", "A grey cat on a sofa."],
}  # fmt: skip
RESULTS = {
    3: "a man surfing a big wave",
    7: "Two dogs playing in the grass.",
    11: "a plate of rice and broccoli",
    19: "A red double decker bus on a street",
}  # 23 has no result: annotated but not evaluated


@pytest.fixture(scope="module")
def coco_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coco")
    (folder / "images").mkdir()
    images = []
    for index, image_id in enumerate(IMAGE_IDS):
        name = f"COCO_val2014_{image_id:012d}.{'jpg' if index % 2 else 'png'}"
        # a palette and a grayscale PNG among RGB files: the shared decoding keeps each file's mode for the models
        mode = {0: "P", 2: "L"}.get(index, "RGB")
        random_image(index, (64 + 16 * index, 48 + 8 * index), mode=mode).save(folder / "images" / name)
        images.append({"id": image_id, "file_name": name, "height": 48, "width": 64})
    annotations = [{"id": 100 * image_id + n, "image_id": image_id, "caption": caption}
                   for image_id, references in REFERENCES.items() for n, caption in enumerate(references)]  # fmt: skip
    annotations_file = folder / "captions_val.json"
    annotations_file.write_text(json.dumps({"images": images, "annotations": annotations, "type": "captions",
                                            "info": {}, "licenses": []}))  # fmt: skip
    results_file = folder / "results.json"
    results_file.write_text(json.dumps([{"image_id": i, "caption": c} for i, c in RESULTS.items()]))
    return folder, results_file, annotations_file


@pytest.fixture(scope="module")
def report(coco_files):
    """One run of the command (n-gram metrics where Java is installed, and the three tiny model metrics)."""
    folder, results_file, annotations_file = coco_files
    output = folder / "report.json"
    metrics = (NGRAMS if JAVA else ()) + MODELS
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        main(["evaluate-captions", "--results", str(results_file), "--annotations", str(annotations_file), "--images",
              str(folder / "images"), "--metrics", ",".join(metrics), "--output", str(output), "--no-progress",
              "--device", "cpu"])  # fmt: skip
    return json.loads(output.read_text()), stdout.getvalue()


@pytest.fixture(scope="module")
def coco_eval(coco_files):
    """pycocoevalcap's own evaluation of the same files (SPICE left out where its CoreNLP jars are missing)."""
    from pycocoevalcap import eval as coco_eval_module
    from pycocotools.coco import COCO

    _, results_file, annotations_file = coco_files
    with contextlib.redirect_stdout(io.StringIO()), pytest.MonkeyPatch.context() as patch:
        coco = COCO(str(annotations_file))
        results = coco.loadRes(str(results_file))
        evaluation = coco_eval_module.COCOEvalCap(coco, results)
        evaluation.params["image_id"] = results.getImgIds()

        class NoSpice:  # pycocoevalcap would try to download the jars
            def compute_score(self, gts, res):
                return 0.0, [0.0] * len(gts)

            def method(self):
                return "SPICE (not run)"

        patch.setattr(coco_eval_module, "Spice", NoSpice)
        evaluation.evaluate()
    return evaluation


# ---------------------------------------------------------------------------------------------------- numbers
@needs_java
def test_ngram_columns_equal_coco_eval_cap_exactly(report, coco_eval):
    result, _ = report
    for column in ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr"):
        assert result["corpus"][column] == coco_eval.eval[column], column  # the same code: the same floats
        per_item = [item[column] for item in result["items"]]
        assert per_item == [float(coco_eval.imgToEval[image_id][column]) for image_id in RESULTS], column
    assert [item["image_id"] for item in result["items"]] == list(RESULTS)
    assert [item["caption"] for item in result["items"]] == list(RESULTS.values())


@pytest.mark.parametrize("model", MODELS)
def test_model_columns_equal_pacs_score(report, coco_files, model, tmp_path):
    result, _ = report
    folder = coco_files[0]
    lines = [json.dumps({"image": str(folder / "images" / f"COCO_val2014_{image_id:012d}."
                                      f"{'jpg' if IMAGE_IDS.index(image_id) % 2 else 'png'}"),
                         "caption": caption, "references": REFERENCES[image_id]})
             for image_id, caption in RESULTS.items()]  # fmt: skip
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    with contextlib.redirect_stdout(io.StringIO()):
        score_main([str(tmp_path / "items.jsonl"), "--model", model, "--output", str(tmp_path / "scores.json"),
                    "--no-progress", "--device", "cpu"])  # fmt: skip
    scores = json.loads((tmp_path / "scores.json").read_text())
    ours = [column for column in result["corpus"] if column.startswith(f"{model}/")]
    assert [result["labels"][column] for column in ours] == list(scores["mean"])
    for column, label in zip(ours, scores["mean"], strict=True):
        assert result["corpus"][column] == pytest.approx(scores["mean"][label], abs=1e-6)
        assert [item[column] for item in result["items"]] == pytest.approx(
            [item[label] for item in scores["items"]], abs=1e-6
        )


def test_report_table_signatures_and_footer(report):
    result, stdout = report
    table, _, rest = stdout.partition("\n\nsignatures:\n")
    assert table.splitlines()[0] == "| column | metric | score |"
    assert f"| tiny:clip_s/score | CLIP-S | {result['corpus']['tiny:clip_s/score']:.4f} |" in table
    for entry, text in result["signatures"].items():
        assert f"- {entry}: `{text}`" in rest
    assert "4 items scored, 0 rows skipped" in rest
    assert "1 annotated images have no result and were not evaluated" in rest
    assert result["signatures"]["tiny:clip_s"].startswith("CLIP-S|model:tiny:clip_s|weights:sha256:")
    assert "|refs:3-5|" in result["signatures"]["tiny"]
    if JAVA:
        assert result["signatures"]["cider"] == (
            f"CIDEr-D|refs:3-5|tok:ptb|impl:pycocoevalcap-1.2|version:{package_version()}"
        )


# ---------------------------------------------------------------------------------------------------- signatures
def test_signature_changes_exactly_with_a_pinned_setting(tmp_path, monkeypatch):
    from modeling_pacs import signatures
    from modeling_pacs.loading import load_model
    from modeling_pacs.registry import METRICS

    model = load_model("tiny", device="cpu")
    directory = Path(model.config._name_or_path)
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    refs = [["a", "b"], ["c", "d"]]

    def sign(**changes):
        options = {"entry": "tiny", "references": refs, "long_captions": "truncate", "dtype": None} | changes
        return signatures.model_signature(model, **options)

    base = sign()
    assert base == sign()  # deterministic
    # what does not change a number leaves it alone: the directory's place and README, the captions' texts
    model.config._name_or_path = str(copy)
    (copy / "README.md").write_text("another card")
    signatures.directory_digest.cache_clear()
    assert sign() == base
    assert sign(references=[["x", "y"], ["z", "w"]]) == base
    changed = {
        "entry": sign(entry="tiny:pac_s"),
        "refs": sign(references=[["a"], ["c", "d"]]),
        "no refs": sign(references=None),
        "long captions": sign(long_captions="chunks"),
        "dtype": sign(dtype="bf16"),
    }
    for attribute, value in (("w", 3.0), ("prompt_prefix", "An image of "), ("lora_rank", 8),
                             ("max_text_length", 248)):  # fmt: skip
        old = getattr(model.config, attribute)
        setattr(model.config, attribute, value)
        changed[attribute] = sign()
        setattr(model.config, attribute, old)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x01")
    changed["weights"] = sign()
    monkeypatch.setattr(signatures, "package_version", lambda: "9.9.9")
    changed["version"] = sign()
    assert all(text != base for text in changed.values()), {k: v for k, v in changed.items() if v == base}
    assert len(set(changed.values())) == len(changed)
    # n-gram metrics: the reference count, the implementation and the version
    cider = signatures.ngram_signature(METRICS["cider"], refs)
    assert cider == "CIDEr-D|refs:2|tok:ptb|impl:pycocoevalcap-1.2|version:9.9.9"
    assert signatures.ngram_signature(METRICS["cider"], [["a"], ["b", "c", "d"]]).startswith("CIDEr-D|refs:1-3|")


# ---------------------------------------------------------------------------------------------------- bad input
def items_of(changes: dict | None = None) -> list[dict]:
    base = [{"image_id": i, "image": f"/nonexistent/{i}.png", "caption": c, "references": REFERENCES[i]}
            for i, c in RESULTS.items()]  # fmt: skip
    return [{**item, **(changes or {}).get(item["image_id"], {})} for item in base]


def test_unknown_metric_lists_the_known_names():
    with pytest.raises(UnknownModelError, match=r"unknown metric 'cidr' \(did you mean 'cider'\?\).*bleu.*"
                                                r"pac_s_pp_vit_b32.*tiny:clip_s"):  # fmt: skip
        parse_metrics(["bleu", "cidr"])
    with pytest.raises(InputError, match="listed twice"):
        parse_metrics(["bleu", "bleu"])


def test_bad_items_are_errors_naming_them():
    with pytest.raises(InputError, match=r"rows 1 \(image_id 7\).*skip='empty_captions'"):
        evaluate_captions(items_of({7: {"caption": "  "}}), ["rouge_l"])
    with pytest.raises(InputError, match=r"4 items have an image that does not exist.*--skip missing-images"):
        evaluate_captions(items_of(), ["tiny:clip_s"])
    with pytest.raises(InputError, match=r"1 image ids have several captions \(3\).*duplicates='separate'"):
        evaluate_captions([*items_of(), items_of()[0]], ["rouge_l"])
    with pytest.raises(InputError, match=r"^rouge_l, tiny:polos need references, and none were given"):
        evaluate_captions(items_of({i: {"references": []} for i in RESULTS}), ["rouge_l", "tiny:polos"])


@needs_pycocoevalcap
def test_spice_without_its_jars_says_which_file_where_and_how_to_skip(monkeypatch):
    monkeypatch.setattr(captions_module, "java_available", lambda: True)
    monkeypatch.setattr(captions_module, "CORENLP_JARS", ("stanford-corenlp-0.0.0.jar",))
    with pytest.raises(MissingExtraError, match=r"stanford-corenlp-0\.0\.0\.jar are missing from .*spice/lib: "
                                                r"extract them from http.*leave SPICE out"):  # fmt: skip
        evaluate_captions(items_of(), ["bleu", "spice"])


@needs_pycocoevalcap
def test_skips_are_counted_and_no_java_skips_the_ngram_metrics(coco_files, monkeypatch, caplog, tmp_path):
    folder = coco_files[0]
    (tmp_path / "java").write_text("#!/bin/sh\nexit 1\n")  # a java on PATH that does not run
    (tmp_path / "java").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    items = [{**item, "image": str(folder / "images" / "COCO_val2014_000000000003.png")} for item in items_of()]
    items[1]["caption"] = ""
    items[2]["image"] = str(folder / "missing.png")
    result = evaluate_captions(items, ["bleu", "cider", "tiny:clip_s"], skip=("empty_captions", "missing_images"),
                               progress=False, device="cpu")  # fmt: skip
    assert result.skipped == {"empty_captions": [1], "missing_images": [2]}
    assert [item["image_id"] for item in result.items] == [3, 19]
    assert list(result.corpus) == ["tiny:clip_s/score", "tiny:clip_s/ref_score"]
    assert list(result.signatures) == ["tiny:clip_s"]
    footer = result.footer()
    assert footer.startswith("2 items scored, 2 rows skipped (1 empty captions, 1 missing images)")
    assert "no working Java (`java -version`), so bleu, cider were skipped" in footer
    assert [record.message for record in caplog.records if "Java" in record.message] == [
        footer.splitlines()[1].removeprefix("warning: ")
    ]


def test_coco_reader_refuses_unknown_ids_and_reads_karpathy_files(coco_files, tmp_path):
    folder, _, annotations_file = coco_files
    results = tmp_path / "results.json"
    results.write_text(json.dumps([{"image_id": 3, "caption": "a"}, {"image_id": "7", "caption": "b"}]))
    with pytest.raises(InputError, match=r"1 results name image ids that .* does not annotate \('7'\) \(the "
                                         r"results give ids as strings"):  # fmt: skip
        read_coco_results(results, annotations_file, folder / "images")
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"images": [{"cocoid": 3, "filepath": "val2014", "filename": "a.jpg",
                                                "sentences": [{"raw": "A man."}, {"raw": "A surfer."}]}]}))  # fmt: skip
    results.write_text(json.dumps([{"image_id": 3, "caption": "a man"}]))
    coco = read_coco_results(results, karpathy, tmp_path / "images")
    assert coco.items == [{"image_id": 3, "image": str(tmp_path / "images" / "val2014" / "a.jpg"),
                           "caption": "a man", "references": ["A man.", "A surfer."]}]  # fmt: skip
    assert coco.unmatched_images == 0


def test_command_errors_are_one_line(coco_files, capsys):
    _, results_file, _ = coco_files
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate-captions", "--results", str(results_file), "--metrics", "bleu"])
    assert str(exit_info.value).startswith("pacs-pp evaluate-captions: error: ")
    assert "COCO results list: give its annotations with --annotations" in str(exit_info.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate-captions", "--results", str(results_file), "--metrics", "bleu,nope"])
    assert "unknown metric 'nope'" in str(exit_info.value)


def test_each_image_is_decoded_once_per_chunk_for_every_model(coco_files, monkeypatch):
    import PIL.Image

    folder = coco_files[0]
    paths = [str(folder / "images" / "COCO_val2014_000000000003.png"),
             str(folder / "images" / "COCO_val2014_000000000007.jpg")]  # fmt: skip
    captions = ["a surfer", "two dogs", "a wave", "dogs", "the sea", "a lawn"]
    items = [{"image_id": row, "image": paths[row % 2], "caption": caption, "references": ["a photo"]}
             for row, caption in enumerate(captions)]  # fmt: skip
    opened = []
    original_open = PIL.Image.open
    monkeypatch.setattr(
        PIL.Image, "open", lambda *args, **kwargs: opened.append(args[0]) or original_open(*args, **kwargs)
    )
    whole = evaluate_captions(items, ["tiny:clip_s", "tiny"], progress=False, device="cpu")
    assert sorted(opened) == sorted(paths)  # two models, six items: each file decoded once
    opened.clear()
    chunked = evaluate_captions(items, ["tiny:clip_s", "tiny"], progress=False, device="cpu", chunk_size=4)
    assert sorted(opened) == sorted(paths * 2)  # once per chunk
    for column, value in whole.corpus.items():
        assert chunked.corpus[column] == pytest.approx(value, abs=1e-6)
        assert [item[column] for item in chunked.items] == pytest.approx([item[column] for item in whole.items],
                                                                          abs=1e-6)  # fmt: skip


@needs_java
def test_csv_output_has_the_items_and_a_corpus_row(coco_files, tmp_path):
    import csv

    _, results_file, annotations_file = coco_files
    with contextlib.redirect_stdout(io.StringIO()):
        main(["evaluate-captions", "--results", str(results_file), "--annotations", str(annotations_file),
              "--metrics", "rouge_l", "--output", str(tmp_path / "report.csv"), "--no-progress"])  # fmt: skip
    rows = list(csv.DictReader((tmp_path / "report.csv").open()))
    assert [row["image_id"] for row in rows] == [*map(str, RESULTS), "CORPUS"]
    assert list(rows[0]) == ["image_id", "caption", "ROUGE_L"]


@needs_pycocoevalcap
def test_a_failing_pycocoevalcap_step_is_one_error_naming_it(monkeypatch):
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    def unwritable(self, captions):
        raise PermissionError(13, "Permission denied", "site-packages/pycocoevalcap/tokenizer/tmpab12")

    monkeypatch.setattr(captions_module, "java_available", lambda: True)
    monkeypatch.setattr(PTBTokenizer, "tokenize", unwritable)
    with pytest.raises(captions_module.ExternalMetricError, match=r"^the PTB tokenizer \(pycocoevalcap\) failed "
                       r"\(PermissionError: .*tmpab12'\).*leave the n-gram metrics out"):  # fmt: skip
        evaluate_captions(items_of(), ["bleu"])


def test_a_datasets_folder_gives_the_scores_of_its_image_files(coco_files, tmp_path):
    import datasets

    folder = coco_files[0]
    paths = sorted(str(path) for path in (folder / "images").iterdir())[:3]
    columns = {"image_id": [10, 20, 30], "image": paths, "caption": ["a photo", "a dog", "a red bus"],
               "references": [["a picture"], ["two dogs"], ["a bus"]]}  # fmt: skip
    datasets.Dataset.from_dict(columns).cast_column("image", datasets.Image()).save_to_disk(str(tmp_path / "ds"))
    with contextlib.redirect_stdout(io.StringIO()):
        main(["evaluate-captions", "--results", str(tmp_path / "ds"), "--metrics", "tiny:clip_s", "--output",
              str(tmp_path / "report.json"), "--no-progress", "--device", "cpu"])  # fmt: skip
    report = json.loads((tmp_path / "report.json").read_text())
    items = [dict(zip(columns, values)) for values in zip(*columns.values())]
    expected = evaluate_captions(items, ["tiny:clip_s"], progress=False, device="cpu")
    assert [item["image_id"] for item in report["items"]] == [10, 20, 30]
    for column, value in expected.corpus.items():
        assert report["corpus"][column] == pytest.approx(value, abs=1e-6)
    with pytest.raises(SystemExit, match="holds several splits: pass the folder of one"):
        datasets.DatasetDict({"val": datasets.Dataset.from_dict(columns)}).save_to_disk(str(tmp_path / "dd"))
        main(["evaluate-captions", "--results", str(tmp_path / "dd"), "--metrics", "tiny:clip_s"])


@pytest.mark.parametrize("low_memory", [False, True])
def test_low_memory_fixes_the_mmap_threshold_and_changes_no_number(coco_files, report, low_memory, monkeypatch):
    """`--low-memory` sets glibc's mmap threshold (process-wide, `modeling_pacs.heap`); without it nothing is set.
    Either way the report is the one of the module's run."""
    import modeling_pacs.heap as heap

    calls = []
    monkeypatch.setattr(heap, "return_large_blocks", lambda *args: calls.append(args) or True)
    folder, results_file, annotations_file = coco_files
    output = folder / f"report-{low_memory}.json"
    with contextlib.redirect_stdout(io.StringIO()):
        main(["evaluate-captions", "--results", str(results_file), "--annotations", str(annotations_file), "--images",
              str(folder / "images"), "--metrics", ",".join(MODELS), "--output", str(output), "--no-progress",
              "--device", "cpu", *(["--low-memory"] if low_memory else [])])  # fmt: skip
    assert calls == ([()] if low_memory else [])
    expected, _ = report
    for item, row in zip(json.loads(output.read_text())["items"], expected["items"], strict=True):
        for column, value in item.items():
            if column.split("/")[0] in MODELS:
                assert value == pytest.approx(row[column], abs=1e-6)
