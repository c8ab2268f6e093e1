"""Pascal-50S (docs/spec/benchmarks.md#pascal50s): `pyCIDErConsensus/pair_pascal.mat` + `consensus_pascal.mat`, VOC2010
images.

Labels exactly as Polos `validate/pascal50s.py` (votes by winning caption string, seed 42, one draw per pair). Each
pair gives two items (caption A and caption B). References: all 48 (official code, default) or `num_draws` draws of
`per_draw` references sampled from the 48 (the papers' protocol, [paper-derived]: draws and seed are reported).
"""

import logging
from pathlib import Path

import numpy as np

from .benchmark import Benchmark, BenchmarkOptions, data_error, require_file, scores_for
from .protocols import (
    PASCAL_TIE_POLICIES,
    accuracy,
    pascal_labels,
    pascal_predictions,
    sample_reference_draws,
)
from .releases import folder_or_first, locate

logger = logging.getLogger("pacs_pp.benchmarks")

TITLE = "Pascal-50S"
CATEGORIES = {1: "HC", 2: "HI", 3: "HM", 4: "MM"}
REFERENCES_PER_PAIR = 48
PAIR_LAYOUT = (
    "pyCIDErConsensus/pair_pascal.mat (scipy.io.loadmat) with new_input: 1xN struct array of 3 char fields "
    "(image file, caption A, caption B), category: 1xN in 1..4, new_data: Nx2 source codes"
)
CONSENSUS_LAYOUT = (
    "pyCIDErConsensus/consensus_pascal.mat with triplets: 1x(48N) struct array of 4 fields (reference cell, "
    "caption 1 cell, caption 2 cell, winner: 1 = caption 1)"
)


def load_mat(path: Path, layout: str, key: str):
    import scipy.io  # optional dependency: extra "benchmarks"

    require_file(path, layout, TITLE)
    try:
        mat = scipy.io.loadmat(path)
    except Exception as error:  # scipy raises several unrelated types for a file that is not a .mat
        raise data_error(path, f"not a readable MATLAB file ({error})", layout, TITLE) from error
    if key not in mat:
        raise data_error(
            path, f"no variable '{key}' (found {sorted(k for k in mat if not k.startswith('_'))})", layout, TITLE
        )
    return mat


def check_categories(path: Path, categories: np.ndarray, codes: np.ndarray):
    """The loader's sanity check (`pascal50s.py:30-47`) minus the 1,000-per-category count (fixtures are smaller)."""
    derived = (
        (codes.sum(axis=1) == 12) * 1
        + (codes.sum(axis=1) == 13) * 2
        + ((codes < 6).sum(axis=1) == 1) * 3
        + ((codes < 6).sum(axis=1) == 2) * 4
    )
    bad = np.flatnonzero(derived != categories)
    if bad.size:
        raise data_error(path, f"pair {int(bad[0])}: category disagrees with new_data", PAIR_LAYOUT, TITLE)
    counts = {name: int((categories == code).sum()) for code, name in CATEGORIES.items()}
    if set(counts.values()) != {1000}:
        logger.warning("%s: %s pairs per category (the release has 1,000 of each)", path, counts)


