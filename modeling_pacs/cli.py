"""Command-line entry points: `pacs-score` (score captions) and `pacs-pp` (utilities)."""

import argparse
import csv
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from .jobs import write_text_atomically
from .loading import DEFAULT_MODEL, PRETRAINED_MODELS, load_model
from .output_paths import check_output_directory, check_output_file, strict_json
from .video_cli import VIDEO_EPILOG, add_video_arguments, is_video_run, run_video_score

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
SCORE_EPILOG += VIDEO_EPILOG


# ---------------------------------------------------------------------------------------------------- reading
def resolve_image(image, image_root: Path):
    """Relative paths (and `~`) are resolved against `image_root`; other image values go to the engine as they are."""
    if isinstance(image, str):
        path = Path(os.path.expanduser(image))
        return str(path if path.is_absolute() else image_root / path)
    if isinstance(image, dict) and image.get("bytes") is None and image.get("path"):
        return resolve_image(image["path"], image_root)
    return image


def load_json_file(path: Path):
    """Parse a JSON file; errors name the file, line and column, and repeated object keys are refused."""

    def unique_keys(pairs: list[tuple]) -> dict:
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(
                    f"{path}: the key '{key}' appears twice, so one of its values would be lost: merge them "
                    "(several captions of one image go in a list)"
                )
            seen[key] = value
        return seen

    try:
        return json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=unique_keys)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error})") from None


def captions_of(image: str, value, input_path: Path) -> list[str]:
    """The captions of one image in a JSON mapping: a string or a list of strings."""
    captions = [value] if isinstance(value, str) else value
    if not isinstance(captions, list) or not all(isinstance(caption, str) for caption in captions):
        raise ValueError(
            f"{input_path}: the captions of '{image}' are {json.dumps(value)[:80]}: expected a string or a list of "
            "strings"
        )
    return captions


def read_items(input_path: Path, image_root: Path) -> list[dict]:
    """Read (image, caption, references) items from a JSON mapping, JSONL or CSV file."""
    suffix = input_path.suffix.lower()
    if suffix == ".json":
        mapping = load_json_file(input_path)
        if not isinstance(mapping, dict):
            raise ValueError(f"{input_path}: a JSON input must be an object {{image_path: caption or [captions]}}")
        items = [
            {"image": image, "caption": caption}
            for image, value in mapping.items()
            for caption in captions_of(image, value, input_path)
        ]
    elif suffix == ".jsonl":
        items = []
        with input_path.open(encoding="utf-8-sig") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{input_path}: line {line_number} is not valid JSON: {error.msg}") from None
                if not isinstance(item, dict):
                    raise ValueError(f'{input_path}: line {line_number} is not a JSON object {{"image", "caption"}}')
                items.append(item)
    elif suffix == ".csv":
        # utf-8-sig: a byte-order mark (Excel writes one) must not rename the first column
        with input_path.open(newline="", encoding="utf-8-sig") as handle:
            items = list(csv.DictReader(handle))
        for row, item in enumerate(items):
            cell = item.pop("references", None)
            if cell is None or not cell.strip():
                continue  # no references for this row (all rows or none must have them)
            try:
                item["references"] = json.loads(cell)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{input_path}: row {row} (line {row + 2}): the references cell is not a JSON list "
                    f'({error.msg}); write it as ["first reference", "second reference"]'
                ) from None
    else:
        raise ValueError(f"{input_path}: unsupported input format '{suffix}' (use .json, .jsonl or .csv)")
    if not items:
        raise ValueError(f"{input_path} holds no captions: nothing to score")
    for row, item in enumerate(items):
        if "image" not in item and "video" in item:
            item["image"] = item.pop("video")
        missing = [column for column in ("image", "caption") if column not in item]
        if missing:
            raise ValueError(f"{input_path}: item {row} lacks {missing} (each item needs 'image' and 'caption')")
        if not isinstance(item["image"], str):
            raise ValueError(f"{input_path}: item {row}'s image is {item['image']!r}: expected a path string")
        item["image_path"] = resolve_image(item["image"], image_root)
    return items


def attach_references(items: list[dict], references_path: Path, image_root: Path):
    mapping = load_json_file(references_path)
    if not isinstance(mapping, dict):
        raise ValueError(f"{references_path}: references must be a JSON object {{image_path: [reference, ...]}}")
    by_path = {resolve_image(key, image_root): value for key, value in mapping.items()}
    for item in items:
        references = by_path.get(item["image_path"])
        if references is None:
            raise ValueError(f"{references_path}: no references for image '{item['image']}'")
        item["references"] = [references] if isinstance(references, str) else references


# ---------------------------------------------------------------------------------------------------- writing
def write_atomically(path: Path, chunks: Iterable[str]):
    """Write text through a temporary file renamed into place (`modeling_pacs.jobs.write_text_atomically`): readers
    (and a crash) see the whole file or none of it; the file is fsynced and world-readable."""
    write_text_atomically(Path(path), chunks)


OUTPUT_SUFFIXES = (".json", ".jsonl", ".csv")


