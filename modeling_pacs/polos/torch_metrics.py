"""Polos as a torchmetrics `Metric` (`update(images, captions, references)`: Polos reads references): the generic
`ModelMetric` (`evaluation/torch_metrics.py`) with the released Polos as the default.

Example:

```python
>>> from modeling_pacs.polos.torch_metrics import PolosMetric
>>> metric = PolosMetric(model="tiny:polos")  # doctest: +SKIP
>>> metric.update(["examples/images/red_circle.png"], ["a red circle"], [["a red disc"]])  # doctest: +SKIP
```
"""

from ..evaluation.torch_metrics import ModelMetric


class PolosMetric(ModelMetric):
    """Polos as a torchmetrics `Metric`; see `ModelMetric`."""

    default_model = "polos_vit_b32"
    metric = "polos"


__all__ = ["PolosMetric"]
