"""`pacs-pp evaluate-captions` at scale: torchrun processes each score their shards of the job folder and give the one
process's report; a killed run resumes without rescoring or losing an item; models that share an image encoder encode
each image once; items without references get empty cells (issue 33).

One single-process run (module-scoped) is the reference of every comparison. The child processes run the command
through `WRAPPER`, which logs each shard a process writes and, when asked, kills its own process right after a given
number of shards: the kill lands at a known point, not at a timing race."""

import contextlib
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_pacs.cli import main
from modeling_pacs.evaluation import captions
from modeling_pacs.evaluation.captions import evaluate_captions
from modeling_pacs.jobs import ShardedJob
from tests.fixtures.helpers import random_image

REPO_ROOT = Path(__file__).resolve().parents[2]
JAVA = shutil.which("java") is not None and importlib.util.find_spec("pycocoevalcap") is not None
MODELS = ("tiny:clip_s", "tiny:polos")  # reference-free and reference-based, a model that needs references
METRICS = ",".join([*(["cider"] if JAVA else []), *MODELS])  # CIDEr: corpus-level, on the merged rows
NUM_ITEMS, SHARD_SIZE = 12, 3
WITHOUT_REFERENCES = (3, 4, 5, 9)  # shard 1 has no item with references: Polos gets empty cells there
# Runs `pacs-pp` recording "PROCESS SHARD" per shard written in $SHARD_LOG; with $KILL_AFTER_SHARDS=N, SIGKILLs its
# own process right after its N-th shard (as a crash or a pre-empted machine would).
WRAPPER = """
import os, signal, sys
from modeling_pacs.cli.main import main
from modeling_pacs.jobs import ShardedJob

write = ShardedJob.write_jsonl_shard
written = []

def recording(self, shard, rows):
    write(self, shard, rows)
    written.append(shard)
    with open(os.environ["SHARD_LOG"], "a") as log:
        log.write(f"{self.process_index} {shard}\\n")
    if len(written) == int(os.environ.get("KILL_AFTER_SHARDS", "0")):
        os.kill(os.getpid(), signal.SIGKILL)

ShardedJob.write_jsonl_shard = recording
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "images").mkdir()
    lines = []
    for row in range(NUM_ITEMS):
        random_image(row, size=(64, 48)).save(folder / "images" / f"{row:02d}.png")
        references = [] if row in WITHOUT_REFERENCES else [f"a photo of thing {row}", "a noisy gradient picture"]
        lines.append(json.dumps({"image": f"images/{row:02d}.png", "caption": f"a gradient number {row} on a photo",
                                 "references": references}))  # fmt: skip
    (folder / "items.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "wrapper.py").write_text(WRAPPER)
    return folder


def command_arguments(corpus: Path, job: Path, output: Path) -> list[str]:
    return ["evaluate-captions", "--results", str(corpus / "items.jsonl"), "--metrics", METRICS, "--output-dir",
            str(job), "--shard-size", str(SHARD_SIZE), "--output", str(output), "--no-progress",
            "--cpu"]  # fmt: skip


def environment(shard_log: Path, **extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "SHARD_LOG": str(shard_log), **extra}  # fmt: skip


@pytest.fixture(scope="module")
def one_process(corpus, tmp_path_factory) -> tuple[dict, str, Path]:
    """The report, stdout and job folder of one process."""
    folder = tmp_path_factory.mktemp("one")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        main(command_arguments(corpus, folder / "job", folder / "report.json"))
    return json.loads((folder / "report.json").read_text()), stdout.getvalue(), folder / "job"


def assert_reports_match(actual: dict, expected: dict):
    """Ids, captions, columns and empty cells exactly; scores within the fp32 tolerance (other processes)."""
    assert list(actual["corpus"]) == list(expected["corpus"])
    assert actual["corpus"] == pytest.approx(expected["corpus"], abs=1e-6)
    assert [[item["image_id"], item["caption"]] for item in actual["items"]] == [
        [item["image_id"], item["caption"]] for item in expected["items"]
    ]
    for got, want in zip(actual["items"], expected["items"], strict=True):
        assert list(got) == list(want)
        assert [value is None for value in got.values()] == [value is None for value in want.values()]
        assert {key: value for key, value in got.items() if isinstance(value, float)} == pytest.approx(
            {key: value for key, value in want.items() if isinstance(value, float)}, abs=1e-6
        )
    for key in ("signatures", "skipped", "without_references", "notes"):
        assert actual[key] == expected[key], key


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_torchrun_processes_give_the_one_process_report(corpus, one_process, tmp_path):
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
              str(free_port()), str(corpus / "wrapper.py")]  # fmt: skip
    completed = subprocess.run(
        [*launch, *command_arguments(corpus, tmp_path / "job", tmp_path / "report.json")],
        env=environment(tmp_path / "shards.log"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    written = sorted(tuple(map(int, line.split())) for line in (tmp_path / "shards.log").read_text().splitlines())
    assert written == [(0, 0), (0, 2), (1, 1), (1, 3)]  # the work was split, each shard written once
    assert completed.stdout.count("| column | metric | score |") == 1  # one table, by the main process
    assert_reports_match(json.loads((tmp_path / "report.json").read_text()), one_process[0])


def test_a_killed_run_resumes_without_rescoring_or_losing_an_item(corpus, one_process, tmp_path, monkeypatch):
    arguments = command_arguments(corpus, tmp_path / "job", tmp_path / "report.json")
    killed = subprocess.run(
        [sys.executable, str(corpus / "wrapper.py"), *arguments],
        env=environment(tmp_path / "shards.log", KILL_AFTER_SHARDS="2"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    shard_dir = tmp_path / "job" / "shards"
    finished = {path.name: path.stat().st_mtime_ns for path in shard_dir.glob("shard-*.jsonl")}
    assert sorted(finished) == ["shard-0000000.jsonl", "shard-0000001.jsonl"]
    assert not (tmp_path / "report.json").exists()

    assert (tmp_path / "job" / "ngram_scores.json").is_file() == JAVA  # kept before the models ran

    written, ngram_runs = [], []
    original = ShardedJob.write_jsonl_shard
    monkeypatch.setattr(
        ShardedJob, "write_jsonl_shard", lambda job, shard, rows: written.append(shard) or original(job, shard, rows)
    )
    score_ngrams = captions.score_ngrams
    monkeypatch.setattr(captions, "score_ngrams", lambda *args: ngram_runs.append(args[0]) or score_ngrams(*args))
    with contextlib.redirect_stdout(io.StringIO()):
        main(arguments)
    assert written == [2, 3]  # only the unfinished shards were scored
    assert ngram_runs == []  # and the n-gram metrics were read from the job folder, not scored again
    for name, modified in finished.items():
        assert (shard_dir / name).stat().st_mtime_ns == modified
    report = json.loads((tmp_path / "report.json").read_text())
    assert [item["image_id"] for item in report["items"]] == [f"images/{row:02d}.png" for row in range(NUM_ITEMS)]
    assert_reports_match(report, one_process[0])
    for column in ["CIDEr"] if JAVA else []:  # the same floats: read back from JSON exactly
        assert report["corpus"][column] == one_process[0]["corpus"][column]
        assert [item[column] for item in report["items"]] == [item[column] for item in one_process[0]["items"]]


@pytest.mark.skipif(not JAVA, reason="the n-gram metrics need Java and pycocoevalcap")
def test_kept_ngram_scores_are_reused_for_the_same_metrics_and_items_only(corpus, tmp_path, monkeypatch):
    rows = [json.loads(line) for line in (corpus / "items.jsonl").read_text().splitlines()][:3]
    items = [{"image_id": row["image"], "caption": row["caption"], "references": row["references"]} for row in rows]
    fresh = evaluate_captions(items, ["rouge_l", "cider"], progress=False)
    ngram_runs = []
    score_ngrams = captions.score_ngrams
    monkeypatch.setattr(
        captions, "score_ngrams", lambda *args: ngram_runs.append([e.name for e in args[0]]) or score_ngrams(*args)
    )
    runs = [evaluate_captions(items, metrics, progress=False, output_dir=tmp_path / "job")
            for metrics in (["rouge_l", "cider"], ["rouge_l", "cider"], ["cider", "rouge_l"], ["rouge_l"])]  # fmt: skip
    assert ngram_runs == [["rouge_l", "cider"], ["rouge_l"]]  # another metric list is scored again
    for run in runs[:3]:
        assert run.corpus == {**fresh.corpus} and run.items == fresh.items
    assert runs[3].corpus == {"ROUGE_L": fresh.corpus["ROUGE_L"]}
    kept = json.loads((tmp_path / "job" / "ngram_scores.json").read_text())
    assert list(kept["corpus"]) == ["ROUGE_L"] and kept["fingerprint"].startswith("sha256:")
    (tmp_path / "job" / "ngram_scores.json").write_text("{not json")  # damaged: scored again, not trusted
    assert evaluate_captions(items, ["rouge_l"], progress=False, output_dir=tmp_path / "job").corpus == runs[3].corpus
    assert ngram_runs[-1] == ["rouge_l"] and len(ngram_runs) == 3


def test_items_without_references_get_empty_cells_counted_in_the_footer(corpus, one_process):
    report, stdout, _ = one_process
    assert report["without_references"] == list(WITHOUT_REFERENCES)
    ngram_columns = ["CIDEr"] if JAVA else []
    for row, item in enumerate(report["items"]):
        empty = row in WITHOUT_REFERENCES
        for column in ["tiny:clip_s/ref_score", "tiny:polos/score", *ngram_columns]:
            assert (item[column] is None) == empty, (row, column)
        assert isinstance(item["tiny:clip_s/score"], float)  # reference-free: every item
    for column in ("tiny:clip_s/ref_score", "tiny:polos/score"):  # means over the items that have a value
        present = [item[column] for item in report["items"] if item[column] is not None]
        assert report["corpus"][column] == pytest.approx(sum(present) / len(present), abs=1e-12)
    labels = " and ".join([*ngram_columns, "RefCLIP-S", "Polos"])  # in the order of --metrics
    note = (f"4 of 12 items have no references: their {labels} cells are empty; those corpus scores are over the 8 "
            "items that have references")  # fmt: skip
    assert report["notes"] == [note]
    assert f"12 items scored, 0 rows skipped\n{note}" in stdout
    if JAVA:  # CIDEr's document frequencies come from the items with references alone
        rows = [json.loads(line) for line in (corpus / "items.jsonl").read_text().splitlines()]
        alone = evaluate_captions(
            [{"image_id": row["image"], "caption": row["caption"], "references": row["references"]}
             for row in rows if row["references"]], ["cider"], progress=False,
        )  # fmt: skip
        assert report["corpus"]["CIDEr"] == alone.corpus["CIDEr"]
        assert [item["CIDEr"] for item in report["items"] if item["CIDEr"] is not None] == [
            item["CIDEr"] for item in alone.items
        ]


def test_models_sharing_an_image_encoder_encode_each_image_once(corpus, monkeypatch):
    from modeling_pacs.models.modeling_pacs import PACSModel

    encoded = []
    original = PACSModel.image_batch_encoder

    def counting(model):
        encode = original(model)
        return lambda pixel_values: encoded.append(len(pixel_values)) or encode(pixel_values)

    monkeypatch.setattr(PACSModel, "image_batch_encoder", counting)
    items = [{"image_id": row, "image": str(corpus / "images" / f"{row:02d}.png"), "caption": f"a picture {row}",
              "references": ["a noisy gradient picture"]} for row in range(NUM_ITEMS)]  # fmt: skip
    # tiny:clip_s and tiny:pac_s: one random backbone (other w, other names). A vision-side change is another
    # encoder: tests/models/test_embedding_cache.py
    together = evaluate_captions(items, ["tiny:clip_s", "tiny:pac_s"], progress=False, device="cpu")
    assert sum(encoded) == NUM_ITEMS  # once for CLIP-S and PAC-S together
    for name in ("tiny:clip_s", "tiny:pac_s"):
        encoded.clear()
        alone = evaluate_captions(items, [name], progress=False, device="cpu")
        assert sum(encoded) == NUM_ITEMS
        assert list(alone.corpus) == [column for column in together.corpus if column.startswith(f"{name}/")]
        for column, value in alone.corpus.items():
            assert together.corpus[column] == pytest.approx(value, abs=1e-6)
            assert [item[column] for item in together.items] == pytest.approx(
                [item[column] for item in alone.items], abs=1e-6
            )


def test_pac_s_pp_keeps_its_adapter_unmerged_on_the_clip_s_backbone_it_was_trained_on(corpus):
    """Issue 33's memory goal: tiny (PAC-S++: LoRA on the tiny backbone) and tiny:clip_s (that backbone) store the
    backbone once (PAC-S++'s base tensors are CLIP-S's), with PAC-S++'s scores those of the merged model (`pacs-score`);
    PAC-S++ without such a model is merged, as loaded alone."""
    import numpy as np

    from modeling_pacs.evaluation.captions import load_models, parse_metrics, share_image_encoders
    from modeling_pacs.loading import load_model
    from modeling_pacs.results import score_items

    models = load_models(parse_metrics(["tiny:clip_s", "tiny"]), "cpu", None)
    share_image_encoders(models, max_entries=64)
    clip_s, pac_s_pp = models["tiny:clip_s"], models["tiny"]
    assert pac_s_pp.peft_model is not None and not pac_s_pp.merge_deferred
    lora_layer = pac_s_pp.clip.vision_model.encoder.layers[0].mlp.fc1
    shared_weight = clip_s.clip.vision_model.encoder.layers[0].mlp.fc1.weight
    assert lora_layer.base_layer.weight.data_ptr() == shared_weight.data_ptr()
    base = {name for name, _ in pac_s_pp.clip.named_parameters() if "lora_" not in name}
    pointers = {parameter.data_ptr() for parameter in clip_s.clip.parameters()}
    assert all(parameter.data_ptr() in pointers for name, parameter in pac_s_pp.clip.named_parameters() if name in base)

    images = [str(corpus / "images" / f"{row:02d}.png") for row in range(4)]
    captions = [f"a picture {row}" for row in range(4)]
    merged = load_model("tiny", device="cpu")
    assert merged.peft_model is None
    together = score_items(pac_s_pp, images, captions, None).columns[0].values
    alone = score_items(merged, images, captions, None).columns[0].values
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-6)

    lone = load_models(parse_metrics(["tiny"]), "cpu", None)
    share_image_encoders(lone, max_entries=64)
    assert lone["tiny"].peft_model is None and lone["tiny"].config.adapter_path is None


def test_a_job_folder_is_needed_by_several_processes_and_pins_the_run(corpus, one_process):
    from types import SimpleNamespace

    from modeling_pacs.errors import InputError, JobStateError

    rows = [json.loads(line) for line in (corpus / "items.jsonl").read_text().splitlines()]
    items = [{"image_id": row["image"], "image": str(corpus / row["image"]), "caption": row["caption"],
              "references": row["references"]} for row in rows]  # fmt: skip
    second = SimpleNamespace(process_index=1, num_processes=2, is_main_process=False, wait_for_everyone=lambda: None)
    with pytest.raises(InputError, match=r"^2 processes share their work through a job folder: pass output_dir"):
        evaluate_captions(items, ["tiny:clip_s"], processes=second)
    with pytest.raises(JobStateError, match=r"holds shards of a different run \(metrics: .*tiny:polos.*-> .*\)"):
        evaluate_captions(items, ["tiny:clip_s"], output_dir=one_process[2], shard_size=SHARD_SIZE, progress=False)
