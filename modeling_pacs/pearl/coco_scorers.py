"""Pearl as a pycocoevalcap scorer (`compute_score(gts, res)`, `method()`): the generic `ModelScorer`
(`evaluation/coco_scorers.py`). Its name is `PearlCOCOScorer` because `PearlScorer` is the loaded Pearl model
(`pearl/scorer.py`, what `load_model` returns); Pearl has no released model yet, so `model=` is required.

Example:

```python
>>> from modeling_pacs.pearl.coco_scorers import PearlCOCOScorer
>>> scorer = PearlCOCOScorer(model="tiny:pearl", images={1: "examples/images/red_circle.png"})  # doctest: +SKIP
>>> scorer.columns  # doctest: +SKIP
['Pearl-img', 'Pearl']
```
"""

from ..evaluation.coco_scorers import ModelScorer


class PearlCOCOScorer(ModelScorer):
    """Pearl-img (and Pearl with the references of `gts`) as a pycocoevalcap scorer; see `ModelScorer`."""

    metric = "pearl"


__all__ = ["PearlCOCOScorer"]
