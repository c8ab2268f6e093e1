"""The human-correlation benchmarks of the papers: a loader per benchmark that reads its original release files
(`flickr8k`, `composite`, `pascal50s`, `foil`, `video`, `rated_csv`, ...), the official protocols (`protocols`), the
harness that scores any metric on them (`harness`, `runner`, `systems`) and the report with the papers' numbers
(`report`). A new benchmark is a loader module here and an entry in `BENCHMARKS`.

>>> from modeling_pacs.evaluation import BENCHMARKS, load_benchmark
>>> sorted(BENCHMARKS)[:3]
['activitynet_foil', 'composite', 'detailcaps']
"""

from pathlib import Path

from . import detailcaps, flickr8k, foil, pascal50s, rated_csv, video
from .benchmark import Benchmark, BenchmarkDataError, BenchmarkOptions

# name -> (title as in the papers, loader(data_dir, options))
BENCHMARKS = {
    "flickr8k_expert": ("Flickr8k-Expert", flickr8k.load_expert),
    "flickr8k_cf": ("Flickr8k-CF", flickr8k.load_crowdflower),
    "composite": ("Composite", rated_csv.load_composite),
    "pascal50s": ("Pascal-50S", pascal50s.load),
    "foil": ("FOIL", foil.load),
    "vatex_eval": ("VATEX-EVAL", video.load_vatex_eval),
    "activitynet_foil": ("ActivityNet-FOIL", video.load_activitynet_foil),
    "polaris": ("Polaris", rated_csv.load_polaris),
    "nebula": ("Nebula", rated_csv.load_nebula),
    "detailcaps": ("DetailCaps-4870", detailcaps.load),
}


def load_benchmark(name: str, data_dir: str | Path, options: BenchmarkOptions | None = None) -> Benchmark:
    """Load benchmark `name` from the user's local copy of its original files in `data_dir`."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {sorted(BENCHMARKS)}")
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise BenchmarkDataError(f"{data_dir}: data directory not found (the local copy of {BENCHMARKS[name][0]})")
    return BENCHMARKS[name][1](data_dir, options or BenchmarkOptions())


__all__ = ["BENCHMARKS", "Benchmark", "BenchmarkDataError", "BenchmarkOptions", "load_benchmark"]
