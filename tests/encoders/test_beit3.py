"""The BEiT-3 port: converter on a tiny checkpoint in the official key layout, and features against NumPy."""

import io
import re

import numpy as np
import pytest
import sentencepiece
import torch
from scipy.special import erf

from modeling_pacs.encoders.beit3 import BEiT3ForRetrieval, BEiT3RetrievalEncoder
from modeling_pacs.pearl.convert_beit3 import convert_beit3_checkpoint
from tests.fixtures.helpers import random_image
from tests.fixtures.pearl import one_torch_thread  # noqa: F401 (autouse fixture)

HIDDEN, HEADS, FFN, LAYERS, VOCAB, IMAGE, PATCH, TEXT_POSITIONS = 16, 2, 32, 2, 48, 32, 16, 40
WORDS = "a dog cat man woman on the sofa grass running red car street two people riding bike child ball".split()


def official_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors under unilm/torchscale's key names for BEiT3ForRetrieval (written from torchscale's modules)."""
    rng = np.random.default_rng(seed)
    shapes = {
        "beit3.text_embed.weight": (VOCAB, HIDDEN),
        "beit3.vision_embed.mask_token": (1, 1, HIDDEN),
        "beit3.vision_embed.cls_token": (1, 1, HIDDEN),
        "beit3.vision_embed.proj.weight": (HIDDEN, 3, PATCH, PATCH),
        "beit3.vision_embed.proj.bias": (HIDDEN,),
        "beit3.encoder.embed_positions.A.weight": ((IMAGE // PATCH) ** 2 + 3, HIDDEN),
        "beit3.encoder.embed_positions.B.weight": (TEXT_POSITIONS, HIDDEN),
        "vision_head.weight": (HIDDEN, HIDDEN),
        "language_head.weight": (HIDDEN, HIDDEN),
        "logit_scale": (),
    }
    for way in "AB":
        shapes[f"beit3.encoder.layer_norm.{way}.weight"] = (HIDDEN,)
        shapes[f"beit3.encoder.layer_norm.{way}.bias"] = (HIDDEN,)
        for layer in range(LAYERS):
            prefix = f"beit3.encoder.layers.{layer}."
            for projection in ("k_proj", "v_proj", "q_proj", "out_proj"):
                shapes[f"{prefix}self_attn.{projection}.{way}.weight"] = (HIDDEN, HIDDEN)
                shapes[f"{prefix}self_attn.{projection}.{way}.bias"] = (HIDDEN,)
            for norm in ("self_attn.inner_attn_ln", "self_attn_layer_norm", "final_layer_norm"):
                shapes[f"{prefix}{norm}.{way}.weight"] = (HIDDEN,)
                shapes[f"{prefix}{norm}.{way}.bias"] = (HIDDEN,)
            shapes[f"{prefix}ffn.{way}.fc1.weight"] = (FFN, HIDDEN)
            shapes[f"{prefix}ffn.{way}.fc1.bias"] = (FFN,)
            shapes[f"{prefix}ffn.{way}.fc2.weight"] = (HIDDEN, FFN)
            shapes[f"{prefix}ffn.{way}.fc2.bias"] = (HIDDEN,)
            shapes[f"{prefix}ffn.{way}.ffn_layernorm.weight"] = (FFN,)
            shapes[f"{prefix}ffn.{way}.ffn_layernorm.bias"] = (FFN,)
    state = {}
    for key, shape in shapes.items():
        values = rng.normal(0, 0.3, shape)
        if key.endswith("norm.weight") or re.search(r"(layer_norm|_ln|layernorm)\.[AB]?\.?weight$", key):
            values = 1 + 0.1 * rng.normal(size=shape)
        state[key] = torch.tensor(values, dtype=torch.float32)
    return state


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beit3")
    state = official_state_dict()
    torch.save({"model": state}, folder / "beit3_tiny_itc.pth")
    model_file = io.BytesIO()
    sentences = [" ".join(WORDS[index:] + WORDS[:index]) for index in range(len(WORDS))] * 5
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model_file, vocab_size=40, minloglevel=2
    )
    (folder / "beit3.spm").write_bytes(model_file.getvalue())
    convert_beit3_checkpoint(folder / "beit3_tiny_itc.pth", folder / "converted", folder / "beit3.spm", HEADS)
    return {"folder": folder, "state": state, "directory": folder / "converted"}


def test_converter_uses_every_key_with_its_shape(converted):
    model = BEiT3ForRetrieval.from_pretrained(converted["directory"], dtype=torch.float32)
    converted_state = model.state_dict()
    assert sorted(converted_state) == sorted(converted["state"])
    for key, value in converted["state"].items():
        assert torch.equal(converted_state[key], value), key
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.image_size) == (
        HIDDEN,
        LAYERS,
        IMAGE,
    )


def test_converter_rejects_other_layouts(converted, tmp_path):
    extra = dict(converted["state"], **{"beit3.encoder.extra.weight": torch.zeros(1)})
    torch.save({"model": extra}, tmp_path / "extra.pth")
    with pytest.raises(ValueError, match=re.escape("unused keys ['beit3.encoder.extra.weight']")):
        convert_beit3_checkpoint(tmp_path / "extra.pth", tmp_path / "out", converted["folder"] / "beit3.spm", HEADS)
    wrong = dict(converted["state"], **{"vision_head.weight": torch.zeros(HIDDEN, HIDDEN + 1)})
    torch.save({"model": wrong}, tmp_path / "wrong.pth")
    with pytest.raises(ValueError, match=re.escape("vision_head.weight: (16, 17) vs (16, 16)")):
        convert_beit3_checkpoint(tmp_path / "wrong.pth", tmp_path / "out2", converted["folder"] / "beit3.spm", HEADS)


def test_tokenizer_is_xlmr_over_the_sentencepiece_model(converted):
    encoder = BEiT3RetrievalEncoder.from_pretrained(converted["directory"])
    processor = sentencepiece.SentencePieceProcessor(model_file=str(converted["folder"] / "beit3.spm"))
    ids = encoder.tokenizer(["a dog on the sofa"])["input_ids"][0]
    # fairseq's XLM-R ids: <s>=0, </s>=2, every sentencepiece id shifted by one.
    assert ids == [0] + [piece + 1 for piece in processor.encode("a dog on the sofa")] + [2]


def numpy_layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def numpy_beit3(state, tokens, way, padding=None):
    """torchscale's Multiway encoder forward (pre-LN, sub-LN, exact GELU) in NumPy, for one sequence [L, D]."""
    p = {key: value.double().numpy() for key, value in state.items()}
    positions = p[f"beit3.encoder.embed_positions.{way}.weight"][2 : tokens.shape[0] + 2]
    x = tokens + positions
    if padding is not None:
        x = x * (1 - padding[:, None])
    head_dim = HIDDEN // HEADS
    for layer in range(LAYERS):
        q = f"beit3.encoder.layers.{layer}."

        def linear(name, inputs, q=q):
            return inputs @ p[f"{q}{name}.{way}.weight"].T + p[f"{q}{name}.{way}.bias"]

        h = numpy_layer_norm(x, p[f"{q}self_attn_layer_norm.{way}.weight"], p[f"{q}self_attn_layer_norm.{way}.bias"])
        query = linear("self_attn.q_proj", h) * head_dim**-0.5
        key, value = linear("self_attn.k_proj", h), linear("self_attn.v_proj", h)
        heads = []
        for head in range(HEADS):
            part = slice(head * head_dim, (head + 1) * head_dim)
            scores = query[:, part] @ key[:, part].T
            if padding is not None:
                scores = np.where(padding[None, :] > 0, -np.inf, scores)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            heads.append((weights / weights.sum(-1, keepdims=True)) @ value[:, part])
        attended = numpy_layer_norm(
            np.concatenate(heads, -1),
            p[f"{q}self_attn.inner_attn_ln.{way}.weight"],
            p[f"{q}self_attn.inner_attn_ln.{way}.bias"],
        )
        x = x + linear("self_attn.out_proj", attended)
        h = numpy_layer_norm(x, p[f"{q}final_layer_norm.{way}.weight"], p[f"{q}final_layer_norm.{way}.bias"])
        h = h @ p[f"{q}ffn.{way}.fc1.weight"].T + p[f"{q}ffn.{way}.fc1.bias"]
        h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
        h = numpy_layer_norm(h, p[f"{q}ffn.{way}.ffn_layernorm.weight"], p[f"{q}ffn.{way}.ffn_layernorm.bias"])
        x = x + h @ p[f"{q}ffn.{way}.fc2.weight"].T + p[f"{q}ffn.{way}.fc2.bias"]
    x = numpy_layer_norm(x, p[f"beit3.encoder.layer_norm.{way}.weight"], p[f"beit3.encoder.layer_norm.{way}.bias"])
    head = p["language_head.weight"] if way == "B" else p["vision_head.weight"]
    feature = head @ x[0]
    return feature / np.linalg.norm(feature)


