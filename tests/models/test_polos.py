"""Polos in the engine: ScalarMix, feature vector, head and both batch modes against an independent NumPy
computation (docs/spec/polos.md#inference), reloading through AutoModel, and bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from modeling_pacs import PolosModel
from modeling_pacs.models.scoring_polos import polos_features, scalar_mix
from modeling_pacs.testing.polos import make_tiny_polos_model
from tests.fixtures.helpers import SCORE_TOLERANCE, assert_scores_close, random_image

# docs/spec/polos.md#features: offsets of each block in the feature vector, for text width D and CLIP width P.
FEATURE_BLOCKS = ["r_rb", "c_rb", "|c_rb-r_rb|", "c_rb*r_rb", "v", "c_clip", "|v-c_clip|", "v*c_clip", "|r-c_clip|",
                  "r*c_clip"]  # fmt: skip


@pytest.fixture(scope="module")
def polos_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_polos")
    make_tiny_polos_model(directory, seed=0)
    return directory


@pytest.fixture(scope="module")
def polos(polos_dir):
    return PolosModel.from_pretrained(polos_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def items():
    images = [random_image(index, (200 + 10 * index, 180)) for index in range(5)]
    candidates = ["a cat on a sofa", "a dog  running in the park", "two people", "a plate of food", "an airplane"]
    references = [
        ["a cat sleeping", "a cat", "a sofa with a cat"],
        ["a dog"],
        ["people riding horses", "two men"],
        ["food and vegetables", "a plate", "meat"],
        ["a plane over the city", "an airplane flying", "a jet", "a plane at night"],
    ]
    return images, candidates, references


# ---------------------------------------------------------------------------------------------------- NumPy
def numpy_scalar_mix(hidden_states, mask, weights, gamma, groups):
    """AllenNLP/COMET `ScalarMix._do_layer_norm` written again in NumPy (float64), one group at a time."""
    hidden_states = np.asarray(hidden_states, dtype=np.float64)
    mask = np.asarray(mask, dtype=np.float64)
    softmax = np.exp(weights - np.max(weights))
    softmax /= softmax.sum()
    out = np.zeros(hidden_states.shape[1:])
    for group in np.unique(groups):
        rows = np.flatnonzero(groups == group)
        group_mask = mask[rows][:, :, None]
        count = group_mask.sum() * hidden_states.shape[-1]
        for layer, weight in enumerate(softmax):
            tensor = hidden_states[layer, rows]
            masked = tensor * group_mask
            mean = masked.sum() / count
            variance = (((masked - mean) * group_mask) ** 2).sum() / count
            out[rows] += weight * (tensor - mean) / np.sqrt(variance + 1e-12)
    return gamma * out


def numpy_sentence_embeddings(model, texts, groups):
    """CLS of the mix: RoBERTa states from transformers (each text tokenized alone), the mix in NumPy."""
    ids = [model.text_tokenizer(text)["input_ids"] for text in texts]
    length = max(map(len, ids))
    input_ids = torch.ones(len(ids), length, dtype=torch.long)
    mask = torch.zeros(len(ids), length, dtype=torch.long)
    for row, token_ids in enumerate(ids):
        input_ids[row, : len(token_ids)] = torch.tensor(token_ids)
        mask[row, : len(token_ids)] = 1
    with torch.no_grad():
        states = model.text_encoder(input_ids=input_ids, attention_mask=mask, output_hidden_states=True).hidden_states
    weights = model.scalar_mix.layer_weights.detach().double().numpy()
    gamma = float(model.scalar_mix.gamma.detach())
    mixed = numpy_scalar_mix(torch.stack(states).numpy(), mask.numpy(), weights, gamma, np.asarray(groups))
    return mixed[:, 0, :]


def numpy_features(r_rb, c_rb, v, c_clip, r_clip):
    """The feature vector filled block by block at the offsets of docs/spec/polos.md#features."""
    text_width, clip_width = r_rb.shape[-1], v.shape[-1]
    blocks = {
        "r_rb": r_rb, "c_rb": c_rb, "|c_rb-r_rb|": np.abs(c_rb - r_rb), "c_rb*r_rb": c_rb * r_rb, "v": v,
        "c_clip": c_clip, "|v-c_clip|": np.abs(v - c_clip), "v*c_clip": v * c_clip,
        "|r-c_clip|": np.abs(r_clip - c_clip), "r*c_clip": r_clip * c_clip,
    }  # fmt: skip
    features = np.zeros(4 * text_width + 6 * clip_width)
    offset = 0
    for name in FEATURE_BLOCKS:
        width = text_width if name in FEATURE_BLOCKS[:4] else clip_width
        features[offset : offset + width] = blocks[name]
        offset += width
    return features


def numpy_head(model, features):
    hidden = features
    layers = [(layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy()) for layer in
              model.head.layers]  # fmt: skip
    for weight, bias in layers[:-1]:
        hidden = np.tanh(hidden @ weight.T + bias)
    weight, bias = layers[-1]
    return 1 / (1 + np.exp(-(hidden @ weight.T + bias)[..., 0]))


