"""Polos as a pycocoevalcap scorer (`compute_score(gts, res)` with the references of `gts`, `method()`): the generic
`ModelScorer` (`evaluation/coco_scorers.py`) with the released Polos as the default.

Example:

```python
>>> from modeling_pacs.polos.coco_scorers import PolosScorer
>>> scorer = PolosScorer(model="tiny:polos", images={1: "examples/images/red_circle.png"})  # doctest: +SKIP
>>> scorer.method()  # doctest: +SKIP
'Polos'
```
"""

from ..evaluation.coco_scorers import ModelScorer


class PolosScorer(ModelScorer):
    """Polos as a pycocoevalcap scorer; see `ModelScorer`."""

    default_model = "polos_vit_b32"
    metric = "polos"


__all__ = ["PolosScorer"]
