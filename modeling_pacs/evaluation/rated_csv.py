"""Composite, Polaris and Nebula (docs/spec/benchmarks.md): the CSV files the official Polos/DENEB code reads.

Items are the CSV rows in order, references exactly as listed, no normalisation (`validate/dataset.py`). Statistics:
Kendall tau_b and tau_c, Spearman and Pearson, x100, unrounded (the official code rounds the raw tau_c to 4 decimals:
`official_rounding=True`).
"""

from pathlib import Path

from . import composite
from .benchmark import RATED_CSV_LAYOUT as CSV_LAYOUT
from .benchmark import Benchmark, BenchmarkOptions, logger, read_rated_csv
from .hf_local import find_hf_copy, hf_files, read_hf_rows
from .protocols import correlation_report, remove_true_caption
from .releases import find, folder_or_first, missing

# name -> (title, (CSV, image folder) roles in releases.RELEASES, headline statistic)
RATED_CSV_BENCHMARKS = {
    "composite": ("Composite", ("deneb_csv", "deneb_images"), "kendall_tau_c"),
    "polaris": ("Polaris", ("csv", "images"), "kendall_tau_c"),
    "nebula": ("Nebula", ("csv", "images"), "kendall_tau_c"),
}


def load_rated_csv(
    name: str, data_dir: Path, remove_candidate: bool = False, official_rounding: bool = False
) -> Benchmark:
    """Load one of the CSV benchmarks; `remove_candidate` drops references string-equal to the candidate (the
    CLIPScore/PAC-S++ Composite protocol, [paper-derived]; the official DENEB code uses the references as listed)."""
    title, (csv_role, image_role), headline = RATED_CSV_BENCHMARKS[name]
    path = find(data_dir, name, csv_role)
    if path is None and find_hf_copy(data_dir) is not None:
        rows, location = read_hf_rows(data_dir, name)
        files, source = hf_files(location), f"Hugging Face copy at {location}"
    else:
        if path is None:
            missing(data_dir, name, csv_role, CSV_LAYOUT + " (or a local copy of the Hugging Face dataset)", title)
        rows, files, source = read_rated_csv(path, title), [path], path.name
    image_dir = folder_or_first(data_dir, name, image_role).resolve()
    items = []
    for row_number, row in enumerate(rows):
        references = remove_true_caption(row["refs"], row["mt"]) if remove_candidate else row["refs"]
        items.append(
            {
                "id": f"{name}/{row_number}",
                "image": str(image_dir / row["imgid"]),
                "candidate": row["mt"],
                "references": references,
                "human": row["score"],
            }
        )
    protocol = {
        "source": source,
        "items": "one per CSV row, file order, references as listed (Polos/DENEB validate/dataset.py)",
        "references": "candidate removed from its references (paper)" if remove_candidate else "as listed (official)",
        "statistic": f"100 x Kendall tau_b/tau_c, Spearman, Pearson; headline {headline}; "
        + ("raw coefficient rounded to 4 decimals (official)" if official_rounding else "unrounded"),
    }
    if name == "composite":
        protocol["layout"] = "Hugging Face copy" if source.startswith("Hugging Face") else "DENEB CSV"
        protocol["rating"] = "the file's score column (pre-built; which AMT rating it holds is not documented)"
    if name == "nebula":
        protocol["annotations"] = "as in the CSV given (DENEB's release is uncorrected; Pearl's numbers use Spica)"
    return Benchmark(name, items, files, protocol, correlation_report(items, official_rounding), human_field="human")


def load_composite(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    """The original AMT_eval files when present (docs/spec/benchmarks.md#composite), else DENEB's CSV, else a Hugging
    Face copy."""
    if composite.has_amt_files(data_dir):
        other = find(data_dir, "composite", "deneb_csv")
        if other is not None:
            logger.info("Composite: the original AMT_eval files are used, not %s", other.relative_to(data_dir))
        return composite.load_amt(data_dir, options)
    if options.composite_keep_candidate or options.composite_rating != "correctness":
        logger.warning(
            "Composite: composite_rating/composite_keep_candidate apply to the AMT_eval files only; %s has none",
            data_dir,
        )
    return load_rated_csv("composite", data_dir, options.composite_remove_candidate, options.official_rounding)


def load_polaris(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    return load_rated_csv("polaris", data_dir, official_rounding=options.official_rounding)


def load_nebula(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    return load_rated_csv("nebula", data_dir, official_rounding=options.official_rounding)
