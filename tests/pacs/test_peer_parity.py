"""CLIP-S raw cosines from our engine equal torchmetrics' CLIPScore on the same tiny weights."""

import copy

import numpy as np
import pytest
import torch
from torchmetrics.functional.multimodal.clip_score import _clip_score_update

from modeling_pacs.tokenization import build_clip_processor
from tests.fixtures.helpers import random_image


class TensorFeaturesCLIP:
    """torchmetrics 1.9 calls `.norm()` on `get_*_features`; transformers 5 returns output objects. Unwrap them."""

    def __init__(self, clip):
        self.clip = clip
        self.config = clip.config

    def to(self, device):
        return self

    def get_image_features(self, pixel_values):
        return self.clip.get_image_features(pixel_values=pixel_values).pooler_output

    def get_text_features(self, input_ids, attention_mask=None):
        return self.clip.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output


@pytest.mark.filterwarnings("ignore")
def test_clip_s_cosines_equal_torchmetrics(tiny_model):
    model = copy.deepcopy(tiny_model)
    model.config.prompt_prefix = ""  # torchmetrics encodes the bare caption
    # 224 x 224 images: no resize and no crop, so both pipelines see identical pixels.
    images = [random_image(seed, (224, 224)) for seed in range(5)]
    captions = ["a dog", "two cats on a sofa", "a red car parked outside", "a bowl of fruit", "a man surfing"]
    ours = model.score(images, captions).image_text_cosines
    tensors = [torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1) for image in images]
    with torch.no_grad():
        theirs, count = _clip_score_update(tensors, captions, TensorFeaturesCLIP(model.clip), build_clip_processor())
    assert count == 5
    assert torch.allclose(ours, theirs.float() / 100, atol=1e-5, rtol=0)
    # and Eq. 4 is w * max(cos, 0) of those cosines
    assert torch.allclose(model.score(images, captions).scores, 2.5 * (theirs.float() / 100).clamp(min=0), atol=1e-5)


def test_clip_s_scores_equal_the_original_openai_clip_code():
    """CLIP-S through our engine (our pipelines, tokenizer, dedup) equals OpenAI's `clip/model.py` on the same tiny
    random weights, with the original preprocessing and tokenizer, to <= 1e-5 (features, cosines, Eqs. 4 and 5)."""
    from modeling_pacs.pacs.convert import convert_state_dict
    from tests.pacs.test_convert import TINY_HEAD_DIM, assert_parity, original_code
    from tests.references.original_clip import build_original_clip

    state_dict = build_original_clip(activation="quick_gelu", seed=3).state_dict()
    model = convert_state_dict(state_dict, "pac_s_vit_b32", head_dim=TINY_HEAD_DIM, allow_other_geometry=True).model
    model.config.variant, model.config.w = "clip_s", 2.5
    assert_parity(model.eval(), original_code(state_dict, None, "quick_gelu"), w=2.5)
