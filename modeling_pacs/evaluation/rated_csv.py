"""Composite, Polaris and Nebula (docs/spec/benchmarks.md): the CSV files the official Polos/DENEB code reads.

Items are the CSV rows in order, references exactly as listed, no normalisation (`validate/dataset.py`). Statistics:
Kendall tau_b and tau_c, Spearman and Pearson, x100, unrounded (the official code rounds the raw tau_c to 4 decimals:
`official_rounding=True`).
"""

from pathlib import Path

from . import composite
from .benchmark import Benchmark, BenchmarkOptions, first_existing, logger, read_rated_csv
from .hf_local import find_hf_copy, hf_files, read_hf_rows
from .protocols import correlation_report, remove_true_caption

# name -> (title, CSV file names tried in order, image folders relative to the data directory, headline statistic)
RATED_CSV_BENCHMARKS = {
    "composite": (
        "Composite",
        ["en_test_composite_da.csv", "en_test_composite_da2.csv"],
        ["images", "../images"],
        "kendall_tau_c",
    ),
    "polaris": ("Polaris", ["polaris_test.csv"], ["images", "../images"], "kendall_tau_c"),
    "nebula": ("Nebula", ["nebula_test.csv"], ["images", "../images"], "kendall_tau_c"),
}


def load_rated_csv(
    name: str, data_dir: Path, remove_candidate: bool = False, official_rounding: bool = False
) -> Benchmark:
    """Load one of the CSV benchmarks; `remove_candidate` drops references string-equal to the candidate (the
    CLIPScore/PAC-S++ Composite protocol, [paper-derived]; the official DENEB code uses the references as listed)."""
    title, file_names, image_folders, headline = RATED_CSV_BENCHMARKS[name]
    path = next((data_dir / file for file in file_names if (data_dir / file).is_file()), data_dir / file_names[0])
    if not path.is_file() and find_hf_copy(data_dir) is not None:
        rows, location = read_hf_rows(data_dir, name)
        files, source = hf_files(location), f"Hugging Face copy at {location}"
    else:
        rows, files, source = read_rated_csv(path, title), [path], path.name
    image_dir = first_existing([(data_dir / folder).resolve() for folder in image_folders])
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
        others = [name for name in RATED_CSV_BENCHMARKS["composite"][1] if (data_dir / name).is_file()]
        if others:
            logger.info("Composite: the original AMT_eval files are used, not %s", ", ".join(others))
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
