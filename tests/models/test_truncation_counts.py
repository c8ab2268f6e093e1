"""Polos reports the caption tokens its CLIP text features drop (docs/guides/long-captions.md): per candidate, summed
over references, against an independent count with the tokenizer; one `LongCaptionWarning` per kind of text; nothing
changes for captions that fit."""

import warnings

import pytest
import torch

from modeling_pacs import PolosModel
from modeling_pacs.models.inputs import SHORTEN_FIX, LongCaptionWarning
from modeling_pacs.testing.directories import tiny_model_directory
from tests.fixtures.helpers import random_image

PREFIX = "A photo depicts "  # Polos' CLIP prompt (config.prompt_prefix)


@pytest.fixture(scope="module")
def polos():
    return PolosModel.from_pretrained(tiny_model_directory("polos"), dtype=torch.float32).eval()


def clip_dropped(tokenizer, text: str) -> int:
    """Untruncated length minus what a 77-token truncation keeps, with the CLIP tokenizer alone."""
    whole = tokenizer(PREFIX + text, truncation=False, verbose=False)["input_ids"]
    kept = tokenizer(PREFIX + text, truncation=True, max_length=77)["input_ids"]
    return len(whole) - len(kept)


def captions_around_the_context(tokenizer) -> list[str]:
    """Captions of every length from well inside to well past the 77-token context."""
    sentence = "a small brown dog runs across the wide green field near a red house and".split()
    captions = [" ".join((sentence * 8)[:count]) for count in range(55, 90)]
    dropped = [clip_dropped(tokenizer, caption) for caption in captions]
    assert 0 in dropped and 1 in dropped and max(dropped) > 5  # the boundary and both sides are covered
    return captions


def test_counts_equal_an_independent_tokenizer_count(polos):
    captions = captions_around_the_context(polos.clip_tokenizer)
    images = [random_image(index % 3, (40, 30)) for index in range(len(captions))]
    references = [[caption, "a dog", captions[-1 - index]] for index, caption in enumerate(captions)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongCaptionWarning)
        output = polos.score(images, captions, references)
    tokenizer = polos.clip_tokenizer
    assert output.truncated_tokens.tolist() == [clip_dropped(tokenizer, caption) for caption in captions]
    expected = [sum(clip_dropped(tokenizer, text) for text in item) for item in references]
    assert output.truncated_reference_tokens.tolist() == expected
    assert output.truncated_tokens.dtype == torch.long


def test_official_mode_counts_the_references_it_used(polos):
    long = " ".join(["a dog on the grass"] * 20)
    images = [random_image(index, (40, 30)) for index in range(2)]
    references = [["a dog", long], ["a cat"]]  # one chunk of 2: the first item keeps only its first reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongCaptionWarning)
        official = polos.score(images, ["a dog", "a cat"], references, mode="official", batch_size=2)
        per_item = polos.score(images, ["a dog", "a cat"], references)
    assert official.num_references_used.tolist() == [1, 1]
    assert official.truncated_reference_tokens.tolist() == [0, 0]
    assert per_item.truncated_reference_tokens.tolist() == [clip_dropped(polos.clip_tokenizer, long), 0]


def test_short_captions_count_zero_and_warn_nothing(polos):
    images = [random_image(index, (40, 30)) for index in range(3)]
    candidates = ["a cat on a sofa", "a dog  running in the park", ""]
    references = [["a cat sleeping", "a cat"], ["a dog"], ["two people"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        output = polos.score(images, candidates, references)
    assert output.truncated_tokens.tolist() == [0, 0, 0]
    assert output.truncated_reference_tokens.tolist() == [0, 0, 0]


def test_short_captions_keep_their_scores_beside_long_ones(polos):
    images = [random_image(index, (40, 30)) for index in range(3)]
    candidates = ["a cat on a sofa", " ".join(["a dog on the grass"] * 20), "two people"]
    references = [["a cat sleeping"], ["a dog"], ["people walking"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongCaptionWarning)
        together = polos.score(images, candidates, references)
    alone = polos.score([images[0], images[2]], [candidates[0], candidates[2]], [references[0], references[2]])
    torch.testing.assert_close(together.scores[[0, 2]], alone.scores, atol=1e-6, rtol=0)


def test_one_warning_per_kind_of_text_naming_the_fix(polos):
    long = " ".join(["a dog on the grass"] * 20)
    images = [random_image(index, (40, 30)) for index in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        polos.score(images, [long, long, "a cat"], [["a dog"], [long], [long, long]])
    messages = [str(warning.message) for warning in caught if warning.category is LongCaptionWarning]
    assert len(messages) == 2
    assert messages[0].startswith("some captions are longer than the text encoder's 77-token context")
    assert messages[1].startswith("some references are longer than the text encoder's 77-token context")
    assert all(message.endswith(SHORTEN_FIX) for message in messages)
    assert all(warning.filename == __file__ for warning in caught)  # points at the caller's line
    assert "long_captions='chunks'" in SHORTEN_FIX and "shorten" in SHORTEN_FIX