def load(data_dir: Path, options: BenchmarkOptions) -> Benchmark:
    references, tie_policy = options.pascal_references, options.pascal_ties
    num_draws, per_draw, draw_seed = options.pascal_draws, options.pascal_per_draw, options.pascal_seed
    if references not in ("all", "draws"):
        raise ValueError(f"references must be 'all' (official) or 'draws' (paper), got {references!r}")
    if tie_policy not in PASCAL_TIE_POLICIES:
        raise ValueError(f"tie_policy must be one of {PASCAL_TIE_POLICIES}, got {tie_policy!r}")
    pair_path = locate(data_dir, "pascal50s", "pairs", PAIR_LAYOUT, TITLE)
    pair_mat = load_mat(pair_path, PAIR_LAYOUT, "new_input")
    consensus_path = locate(data_dir, "pascal50s", "consensus", CONSENSUS_LAYOUT, TITLE)
    triplets = load_mat(consensus_path, CONSENSUS_LAYOUT, "triplets")["triplets"][0]
    pairs = pair_mat["new_input"][0]
    categories = np.asarray(pair_mat["category"]).ravel()
    check_categories(pair_path, categories, np.asarray(pair_mat["new_data"]))
    if len(triplets) != REFERENCES_PER_PAIR * len(pairs):
        raise data_error(
            consensus_path, f"{len(triplets)} triplets for {len(pairs)} pairs (48 per pair)", CONSENSUS_LAYOUT, TITLE
        )
    image_dir = folder_or_first(data_dir, "pascal50s", "images")
    votes_a, votes_b, all_references, captions = [], [], [], []
    for index in range(len(pairs)):
        votes, pair_references = {}, []
        for position in range(index * REFERENCES_PER_PAIR, (index + 1) * REFERENCES_PER_PAIR):
            reference, first, second, winner = [field[0][0] for field in triplets[position]]
            winning = first[0].strip() if winner == 1 else second[0].strip()
            votes[winning] = votes.get(winning, 0) + 1
            pair_references.append(reference[0].strip())
        image, caption_a, caption_b = [field[0] for field in pairs[index]]
        caption_a, caption_b = caption_a.strip(), caption_b.strip()
        if len(votes) > 2 or not {caption_a, caption_b} >= set(votes):
            raise data_error(
                consensus_path,
                f"pair {index}: votes go to captions other than A and B ({sorted(votes)})",
                CONSENSUS_LAYOUT,
                TITLE,
            )
        votes_a.append(votes.get(caption_a, 0))
        votes_b.append(votes.get(caption_b, 0))
        all_references.append(pair_references)
        captions.append((str(image_dir / image), caption_a, caption_b))
    labels = pascal_labels(votes_a, votes_b)

    if references == "all":
        draws = [[list(range(REFERENCES_PER_PAIR))] * len(pairs)]
    else:
        draws = sample_reference_draws(len(pairs), REFERENCES_PER_PAIR, num_draws, per_draw, draw_seed)
    items = []
    for draw, chosen in enumerate(draws):
        for index, (image, caption_a, caption_b) in enumerate(captions):
            pair_references = [all_references[index][k] for k in chosen[index]]
            for side, caption in (("A", caption_a), ("B", caption_b)):
                items.append(
                    {
                        "id": f"pascal50s/{index}/{side}/draw{draw}",
                        "image": str(Path(image).resolve()),
                        "candidate": caption,
                        "references": pair_references,
                        "pair": index,
                        "side": side,
                        "draw": draw,
                        "category": CATEGORIES[int(categories[index])],
                        "label": labels[index],
                    }
                )

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        per_draw_accuracy = []
        for draw in range(len(draws)):
            draw_items = items[draw * 2 * len(pairs) : (draw + 1) * 2 * len(pairs)]
            values = scores_for(draw_items, scores)
            predictions = pascal_predictions(values[0::2], values[1::2], tie_policy)
            correct = {name: [] for name in CATEGORIES.values()}
            for index, prediction in enumerate(predictions):
                correct[CATEGORIES[int(categories[index])]].append(prediction == labels[index])
            per_draw_accuracy.append({f"accuracy_{name}": accuracy(hits) for name, hits in correct.items() if hits})
        statistics = {name: float(np.mean([draw[name] for draw in per_draw_accuracy])) for name in per_draw_accuracy[0]}
        statistics["accuracy_mean"] = float(np.mean(list(statistics.values())))
        return statistics

    protocol = {
        "labels": "majority of the 48 judgements, ties by random.seed(42), one draw per pair (Polos pascal50s.py)",
        "references": "all 48 (official Polos code)"
        if references == "all"
        else f"{num_draws} draws of {per_draw} of the 48, numpy default_rng(seed={draw_seed}), accuracy averaged "
        "over draws (paper)",
        "metric_ties": {"b": "count as B (official)", "a": "count as A", "wrong": "never correct (paper wording)"}[
            tie_policy
        ],
        "statistic": "100 x accuracy per category (HC, HI, HM, MM) and their mean",
    }
    options = {"references": references, "num_draws": num_draws, "per_draw": per_draw, "seed": draw_seed}
    return Benchmark("pascal50s", items, [pair_path, consensus_path], protocol, evaluate, options=options)
