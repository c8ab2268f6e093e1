"""Run benchmarks end to end: load the original files, score them with models or read external scores, apply the
protocols and collect the report (what `scripts/evaluate_benchmarks.py` calls)."""

import itertools
import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..caption_files import read_json_lines
from ..jobs import write_text_atomically
from ..models.inputs import check_long_captions
from ..output_paths import check_output_directory
from ..signatures import model_signature
from . import BENCHMARKS, load_benchmark
from .benchmark import Benchmark, BenchmarkOptions, checksum, parse_named
from .report import benchmark_rows, paper_name, write_reports
from .runner import FEATURES_PROTOCOL, SCORE_COLUMNS, score_image_items, score_video_items
from .systems import COCO_METRICS, evaluate_systems

logger = logging.getLogger("pacs_pp.benchmarks")


@dataclass
class HarnessConfig:
    """Everything a run needs besides the benchmark options; numeric fields are validated in `check`."""

    benchmarks: list[str]
    data_dir: Path
    models: list[str] = field(default_factory=list)
    scores: list[str] = field(default_factory=list)  # "[NAME=]FILE"
    captions: list[str] = field(default_factory=list)  # "SYSTEM=FILE"
    references: Path | None = None
    coco_metrics: list[str] = field(default_factory=lambda: list(COCO_METRICS))
    image_root: Path | None = None
    output: Path | None = None
    dump_items: Path | None = None
    video_features: Path | None = (
        None  # EMScore's released <video_id>.pt features (CLIP-S rows of the video benchmarks)
    )
    w: float | None = None
    device: str | None = None
    dtype: str | None = None
    image_batch_size: int = 64
    text_batch_size: int = 256
    video_batch_size: int = 16
    chunk_size: int = 16384
    overwrite: bool = False
    resume: bool = False
    progress: bool | None = None
    # One row per model and mode: "truncate" (the official behaviour) and/or "chunks" (docs/guides/long-captions.md).
    long_captions: list[str] = field(default_factory=lambda: ["truncate"])
    # The scoring mode of metrics with several (`Capabilities.scoring_modes`: "per_item", "official"); None: each
    # model's default. Every --model must have it.
    scoring_mode: str | None = None

    def check(self):
        for name in ("image_batch_size", "text_batch_size", "video_batch_size", "chunk_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.w is not None and not (math.isfinite(self.w) and self.w > 0):
            raise ValueError(f"--w must be a finite number > 0, got {self.w}")
        for mode in self.long_captions:
            check_long_captions(mode)
        if not self.long_captions:
            raise ValueError("--long-captions needs at least one of truncate, chunks")
        if not (self.models or self.scores or self.dump_items or self.captions):
            raise ValueError("nothing to do: pass --model, --scores, --dump-items or --captions")
        if self.scoring_mode is not None:
            from ..loading import check_scoring_mode
            from ..model_sources import spec_for_model_name

            for name in self.models:  # refused before anything loads (a Hub id is checked once loaded)
                spec = spec_for_model_name(name)
                if spec is not None:
                    try:
                        check_scoring_mode(spec, self.scoring_mode)
                    except ValueError as error:
                        raise type(error)(f"--mode: --model {name}: {error}") from None
        if self.video_features is not None:
            if not self.video_features.is_dir():
                raise ValueError(f"--video-features {self.video_features}: no such folder (of <video_id>.pt files)")
            if not set(self.benchmarks) & {"vatex_eval", "activitynet_foil", "all"}:
                raise ValueError("--video-features applies to --benchmark vatex_eval and activitynet_foil only")


def read_scores(path: Path) -> dict[str, dict[str, float]]:
    """A JSONL file of `{"id", "score"[, "ref_score"]}`: scores by column and id; bad lines are named."""
    if not path.is_file():
        raise FileNotFoundError(f'{path}: scores file not found (JSONL lines {{"id": ..., "score": ...}})')
    columns: dict[str, dict[str, float]] = {}
    for number, row in read_json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or "score" not in row:
            raise ValueError(f'{path}:{number}: each line needs "id" (a string) and "score"')
        for column in SCORE_COLUMNS:
            if column not in row:
                continue
            value = row[column]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{path}:{number}: {column} of '{row['id']}' is {value!r}, not a finite number")
            if row["id"] in columns.setdefault(column, {}):
                raise ValueError(f"{path}:{number}: id '{row['id']}' appears twice")
            columns[column][row["id"]] = float(value)
    return columns


def is_benchmark_output(folder: Path) -> bool:
    """A folder an earlier `--output-dir` run wrote: it holds results.json or the score cache."""
    return (folder / "results.json").is_file() or (folder / "cache").is_dir()


def prepare_output(config: HarnessConfig):
    output = config.output
    if output is None:
        return
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output-dir {output} is a file: pass a folder")
    # "[NAME=]FILE" / "SYSTEM=FILE": the file is what follows the last "="
    inputs = [
        config.data_dir,
        config.references,
        *(spec.rpartition("=")[2] for spec in config.scores + config.captions),
    ]
    # The project's place rules (never the current directory, a parent of it, or a folder holding an input).
    check_output_directory(output, inputs=inputs, allow_existing=True, what="--output-dir")
    if output.is_dir() and any(output.iterdir()) and not config.resume:
        if not config.overwrite:
            raise ValueError(
                f"--output-dir {output} is not empty: pass --resume to reuse its cached scores, or --overwrite to "
                "replace it"
            )
        # --overwrite replaces only a folder an earlier run of this command wrote.
        check_output_directory(
            output,
            inputs=inputs,
            overwrite=True,
            what="--output-dir",
            replaceable=is_benchmark_output,
            replaceable_kind="an earlier benchmark output (results.json or cache/)",
        )
        shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)


