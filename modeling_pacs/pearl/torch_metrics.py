"""Pearl as a torchmetrics `Metric`: the generic `ModelMetric` (`evaluation/torch_metrics.py`); Pearl has no released
model yet, so `model=` is required.

Example:

```python
>>> from modeling_pacs.pearl.torch_metrics import PearlMetric
>>> metric = PearlMetric(model="tiny:pearl", output="ref_score")  # doctest: +SKIP
>>> metric.update(["examples/images/red_circle.png"], ["a red circle"], [["a red disc"]])  # doctest: +SKIP
```
"""

from ..evaluation.torch_metrics import ModelMetric


class PearlMetric(ModelMetric):
    """Pearl-img (`output="score"`) or Pearl (`output="ref_score"`) as a torchmetrics `Metric`; see `ModelMetric`."""

    metric = "pearl"


__all__ = ["PearlMetric"]
