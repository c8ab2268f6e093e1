"""Score outputs -> result columns, by the metric's declared output fields: the one conversion every door uses
(`pacs-score`, corpus scoring, the benchmark harness, the `evaluate` module, the Space).

A door then only names the columns its format wants: the headings people read (`label`: `PAC-S++`, `RefPAC-S++`,
`Polos`, `Pearl-img`), or the stable keys (`key`: `score`, `ref_score`, `truncated_tokens`).

`score_items` is the doors' one references policy (docs/concepts/bad-input.md), for every metric: when references are
given, an item with references gets the reference-based scores and an item without (an empty list) gets an empty
cell (`None`) in them, with a count (`ScoredItems.note`: "3 of 10 items have no references: their RefPAC-S++ cells
are empty"). Reference-free scores are there for every item; a metric without a reference-free score (Polos) leaves
every cell of such an item empty, and refuses only a call in which no item has references.

Example:

```python
>>> from modeling_pacs.loading import load_model
>>> model = load_model("tiny")  # random weights
>>> output = model.score(["examples/images/red_circle.png"], ["a red circle"], references=[["a red disc"]])
>>> [(column.key, column.label) for column in result_columns(model, output)]
[('score', 'PAC-S++'), ('ref_score', 'RefPAC-S++'), ('truncated_tokens', 'truncated_tokens')]
```
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from .errors import InputError, renumber_item, with_message
from .metric_spec import MetricSpec, OutputField
from .registry import spec_of


@dataclass(frozen=True)
class ResultColumn:
    """One output field of one scoring call: its per-item values and, for scores, the corpus score."""

    field: OutputField
    label: str  # the heading people read (from the model's config where the field says so)
    values: list  # per item, in input order: floats for scores, ints for counts
    mean: float | None  # the corpus score the model reports (None for counts)

    @property
    def key(self) -> str:
        return self.field.key

    @property
    def is_score(self) -> bool:
        return self.field.kind == "score"


def result_columns(model: Any, output: Any, spec: MetricSpec | None = None) -> list[ResultColumn]:
    """The columns of `output` (a `model.score(...)` result) that `model`'s spec declares, in the spec's order; fields
    the output does not hold (a reference-based score of a call without references) are left out."""
    spec = spec or spec_of(model)
    columns = []
    for field in spec.outputs:
        values = getattr(output, field.attribute, None)
        if values is None:
            continue
        values = values.tolist() if hasattr(values, "tolist") else list(values)
        mean = getattr(output, field.mean_attribute, None) if field.mean_attribute else None
        columns.append(ResultColumn(field, field.label_for(model.config), values, mean))
    return columns


def score_labels(model: Any) -> list[str]:
    """The headings of `model`'s score fields (`["PAC-S++", "RefPAC-S++"]`), whether or not a call fills them."""
    return [field.label_for(model.config) for field in spec_of(model).outputs if field.kind == "score"]


def score_columns(columns: list[ResultColumn]) -> list[ResultColumn]:
    """The score columns (not the diagnostic counts) of `result_columns`."""
    return [column for column in columns if column.is_score]


def item_rows(columns: list[ResultColumn], by: str = "label") -> list[dict]:
    """One `{name: value}` per item (`by`: `"label"` for headings, `"key"` for the stable keys)."""
    if not columns:
        return []
    names = [column.label if by == "label" else column.key for column in columns]
    return [dict(zip(names, values)) for values in zip(*(column.values for column in columns), strict=True)]


def count_totals_note(totals: dict[OutputField, int]) -> str:
    """`"; unparsable answers (NaN, left out of the means): 2"` from `{field: total}`: the end of a summary line."""
    return "".join(f"; {field.summary}: {total}" for field, total in totals.items())


def summary_counts(columns: list[ResultColumn]) -> str:
    """`count_totals_note` of the counts whose fields name a `summary` (empty when the metric declares none)."""
    return count_totals_note({column.field: sum(value or 0 for value in column.values) for column in columns
                              if column.field.summary})  # fmt: skip


