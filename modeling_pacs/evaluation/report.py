"""Reports: the statistics beside the papers' numbers (docs/spec/pacs.md#evaluation,
docs/spec/benchmarks.md#reported-numbers), as console text, Markdown, `results.json` and PNG plots. Non-finite
statistics are written as `null`, never NaN."""

import json
import logging
import math
from pathlib import Path

from ..jobs import write_text_atomically
from ..variants import PAPER_NAMES

logger = logging.getLogger("pacs_pp.benchmarks")

TAUS = ("kendall_tau_b", "kendall_tau_c")
PASCAL = ("accuracy_HC", "accuracy_HI", "accuracy_HM", "accuracy_MM", "accuracy_mean")
FOIL = ("accuracy_1ref", "accuracy_4ref")
DETAILCAPS = ("pearson", "one_minus_r2", "kendall_tau_b", "sample_kendall_tau_b")


def _row(names: tuple[str, ...], *values: float) -> dict[str, float]:
    return dict(zip(names, values))


# Reported numbers, x100, by benchmark and by the paper's metric name (ViT-B/32 unless "L/14"). On video, CLIP-S and
# RefCLIP-S are EMScore and EMScoreRef.
PAPER_NUMBERS = {
    "flickr8k_expert": {
        "CLIP-S": _row(TAUS, 51.1, 51.2),
        "PAC-S++": _row(TAUS, 54.1, 54.5),
        "RefCLIP-S": _row(TAUS, 52.6, 53.0),
        "RefPAC-S++": _row(TAUS, 55.3, 55.7),
        "PAC-S": _row(TAUS, 53.9, 54.3),
        "RefPAC-S": _row(TAUS, 55.5, 55.9),
        "PAC-S++ L/14": _row(TAUS, 57.0, 57.4),
        "RefPAC-S++ L/14": _row(TAUS, 57.5, 57.9),
        "Polos": {"kendall_tau_c": 56.4},
        "Pearl": _row(TAUS, 58.2, 58.6),
    },
    "flickr8k_cf": {
        "CLIP-S": _row(TAUS, 34.4, 17.7),
        "PAC-S++": _row(TAUS, 37.0, 19.1),
        "RefCLIP-S": _row(TAUS, 36.4, 18.8),
        "RefPAC-S++": _row(TAUS, 37.9, 19.6),
        "PAC-S": _row(TAUS, 36.0, 18.6),
        "RefPAC-S": _row(TAUS, 37.6, 19.5),
        "PAC-S++ L/14": _row(TAUS, 38.5, 19.9),
        "RefPAC-S++ L/14": _row(TAUS, 38.8, 20.1),
        "Polos": {"kendall_tau_b": 37.8},
        "Pearl": _row(TAUS, 38.6, 20.0),
    },
    "composite": {
        "CLIP-S": _row(TAUS, 49.8, 53.8),
        "PAC-S++": _row(TAUS, 53.9, 58.3),
        "RefCLIP-S": _row(TAUS, 51.2, 55.4),
        "RefPAC-S++": _row(TAUS, 54.7, 59.1),
        "PAC-S": _row(TAUS, 51.5, 55.7),
        "RefPAC-S": _row(TAUS, 53.0, 57.3),
        "PAC-S++ L/14": _row(TAUS, 57.3, 62.0),
        "RefPAC-S++ L/14": _row(TAUS, 60.0, 61.6),
        "Polos": _row(TAUS, 53.7, 57.6),
        "Pearl": _row(TAUS, 55.8, 60.4),
    },
    "pascal50s": {
        "CLIP-S": _row(PASCAL, 55.9, 99.3, 96.5, 72.0, 80.9),
        "PAC-S++": _row(PASCAL, 59.5, 99.6, 96.5, 73.6, 82.3),
        "RefCLIP-S": _row(PASCAL, 64.9, 99.5, 95.5, 73.3, 83.3),
        "RefPAC-S++": _row(PASCAL, 67.2, 99.6, 96.2, 74.2, 84.5),
        "PAC-S": {"accuracy_mean": 82.4},
        "RefPAC-S": {"accuracy_mean": 84.7},
        "PAC-S++ L/14": {"accuracy_mean": 82.4},
        "RefPAC-S++ L/14": {"accuracy_mean": 85.4},
        "Polos": _row(PASCAL, 70.0, 99.6, 97.4, 79.0, 86.5),
    },
    "foil": {
        "CLIP-S": _row(FOIL, 87.2, 87.2),
        "PAC-S++": _row(FOIL, 90.2, 90.2),
        "RefCLIP-S": _row(FOIL, 91.0, 92.6),
        "RefPAC-S++": _row(FOIL, 93.5, 94.1),
        "PAC-S": _row(FOIL, 89.9, 89.9),
        "RefPAC-S": _row(FOIL, 93.7, 94.9),
        "PAC-S++ L/14": _row(FOIL, 93.6, 93.6),
        "Polos": _row(FOIL, 93.3, 95.4),
        "Pearl": _row(FOIL, 96.5, 97.2),
    },
    "vatex_eval": {
        "CLIP-S": {"kendall_tau_b": 23.2, "spearman": 30.3},
        "PAC-S++": {"kendall_tau_b": 28.1, "spearman": 36.4},
        "RefCLIP-S": {
            "kendall_tau_b_1ref": 28.6,
            "spearman_1ref": 37.1,
            "kendall_tau_b_9ref": 36.8,
            "spearman_9ref": 47.2,
        },
        "RefPAC-S++": {
            "kendall_tau_b_1ref": 32.2,
            "spearman_1ref": 41.5,
            "kendall_tau_b_9ref": 39.8,
            "spearman_9ref": 50.8,
        },
    },
    "activitynet_foil": {
        "CLIP-S": {"accuracy": 89.5},
        "PAC-S++": {"accuracy": 91.0},
        "RefCLIP-S": {"accuracy": 92.4},
        "RefPAC-S++": {"accuracy": 93.4},
        "PAC-S": {"accuracy": 90.1},
        "RefPAC-S": {"accuracy": 93.5},
    },
    "polaris": {
        "CLIP-S": {"kendall_tau_c": 52.3},
        "RefCLIP-S": {"kendall_tau_c": 52.3},
        "PAC-S": {"kendall_tau_c": 52.5},
        "RefPAC-S": {"kendall_tau_c": 56.0},
        "Polos": {"kendall_tau_c": 57.8},
    },
    "nebula": {  # Pearl Table 1, Spica-corrected annotations
        "CLIP-S": _row(TAUS, 50.5, 47.9),
        "PAC-S": _row(TAUS, 51.0, 48.3),
        "PAC-S++": _row(TAUS, 50.5, 47.9),
        "RefCLIP-S": _row(TAUS, 53.6, 50.8),
        "RefPAC-S": _row(TAUS, 54.7, 51.9),
        "RefPAC-S++": _row(TAUS, 53.3, 50.6),
        "Polos": _row(TAUS, 58.0, 55.0),
    },
    # CAPTURE README (foundation-multimodal-models/CAPTURE@52eeb27, lines 45-57): the AVERAGE of DetailCaps-100 and
    # DetailCaps-4870 (the per-benchmark values are not public). PCC and the taus x100; 1-R^2 as printed (a ratio).
    # CLIPScore's backbone is not stated.
    "detailcaps": {
        "BLEU": _row(DETAILCAPS, 26.08, 54.75, 18.66, 24.62),
        "ROUGE-L": _row(DETAILCAPS, 29.51, 134.12, 21.49, 33.83),
        "CIDEr": _row(DETAILCAPS, 11.48, 2.6e7, 11.65, 9.91),
        "METEOR": _row(DETAILCAPS, 40.22, 290.38, 29.27, 40.62),
        "SPICE": _row(DETAILCAPS, 43.86, 155.95, 32.44, 47.18),
        "CLIPScore": _row(DETAILCAPS, 35.58, 21.46, 24.79, 38.41),
        "CLIP-S": _row(DETAILCAPS, 35.58, 21.46, 24.79, 38.41),
        "CAPTURE": _row(DETAILCAPS, 50.91, 8.29, 38.61, 60.18),
    },
}

