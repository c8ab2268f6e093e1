"""Command-line entry points: `pacs-score` (score captions) and `pacs-pp` (utilities)."""

import argparse
import csv
import json
import logging
import math
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .loading import DEFAULT_MODEL, PRETRAINED_MODELS, load_model

logger = logging.getLogger("pacs_pp")

SCORE_EPILOG = f"""
input formats:
  JSON   {{"images/cat.jpg": "a cat on a sofa", "images/dog.jpg": ["a dog", "a brown dog running"]}}
  JSONL  one object per line: {{"image": "cat.jpg", "caption": "a cat", "references": ["a cat on a couch"]}}
  CSV    columns image, caption and optionally references (a JSON list, e.g. ["ref one", "ref two"])
Relative image paths are resolved against --image-root (default: the input file's folder).
--references FILE is a JSON {{image_path: [reference, ...]}} applied to every caption of that image.

models: a local directory, a Hub id, or an alias: {", ".join(sorted(PRETRAINED_MODELS))};
"tiny" (random weights, meaningless scores) for an offline smoke run.
A Pearl model directory gives the columns Pearl-img (reference-free) and Pearl ("tiny:pearl" for a smoke run).

examples:
  pacs-score captions.json --output scores.json
  pacs-score captions.jsonl --model clip_s_vit_b32 --output scores.csv
  pacs-score captions.json --references refs.json --device cuda --dtype fp16
"""


# ---------------------------------------------------------------------------------------------------- reading
def resolve_image(image, image_root: Path):
    """Relative paths (and `~`) are resolved against `image_root`; other image values go to the engine as they are."""
    if isinstance(image, str):
        path = Path(os.path.expanduser(image))
        return str(path if path.is_absolute() else image_root / path)
    if isinstance(image, dict) and image.get("bytes") is None and image.get("path"):
        return resolve_image(image["path"], image_root)
    return image


def read_items(input_path: Path, image_root: Path) -> list[dict]:
    """Read (image, caption, references) items from a JSON mapping, JSONL or CSV file."""
    suffix = input_path.suffix.lower()
    if suffix == ".json":
        mapping = json.loads(input_path.read_text(encoding="utf-8"))
        if not isinstance(mapping, dict):
            raise SystemExit(f"{input_path}: a JSON input must be an object {{image_path: caption or [captions]}}")
        items = []
        for image, captions in mapping.items():
            for caption in [captions] if isinstance(captions, str) else captions:
                items.append({"image": image, "caption": caption})
    elif suffix == ".jsonl":
        lines = input_path.read_text(encoding="utf-8").splitlines()
        items = [json.loads(line) for line in lines if line.strip()]
    elif suffix == ".csv":
        with input_path.open(newline="", encoding="utf-8") as handle:
            items = list(csv.DictReader(handle))
        for item in items:
            if item.get("references"):
                item["references"] = json.loads(item["references"])
            else:
                item.pop("references", None)
    else:
        raise SystemExit(f"{input_path}: unsupported input format '{suffix}' (use .json, .jsonl or .csv)")
    for row, item in enumerate(items):
        missing = [column for column in ("image", "caption") if column not in item]
        if missing:
            raise SystemExit(f"{input_path}: item {row} lacks {missing} (each item needs 'image' and 'caption')")
        item["image_path"] = resolve_image(item["image"], image_root)
    return items


def attach_references(items: list[dict], references_path: Path, image_root: Path):
    mapping = json.loads(references_path.read_text(encoding="utf-8"))
    by_path = {resolve_image(key, image_root): value for key, value in mapping.items()}
    for item in items:
        references = by_path.get(item["image_path"])
        if references is None:
            raise SystemExit(f"{references_path}: no references for image '{item['image']}'")
        item["references"] = [references] if isinstance(references, str) else references