def benchmark_data_dirs(config: HarnessConfig) -> list[tuple[str, Path]]:
    """`all` looks for one sub-folder per benchmark name and skips the absent ones."""
    if config.benchmarks != ["all"]:
        return [(name, config.data_dir) for name in config.benchmarks]
    present = [(name, config.data_dir / name) for name in BENCHMARKS if (config.data_dir / name).is_dir()]
    if not present:
        raise FileNotFoundError(
            f"{config.data_dir}: no benchmark folder found (expected sub-folders named {sorted(BENCHMARKS)})"
        )
    skipped = sorted(set(BENCHMARKS) - {name for name, _ in present})
    if skipped:
        logger.warning("--benchmark all: no folder for %s, skipped", ", ".join(skipped))
    return present


def dump_items(path: Path, benchmarks: list[Benchmark]):
    """One JSON line per scored caption, `benchmark` added, for external metrics."""

    def lines():
        for benchmark in benchmarks:
            for item in benchmark.items:
                yield json.dumps({**item, "benchmark": benchmark.name}, ensure_ascii=False) + "\n"

    write_text_atomically(path, lines())


def model_label(name: str) -> str:
    return name.replace("/", "--").replace(":", "-")


def run(config: HarnessConfig, options: BenchmarkOptions) -> dict:
    """Load, score, evaluate and write the reports; returns the results (`report.format_table` prints them)."""
    from ..loading import load_model

    config.check()
    prepare_output(config)
    benchmarks = [load_benchmark(name, data_dir, options) for name, data_dir in benchmark_data_dirs(config)]
    if config.dump_items:
        dump_items(config.dump_items, benchmarks)
    external = [(name, path, read_scores(path)) for name, path in (parse_named(s, "--scores") for s in config.scores)]
    models = {}
    for name in config.models:
        models[name] = load_model(name, device=config.device, dtype=config.dtype)
        if config.w is not None:
            if getattr(models[name].config, "w", None) is None:
                raise ValueError(f"--w applies to PAC-S / CLIP-S models; '{name}' has no w")
            models[name].config.w = config.w
    results = {"benchmarks": {}, "runs": [], "options": asdict(options)}
    plots = {}
    for benchmark in benchmarks:
        rows = []
        for (name, model), mode in itertools.product(models.items(), config.long_captions):
            started = time.perf_counter()
            row_name = name if mode == "truncate" else f"{name} ({mode})"
            if benchmark.modality == "video":
                columns = score_video_items(
                    model,
                    benchmark,
                    config.video_batch_size,
                    config.video_features,
                    model_name=name,
                    long_captions=mode,
                    scoring_mode=config.scoring_mode,
                )
                counts = None
            else:
                label = model_label(name) + ("" if mode == "truncate" else f"--{mode}")
                label += f"--{config.scoring_mode}" if config.scoring_mode else ""
                cache = config.output / "cache" / benchmark.name / label if config.output else None
                columns, counts = score_image_items(
                    model,
                    benchmark.items,
                    cache,
                    config.chunk_size,
                    config.image_batch_size,
                    config.text_batch_size,
                    config.progress,
                    mode,
                    config.scoring_mode,
                )
            seconds = time.perf_counter() - started
            run_record = {
                "benchmark": benchmark.name,
                "model": row_name,
                "items": len(benchmark.items),
                "seconds": seconds,
                "items_per_second": len(benchmark.items) / seconds if seconds > 0 else None,
            }
            if counts is not None:
                run_record.update(
                    image_encodings=counts.images, text_encodings=counts.texts, **naive_encodings(benchmark)
                )
            results["runs"].append(run_record)
            w = getattr(model.config, "w", None)  # Polos and Pearl have no w
            references = [item.get("references") or [] for item in benchmark.items]
            meta = {
                "source": "model",
                "w": w,
                "dtype": str(model.dtype).replace("torch.", ""),
                "signature": model_signature(
                    model, name, references, long_captions=mode, dtype=config.dtype, mode=config.scoring_mode
                ),
            }
            rows += evaluate_columns(benchmark, row_name, columns, meta)
        for name, path, columns in external:
            rows += evaluate_columns(benchmark, name, columns, {"source": str(path), "sha256": checksum(path)})
        title = BENCHMARKS[benchmark.name][0]
        if benchmark.modality == "video" and models:
            benchmark.protocol["frames_from"] = FEATURES_PROTOCOL if config.video_features else "the raw videos"
        result = {
            "title": title,
            "protocol": benchmark.protocol,
            "num_items": len(benchmark.items),
            "files": {path.name: checksum(path) for path in benchmark.files},
            "rows": benchmark_rows(benchmark.name, rows),
        }
        results["benchmarks"][benchmark.name] = result
        if benchmark.human_field and rows:
            plots[benchmark.name] = []
            for row in rows:
                scored = [item for item in benchmark.items if item["id"] in row["item_scores"]]
                human = [item[benchmark.human_field] for item in scored]
                metric = [row["item_scores"][item["id"]] for item in scored]
                plots[benchmark.name].append((f"{row['name']}:{row['column']}", human, metric))
        for row in rows:
            row.pop("item_scores")
    if config.captions:
        results["systems"] = evaluate_systems(config, models)
    if config.output:
        write_reports(config.output, results, plots)
    return results


def naive_encodings(benchmark: Benchmark) -> dict[str, int]:
    """What scoring item by item would encode: one image per item, its candidate and every reference."""
    return {
        "naive_image_encodings": len(benchmark.items),
        "naive_text_encodings": sum(1 + len(item["references"]) for item in benchmark.items),
    }


def evaluate_columns(benchmark: Benchmark, name: str, columns: dict[str, dict[str, float]], meta: dict) -> list[dict]:
    rows = []
    for column in SCORE_COLUMNS:
        if column not in columns:
            continue
        rows.append(
            {
                "name": name,
                "column": column,
                "paper_name": paper_name(name, column),
                "statistics": benchmark.evaluate(columns[column], column),
                "item_scores": columns[column],
                **meta,
            }
        )
    return rows