# Model aliases and Hub ids -> the papers' names of their reference-free and reference-based scores.


def paper_name(row_name: str, column: str) -> str | None:
    """The paper's name for a row's column: `PAC-S++` / `RefPAC-S++` for the model `pac_s_pp_vit_b32`, and so on;
    a --scores row named after a paper metric (e.g. `Polos`) matches it for its `score` column."""
    base = PAPER_NAMES.get(row_name, row_name)
    return base if column == "score" else f"Ref{base}"


def finite_or_none(value: float) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def benchmark_rows(name: str, rows: list[dict]) -> list[dict]:
    """Attach the paper's numbers and the differences to each row's statistics."""
    for row in rows:
        reported = PAPER_NUMBERS.get(name, {}).get(row["paper_name"] or "", {})
        row["paper"] = dict(reported)
        row["difference"] = {
            stat: row["statistics"][stat] - value
            for stat, value in reported.items()
            if finite_or_none(row["statistics"].get(stat)) is not None
        }
    return rows


def _cell(row: dict, stat: str) -> str:
    value = finite_or_none(row["statistics"].get(stat))
    text = "n/a" if value is None else f"{value:.2f}"
    if stat in row["paper"]:
        difference = row["difference"].get(stat)
        text += f" ({row['paper'][stat]:.1f}" + ("" if difference is None else f", {difference:+.2f}") + ")"
    return text


