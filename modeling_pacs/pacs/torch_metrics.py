"""PAC-S++, PAC-S and CLIP-S as torchmetrics `Metric`s: the generic `ModelMetric` (`evaluation/torch_metrics.py`)
with each metric's released ViT-B/32 model as the default (`output="ref_score"` for the reference-based score).

Example:

```python
>>> from modeling_pacs.pacs.torch_metrics import PACSppMetric
>>> metric = PACSppMetric(model="tiny")  # doctest: +SKIP
>>> metric.update(["examples/images/red_circle.png"], ["a red circle"])  # doctest: +SKIP
```
"""

from ..evaluation.torch_metrics import ModelMetric


class PACSppMetric(ModelMetric):
    """PAC-S++ (or RefPAC-S++ with `output="ref_score"`) as a torchmetrics `Metric`; see `ModelMetric`."""

    default_model = "pac_s_pp_vit_b32"
    metric = "pac_s_pp"


class PACSMetric(ModelMetric):
    """PAC-S (or RefPAC-S) as a torchmetrics `Metric`; see `ModelMetric`."""

    default_model = "pac_s_vit_b32"
    metric = "pac_s"


class CLIPSMetric(ModelMetric):
    """CLIP-S (or RefCLIP-S) as a torchmetrics `Metric`; see `ModelMetric`."""

    default_model = "clip_s_vit_b32"
    metric = "clip_s"


__all__ = ["CLIPSMetric", "PACSMetric", "PACSppMetric"]
