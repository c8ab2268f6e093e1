"""SigLIP-based models through the user-facing entry points: `pacs-pp make-tiny --backbone`, `pacs-score`, the
`tiny-siglip` aliases, plain SigLIP checkpoints in `load_model`, the `evaluate` module and the Space."""

import json
from pathlib import Path

import evaluate
import numpy as np
import pytest
import torch
from transformers import Siglip2Config

from modeling_pacs import PACSModel
from modeling_pacs.cli import main, score_main
from modeling_pacs.loading import load_model
from tests.fixtures.helpers import assert_scores_close, random_image

REPO_ROOT = Path(__file__).resolve().parents[2]
CAPTIONS = ["a dog on the grass", "two cats sleeping", "a red car", "a dog on the grass"]
REFERENCES = [["a dog lying on a lawn"], ["cats"], ["a car", "a red bus"], ["a brown dog"]]


@pytest.fixture(scope="module")
def siglip_directory(tmp_path_factory):
    """`pacs-pp make-tiny DIR --backbone siglip2` (SigLIP 2 towers, Gemma tokenizer), seed 2: mostly positive."""
    directory = tmp_path_factory.mktemp("siglip_cli") / "model"
    main(["make-tiny", str(directory), "--backbone", "siglip2", "--seed", "2"])
    return directory


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("siglip_images")
    paths = []
    for seed, size in enumerate([(320, 240), (97, 131), (224, 224)]):
        paths.append(folder / f"image_{seed}.png")
        random_image(seed, size).save(paths[-1])
    return [paths[0], paths[1], paths[2], paths[0]]


@pytest.fixture(scope="module")
def expected(siglip_directory, images):
    model = PACSModel.from_pretrained(siglip_directory, dtype=torch.float32)
    assert type(model.tokenizer).__name__ == "Siglip2Tokenizer"
    return model.score(images, CAPTIONS, references=REFERENCES)


def test_pacs_score_cli_scores_with_a_siglip_model(siglip_directory, images, expected, tmp_path):
    mapping = {}
    for path, caption in zip(images, CAPTIONS):
        mapping.setdefault(path.name, []).append(caption)
    captions_file = images[0].parent / "captions.json"
    captions_file.write_text(json.dumps(mapping))
    output = tmp_path / "scores.json"
    score_main([str(captions_file), "--model", str(siglip_directory), "--output", str(output), "--no-progress"])
    result = json.loads(output.read_text())
    by_pair = {(item["image"], item["caption"]): item["PAC-S++"] for item in result["items"]}
    assert len(by_pair) == 3 and result["w"] == 2.5
    for path, caption, score in zip(images, CAPTIONS, expected.scores.tolist()):
        assert by_pair[(path.name, caption)] == pytest.approx(score, abs=1e-6)


def test_evaluate_module_scores_with_a_siglip_model(siglip_directory, images, expected, tmp_path):
    metric = evaluate.load(str(REPO_ROOT / "metric" / "pacs_pp"), model=str(siglip_directory), cache_dir=str(tmp_path))
    result = metric.compute(predictions=CAPTIONS, images=[str(path) for path in images], references=REFERENCES)
    assert_scores_close(result["scores"], expected.scores)
    assert_scores_close(result["ref_scores"], expected.ref_scores, what="ref_scores")


def test_space_scores_with_a_local_siglip_model(siglip_directory, images, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    monkeypatch.syspath_prepend(str(REPO_ROOT / "space"))
    import app

    cache = app.ModelCache({}, local_model=str(siglip_directory), allow_typed_paths=True)  # local: reasons shown
    models = cache.get(str(siglip_directory))
    # CLIP-S needs the base SigLIP named in the config (a Hub id, unreachable offline): the Space says why it is absent.
    assert models.clip_s is None and "google/siglip2-base-patch16-224" in models.clip_s_unavailable_reason
    request = app.ScoreRequest(image=str(images[0]), captions=CAPTIONS[:1] + CAPTIONS[2:3], references=["a dog"])
    table = app.score_request(request, models)
    direct = models.pac_s.score([images[0]] * 2, request.captions, references=[["a dog"]] * 2)
    by_caption = dict(zip(table["caption"], table["PAC-S++"]))
    assert_scores_close([by_caption[caption] for caption in request.captions], direct.scores)


def test_tiny_siglip_aliases_and_plain_siglip_checkpoints(tmp_path, images):
    tiny = load_model("tiny-siglip:clip_s")
    assert tiny.config.variant == "clip_s" and type(tiny.tokenizer).__name__ == "SiglipTokenizer"
    # A plain transformers SigLIP checkpoint (as google/siglip-* on the Hub) loads as zero-shot "CLIP-S" on SigLIP.
    plain = tmp_path / "siglip-checkpoint"
    tiny.clip.save_pretrained(plain)
    tiny.tokenizer.save_pretrained(plain)
    wrapped = load_model(str(plain))
    assert wrapped.config.backbone_config.model_type == "siglip" and wrapped.config.prompt_prefix == ""
    assert_scores_close(wrapped.score(images, CAPTIONS).scores, tiny.score(images, CAPTIONS).scores)
    # A NaFlex SigLIP 2 checkpoint is refused before its weights are read.
    naflex = tmp_path / "naflex"
    Siglip2Config().save_pretrained(naflex)
    with pytest.raises(ValueError, match="SigLIP 2 NaFlex.*not supported"):
        load_model(str(naflex))


def test_a_siglip2_checkpoint_with_the_hubs_gemma_tokenizer_gets_lowercasing(tmp_path):
    """SigLIP 2 checkpoints name `GemmaTokenizer`, which does not lowercase; SigLIP 2 was trained on lowercase text."""
    from transformers import GemmaTokenizer, Siglip2Tokenizer

    from modeling_pacs.testing.pacs import tiny_gemma_bpe

    tiny = load_model("tiny-siglip2:clip_s")
    plain = tmp_path / "siglip2-checkpoint"
    tiny.clip.save_pretrained(plain)
    vocab, merges = tiny_gemma_bpe()
    GemmaTokenizer(vocab=dict(vocab), merges=list(merges)).save_pretrained(plain)
    wrapped = PACSModel.from_siglip(str(plain))
    assert type(wrapped.tokenizer).__name__ == "Siglip2Tokenizer"
    expected = Siglip2Tokenizer(vocab=dict(vocab), merges=list(merges))(
        ["a dog on the grass"], padding="max_length", max_length=64
    )
    assert wrapped.tokenize(["A Dog ON the GRASS"])["input_ids"].tolist() == expected["input_ids"]


def test_tiny_siglip_scores_are_not_degenerate(expected):
    assert np.count_nonzero(expected.scores.numpy()) >= 3


@pytest.mark.parametrize("alias", ["tiny-siglip", "tiny-siglip2"])
def test_siglip_models_score_videos_through_their_own_image_pipeline(alias):
    """A video's frames go through the backbone's own image pipeline and encoder: each frame embedding equals the
    embedding of that frame scored as an image (SigLIP resizes without a crop, unlike CLIP)."""
    model = load_model(alias)
    frames = np.stack([np.asarray(random_image(seed, (80, 48))) for seed in range(4)])  # (T, H, W, C) uint8
    (frame_embeds,) = model.encode_videos([frames])
    assert_scores_close(frame_embeds.flatten(), model.encode_images(list(frames)).flatten(), what="frame embeddings")
    output = model.score_videos([frames, frames], ["a red square", "two dogs"], references=[["a square"], ["dogs"]])
    assert output.scores.shape == (2,) and bool(torch.isfinite(output.scores).all())