def format_results(items: list[dict], names: list[str], means: dict, model_name: str, w: float, suffix: str) -> str:
    """The output file's text: JSON (summary + items), JSONL (one item per line) or CSV (items + a MEAN row)."""
    rows = [{"image": item["image"], "caption": item["caption"], **{n: item[n] for n in names}} for item in items]
    if suffix == ".csv":
        from io import StringIO

        buffer = StringIO()
        writer = csv.DictWriter(buffer, fieldnames=["image", "caption", *names])
        writer.writeheader()
        writer.writerows(rows)
        writer.writerow({"image": "MEAN", "caption": "", **means})
        return buffer.getvalue()
    if suffix == ".jsonl":
        return "".join(strict_json(row, ensure_ascii=False) + "\n" for row in rows)
    summary = {"model": model_name, "w": w, "num_items": len(items), "mean": means, "items": rows}
    return strict_json(summary, indent=2, ensure_ascii=False) + "\n"


def quiet_libraries(verbose: bool):
    """Keep the libraries' developer notes (deprecations, loading reports) off a user's terminal."""
    if verbose:
        return
    import warnings

    import transformers

    transformers.utils.logging.set_verbosity_error()
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=r"(transformers|peft|huggingface_hub|torch)\b")


@contextmanager
def quiet_loading(verbose: bool):
    """Hide the weight-loading progress bars while a model loads (our own progress bars stay on afterwards)."""
    import huggingface_hub.utils
    import transformers

    hidden = not verbose and transformers.utils.logging.is_progress_bar_enabled()
    if hidden:
        transformers.utils.logging.disable_progress_bar()
        huggingface_hub.utils.disable_progress_bars()
    try:
        yield
    finally:
        if hidden:
            transformers.utils.logging.enable_progress_bar()
            huggingface_hub.utils.enable_progress_bars()


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


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
    parser.add_argument(
        "--output", "-o", type=Path, help="write per-item scores and means (.json, .jsonl or .csv; not an input)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=64, help="images per encoder batch (texts: 4x)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1', ...")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "fp16", "bf16"],
        default="fp32",
        help="fp32 gives the reference numbers; fp16/bf16 speed up the GPU encoders (deviation <= ~1e-2, see README)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--verbose", action="store_true", help="also show the libraries' own logs, warnings and loading bars"
    )
    add_video_arguments(parser)
    return parser


def run_score(args: argparse.Namespace) -> dict:
    quiet_libraries(args.verbose)
    image_root = args.image_root or args.input.parent
    if not args.input.is_file():
        raise SystemExit(f"input file '{args.input}' does not exist")
    if args.output:
        check_output_file(args.output, inputs=[args.input, args.references], suffixes=OUTPUT_SUFFIXES)
    items = read_items(args.input, image_root)
    if args.references:
        attach_references(items, args.references, image_root)
    with_references = [item for item in items if item.get("references")]
    if with_references and len(with_references) != len(items):
        missing = next(index for index, item in enumerate(items) if not item.get("references"))
        raise SystemExit(f"item {missing} ('{items[missing]['image']}') has no references while others do")
    if not with_references and (args.references or any("references" in item for item in items)):
        raise SystemExit(
            "references were given but every item's reference list is empty: give at least one reference per item, "
            "or leave references out for the reference-free score"
        )

    videos = is_video_run(args, items)
    with quiet_loading(args.verbose):
        model = load_model(args.model, device=args.device, dtype=None if args.dtype == "fp32" else args.dtype)
    if videos:
        return run_video_score(args, items, model, bool(with_references))
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
    if getattr(output, "ref_scores", None) is not None:  # Polos returns one (reference-based) score
        names.append(ref_name)
        means[ref_name] = output.mean_ref_score
        for item, score in zip(items, output.ref_scores.tolist()):
            item[ref_name] = score
    if args.output:
        suffix = args.output.suffix.lower()
        text = format_results(items, names, means, args.model, getattr(model.config, "w", None), suffix)
        write_atomically(args.output, [text])
    summary = ", ".join(f"{name} {value:.4f}" for name, value in means.items())
    weight = f" (w={model.config.w})" if getattr(model.config, "w", None) is not None else ""
    print(f"{len(items)} captions scored with {args.model}{weight}: mean {summary}")
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
    tiny.add_argument("--overwrite", action="store_true", help="replace an existing tiny model directory")
    tiny.add_argument("--backbone", choices=["clip", "siglip", "siglip2"], default="clip", help="tiny towers' family")
    from .pacs.convert import build_parser as build_convert_parser

    build_convert_parser(commands.add_parser("convert", help="convert an official PAC-S / PAC-S++ checkpoint"))
    from .polos.convert import build_parser as build_convert_polos_parser

    build_convert_polos_parser(commands.add_parser("convert-polos", help="convert the released Polos checkpoint"))
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
        from .testing.pacs import make_tiny_model

        try:
            check_output_directory(args.output, overwrite=args.overwrite)
        except ValueError as error:
            raise SystemExit(f"pacs-pp make-tiny: error: {error}") from None
        if args.output.is_dir() and any(args.output.iterdir()):
            shutil.rmtree(args.output)  # a model directory, checked above, that --overwrite replaces
        make_tiny_model(args.output, variant=args.variant, seed=args.seed, backbone=args.backbone)
        print(f"tiny {args.backbone} {args.variant} model (random weights) saved to {args.output}")
    elif args.command == "convert":
        from .pacs.convert import run_conversion

        return run_conversion(args)
    elif args.command == "convert-polos":
        from .polos.convert import run_conversion as run_polos_conversion

        return run_polos_conversion(args)
    elif args.command == "register-metric":
        from .metric_module.registration import register_metric

        for copy in register_metric(args.modules_cache):
            print(f"registered {copy}")
        print("evaluate.load('pacs_pp') and evaluate.load('pacs-pp/pacs_pp') now load it from any folder, offline too")


if __name__ == "__main__":
    sys.exit(main())
