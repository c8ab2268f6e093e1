"""Reports: the statistics beside the papers' numbers (docs/spec/pacs.md#evaluation,
docs/spec/benchmarks.md#reported-numbers), as console text, Markdown, `results.json` and PNG plots. Non-finite
statistics are written as `null`, never NaN."""

import json
import logging
import math
from pathlib import Path

from ..extras import MissingExtraError, require
from ..jobs import write_text_atomically
from ..registry import PAPER_NAMES, REPORTED_NUMBERS

logger = logging.getLogger("pacs_pp.benchmarks")

# Reported numbers, x100, by benchmark and by the paper's metric name: each metric's spec holds its own
# (`registry.REPORTED_NUMBERS`); CAPTURE's table adds rows for metrics the package does not compute.
PAPER_NUMBERS = {benchmark: dict(rows) for benchmark, rows in REPORTED_NUMBERS.items()}
# CAPTURE README (foundation-multimodal-models/CAPTURE@52eeb27, lines 45-57): the AVERAGE of DetailCaps-100 and
# DetailCaps-4870. CLIPScore is CLIP-S under CAPTURE's name (its backbone is not stated).
PAPER_NUMBERS["detailcaps"].update(
    {
        "CLIPScore": PAPER_NUMBERS["detailcaps"]["CLIP-S"],
        "CAPTURE": {"pearson": 50.91, "one_minus_r2": 8.29, "kendall_tau_b": 38.61, "sample_kendall_tau_b": 60.18},
    }
)


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
    signatures = {row["name"]: row["signature"] for row in result["rows"] if row.get("signature")}
    meta += [f"signature {name}: {signature}" for name, signature in signatures.items()]
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
        matplotlib = require("matplotlib", "benchmarks", "Plots of the benchmark results")
    except MissingExtraError as error:
        logger.warning(f"{error} (results.json and results.md are written without them)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