def test_text_features_match_numpy_and_do_not_depend_on_the_batch(converted):
    encoder = BEiT3RetrievalEncoder.from_pretrained(converted["directory"])
    texts = ["a dog on the sofa", "two people riding a red bike on the street"]
    features = encoder.encode_text(texts)
    assert features.shape == (2, HIDDEN)
    embedding = converted["state"]["beit3.text_embed.weight"].double().numpy()
    for index, text in enumerate(texts):
        ids = np.array(encoder.tokenizer([text])["input_ids"][0])
        np.testing.assert_allclose(
            features[index].numpy(), numpy_beit3(converted["state"], embedding[ids], "B"), atol=1e-5
        )
    alone = encoder.encode_text(texts[:1])
    # Padding is masked, so a text's features do not depend on its batch (docs/spec/pearl.md#a9).
    np.testing.assert_allclose(alone[0].numpy(), features[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(
        encoder.encode_text([""])[0].numpy(), encoder.encode_text(["[EMPTY]"])[0].numpy(), atol=1e-6
    )


def test_image_features_match_numpy(converted, tmp_path):
    encoder = BEiT3RetrievalEncoder.from_pretrained(converted["directory"])
    path = tmp_path / "image.png"
    random_image(3, (50, 40)).save(path)
    features = encoder.encode_image([str(path)])
    assert features.shape == (1, 1, HIDDEN)
    resized = np.asarray(random_image(3, (50, 40)).resize((IMAGE, IMAGE), 2), dtype=np.float64) / 255  # 2 = bilinear
    pixels = ((resized - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).transpose(2, 0, 1)
    state = converted["state"]
    weight = state["beit3.vision_embed.proj.weight"].double().numpy().reshape(HIDDEN, -1)
    grid = IMAGE // PATCH
    patches = pixels.reshape(3, grid, PATCH, grid, PATCH).transpose(1, 3, 0, 2, 4).reshape(grid * grid, -1)
    tokens = patches @ weight.T + state["beit3.vision_embed.proj.bias"].double().numpy()
    tokens = np.concatenate([state["beit3.vision_embed.cls_token"].double().numpy()[0], tokens])
    np.testing.assert_allclose(features[0, 0].numpy(), numpy_beit3(state, tokens, "A"), atol=1e-4)