# ---------------------------------------------------------------------------------------------------- references policy
@dataclass(frozen=True)
class ScoredItems:
    """The columns of `score_items`, in input order, with `None` where an item has no value; `without_references`
    lists the items given an empty reference list; `truncation` holds `truncated_tokens` (and, where the model counts
    them, `truncated_reference_tokens`) per item, for the doors' truncation reports."""

    columns: list[ResultColumn]
    without_references: tuple[int, ...]
    truncation: Any

    @property
    def num_items(self) -> int:
        return len(self.columns[0].values) if self.columns else 0

    def note(self) -> str | None:
        """`"3 of 10 items have no references: their RefPAC-S++ cells are empty"`; None when no item lacks them."""
        if not self.without_references:
            return None
        first = self.without_references[0]
        empty = [column.label for column in score_columns(self.columns) if column.values[first] is None]
        return references_note(len(self.without_references), self.num_items, empty)


def references_note(count: int, total: int, labels: list[str], noun: str = "item", empty: str = "empty") -> str:
    """`"3 of 10 items have no references: their RefPAC-S++ cells are empty"` (`"1 of 10 items has ...: its ... cell
    is ..."`)."""
    one = count == 1
    return (
        f"{count} of {total} {noun}s {'has' if one else 'have'} no references: {'its' if one else 'their'} "
        f"{' and '.join(labels)} {'cell is' if one and len(labels) == 1 else 'cells are'} {empty}"
    )


def score_items(
    model: Any,
    images: Sequence,
    candidates: Sequence[str],
    references: Sequence[Sequence[str]] | None = None,
    **options: Any,
) -> ScoredItems:
    """Score items of which some may have no references (an empty list) with `model.score`, by the references policy
    above. `references=None` is a reference-free call; `options` go to every call. Items with and without references
    are scored in two calls (each batched as usual).
    """
    spec = spec_of(model)
    score = model.score
    if references is None or all(references):
        output = score(images, candidates, references=references, **options)
        return ScoredItems(result_columns(model, output, spec), (), output)
    without = tuple(index for index, item in enumerate(references) if not item)
    with_references = [index for index, item in enumerate(references) if item]
    if not with_references and spec.capabilities.needs_references:
        raise InputError(
            f"{spec.display_name} scores a caption against references, and none of the {len(references)} items has "
            "any: give at least one reference per item"
        )
    parts = []  # (item indices, columns, output) of each call

    def score_part(indices: list[int], part_references: list | None):
        try:
            return score(
                [images[i] for i in indices], [candidates[i] for i in indices], references=part_references, **options
            )
        except (OSError, ValueError, TypeError) as error:  # the core's "image i" is item indices[i] of this call
            message = renumber_item(str(error), indices)
            if message is None:
                raise
            raise with_message(error, message) from error

    if with_references:
        output = score_part(with_references, [references[i] for i in with_references])
        parts.append((with_references, result_columns(model, output, spec), output))
    if spec.capabilities.reference_free:
        output = score_part(list(without), None)
        parts.append((list(without), result_columns(model, output, spec), output))
    columns = []
    for field in spec.outputs:
        produced = any(column.field is field for _, part_columns, _ in parts for column in part_columns)
        if not produced and not field.needs_references:  # a reference-based score stays, with empty cells
            continue
        values = [None] * len(candidates)
        for indices, part_columns, _ in parts:
            for column in part_columns:
                if column.field is field:
                    for index, value in zip(indices, column.values, strict=True):
                        values[index] = value
        present = [value for value in values if value is not None]
        # NaN (a judge's answer that gave no score) is left out, as the models' own means leave it out: NaN if all are
        answered = [value for value in present if not math.isnan(value)]
        mean = None
        if field.kind == "score" and present:
            mean = math.fsum(answered) / len(answered) if answered else math.nan
        columns.append(ResultColumn(field, field.label_for(model.config), values, mean))
    truncation = {}
    for name in ("truncated_tokens", "truncated_reference_tokens"):
        counts = [None] * len(candidates)  # None: an item no call scored
        for indices, _, output in parts:
            values = getattr(output, name, None)
            for index, value in zip(indices, [] if values is None else values.tolist(), strict=False):
                counts[index] = value
        truncation[name] = counts
    return ScoredItems(columns, without, SimpleNamespace(**truncation))


__all__ = [
    "ResultColumn",
    "ScoredItems",
    "count_totals_note",
    "item_rows",
    "references_note",
    "result_columns",
    "score_columns",
    "score_items",
    "score_labels",
    "summary_counts",
]
