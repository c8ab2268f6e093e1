"""Pearl reports the caption tokens its encoders drop (docs/guides/long-captions.md): each encoder's count against an
independent count with that encoder's tokenizer, the per-item maximum over encoders, references summed per item, one
`LongCaptionWarning` per kind of text, and unchanged scores for captions that fit."""

import warnings

import pytest
import torch

from modeling_pacs.encoders.blip2 import BLIP_MAX_TEXT_LENGTH, blip_caption_normalise
from modeling_pacs.models.inputs import SHORTEN_FIX, LongCaptionWarning, prepare_caption
from modeling_pacs.pearl.scorer import PearlScorer
from modeling_pacs.testing.directories import tiny_model_directory
from tests.fixtures.helpers import random_image
from tests.fixtures.pearl import one_torch_thread  # noqa: F401 (autouse fixture)

SENTENCE = "a small brown dog runs across the wide green field near a red house and".split()


@pytest.fixture(scope="module")
def scorer():
    return PearlScorer.from_pretrained(tiny_model_directory("pearl"))


def untruncated_minus_kept(tokenizer, whole: str, read: str, max_length: int) -> int:
    """Tokens of `whole` minus the tokens a `max_length` truncation of `read` keeps (the encoder's input)."""
    total = len(tokenizer(whole, truncation=False, verbose=False)["input_ids"])
    return total - len(tokenizer(read, truncation=True, max_length=max_length)["input_ids"])


def independent_counts(scorer: PearlScorer, text: str) -> dict[str, int]:
    """What each encoder drops of `text`, from its tokenizer and the official preprocessing only."""
    clip = scorer.encoders["clip"].model
    clip_text = prepare_caption(text, clip.config.prompt_prefix)
    blip_whole, blip_read = blip_caption_normalise(text, max_words=10**6), blip_caption_normalise(text)
    return {
        "clip": untruncated_minus_kept(clip.tokenizer, clip_text, clip_text, clip.config.max_text_length),
        "beit3": untruncated_minus_kept(scorer.encoders["beit3"].tokenizer, text or "[EMPTY]", text or "[EMPTY]", 77),
        "blip2": untruncated_minus_kept(
            scorer.encoders["blip2"].tokenizer, blip_whole, blip_read, BLIP_MAX_TEXT_LENGTH
        ),
        "stella": untruncated_minus_kept(scorer.encoders["stella"].tokenizer, text, text, 512),
    }


def test_every_encoder_count_equals_an_independent_count(scorer):
    # Every length from 1 to 140 words: each encoder's boundary (BLIP-2 32 tokens and 50 words, CLIP and BEiT-3 77)
    # and both sides of it.
    texts = [" ".join((SENTENCE * 10)[:count]) for count in range(1, 141)]
    texts += ["", "A dog. A cat!  (two) animals: here; ~now~ " * 12]
    by_encoder = scorer.truncated_tokens_by_encoder(texts)
    assert sorted(by_encoder) == ["beit3", "blip2", "clip", "stella"]
    expected = [independent_counts(scorer, text) for text in texts]
    for name, counts in by_encoder.items():
        assert counts.tolist() == [item[name] for item in expected], name
        assert 0 in counts.tolist()
        if name != "stella":
            assert 1 in counts.tolist() and max(counts.tolist()) > 5, name  # the boundary and past it
    maximum = [max(item.values()) for item in expected]
    assert scorer.truncated_tokens(texts).tolist() == maximum


def test_blip2_counts_the_words_past_lavis_fifty_word_cut(scorer):
    encoder = scorer.encoders["blip2"]
    text = " ".join(["dog"] * 70)  # 70 one-token words: the 50-word cut, then the 32-token context
    assert encoder.truncated_tokens([text]).tolist() == [70 + 2 - BLIP_MAX_TEXT_LENGTH]
    assert len(encoder.tokenizer(text)["input_ids"]) == 72


def test_score_reports_the_maximum_and_the_reference_sums(scorer):
    long = " ".join(SENTENCE * 6)
    medium = " ".join(SENTENCE[:12] * 3)  # past BLIP-2's 32 tokens only
    candidates = ["a dog on the grass", long, medium]
    references = [["a dog running", long], [], [medium, medium, "a car"]]
    images = [random_image(index, (50, 40)) for index in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongCaptionWarning)
        output = scorer.score(images, candidates, references)
        free = scorer.score(images, candidates)
    per_text = {text: max(independent_counts(scorer, text).values()) for text in {long, medium, "a dog on the grass"}}
    assert per_text[long] > per_text[medium] > 0 and per_text["a dog on the grass"] == 0
    assert output.truncated_tokens.tolist() == [0, per_text[long], per_text[medium]]
    assert output.truncated_reference_tokens.tolist() == [per_text[long], 0, 2 * per_text[medium]]
    assert free.truncated_tokens.tolist() == output.truncated_tokens.tolist()
    assert free.truncated_reference_tokens is None


def test_short_captions_count_zero_warn_nothing_and_keep_their_scores(scorer):
    images = [random_image(index, (50, 40)) for index in range(3)]
    candidates = ["a dog on the grass", "a cat on a sofa", ""]
    references = [["a dog running"], [], ["a car on the street", "a red car parked"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        output = scorer.score(images, candidates, references)
    assert output.truncated_tokens.tolist() == [0, 0, 0]
    assert output.truncated_reference_tokens.tolist() == [0, 0, 0]
    # The scores are those of the scoring path itself, which the counting does not touch.
    img_scores, scores = scorer.score_features(scorer.encode(images, candidates, references))
    assert torch.equal(output.scores, img_scores) and torch.equal(output.ref_scores, scores)


def test_one_warning_per_kind_of_text_naming_the_encoders_and_the_fix(scorer):
    long = " ".join(SENTENCE * 6)
    medium = " ".join(SENTENCE[:12] * 3)
    images = [random_image(index, (50, 40)) for index in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer.score(images, [long, long, medium], [["a dog"], [medium], [medium, medium]])
    messages = [str(warning.message) for warning in caught if warning.category is LongCaptionWarning]
    assert len(messages) == 2
    assert messages[0].startswith("some captions are longer than the text encoders' contexts (clip 77 tokens, ")
    assert "blip2 32 tokens" in messages[0] and "stella" not in messages[0]
    # The references cut by BLIP-2 (and the tiny BEiT-3's verbose tokenizer) but not by CLIP: CLIP is not named.
    context = messages[1].split(" and were truncated")[0]
    assert context.startswith("some references are longer than the text encoders' contexts (")
    assert "blip2 32 tokens" in context and "clip 77 tokens" not in context
    assert all(message.endswith(SHORTEN_FIX) for message in messages)
    assert all(warning.filename == __file__ for warning in caught)  # points at the caller's line


def test_an_encoder_without_a_count_is_left_out(scorer):
    class Uncounted:  # a user's encoder that implements only the required protocol
        def __init__(self, encoder):
            self.name, self.dim, self.tokens = encoder.name, encoder.dim, encoder.tokens
            self.encode_text, self.encode_image = encoder.encode_text, encoder.encode_image

    encoders = {**scorer.encoders, "beit3": Uncounted(scorer.encoders["beit3"])}
    partial = PearlScorer(scorer.model, encoders)
    text = " ".join(SENTENCE * 6)
    assert sorted(partial.truncated_tokens_by_encoder([text])) == ["blip2", "clip", "stella"]
    expected = {name: count for name, count in independent_counts(scorer, text).items() if name != "beit3"}
    assert partial.truncated_tokens([text]).tolist() == [max(expected.values())]