def _label(row: dict) -> str:
    known = row["paper_name"] if row["paper"] else None
    label = f"{row['name']}:{row['column']}" + (f" [{known}]" if known else "")
    if row.get("w") is not None:
        return label + f" w={row['w']:g} {row['dtype']}"
    return label + (f" {row['dtype']}" if row.get("dtype") else "")


def format_table(result: dict, markdown: bool = False) -> str:
    """One benchmark's rows in the paper's layout: metrics down, statistics across, `ours (paper, difference)`."""
    stats = list(dict.fromkeys(stat for row in result["rows"] for stat in row["statistics"]))
    header = ["metric", *stats]
    lines = [[_label(row), *(_cell(row, stat) for stat in stats)] for row in result["rows"]]
    meta = [f"{key}: {value}" for key, value in result["protocol"].items()]
    meta.append(
        f"items: {result['num_items']}; " + "; ".join(f"{k} sha256 {v[:12]}" for k, v in result["files"].items())
    )
    if markdown:
        table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        table += ["| " + " | ".join(line) + " |" for line in lines]
        return f"## {result['title']}\n\n" + "\n".join(table) + "\n\n" + "\n".join(f"- {m}" for m in meta) + "\n"
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    body = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)) for line in [header, *lines]]
    return f"== {result['title']} ==  values x100, ours (paper, ours - paper)\n" + "\n".join(body + meta) + "\n"


def json_safe(value):
    """NaN/inf -> None, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_safe(item) for item in value]
    return value


def write_reports(output_dir: Path, results: dict, plots: dict[str, list[tuple[str, list, list]]]):
    """`results.json`, `results.md` and one `plot_<benchmark>.png` per correlation benchmark (matplotlib, if
    installed)."""
    write_text_atomically(
        output_dir / "results.json", [json.dumps(json_safe(results), indent=2, allow_nan=False) + "\n"]
    )
    markdown = "# Benchmark results\n\n" + "\n".join(format_table(r, True) for r in results["benchmarks"].values())
    if results.get("systems"):
        markdown += "\n" + format_systems(results["systems"], markdown=True)
    write_text_atomically(output_dir / "results.md", [markdown])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no plots (pip install 'pacs-pp[benchmarks]')")
        return
    for name, series in plots.items():
        figure, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3.6), squeeze=False)
        for axis, (label, human, metric) in zip(axes[0], series):
            axis.scatter(human, metric, s=4, alpha=0.4)
            axis.set_xlabel("human score")
            axis.set_ylabel("metric score")
            axis.set_title(label, fontsize=8)
        figure.suptitle(results["benchmarks"][name]["title"])
        figure.tight_layout()
        temporary = output_dir / f".plot_{name}.png.tmp"
        figure.savefig(temporary, format="png", dpi=100)
        plt.close(figure)
        temporary.replace(output_dir / f"plot_{name}.png")


def format_systems(systems: dict, markdown: bool = False) -> str:
    """System-level table: one row per captioner, one column per measure."""
    columns = list(dict.fromkeys(column for row in systems["rows"] for column in row["measures"]))
    header = ["system", *columns]
    lines = []
    for row in systems["rows"]:
        cells = [finite_or_none(row["measures"].get(column)) for column in columns]
        lines.append([row["system"], *("n/a" if value is None else f"{value:.3f}" for value in cells)])
    notes = systems.get("notes", [])
    if markdown:
        table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        table += ["| " + " | ".join(line) + " |" for line in lines]
        return "## Systems\n\n" + "\n".join(table) + "\n\n" + "".join(f"- {note}\n" for note in notes)
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    body = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)) for line in [header, *lines]]
    return "== Systems ==\n" + "\n".join(body + notes) + "\n"
