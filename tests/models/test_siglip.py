"""SigLIP and SigLIP 2 (fixed-resolution) backbones: features equal transformers' own on the same weights,
preprocessing equals `SiglipImageProcessor`, scores equal a NumPy computation, a fresh offline process reproduces
them, and the configuration explains what it refuses."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pytest
import torch
from transformers import Siglip2Config, SiglipConfig, SiglipImageProcessorPil

from modeling_pacs import PACSConfig, PACSModel
from modeling_pacs.models.backbones import multihead_attention_projections
from modeling_pacs.models.inputs import load_and_preprocess_squashed
from modeling_pacs.testing.pacs import build_siglip_tokenizer, make_tiny_model, tiny_clip_config, tiny_siglip_config
from tests.fixtures.helpers import assert_scores_close, random_image

BACKBONES = ["siglip", "siglip2"]
CAPTIONS = ["a dog on the grass", "Two CATS, sleeping!", "", "a red car parked in front of a house near a tree"]
REFERENCES = [["a dog lying on a lawn", "grass and a dog"], ["two cats"], ["a photo"], ["a car", "a red bus"]]
# Features pass through 2 layers on inputs that agree to ~1e-7: they agree to well below this.
FEATURE_TOLERANCE = 1e-5


@pytest.fixture(scope="module", params=BACKBONES)
def siglip_model(request):
    return make_tiny_model(variant="clip_s", seed=2, backbone=request.param)


@pytest.fixture(scope="module")
def images():
    sizes = [(320, 240), (97, 131), (224, 224), (640, 427)]
    return [random_image(seed, size) for seed, size in enumerate(sizes)]


def hf_image_features(model: PACSModel, images: list) -> np.ndarray:
    """transformers' own path: the SigLIP image processor, then `SiglipModel.get_image_features`."""
    processor = SiglipImageProcessorPil(size={"height": 224, "width": 224})
    pixel_values = processor(images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return model.clip.get_image_features(pixel_values=pixel_values).pooler_output.double().numpy()


def hf_text_features(model: PACSModel, texts: list[str]) -> np.ndarray:
    """transformers' own path: the tokenizer padded to max_length (as SigLIP was trained), `get_text_features`."""
    input_ids = model.tokenizer(texts, padding="max_length", max_length=64, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return model.clip.get_text_features(input_ids=input_ids["input_ids"]).pooler_output.double().numpy()


def numpy_scores(image_features, candidate_features, reference_features, w):
    """Eqs. 4 and 5 in float64 NumPy: scores, reference scores, and the unclipped cosines."""

    def normalise(rows):
        return rows / np.linalg.norm(rows, axis=-1, keepdims=True)

    cosines = (normalise(image_features) * normalise(candidate_features)).sum(-1)
    scores = w * np.maximum(cosines, 0)
    ref_scores = []
    for index, references in enumerate(reference_features):
        similarity = max(0.0, float((normalise(references) @ normalise(candidate_features[index])).max()))
        total = scores[index] + similarity
        ref_scores.append(0.0 if total == 0 else 2 * scores[index] * similarity / total)
    return scores, np.array(ref_scores), cosines


# ----------------------------------------------------------------------------------------------------- config
def test_siglip_defaults_differ_from_clip_only_where_the_backbone_does(siglip_model):
    config = siglip_model.config
    assert config.backbone_config.model_type == "siglip"
    assert (config.prompt_prefix, config.max_text_length, config.w) == ("", 64, 2.5)
    assert PACSConfig(backbone_config=config.backbone_config, variant="pac_s").w == 2.0
    clip = PACSConfig(backbone_config=tiny_clip_config())
    assert (clip.prompt_prefix, clip.max_text_length, clip.w) == ("A photo depicts ", 77, 2.5)
    # A dict backbone config (as read from config.json) resolves to the same defaults.
    reloaded = PACSConfig(backbone_config=config.backbone_config.to_dict())
    assert (reloaded.prompt_prefix, reloaded.max_text_length) == ("", 64)


def test_naflex_and_headless_siglip_are_refused_with_an_explanation():
    with pytest.raises(ValueError, match=r"'siglip2' \(SigLIP 2 NaFlex.*google/siglip2-base-patch16-224"):
        PACSConfig(backbone_config=Siglip2Config())
    with pytest.raises(ValueError, match="no vision pooling head"):
        PACSConfig(backbone_config=SiglipConfig(vision_config={"vision_use_head": False}))
    with pytest.raises(ValueError, match="text head outputs 48 dimensions and its image head 32: set"):
        PACSConfig(backbone_config=SiglipConfig(text_config={"projection_size": 48}, vision_config={"hidden_size": 32}))
    with pytest.raises(ValueError, match=r"backbone model_type 'bert' is not supported.*clip.*siglip"):
        PACSConfig(backbone_config={"model_type": "bert"})


# ----------------------------------------------------------------------------------------------------- features
def test_image_features_equal_transformers_get_image_features(siglip_model, images):
    ours = siglip_model.encode_images(images, batch_size=3).double().numpy()
    np.testing.assert_allclose(ours, hf_image_features(siglip_model, images), rtol=0, atol=FEATURE_TOLERANCE)


def test_text_features_equal_transformers_get_text_features(siglip_model):
    texts = CAPTIONS + ["word " * 80]  # the last one is truncated to 64 tokens
    ours = siglip_model.encode_texts(texts, batch_size=2).double().numpy()
    np.testing.assert_allclose(ours, hf_text_features(siglip_model, texts), rtol=0, atol=FEATURE_TOLERANCE)


def test_token_features_for_video_scoring(siglip_model):
    """`encode_texts(return_tokens=True)`: `head` of every position; the pooled feature is the last position's."""
    features = siglip_model.encode_texts(CAPTIONS, return_tokens=True)
    tokens = siglip_model.tokenizer(CAPTIONS, padding="max_length", max_length=64, return_tensors="pt")
    assert torch.equal(features.input_ids, tokens["input_ids"])
    assert torch.equal(features.attention_mask, tokens["attention_mask"])
    assert features.token_embeds.shape == (len(CAPTIONS), 64, features.text_embeds.shape[1])
    text_model = siglip_model.clip.text_model
    with torch.no_grad():
        expected = text_model.head(text_model(input_ids=tokens["input_ids"]).last_hidden_state)
    torch.testing.assert_close(features.token_embeds, expected, atol=FEATURE_TOLERANCE, rtol=0)
    torch.testing.assert_close(features.text_embeds, features.token_embeds[:, -1], atol=FEATURE_TOLERANCE, rtol=0)


def test_captions_are_tokenised_as_given_without_the_clip_prompt(siglip_model):
    tokens = siglip_model.tokenize(["a dog"])
    expected = siglip_model.tokenizer(["a dog"], padding="max_length", max_length=64)["input_ids"]
    assert tokens["input_ids"].tolist() == expected


# ----------------------------------------------------------------------------------------------------- scores
def test_scores_equal_numpy_on_transformers_features(siglip_model, images):
    output = siglip_model.score(images, CAPTIONS, references=REFERENCES)
    image_features = hf_image_features(siglip_model, images)
    candidate_features = hf_text_features(siglip_model, CAPTIONS)
    reference_features = [hf_text_features(siglip_model, references) for references in REFERENCES]
    w = siglip_model.config.w
    scores, ref_scores, cosines = numpy_scores(image_features, candidate_features, reference_features, w)
    # the unclipped cosines too: random tiny weights may give negative cosines, which Eq. 4 clips to 0
    assert_scores_close(output.image_text_cosines, cosines, what="cosines")
    assert_scores_close(output.scores, scores)
    assert_scores_close(output.ref_scores, ref_scores, what="ref_scores")


def test_logit_bias_never_enters_the_score(siglip_model, images):
    before = siglip_model.score(images, CAPTIONS).scores.clone()
    original = siglip_model.clip.logit_bias.data.clone()
    try:
        siglip_model.clip.logit_bias.data.fill_(-50.0)
        siglip_model.clip.logit_scale.data.fill_(5.0)
        assert torch.equal(siglip_model.score(images, CAPTIONS).scores, before)
    finally:
        siglip_model.clip.logit_bias.data.copy_(original)


# ----------------------------------------------------------------------------------------------------- images
# Two uint8 levels after normalising to [-1, 1] (2 * 2/255): the measured worst case of PIL vs torchvision resizing.
SIGLIP_RESAMPLING_BOUND = 4 / 255 + 1e-6
ODD_SIZES = [(1, 1), (7, 300), (301, 17), (224, 224), (225, 223), (500, 375)]
MODES = ["RGB", "L", "1", "P", "RGBA", "LA", "CMYK", "P_transparent"]


def odd_image(seed: int, size: tuple[int, int], mode: str) -> PIL.Image.Image:
    image = random_image(seed, size)
    if mode == "P_transparent":
        image = image.convert("P")
        image.info["transparency"] = 0
        return image
    if mode in ("RGBA", "LA"):
        alpha = PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, size[::-1]).astype(np.uint8))
        image = image.convert(mode)
        image.putalpha(alpha)
        return image
    return image.convert(mode)


