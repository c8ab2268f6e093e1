"""Score outputs -> result columns, by the metric's declared output fields: the one conversion every door uses
(`pacs-score`, corpus scoring, the benchmark harness, the `evaluate` module, the Space).

A door then only names the columns its format wants: the headings people read (`label`: `PAC-S++`, `RefPAC-S++`,
`Polos`, `Pearl-img`), or the stable keys (`key`: `score`, `ref_score`, `truncated_tokens`).

Example:

```python
>>> from modeling_pacs.loading import load_model
>>> model = load_model("tiny")  # random weights
>>> output = model.score(["examples/images/red_circle.png"], ["a red circle"], references=[["a red disc"]])
>>> [(column.key, column.label) for column in result_columns(model, output)]
[('score', 'PAC-S++'), ('ref_score', 'RefPAC-S++'), ('truncated_tokens', 'truncated_tokens')]
```
"""

from dataclasses import dataclass
from typing import Any

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


__all__ = ["ResultColumn", "item_rows", "result_columns", "score_columns", "score_labels"]