# ---------------------------------------------------------------------------------------------------- writing
def write_atomically(path: Path, chunks: Iterable[str]):
    """Write through a temporary file renamed into place: readers (and a crash) see the whole file or none of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            for chunk in chunks:
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def format_results(items: list[dict], names: list[str], means: dict, model_name: str, w: float, suffix: str) -> str:
    rows = [{"image": item["image"], "caption": item["caption"], **{n: item[n] for n in names}} for item in items]
    if suffix == ".csv":
        from io import StringIO

        buffer = StringIO()
        writer = csv.DictWriter(buffer, fieldnames=["image", "caption", *names])
        writer.writeheader()
        writer.writerows(rows)
        writer.writerow({"image": "MEAN", "caption": "", **means})
        return buffer.getvalue()
    summary = {"model": model_name, "w": w, "num_items": len(items), "mean": means, "items": rows}
    return json.dumps(summary, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------------------------------- commands
def build_score_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="pacs-score",
        description="Score image captions with PAC-S++ (reference-free) and RefPAC-S++ (with references); "
        "also CLIP-S and PAC-S.",
        epilog=SCORE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", type=Path, help="captions file: .json mapping, .jsonl or .csv (see below)")
    parser.add_argument(
        "--model",
        default=os.environ.get("PACS_MODEL", DEFAULT_MODEL),
        help=f"alias, Hub id or local directory (default: {DEFAULT_MODEL}, or $PACS_MODEL)",
    )
    parser.add_argument("--references", type=Path, help="JSON {image_path: [references]} for RefPAC-S++")
    parser.add_argument("--image-root", type=Path, help="folder for relative image paths (default: input's folder)")
    parser.add_argument("--output", "-o", type=Path, help="write per-item scores and means (.json or .csv)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per encoder batch (texts: 4x)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1', ...")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "fp16", "bf16"],
        default="fp32",
        help="fp32 gives the reference numbers; fp16/bf16 speed up the GPU encoders (deviation <= ~1e-2, see README)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def run_score(args: argparse.Namespace) -> dict:
    image_root = args.image_root or args.input.parent
    if not args.input.is_file():
        raise SystemExit(f"input file '{args.input}' does not exist")
    items = read_items(args.input, image_root)
    if args.references:
        attach_references(items, args.references, image_root)
    with_references = [item for item in items if item.get("references")]
    if with_references and len(with_references) != len(items):
        missing = next(index for index, item in enumerate(items) if not item.get("references"))
        raise SystemExit(f"item {missing} ('{items[missing]['image']}') has no references while others do")

    model = load_model(args.model, device=args.device, dtype=None if args.dtype == "fp32" else args.dtype)
    output = model.score(
        [item["image_path"] for item in items],
        [item["caption"] for item in items],
        references=[item["references"] for item in items] if with_references else None,
        image_batch_size=args.batch_size,
        text_batch_size=4 * args.batch_size,
        progress=False if args.no_progress else None,
    )
    free_name, ref_name = model.config.score_names
    names = [free_name]
    means = {free_name: output.mean_score}
    for item, score in zip(items, output.scores.tolist()):
        item[free_name] = score
    if output.ref_scores is not None:
        names.append(ref_name)
        means[ref_name] = output.mean_ref_score
        for item, score in zip(items, output.ref_scores.tolist()):
            item[ref_name] = score
    if args.output:
        suffix = args.output.suffix.lower()
        text = format_results(items, names, means, args.model, getattr(model.config, "w", None), suffix)
        write_atomically(args.output, [text])
    summary = ", ".join(f"{name} {value:.4f}" for name, value in means.items() if not math.isnan(value))
    w = getattr(model.config, "w", None)  # Pearl has no w
    setting = f" (w={w})" if w is not None else ""
    print(f"{len(items)} captions scored with {args.model}{setting}: mean {summary}")
    if args.output:
        print(f"per-item scores written to {args.output}")
    return means


def score_main(argv: list[str] | None = None):
    """`pacs-score`: score captions from a JSON/JSONL/CSV file."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    args = build_score_parser().parse_args(argv)
    try:
        run_score(args)
    except (OSError, ValueError, TypeError) as error:
        raise SystemExit(f"pacs-score: error: {error}") from None


def main(argv: list[str] | None = None):
    """`pacs-pp`: utilities (score, make-tiny, convert)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    parser = argparse.ArgumentParser(prog="pacs-pp", description="PAC-S++ utilities")
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser(
        "score",
        help="score captions (same as pacs-score)",
        epilog=SCORE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build_score_parser(score)
    tiny = commands.add_parser("make-tiny", help="save a random tiny model directory (offline tests and demos)")
    tiny.add_argument("output", type=Path)
    tiny.add_argument("--variant", choices=["pac_s_pp", "pac_s", "clip_s"], default="pac_s_pp")
    tiny.add_argument("--seed", type=int, default=0)
    from .convert import build_parser as build_convert_parser

    build_convert_parser(commands.add_parser("convert", help="convert an official PAC-S / PAC-S++ checkpoint"))
    register = commands.add_parser(
        "register-metric",
        help="install the evaluate module so that evaluate.load('pacs_pp') works offline from any folder",
    )
    register.add_argument(
        "--modules-cache",
        type=Path,
        help="evaluate's modules cache (default: $HF_MODULES_CACHE, i.e. $HF_HOME/modules)",
    )
    args = parser.parse_args(argv)
    if args.command == "score":
        try:
            run_score(args)
        except (OSError, ValueError, TypeError) as error:
            raise SystemExit(f"pacs-pp score: error: {error}") from None
    elif args.command == "make-tiny":
        from .tiny import make_tiny_model

        make_tiny_model(args.output, variant=args.variant, seed=args.seed)
        print(f"tiny {args.variant} model (random weights) saved to {args.output}")
    elif args.command == "convert":
        from .convert import run_conversion

        return run_conversion(args)
    elif args.command == "register-metric":
        from .metric_registration import register_metric

        for copy in register_metric(args.modules_cache):
            print(f"registered {copy}")
        print("evaluate.load('pacs_pp') and evaluate.load('pacs-pp/pacs_pp') now load it from any folder, offline too")


if __name__ == "__main__":
    sys.exit(main())
