"""Pearl's formulas as pure tensor functions (docs/spec/pearl.md#vss, docs/spec/pearl.md#training): the fusion of
the image and reference scores (Eqs. 2-3) and the training loss.

`modeling_pearl.py` calls these.
"""

import torch
import torch.nn.functional as F


def fuse_pearl_scores(
    img_score: torch.Tensor, ref_scores: torch.Tensor, ref_mask: torch.Tensor, lambda_img: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pearl Eqs. 2-3: best reference score (masked slots count 0) and the lambda fusion where a reference exists.

    Args:
        img_score: `[B]` image-head scores. ref_scores: `[B, R]` reference-head scores. ref_mask: `[B, R]` bool.

    Returns:
        `(score, ref_score, has_refs)`, each `[B]`.
    """
    ref_score = torch.where(ref_mask, ref_scores, torch.zeros_like(ref_scores)).amax(dim=1)
    has_refs = ref_mask.any(dim=1)
    score = torch.where(has_refs, lambda_img * img_score + (1 - lambda_img) * ref_score, img_score)
    return score, ref_score, has_refs


def pearl_huber_loss(
    img_score: torch.Tensor, ref_score: torch.Tensor, has_refs: torch.Tensor, labels: torch.Tensor, delta: float
) -> torch.Tensor:
    """Pearl's loss (docs/spec/pearl.md#training, docs/spec/pearl.md#a4):
    `sum_b H(y_img_b, y_b) + sum_{b with refs} H(y_ref_b, y_b)`, Huber `delta`."""
    image_term = F.huber_loss(img_score, labels, reduction="sum", delta=delta)
    reference_term = F.huber_loss(ref_score[has_refs], labels[has_refs], reduction="sum", delta=delta)
    return image_term + reference_term


__all__ = ["fuse_pearl_scores", "pearl_huber_loss"]
