"""The statistics and item rules of the benchmark protocols (docs/spec/benchmarks.md), as pure functions.

Correlations are returned x100, as in the papers, unrounded; `official_rounding` gives the Polos/DENEB/EMScore
4-decimal rounding of the raw coefficient (x100 afterwards). Everything here is NumPy and the standard library, so the
tests can check it against scipy, the reference the official code uses.
"""

import math
import random
from collections.abc import Sequence

import numpy as np

from .benchmark import scores_for

# Pascal-50S metric-tie policies (docs/spec/benchmarks.md#pascal50s, docs/spec/benchmarks.md#disagreements): the
# official Polos code predicts B on a tie, a third-party variant predicts A, and the papers' wording ("assigns a higher
# score") counts a tie as wrong.
PASCAL_TIE_POLICIES = ("b", "a", "wrong")
PASCAL_LABEL_SEED = 42  # random.seed(42) in Polos validate/pascal50s.py


def _as_vector(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of numbers, got shape {array.shape}")
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{what}[{bad}] is {array[bad]}: drop or fix non-finite values before correlating")
    return array


def _paired(metric: Sequence[float], human: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = _as_vector(metric, "metric scores"), _as_vector(human, "human scores")
    if len(x) != len(y):
        raise ValueError(f"got {len(x)} metric scores and {len(y)} human scores: pass one of each per item")
    if len(x) < 2:
        raise ValueError(f"a correlation needs at least 2 items, got {len(x)}")
    return x, y


def _tied_pairs(values: np.ndarray) -> int:
    _, counts = np.unique(values, axis=0, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def _discordant_pairs(x: np.ndarray, y: np.ndarray) -> int:
    """Pairs ordered one way by x and strictly the other way by y (a Fenwick tree over the ranks of y)."""
    order = np.lexsort((y, x))  # by x, then y: pairs tied in x are never counted as discordant
    ranks = np.unique(y, return_inverse=True)[1][order] + 1
    tree = [0] * (int(ranks.max()) + 1)
    discordant = 0
    for seen, rank in enumerate(ranks.tolist()):
        not_greater, index = 0, rank
        while index:
            not_greater += tree[index]
            index -= index & -index
        discordant += seen - not_greater
        index = rank
        while index < len(tree):
            tree[index] += 1
            index += index & -index
    return discordant


def kendall_tau(metric: Sequence[float], human: Sequence[float], variant: str = "b") -> float:
    """100 x Kendall's tau (`variant` "b" or "c", as `scipy.stats.kendalltau(metric, human, variant=...)`).

    tau_c (Stuart) is `2 (C - D) / (n^2 (m - 1) / m)` with m the smaller number of distinct values; ties in the metric
    lower tau_b but not tau_c. NaN where a side is constant (no pair is ordered), as scipy.
    """
    if variant not in ("b", "c"):
        raise ValueError(f"variant must be 'b' or 'c', got {variant!r}")
    x, y = _paired(metric, human)
    n = len(x)
    total = n * (n - 1) // 2
    tied_x, tied_y = _tied_pairs(x), _tied_pairs(y)
    tied_both = _tied_pairs(np.stack([x, y], axis=1))
    discordant = _discordant_pairs(x, y)
    concordant = total - tied_x - tied_y + tied_both - discordant
    if variant == "b":
        denominator = math.sqrt((total - tied_x) * (total - tied_y))
        return 100 * (concordant - discordant) / denominator if denominator else math.nan
    distinct = min(len(np.unique(x)), len(np.unique(y)))
    if distinct < 2:
        return math.nan
    return 100 * 2 * (concordant - discordant) / (n * n * (distinct - 1) / distinct)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their mean rank (scipy.stats.rankdata's "average")."""
    unique, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1
    return (first_rank + (counts - 1) / 2)[inverse]


def pearson(metric: Sequence[float], human: Sequence[float]) -> float:
    """100 x Pearson's r (NaN where a side is constant)."""
    x, y = _paired(metric, human)
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return 100 * float((x * y).sum()) / denominator if denominator else math.nan


def spearman(metric: Sequence[float], human: Sequence[float]) -> float:
    """100 x Spearman's rho: Pearson's r of the average ranks (as `scipy.stats.spearmanr`)."""
    x, y = _paired(metric, human)
    return pearson(average_ranks(x), average_ranks(y))


def official_round(value_x100: float) -> float:
    """The Polos/DENEB/EMScore rounding: the raw coefficient to 4 decimals, shown x100."""
    return round(value_x100 / 100, 4) * 100


def accuracy(correct: Sequence[bool]) -> float:
    """100 x the share of True."""
    correct = np.asarray(correct, dtype=bool)
    if correct.size == 0:
        raise ValueError("accuracy of no items: the benchmark produced no pairs")
    return 100 * float(correct.mean())


# ------------------------------------------------------------------------------------------------------ Pascal-50S
def pascal_labels(votes_a: Sequence[int], votes_b: Sequence[int], seed: int = PASCAL_LABEL_SEED) -> list[int]:
    """Human labels (0 = caption A preferred) exactly as Polos `pascal50s.py:75`.

    One `random.random()` is drawn for every pair, tie or not, in file order, from `random.seed(seed)`; only a tie
    depends on it (label 0 iff the draw is < 0.5).
    """
    if len(votes_a) != len(votes_b):
        raise ValueError(f"got {len(votes_a)} A votes and {len(votes_b)} B votes: one of each per pair")
    generator = random.Random(seed)
    return [0 if a > b + generator.random() - 0.5 else 1 for a, b in zip(votes_a, votes_b)]


def pascal_predictions(scores_a: Sequence[float], scores_b: Sequence[float], tie_policy: str = "b") -> list[int | None]:
    """0 where the metric prefers A, 1 for B; a tie gives 1 ("b", official), 0 ("a") or None ("wrong": never
    correct)."""
    if tie_policy not in PASCAL_TIE_POLICIES:
        raise ValueError(f"tie_policy must be one of {PASCAL_TIE_POLICIES}, got {tie_policy!r}")
    tie = {"b": 1, "a": 0, "wrong": None}[tie_policy]
    return [0 if a > b else 1 if a < b else tie for a, b in zip(scores_a, scores_b)]


def sample_reference_draws(
    num_pairs: int, num_references: int = 48, num_draws: int = 5, per_draw: int = 5, seed: int = 0
) -> list[list[list[int]]]:
    """`[draw][pair]` -> sorted indices of `per_draw` distinct references ([paper-derived] Pascal-50S protocol).

    NumPy `default_rng(seed)`, drawing pair by pair within a draw, draw after draw: fixed by the seed.
    """
    for name, value in (("num_draws", num_draws), ("per_draw", per_draw), ("num_references", num_references)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if per_draw > num_references:
        raise ValueError(f"cannot draw {per_draw} distinct references out of {num_references}")
    generator = np.random.default_rng(seed)
    return [
        [sorted(generator.choice(num_references, per_draw, replace=False).tolist()) for _ in range(num_pairs)]
        for _ in range(num_draws)
    ]


# ------------------------------------------------------------------------------------------------------------ FOIL
def remove_true_caption(references: Sequence[str], original: str) -> list[str]:
    """The references minus every one string-equal to the true caption (Polos `compute_foil.py:65`: no normalisation,
    so a whitespace or case variant stays)."""
    return [reference for reference in references if reference != original]


def strictly_greater(first: Sequence[float], second: Sequence[float]) -> list[bool]:
    """Hallucination accuracy rule: correct only if the true caption scores strictly higher (a tie is a failure)."""
    return [a > b for a, b in zip(first, second)]


# ---------------------------------------------------------------------------------------------------- VATEX-EVAL
def per_annotator_correlations(
    metric: Sequence[float], human: np.ndarray, round_predictions: bool = False
) -> dict[str, float]:
    """EMScore `utils.py:19-42`: Kendall tau_b and Spearman against each annotator column, averaged, x100.

    `round_predictions=True` reproduces the official code: `np.around(pred, 4)` first (creating ties) and the averaged
    coefficients rounded to 4 decimals.
    """
    human = np.asarray(human, dtype=np.float64)
    if human.ndim != 2:
        raise ValueError(f"human scores must be [items, annotators], got shape {human.shape}")
    metric = _as_vector(metric, "metric scores")
    if round_predictions:
        metric = np.around(metric, 4)
    taus = [kendall_tau(metric, human[:, column], "b") for column in range(human.shape[1])]
    rhos = [spearman(metric, human[:, column]) for column in range(human.shape[1])]
    result = {"kendall_tau_b": float(np.mean(taus)), "spearman": float(np.mean(rhos))}
    if round_predictions:
        result = {name: official_round(value) for name, value in result.items()}
    return result


def pooled_correlations(metric: Sequence[float], human: np.ndarray) -> dict[str, float]:
    """Every (item, annotator) rating as its own row: the Flickr8k-style alternative to per-annotator averaging."""
    human = np.asarray(human, dtype=np.float64)
    repeated = np.repeat(_as_vector(metric, "metric scores"), human.shape[1])
    return {"kendall_tau_b": kendall_tau(repeated, human.ravel(), "b"), "spearman": spearman(repeated, human.ravel())}


# ---------------------------------------------------------------------------------------------- ActivityNet-FOIL
def segment_frames(segment: Sequence[float], num_frames: int, duration: float) -> slice:
    """The frames of a timestamp `[a, b]`: `feats[int(a*n//duration) : int(b*n//duration)]` (may be empty)."""
    if duration <= 0 or not math.isfinite(duration):
        raise ValueError(f"video duration must be finite and > 0, got {duration}")
    start, end = segment
    return slice(int(start * num_frames // duration), int(end * num_frames // duration))


def overlapping_references(
    segment: Sequence[float], reference_segments: Sequence[Sequence[float]], threshold: float = 0.4
) -> list[int]:
    """Indices of the references whose integer-second range overlaps the candidate's by more than `threshold` of the
    reference's own length (EMScore `ActivityNet-FOIL_demo.py:134-146`); all of them when none qualifies."""
    start, end = segment
    candidate = set(range(int(start), int(end) + 1))
    chosen = []
    for index, (ref_start, ref_end) in enumerate(reference_segments):
        reference = range(int(ref_start), int(ref_end) + 1)
        if len(reference) and len(candidate.intersection(reference)) / len(reference) > threshold:
            chosen.append(index)
    return chosen or list(range(len(reference_segments)))


def paired_accuracy(right: dict[str, float], foil: dict[str, float]) -> float:
    """100 x the share of videos whose right paragraph scores strictly above its foil, aligned by video id."""
    missing = sorted(set(right) ^ set(foil))
    if missing:
        raise ValueError(f"videos scored on one side only: {missing[:5]} (every video needs a right and a foil score)")
    return accuracy([right[video] > foil[video] for video in sorted(right)])


def correlation_report(items: list[dict], official_rounding: bool):
    """The CSV benchmarks' statistics over all items: Kendall tau_b, tau_c, Spearman, Pearson (x100)."""
    human = [item["human"] for item in items]

    def evaluate(scores: dict[str, float], column: str = "score") -> dict[str, float]:
        metric = scores_for(items, scores)
        statistics = {
            "kendall_tau_b": kendall_tau(metric, human, "b"),
            "kendall_tau_c": kendall_tau(metric, human, "c"),
            "spearman": spearman(metric, human),
            "pearson": pearson(metric, human),
        }
        if official_rounding:
            statistics = {key: official_round(value) for key, value in statistics.items()}
        return statistics

    return evaluate


# ----------------------------------------------------------------------------------------------- DetailCaps-4870
def one_minus_r_squared(metric: Sequence[float], human: Sequence[float]) -> float:
    """`1 - R^2` with the metric's scores as the observed values and the judge's scores as the predictions, no fit:
    `sum((metric - human)^2) / sum((metric - mean(metric))^2)` (as `1 - sklearn.metrics.r2_score(metric, human)`).

    A ratio, not x100; it depends on the scales of both sides (0 only when the metric returns the judge's scores).
    This is our reading of the CAPTURE README's `1-R^2` column (see `detailcaps.py`). NaN for a constant metric.
    """
    x, y = _paired(metric, human)
    total = float(((x - x.mean()) ** 2).sum())
    return float(((x - y) ** 2).sum()) / total if total else math.nan


def grouped_kendall_tau(
    metric: Sequence[float], human: Sequence[float], groups: Sequence, variant: str = "b"
) -> tuple[float, int]:
    """100 x Kendall's tau within each group (the captions of one image), averaged over the groups where it is
    defined, and how many groups that is. A group with fewer than 2 items, or constant on either side, has no tau
    and is left out of the mean (NaN when no group has one)."""
    x, y = _paired(metric, human)
    if len(groups) != len(x):
        raise ValueError(f"got {len(groups)} group labels for {len(x)} items: pass one per item")
    members: dict = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    taus = []
    for indices in members.values():
        if len(indices) < 2:
            continue
        tau = kendall_tau(x[indices], y[indices], variant)
        if math.isfinite(tau):
            taus.append(tau)
    return (float(np.mean(taus)) if taus else math.nan), len(taus)
