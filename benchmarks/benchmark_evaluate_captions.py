"""`pacs-pp evaluate-captions` (every metric in one process) against running each metric alone.

Writes a COCO-shaped workload (default 500 images of 640x480 JPEG, one result each, 5 references each), then times,
each in a fresh process with its peak RSS (from `wait4`):

- alone: a pycocoevalcap script (PTB tokenisation and the n-gram scorers, as captioning codebases run them) and one
  `pacs-score --model X` per model metric;
- together: one `pacs-pp evaluate-captions` with all of them.

It prints each run, the ratio (sum of the alone runs / the run together; goal >= 1.3) and the peak RSS of the run
together over the largest alone run (goal <= 1.2), and checks that the numbers agree (n-gram columns exactly, model
columns within 1e-6). The n-gram metrics need Java (without it they are left out of both sides).

The default model set has CLIP-S and PAC-S on one backbone (`tiny:clip_s`, `tiny:pac_s`): run together, they share
each image's features (`evaluate_captions` encodes an image once for the models with one image encoder). `--size b32`
replaces the tiny models by random models of ViT-B/32's size (CLIP-S, PAC-S on one backbone, PAC-S++ with LoRA),
built in the temporary folder: the encoders' cost of the released models, without their weights.

Example:
    python benchmarks/benchmark_evaluate_captions.py                         # tiny models, 500 items
    python benchmarks/benchmark_evaluate_captions.py --items 100 --models tiny:clip_s,tiny --ngrams bleu,cider
    python benchmarks/benchmark_evaluate_captions.py --size b32 --items 100  # ViT-B/32-size random models
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL.Image
from benchmark_corpus_memory import peak_rss_of_run

WORDS = "a the red blue green dog cat man woman sits runs on under near table grass street big small photo".split()
# The pycocoevalcap script of a captioning codebase: tokenise, then each scorer's compute_score.
NGRAM_SCRIPT = """
import importlib, json, sys
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
SCORERS = {
    "bleu": ("pycocoevalcap.bleu.bleu", "Bleu", ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"]),
    "meteor": ("pycocoevalcap.meteor.meteor", "Meteor", ["METEOR"]),
    "rouge_l": ("pycocoevalcap.rouge.rouge", "Rouge", ["ROUGE_L"]),
    "cider": ("pycocoevalcap.cider.cider", "Cider", ["CIDEr"]),
    "spice": ("pycocoevalcap.spice.spice", "Spice", ["SPICE"]),
}
annotations, results, output = sys.argv[1:4]
names = sys.argv[4].split(",")
data = json.load(open(annotations))
gts = {image["id"]: [] for image in data["images"]}
for annotation in data["annotations"]:
    gts[annotation["image_id"]].append({"caption": annotation["caption"]})
res = {row["image_id"]: [{"caption": row["caption"]}] for row in json.load(open(results))}
gts = {image_id: gts[image_id] for image_id in res}
tokenizer = PTBTokenizer()
gts, res = tokenizer.tokenize(gts), tokenizer.tokenize(res)
corpus = {}
for name in names:
    module, scorer, columns = SCORERS[name]
    score, _ = getattr(importlib.import_module(module), scorer)().compute_score(gts, res)
    corpus.update(zip(columns, score if isinstance(score, list) else [score]))
json.dump(corpus, open(output, "w"))
"""


def write_workload(directory: Path, num_items: int, num_references: int, size: tuple[int, int], seed: int = 0):
    """COCO annotations, a results file and the same items in pacs-score's JSONL (one distinct image per item)."""
    rng = np.random.default_rng(seed)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    width, height = size
    images, annotations, results, lines = [], [], [], []

    def sentence() -> str:
        return " ".join(rng.choice(WORDS, size=int(rng.integers(6, 14)))).capitalize() + "."

    for index in range(num_items):
        image_id = 1000 + index
        name = f"COCO_val2014_{image_id:012d}.jpg"
        gradient = np.linspace(0, 255, width)[None, :, None]
        pixels = (0.5 * rng.integers(0, 256, (height, width, 3)) + 0.5 * gradient).astype(np.uint8)
        PIL.Image.fromarray(pixels).save(directory / "images" / name, quality=90)
        references = [sentence() for _ in range(num_references)]
        caption = sentence().lower().rstrip(".")
        images.append({"id": image_id, "file_name": name})
        annotations += [{"id": image_id * 10 + n, "image_id": image_id, "caption": r} for n, r in enumerate(references)]
        results.append({"image_id": image_id, "caption": caption})
        lines.append(json.dumps({"image": f"images/{name}", "caption": caption, "references": references}))
    (directory / "annotations.json").write_text(json.dumps({"images": images, "annotations": annotations}))
    (directory / "results.json").write_text(json.dumps(results))
    (directory / "items.jsonl").write_text("\n".join(lines) + "\n")


def write_b32_models(directory: Path) -> list[str]:
    """Random models of ViT-B/32's size (transformers' `CLIPConfig()` defaults: ViT-B/32 towers, 512-d projection):
    CLIP-S and PAC-S from one seed (one backbone: their image features are shared), PAC-S++ with a LoRA adapter."""
    from transformers import CLIPConfig

    from modeling_pacs.testing.pacs import make_tiny_model

    models = []
    for variant in ("clip_s", "pac_s", "pac_s_pp"):
        make_tiny_model(directory / f"b32_{variant}", variant=variant, seed=1, clip_config=CLIPConfig())
        models.append(str(directory / f"b32_{variant}"))
    return models


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--references", type=int, default=5)
    parser.add_argument("--image-size", type=int, nargs=2, default=[640, 480], metavar=("WIDTH", "HEIGHT"))
    parser.add_argument(
        "--models", default="tiny:clip_s,tiny:pac_s,tiny,tiny:polos", help="model metrics (comma-separated)"
    )
    parser.add_argument(
        "--size", choices=("tiny", "b32"), default="tiny", help="b32: ViT-B/32-size random models instead of --models"
    )
    parser.add_argument("--ngrams", default="bleu,meteor,rouge_l,cider", help="n-gram metrics (comma-separated)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", type=Path, help="write the figures as JSON")
    parser.add_argument(
        "--low-memory", action="store_true", help="run evaluate-captions with --low-memory (glibc's mmap threshold)"
    )
    parser.epilog = "Example:\n  python benchmarks/benchmark_evaluate_captions.py --items 500 --output figures.json"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    args = parser.parse_args()
    models = [name for name in args.models.split(",") if name]
    ngrams = [name for name in args.ngrams.split(",") if name] if shutil.which("java") else []
    if not shutil.which("java"):
        print("no Java: the n-gram metrics are left out of both sides")

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        write_workload(folder, args.items, args.references, tuple(args.image_size))
        if args.size == "b32":
            models = write_b32_models(folder)
        cli = [sys.executable, "-m", "modeling_pacs.cli"]
        alone = {}
        if ngrams:
            command = [sys.executable, "-c", NGRAM_SCRIPT, str(folder / "annotations.json"),
                       str(folder / "results.json"), str(folder / "ngrams.json"), ",".join(ngrams)]  # fmt: skip
            alone["pycocoevalcap script"] = peak_rss_of_run(command)
        for model in models:
            output = folder / f"score_{Path(model).name.replace(':', '_')}.json"
            command = [sys.executable, "-m", "modeling_pacs.cli", "score", str(folder / "items.jsonl"), "--model",
                       model, "--output", str(output), "--no-progress", "--device", args.device]  # fmt: skip
            alone[f"pacs-score --model {Path(model).name}"] = peak_rss_of_run(command)
        command = [*cli, "evaluate-captions", "--results", str(folder / "results.json"), "--annotations",
                   str(folder / "annotations.json"), "--images", str(folder / "images"), "--metrics",
                   ",".join([*ngrams, *models]), "--output", str(folder / "together.json"), "--no-progress",
                   "--device", args.device, *(["--low-memory"] if args.low_memory else [])]  # fmt: skip
        start = time.perf_counter()
        together = peak_rss_of_run(command)
        print(f"(together took {time.perf_counter() - start:.1f}s wall)")

        report = json.loads((folder / "together.json").read_text())
        if ngrams:
            expected = json.loads((folder / "ngrams.json").read_text())
            for column, value in expected.items():
                if report["corpus"][column] != value:
                    raise SystemExit(f"{column}: {report['corpus'][column]!r} together, {value!r} alone")
        for model in models:
            scores = json.loads((folder / f"score_{Path(model).name.replace(':', '_')}.json").read_text())
            ours = [column for column in report["corpus"] if column.startswith(f"{model}/")]
            for column, label in zip(ours, scores["mean"], strict=True):
                if abs(report["corpus"][column] - scores["mean"][label]) > 1e-6:
                    raise SystemExit(f"{column}: {report['corpus'][column]} together, {scores['mean'][label]} alone")

    for name, (peak, seconds) in alone.items():
        print(f"alone     {name:<40} {seconds:7.1f} s   peak RSS {peak:7.0f} MiB")
    print(f"together  {'pacs-pp evaluate-captions':<40} {together[1]:7.1f} s   peak RSS {together[0]:7.0f} MiB")
    total = sum(seconds for _, seconds in alone.values())
    largest = max(peak for peak, _ in alone.values())
    figures = {
        "size": args.size,
        "items": args.items,
        "references": args.references,
        "metrics": [*ngrams, *(Path(model).name for model in models)],
        "alone_seconds": {name: seconds for name, (_, seconds) in alone.items()},
        "alone_peak_mib": {name: peak for name, (peak, _) in alone.items()},
        "together_seconds": together[1],
        "together_peak_mib": together[0],
        "speedup": total / together[1],
        "peak_ratio": together[0] / largest,
    }
    print(f"sum of the alone runs {total:.1f} s; together {together[1]:.1f} s: {figures['speedup']:.2f}x (goal >= 1.3)")
    print(f"peak RSS together / largest alone: {figures['peak_ratio']:.2f} (goal <= 1.2); numbers agree")
    if args.output:
        args.output.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
