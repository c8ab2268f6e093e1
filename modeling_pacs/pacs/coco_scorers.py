"""PAC-S++, PAC-S and CLIP-S as pycocoevalcap scorers (`compute_score(gts, res)`, `method()`): the generic
`ModelScorer` (`evaluation/coco_scorers.py`) with each metric's released ViT-B/32 model as the default.

Example:

```python
>>> from modeling_pacs.pacs.coco_scorers import CLIPScorer
>>> scorer = CLIPScorer(model="tiny:clip_s", images={1: "examples/images/red_circle.png"})  # doctest: +SKIP
>>> scorer.method()  # doctest: +SKIP
'CLIP-S'
```
"""

from ..evaluation.coco_scorers import ModelScorer


class PACSppScorer(ModelScorer):
    """PAC-S++ (and RefPAC-S++ with the references of `gts`) as a pycocoevalcap scorer; see `ModelScorer`."""

    default_model = "pac_s_pp_vit_b32"
    metric = "pac_s_pp"


class PACSScorer(ModelScorer):
    """PAC-S (and RefPAC-S) as a pycocoevalcap scorer; see `ModelScorer`."""

    default_model = "pac_s_vit_b32"
    metric = "pac_s"


class CLIPScorer(ModelScorer):
    """CLIP-S (and RefCLIP-S) as a pycocoevalcap scorer; see `ModelScorer`."""

    default_model = "clip_s_vit_b32"
    metric = "clip_s"


__all__ = ["CLIPScorer", "PACSScorer", "PACSppScorer"]