def numpy_polos(model, images, candidates, references, chunk_size=None):
    """Polos scores with every formula in NumPy. `chunk_size=None`: per item (each sentence its own group, all
    references); otherwise the official chunking of docs/spec/polos.md#official-batching, written out independently."""
    image_clip = model.clip_encoder.encode_images(images).double().numpy()
    scores, used = [], []
    chunk_size = chunk_size or 1
    for start in range(0, len(candidates), chunk_size):
        chunk = range(start, min(start + chunk_size, len(candidates)))
        keep = min(len(references[item]) for item in chunk) if chunk_size > 1 else None
        chunk_refs = [references[item][:keep] for item in chunk]
        if chunk_size > 1:
            candidate_rb = numpy_sentence_embeddings(model, [candidates[i] for i in chunk], [0] * len(chunk))
            reference_rb = [
                numpy_sentence_embeddings(model, [refs[j] for refs in chunk_refs], [0] * len(chunk))
                for j in range(keep)
            ]
            reference_rb = [[reference_rb[j][row] for j in range(keep)] for row in range(len(chunk))]
        else:
            candidate_rb = numpy_sentence_embeddings(model, [candidates[start]], [0])
            reference_rb = [list(numpy_sentence_embeddings(model, chunk_refs[0], list(range(len(chunk_refs[0])))))]
        for row, item in enumerate(chunk):
            c_clip = model.clip_encoder.encode_texts([candidates[item]])[0].double().numpy()
            r_clips = model.clip_encoder.encode_texts(chunk_refs[row]).double().numpy()
            pair = [
                numpy_head(model, numpy_features(r_rb, candidate_rb[row], image_clip[item], c_clip, r_clip))
                for r_rb, r_clip in zip(reference_rb[row], r_clips)
            ]
            scores.append(max(pair))
            used.append(len(pair))
    return np.array(scores), used


# ---------------------------------------------------------------------------------------------------- formulas
def test_scalar_mix_matches_numpy_with_padding_and_groups():
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 4, 6, 5, generator=generator) * 2 + 0.5
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
    weights = torch.tensor([0.3, -1.0, 0.7])
    for groups in ([0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 1, 0]):
        expected = numpy_scalar_mix(hidden.numpy(), mask.numpy(), weights.double().numpy(), 1.7, np.array(groups))
        actual = scalar_mix(hidden, mask, weights, torch.tensor(1.7), torch.tensor(groups))
        np.testing.assert_allclose(actual.numpy(), expected, rtol=0, atol=1e-5)


def test_feature_vector_order_matches_spec_offsets():
    generator = torch.Generator().manual_seed(4)
    r_rb, c_rb = torch.randn(2, 7, generator=generator), torch.randn(2, 7, generator=generator)
    v, c_clip, r_clip = (torch.randn(2, 3, generator=generator) for _ in range(3))
    actual = polos_features(r_rb, c_rb, v, c_clip, r_clip)
    assert actual.shape == (2, 4 * 7 + 6 * 3)
    for row in range(2):
        expected = numpy_features(*(tensor[row].double().numpy() for tensor in (r_rb, c_rb, v, c_clip, r_clip)))
        np.testing.assert_allclose(actual[row].numpy(), expected, rtol=0, atol=1e-6)


def test_released_geometry_has_6144_features_and_head_sizes():
    from modeling_pacs import PolosConfig

    config = PolosConfig()
    assert config.feature_size == 6144
    assert config.num_mixed_layers == 13
    assert config.max_text_tokens == 512
    model_sizes = [config.feature_size, *config.hidden_sizes, 1]
    assert model_sizes == [6144, 2304, 1152, 1]


# ---------------------------------------------------------------------------------------------------- modes
def test_per_item_scores_match_numpy(polos, items):
    images, candidates, references = items
    output = polos.score(images, candidates, references)
    expected, used = numpy_polos(polos, images, candidates, references)
    assert_scores_close(output.scores, expected, atol=1e-5)
    assert output.num_references_used.tolist() == used == [3, 1, 2, 3, 4]
    assert output.mode == "per_item"
    assert output.mean_score == pytest.approx(float(np.mean(expected)), abs=1e-5)
    assert all(0 < score < 1 for score in output.scores.tolist())


def test_official_batch_one_equals_per_item(polos, items):
    images, candidates, references = items
    per_item = polos.score(images, candidates, references, mode="per_item")
    official = polos.score(images, candidates, references, mode="official", batch_size=1)
    assert_scores_close(official.scores, per_item.scores)
    assert official.num_references_used.tolist() == per_item.num_references_used.tolist()


