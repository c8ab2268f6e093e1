"""Text pipeline: token ids equal OpenAI's tokenizer bit for bit; truncation keeps end-of-text; padding is inert."""

import importlib.util
from pathlib import Path

import pytest
import torch

from modeling_pacs.models.inputs import prepare_caption
from modeling_pacs.tokenization import build_clip_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore")


def load_openai_simple_tokenizer():
    """`clip/simple_tokenizer.py` of the openai-clip package, imported as a file (its package needs torchvision)."""
    spec = importlib.util.find_spec("clip")
    path = Path(spec.submodule_search_locations[0]) / "simple_tokenizer.py"
    module_spec = importlib.util.spec_from_file_location("openai_simple_tokenizer", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.SimpleTokenizer()


def openai_tokenize(tokenizer, text: str, context_length: int = 77) -> list[int]:
    """`clip.tokenize(text, truncate=True)` from clip/clip.py, without padding."""
    sot, eot = tokenizer.encoder["<|startoftext|>"], tokenizer.encoder["<|endoftext|>"]
    tokens = [sot] + tokenizer.encode(text) + [eot]
    if len(tokens) > context_length:
        tokens = tokens[:context_length]
        tokens[-1] = eot
    return tokens


CAPTIONS = [
    "A man riding a wave on top of a surfboard.",
    "TWO   dogs\tplaying\n in the snow!!",
    "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e on a table",
    "Fish &amp; chips &lt;b&gt;served&lt;/b&gt; &amp;amp; eaten",
    "Ã©lÃ¨ve mojibake text from a bad decoder",
    "a photo of 3 cats, 12 birds and 1,000 ants... isn't it?",
    "emoji \U0001f600 and CJK \u732b and arabic \u0642\u0637\u0629",
    "",
]


@pytest.fixture(scope="module")
def openai_tokenizer():
    return load_openai_simple_tokenizer()


@pytest.fixture(scope="module")
def tokenizer():
    return build_clip_tokenizer()


def test_vocabulary_is_the_real_clip_vocabulary(tokenizer, openai_tokenizer):
    assert len(tokenizer) == 49408
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == 49407
    assert tokenizer.get_vocab() == openai_tokenizer.encoder


@pytest.mark.parametrize("caption", CAPTIONS)
def test_token_ids_equal_openai_clip_tokenize(tokenizer, openai_tokenizer, caption):
    prefix = "A photo depicts "
    ours = tokenizer(prepare_caption(caption, prefix), truncation=True, max_length=77)["input_ids"]
    # The official code feeds prefix + caption to clip.tokenize; captions are whitespace-normalised first.
    expected = openai_tokenize(openai_tokenizer, prefix + " ".join(caption.split()))
    assert ours == expected


def test_long_caption_is_truncated_with_end_of_text_last(tiny_model, openai_tokenizer):
    caption = " ".join(f"word{i % 37} and" for i in range(100))  # 200 words
    tokens = tiny_model.tokenize([caption])
    ids = tokens["input_ids"][0].tolist()
    assert len(ids) == 77
    assert ids[-1] == 49407 and ids[0] == 49406
    assert ids == openai_tokenize(openai_tokenizer, "A photo depicts " + caption)
    scores = tiny_model.score([torch.zeros(3, 224, 224, dtype=torch.uint8)], [caption])
    assert torch.isfinite(scores.scores).all()


def test_padding_does_not_change_an_embedding(tiny_model):
    caption = "a small dog on a red sofa"
    short_batch = tiny_model.encode_texts([caption, "a cat"])
    long_batch = tiny_model.encode_texts([caption, " ".join(["a very long caption"] * 30)])
    alone = tiny_model.encode_texts([caption])
    assert torch.allclose(short_batch[0], alone[0], atol=1e-6, rtol=0)
    assert torch.allclose(long_batch[0], alone[0], atol=1e-6, rtol=0)


def test_text_embedding_is_taken_at_end_of_text(tiny_model):
    features = tiny_model.encode_texts(["a dog", "a big brown dog"], return_tokens=True)
    for row in range(2):
        length = int(features.attention_mask[row].sum())
        assert features.input_ids[row, length - 1] == 49407
        assert torch.allclose(features.token_embeds[row, length - 1], features.text_embeds[row], atol=1e-6)


def test_prefix_is_a_config_field_and_may_be_empty(tiny_model):
    ids = tiny_model.tokenize(["a dog"])["input_ids"][0].tolist()
    assert len(ids) == 2 + 3 + 2  # <sot> a photo depicts a dog <eot>: 'a', 'photo', 'depicts', 'a', 'dog'
    original = tiny_model.config.prompt_prefix
    try:
        tiny_model.config.prompt_prefix = ""
        assert tiny_model.tokenize(["a dog"])["input_ids"][0].tolist() == [49406, 320, 1929, 49407]
    finally:
        tiny_model.config.prompt_prefix = original