@pytest.mark.parametrize("mode", MODES)
def test_preprocessing_equals_siglip_image_processor(mode):
    processor = SiglipImageProcessorPil(size={"height": 224, "width": 160})
    for seed, size in enumerate(ODD_SIZES):
        image = odd_image(seed, size, mode)
        expected = processor(image, return_tensors="pt")["pixel_values"][0]
        ours = load_and_preprocess_squashed(image, seed, 224, 160, (0.5,) * 3, (0.5,) * 3)
        assert ours.shape == expected.shape == (3, 224, 160)
        torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0, msg=f"{mode} {size}")


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="the image size must be positive, got height=0, width=224"):
        load_and_preprocess_squashed(random_image(0), 0, 0, 224, (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match="got hidden_size=30, num_layers=2, image_size=224, patch_size=32"):
        tiny_siglip_config(build_siglip_tokenizer(), hidden_size=30)


def test_preprocessing_equals_the_torchvision_siglip_image_processor():
    pytest.importorskip("torchvision", reason="SiglipImageProcessor (torchvision backend) needs torchvision")
    from transformers import SiglipImageProcessor

    processor = SiglipImageProcessor(size={"height": 224, "width": 224})
    for seed, size in enumerate(ODD_SIZES):
        image = odd_image(seed, size, "RGB")
        expected = processor(image, return_tensors="pt")["pixel_values"][0]
        ours = load_and_preprocess_squashed(image, seed, 224, 224, (0.5,) * 3, (0.5,) * 3)
        # torchvision resizes uint8 tensors with torch's antialiased bicubic, not PIL's: pixels differ by rounding.
        # Measured once (torchvision 0.28's Python files with torch 2.13, 67 sizes from 1x1 to 900x900, random, smooth
        # and blocky images): at most 2 uint8 levels (4/255 after the [-1, 1] normalisation), mean |diff| <= 5.3e-5.
        torch.testing.assert_close(ours, expected, atol=SIGLIP_RESAMPLING_BOUND, rtol=0)
        assert (ours - expected).abs().mean().item() <= 1e-4


def test_siglip_pooling_head_attention_is_excluded_from_lora(siglip_model):
    assert multihead_attention_projections(siglip_model.clip) == ["vision_model.head.attention.out_proj"]
    assert multihead_attention_projections(make_tiny_model(variant="clip_s").clip) == []


# ----------------------------------------------------------------------------------------------------- save/load
FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModel, AutoProcessor
    model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(sys.argv[1], trust_remote_code=True)
    output = model.score(json.loads(sys.argv[2]), json.loads(sys.argv[3]), references=json.loads(sys.argv[4]))
    print(json.dumps({
        "module": type(model).__module__, "backbone": type(model.clip).__name__,
        "processor": type(processor).__name__, "tokenizer": type(model.tokenizer).__name__,
        "scores": output.scores.tolist(), "ref_scores": output.ref_scores.tolist(),
        "cosines": output.image_text_cosines.tolist(),
    }))
    """
)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_fresh_offline_process_reproduces_scores(backbone, tmp_path, images):
    directory = tmp_path / "model"
    model = make_tiny_model(directory, variant="pac_s_pp", seed=2, backbone=backbone)
    paths = []
    for index, image in enumerate(images):
        paths.append(str(tmp_path / f"{index}.png"))
        image.save(paths[-1])
    expected = model.score(paths, CAPTIONS, references=REFERENCES)
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), PYTHONPATH="")
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(directory), *(json.dumps(x) for x in (paths, CAPTIONS, REFERENCES))],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["module"].startswith("transformers_modules.")  # the copied remote code, not this checkout
    assert loaded["backbone"] == "SiglipModel" and loaded["processor"] == "SiglipProcessor"
    assert loaded["tokenizer"] == {"siglip": "SiglipTokenizer", "siglip2": "Siglip2Tokenizer"}[backbone]
    # unclipped cosines too: random tiny weights may give negative cosines, which Eq. 4 clips to 0
    assert_scores_close(loaded["cosines"], expected.image_text_cosines, what="cosines")
    assert_scores_close(loaded["scores"], expected.scores)
    assert_scores_close(loaded["ref_scores"], expected.ref_scores, what="ref_scores")
    adapter_config = json.loads((directory / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == f"google/{backbone}-base-patch16-224"