def test_official_chunks_cut_references_and_share_statistics(polos, items):
    images, candidates, references = items
    # Chunks of 3: items 0-2 (reference counts 3, 1, 2: cut to 1), items 3-4 (3, 4: cut to 3).
    output = polos.score(images, candidates, references, mode="official", batch_size=3)
    assert output.num_references_used.tolist() == [1, 1, 1, 3, 3]
    expected, used = numpy_polos(polos, images, candidates, references, chunk_size=3)
    assert used == [1, 1, 1, 3, 3]
    assert_scores_close(output.scores, expected, atol=1e-5)
    per_item = polos.score(images, candidates, references).scores
    # The cut drops item 0's best reference (index 1): its official score is the first reference's.
    assert output.reference_scores[0] == pytest.approx([polos.score(images[:1], candidates[:1], [references[0][:1]])
                                                        .scores.item()], abs=SCORE_TOLERANCE)  # fmt: skip
    assert not torch.allclose(output.scores, per_item, atol=SCORE_TOLERANCE)


def test_per_item_scores_do_not_depend_on_the_batch(polos, items):
    images, candidates, references = items
    together = polos.score(images, candidates, references, text_batch_size=2, image_batch_size=2).scores
    alone = torch.cat([polos.score([i], [c], [r]).scores for i, c, r in zip(images, candidates, references)])
    assert_scores_close(together, alone)


def test_roberta_reads_raw_text_but_clip_collapses_whitespace(polos):
    single = polos.tokenize_sentences(["a cat"], ["candidate 0"])[0]
    double = polos.tokenize_sentences(["a  cat"], ["candidate 0"])[0]
    assert len(double) == len(single) + 1 and double[0] == 0 and double[-1] == 2
    clip = polos.clip_encoder.tokenize(["a cat", "a  cat"])["input_ids"]
    assert clip[0].tolist() == clip[1].tolist()


# ---------------------------------------------------------------------------------------------------- loading
def test_automodel_loads_in_fresh_offline_process(polos_dir, polos, items, tmp_path):
    # The remote code modeling_polos.py imports, transitively, is saved beside it (Polos's formulas included).
    for name in ("configuration_polos.py", "modeling_polos.py", "scoring.py", "scoring_polos.py", "fast_polos.py"):
        assert (polos_dir / name).is_file(), name
    images, candidates, references = items
    paths = []
    for index, image in enumerate(images[:2]):
        path = tmp_path / f"image_{index}.png"
        image.save(path)
        paths.append(str(path))
    script = (
        "import json, sys, torch\n"
        "from transformers import AutoModel\n"
        f"model = AutoModel.from_pretrained({str(polos_dir)!r}, trust_remote_code=True, dtype=torch.float32)\n"
        f"out = model.eval().score({paths!r}, {candidates[:2]!r}, {references[:2]!r})\n"
        "print(json.dumps({'cls': type(model).__name__, 'scores': out.scores.tolist()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    reloaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert reloaded["cls"] == "PolosModel"
    assert_scores_close(reloaded["scores"], polos.score(paths, candidates[:2], references[:2]).scores)


# ---------------------------------------------------------------------------------------------------- bad input
def test_references_are_required(polos, items):
    images, candidates, _ = items
    with pytest.raises(ValueError, match="Polos is a reference-based metric and has no reference-free mode"):
        polos.score(images[:1], candidates[:1])
    with pytest.raises(
        ValueError, match="item 1 has an empty reference list: .*Polos has no reference-free mode: drop the item"
    ):
        polos.score(images[:2], candidates[:2], [["a cat"], []])
    with pytest.raises(ValueError, match="got 1 reference lists for 2 candidates"):
        polos.score(images[:2], candidates[:2], [["a cat"]])


def test_too_long_caption_is_refused_naming_it(polos, items):
    images, _, _ = items
    long_reference = " ".join(["cat"] * 600)
    num_tokens = len(polos.text_tokenizer(long_reference)["input_ids"])
    assert num_tokens > 512
    with pytest.raises(ValueError, match=rf"reference 1 of item 0 \('cat cat.*\) has {num_tokens} RoBERTa tokens, "
                                         "more than the 512"):  # fmt: skip
        polos.score(images[:1], ["a cat"], [["a cat", long_reference]])
    with pytest.raises(ValueError, match="candidate 0 .* more than the 512"):
        polos.score(images[:1], [long_reference], [["a cat"]], mode="official")


def test_unreadable_image_and_bad_parameters(polos, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"image 1 \('.*broken.jpg'\) could not be decoded"):
        polos.score([random_image(0), broken], ["a cat", "a dog"], [["a cat"], ["a dog"]])
    with pytest.raises(ValueError, match="mode must be one of \\['per_item', 'official'\\], got 'fast'"):
        polos.score([random_image(0)], ["a cat"], [["a cat"]], mode="fast")
    for name in ("batch_size", "image_batch_size", "text_batch_size"):
        with pytest.raises(ValueError, match=f"{name} must be a positive integer, got 0"):
            polos.score([random_image(0)], ["a cat"], [["a cat"]], **{name: 0})


def test_missing_model_explains_how_to_get_weights(tmp_path):
    with pytest.raises(OSError, match=r"could not load Polos model 'nobody/no-polos'.*pacs-pp convert-polos"):
        PolosModel.from_pretrained("nobody/no-polos")
