"""Long captions (docs/guides/long-captions.md): truncation counts, the warning, and `long_captions="chunks"`.

The chunk mode is checked against a NumPy computation of its definition: the pieces' token windows are re-derived
from the tokenizer's untruncated ids, each piece is embedded with transformers' own `get_text_features` and
`get_image_features`, and Eq. 4, the clipped best reference cosine (over every piece of every reference) and the
token-weighted mean are computed in float64.
"""

import re

import numpy as np
import pytest
import torch

from modeling_pacs.models.inputs import LongCaptionWarning, plan_caption_pieces, sentence_starts
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.helpers import SCORE_TOLERANCE, assert_scores_close, random_image

SENTENCES = [
    "A brown dog runs across the green grass of a large park.",
    "Two children throw a red ball toward the dog!",
    "Behind them a white fence stands near tall trees and a small house.",
    "The sky is blue with a few clouds, and the sun is shining brightly?",
    "A man in a black jacket sits on a wooden bench reading a newspaper.",
    "Several bicycles are parked along the path next to a trash can.",
]
LONG = " ".join(SENTENCES * 2)  # about 170 CLIP tokens
RUN_ON = " ".join(f"a dog {index} near a cat and a bird with a ball" for index in range(12))  # no sentence end
SHORT = "a dog on the grass"


@pytest.fixture(scope="module", params=["clip", "siglip"])
def model(request):
    return make_tiny_model(variant="pac_s", seed=2, backbone=request.param)


@pytest.fixture(scope="module")
def clip_model():
    return make_tiny_model(variant="pac_s", seed=2)


@pytest.fixture(scope="module")
def images():
    return [random_image(seed, (224, 224)) for seed in range(4)]


# ------------------------------------------------------------------------------------------------ the plan
def test_plan_reads_whole_sentences_after_the_first_piece():
    # 10 words of 2 tokens, sentences starting at words 0, 3 and 6, 8 tokens per piece.
    starts = [index in (0, 3, 6) for index in range(10)]
    pieces, dropped = plan_caption_pieces([2] * 10, starts, capacity=8)
    assert [tuple(piece) for piece in pieces] == [(0, 4, 8), (3, 7, 6), (6, 10, 6)]
    assert dropped == 0


def test_plan_falls_back_to_token_windows_in_a_run_on_sentence():
    pieces, dropped = plan_caption_pieces([1] * 30, [True] + [False] * 29, capacity=8)
    assert [tuple(piece) for piece in pieces] == [(0, 8, 8), (8, 16, 8), (16, 24, 8), (24, 30, 6)]
    assert dropped == 0


def test_plan_skips_the_unreachable_tail_of_a_word_longer_than_the_context():
    pieces, dropped = plan_caption_pieces([3, 20, 3], [True, False, False], capacity=8)
    assert [tuple(piece) for piece in pieces] == [(0, 2, 8), (1, 2, 3), (2, 3, 3)]
    assert dropped == 12


@pytest.mark.parametrize("capacity", [8, 9, 72])
@pytest.mark.parametrize("extra", [0, 1])
def test_the_next_piece_re_reads_at_most_half_a_window(capacity, extra):
    """Both sides of the rule: a sentence starting `capacity // 2` tokens before the first unread token is re-read
    (2 * re-read <= capacity); one token earlier, the piece starts at the unread token's word instead."""
    reread = capacity // 2 + extra
    sentence = capacity - reread  # one-token words; the second sentence starts at word `sentence`
    starts = [index in (0, sentence) for index in range(2 * capacity)]
    pieces, dropped = plan_caption_pieces([1] * (2 * capacity), starts, capacity)
    expected_first = sentence if 2 * reread <= capacity else capacity
    assert (extra == 0) == (expected_first == sentence)
    reach = min(expected_first + capacity, 2 * capacity)
    assert tuple(pieces[1]) == (expected_first, reach, reach - capacity)
    assert dropped == 0


@pytest.mark.parametrize("extra", [0, 1])
def test_captions_on_both_sides_of_the_half_window_rule_split_as_defined(clip_model, extra):
    """The same boundary through the tokenizer: the first sentence ends `capacity // 2 + extra` tokens before the
    window's end."""
    capacity = context_capacity(clip_model)
    first_sentence = " ".join(["a"] * (capacity - capacity // 2 - extra - 2)) + " dog."  # 'dog' '.': 2 tokens
    caption = first_sentence + " Two " + " ".join(["a"] * capacity) + " cat."  # 'two': 1 token
    texts, weights = reference_pieces(clip_model, caption)
    split = clip_model.split_long_captions([caption])
    assert split.texts == texts and split.new_tokens == weights
    # extra 0: the second piece re-reads the second sentence from 'Two'; extra 1: it starts at the first unread word.
    assert texts[1].startswith("Two") == (extra == 0)
    assert (texts[1].split()[-1] == "cat.") == (extra == 1) and len(texts) == 2 + (extra == 0)


@pytest.mark.parametrize("seed", range(20))
def test_plans_cover_every_token_once_and_never_change_an_earlier_piece(seed):
    rng = np.random.default_rng(seed)
    word_tokens = rng.integers(1, 4, size=80).tolist()
    starts = [True] + (rng.random(79) < 0.15).tolist()
    capacity = int(rng.integers(6, 20))
    previous = None
    for num_words in range(1, 81):
        pieces, dropped = plan_caption_pieces(word_tokens[:num_words], starts[:num_words], capacity)
        total = sum(word_tokens[:num_words])
        assert dropped == 0 and sum(piece.new_tokens for piece in pieces) == total
        assert all(piece.new_tokens >= 1 for piece in pieces)
        if total <= capacity:
            assert len(pieces) == 1
        if previous is not None:  # appending a word changes only the last piece, or adds pieces
            assert [piece.first_word for piece in pieces[: len(previous) - 1]] == [
                piece.first_word for piece in previous[:-1]
            ]
            assert pieces[: len(previous) - 1] == previous[:-1]
        previous = pieces


def test_sentence_starts_follow_sentence_ending_punctuation():
    words = 'A dog. It runs! "Why?" he asks (twice.) then stops'.split()
    assert [word for word, start in zip(words, sentence_starts(words)) if start] == ["A", "It", '"Why?"', "he", "then"]


# ------------------------------------------------------------------------------------------------ counts
def test_truncated_tokens_equal_the_tokenizers_own_count(model, images):
    captions = [SHORT, LONG, RUN_ON, ""]
    prepared = model.prepare_texts(captions)
    expected = [max(0, len(ids) - model.config.max_text_length) for ids in model.tokenizer(prepared)["input_ids"]]
    assert expected[0] == 0 and expected[1] > 50
    with pytest.warns(
        LongCaptionWarning, match=r"some captions are longer .*long_captions='chunks'.*Long-CLIP"
    ) as caught:
        output = model.score(images, captions)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert output.truncated_tokens.tolist() == expected
    assert output.num_pieces.tolist() == [1, 1, 1, 1]


def test_reference_truncation_is_counted_per_item(clip_model, images):
    references = [[SHORT, LONG], [SHORT]]
    with pytest.warns(LongCaptionWarning, match="some references are longer"):
        output = clip_model.score(images[:2], [SHORT, SHORT], references)
    assert output.truncated_reference_tokens.tolist() == [int(clip_model.truncated_tokens([LONG])[0]), 0]
    assert output.truncated_tokens.tolist() == [0, 0]


def test_short_captions_raise_no_warning(clip_model, images):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", LongCaptionWarning)
        output = clip_model.score(images[:2], [SHORT, "two cats"], [[SHORT], ["cats"]])
    assert output.truncated_tokens.tolist() == [0, 0] and output.truncated_reference_tokens.tolist() == [0, 0]


def test_an_unknown_mode_is_refused(clip_model, images):
    with pytest.raises(ValueError, match=r"long_captions must be one of \['truncate', 'chunks'\], got 'split'"):
        clip_model.score(images[:1], [SHORT], long_captions="split")


# ------------------------------------------------------------------------------------------------ exactness
def test_captions_that_fit_score_the_same_in_both_modes(model, images):
    captions = [SHORT, "two cats sleeping on a red sofa", "", "a man riding a bicycle"]
    references = [[SHORT], ["cats"], ["a photo"], ["a man", "a bike"]]
    truncated = model.score(images, captions, references)
    chunks = model.score(images, captions, references, long_captions="chunks")
    for name in ("scores", "ref_scores", "image_text_cosines", "reference_similarities"):
        assert torch.equal(getattr(truncated, name), getattr(chunks, name)), name
    assert chunks.num_pieces.tolist() == [1, 1, 1, 1]


# ------------------------------------------------------------------------------------------------ NumPy reference
def transformers_text_features(model, texts: list[str]) -> np.ndarray:
    """Each text tokenized as the model's pipeline does, embedded by transformers' `get_text_features`."""
    tokens = model.tokenize(texts)
    with torch.no_grad():
        if model.config.backbone_config.model_type == "siglip":
            features = model.clip.get_text_features(input_ids=tokens["input_ids"])
        else:
            features = model.clip.get_text_features(
                input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]
            )
    return features.pooler_output.double().numpy()


def transformers_image_features(model, images) -> np.ndarray:
    from modeling_pacs.models.backbones import image_preprocessor

    preprocess = image_preprocessor(model.config.backbone_config)
    pixels = torch.stack([preprocess(image, index) for index, image in enumerate(images)])
    with torch.no_grad():
        return model.clip.get_image_features(pixel_values=pixels).pooler_output.double().numpy()


SENTENCE_END = re.compile(r"[.!?][\"')\]\u201d\u2019]*$")  # a word ending a sentence, closing quotes allowed


def content_ids(model, text: str) -> list[int]:
    """The untruncated token ids of `text` without the prompt prefix and the special tokens."""
    return model.tokenizer(model.prepare_texts([text], "")[0], add_special_tokens=False)["input_ids"]


def context_capacity(model) -> int:
    """Content tokens one encoder window holds: the context less the special tokens and the prompt prefix."""
    prefix_ids = model.tokenizer(model.prepare_texts([""])[0], add_special_tokens=False)["input_ids"]
    return model.config.max_text_length - model.tokenizer.num_special_tokens_to_add() - len(prefix_ids)


def reference_pieces(model, caption: str) -> tuple[list[str], list[int]]:
    """The chunk definition (docs/guides/long-captions.md) re-derived without the code under test: each piece's text
    and weight.

    Word i begins at token `len(ids of the first i words)`. The first piece is the caption (truncated by the encoder);
    each further piece starts at the sentence holding the first unread token when that re-reads at most half a window
    (2 * re-read <= capacity), else at that token's word; it reads `capacity` tokens and weighs the ones no earlier
    piece read. (The test captions have no word longer than a window.)
    """
    capacity = context_capacity(model)
    words = caption.split()
    word_start = [len(content_ids(model, " ".join(words[:index]))) if index else 0 for index in range(len(words))]
    total = len(content_ids(model, caption))
    sentence_start = [index == 0 or bool(SENTENCE_END.search(words[index - 1])) for index in range(len(words))]
    texts, weights, covered = [caption], [min(capacity, total)], min(capacity, total)
    while covered < total:
        word = max(index for index in range(len(words)) if word_start[index] <= covered)
        sentence = max(index for index in range(word + 1) if sentence_start[index])
        if 2 * (covered - word_start[sentence]) <= capacity:
            first = sentence
        else:
            first = word
            assert covered - word_start[word] < capacity, "no test caption has a word longer than a window"
        reach = word_start[first] + capacity
        end = next((index for index in range(first + 1, len(words)) if word_start[index] >= reach), len(words))
        texts.append(" ".join(words[first:end]))
        weights.append(min(reach, total) - covered)
        covered = min(reach, total)
    if len(texts) == 1:
        return texts, [1]
    return texts, weights


def numpy_chunk_scores(model, images, candidates, references):
    w = model.config.w

    def unit(rows):
        return rows / np.linalg.norm(rows, axis=-1, keepdims=True)

    scores, similarities = [], []
    image_features = unit(transformers_image_features(model, images))
    for image, candidate, item_references in zip(image_features, candidates, references):
        texts, weights = reference_pieces(model, candidate)
        shares = np.asarray(weights, dtype=np.float64) / sum(weights)
        piece_features = unit(transformers_text_features(model, texts))
        scores.append(float(shares @ (w * np.clip(piece_features @ image, 0, None))))
        reference_texts = [text for reference in item_references for text in reference_pieces(model, reference)[0]]
        reference_features = unit(transformers_text_features(model, reference_texts))
        best = np.clip((piece_features @ reference_features.T).max(axis=1), 0, None)
        similarities.append(float(shares @ best))
    scores, similarities = np.asarray(scores), np.asarray(similarities)
    total = scores + similarities
    ref_scores = np.where(total > 0, 2 * scores * similarities / np.where(total > 0, total, 1), 0)
    return scores, similarities, ref_scores


def test_chunk_scores_equal_numpy_on_transformers_features(model, images):
    candidates = [LONG, SHORT, RUN_ON, " ".join(SENTENCES[:3] * 2)]
    references = [[SHORT, LONG], [LONG], ["a dog", "a ball"], [RUN_ON]]
    output = model.score(images, candidates, references, long_captions="chunks")
    split = model.split_long_captions(candidates)
    for item, candidate in enumerate(candidates):
        texts, weights = reference_pieces(model, candidate)
        assert [text for owner, text in zip(split.owner, split.texts) if owner == item] == texts
        assert [n for owner, n in zip(split.owner, split.new_tokens) if owner == item] == weights
    scores, similarities, ref_scores = numpy_chunk_scores(model, images, candidates, references)
    assert output.num_pieces.tolist()[1] == 1 and output.num_pieces.tolist()[0] >= 2
    assert output.truncated_tokens.tolist() == [0, 0, 0, 0]
    assert_scores_close(output.scores, scores, what="chunked scores")
    assert_scores_close(output.reference_similarities, similarities, what="chunked reference similarities")
    assert_scores_close(output.ref_scores, ref_scores, what="chunked reference scores")


def test_pieces_get_the_prompt_prefix_and_read_whole_sentences(clip_model):
    split = clip_model.split_long_captions([LONG])
    assert split.texts[0] == LONG  # the first piece is the caption as truncation reads it today
    assert all(text.split()[0] in {s.split()[0] for s in SENTENCES} for text in split.texts[1:])
    tokens = clip_model.tokenize(split.texts)
    prefix = clip_model.tokenizer("a photo depicts", add_special_tokens=False)["input_ids"]
    assert all(row[1 : 1 + len(prefix)].tolist() == prefix for row in tokens["input_ids"])


# ------------------------------------------------------------------------------------------------ continuity
def test_growing_past_the_limit_moves_the_score_by_at_most_w_over_the_tokens(clip_model, images):
    words = " ".join(SENTENCES * 3).split()
    counts = clip_model.count_tokens([" ".join(words[:n]) for n in range(1, len(words) + 1)]).tolist()
    first_long = next(n for n, count in enumerate(counts, start=1) if count > clip_model.config.max_text_length)
    lengths = list(range(first_long - 3, first_long + 40))
    captions = [" ".join(words[:n]) for n in lengths]
    output = clip_model.score([images[0]] * len(captions), captions, long_captions="chunks")
    split = clip_model.split_long_captions(captions)
    content = [
        sum(n for owner, n in zip(split.owner, split.new_tokens) if owner == item) for item in range(len(lengths))
    ]
    w = clip_model.config.w
    scores, pieces = output.scores.tolist(), output.num_pieces.tolist()
    crossing = lengths.index(first_long)
    assert pieces[crossing - 1] == 1 and pieces[crossing] == 2
    for index in range(1, len(lengths)):
        if pieces[index] > pieces[index - 1]:  # a new piece: every earlier piece is unchanged
            added = content[index] - content[index - 1]
            assert abs(scores[index] - scores[index - 1]) <= w * added / content[index] + SCORE_TOLERANCE
    # Just past the limit the new piece weighs a few tokens in ~72: the score moves by at most w * added / total.
    assert abs(scores[crossing] - scores[crossing - 1]) <= w * 3 / 72


# ------------------------------------------------------------------------------------------------ video
@pytest.mark.filterwarnings("ignore::modeling_pacs.models.inputs.LongCaptionWarning")  # pieces scored one by one
def test_video_chunks_are_the_token_weighted_mean_of_the_pieces_scores(clip_model):
    generator = torch.Generator().manual_seed(0)
    frames = [torch.randn(6, 32, generator=generator), torch.randn(4, 32, generator=generator)]
    candidates, references = [LONG, SHORT], [[SHORT, LONG], [RUN_ON]]
    table = clip_model.build_idf_table([reference for item in references for reference in item])
    output = clip_model.score_videos(frames, candidates, references, idf=table, long_captions="chunks")
    for item, (candidate, item_references) in enumerate(zip(candidates, references)):
        split = clip_model.split_long_captions([candidate], prompt_prefix="")
        reference_texts = [
            text for reference in item_references for text in clip_model.split_long_captions([reference], "").texts
        ]
        pieces = clip_model.score_videos(
            [frames[item]] * len(split.texts), split.texts, [reference_texts] * len(split.texts), idf=table
        )
        shares = np.asarray(split.new_tokens, dtype=np.float64) / sum(split.new_tokens)
        for name in ("scores", "video_f", "video_coarse", "reference_f", "reference_coarse"):
            expected = float(shares @ getattr(pieces, name).double().numpy())
            assert getattr(output, name)[item].item() == pytest.approx(expected, abs=SCORE_TOLERANCE), name
    assert output.num_pieces.tolist()[0] >= 2 and output.num_pieces.tolist()[1] == 1


def test_video_captions_that_fit_score_the_same_in_both_modes(clip_model):
    generator = torch.Generator().manual_seed(1)
    frames = [torch.randn(5, 32, generator=generator), torch.randn(3, 32, generator=generator)]
    truncated = clip_model.score_videos(frames, [SHORT, "a cat"], [["a dog"], ["cats"]])
    chunks = clip_model.score_videos(frames, [SHORT, "a cat"], [["a dog"], ["cats"]], long_captions="chunks")
    for name in ("scores", "video_scores", "reference_scores", "video_precision", "reference_recall"):
        assert torch.equal(getattr(truncated, name), getattr(chunks, name)), name


def test_video_truncation_is_counted(clip_model):
    frames = [torch.randn(3, 32), torch.randn(3, 32)]
    with pytest.warns(LongCaptionWarning) as caught:
        output = clip_model.score_videos(frames, [LONG, SHORT], idf=False)
    assert caught[0].filename == __file__
    assert output.truncated_tokens.tolist() == [int(clip_model.truncated_tokens([LONG], prompt_prefix="")[0]), 0]


# ------------------------------------------------------------------------------------------------ the docs' example
def test_the_worked_example_of_the_docs_shows_the_mechanism():
    """examples/long_captions.py (docs/guides/long-captions.md): truncation cannot see the last sentence, the chunk
    mode's score is the token-weighted mean of the printed piece scores, and both captions share their first pieces."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, str(root / "examples" / "long_captions.py")],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout
    truncate = re.search(r"truncate \(official\)\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+)", printed)
    assert truncate and truncate.group(1) == truncate.group(2) and truncate.group(3) == "+0.0000"
    aggregated = [float(value) for value in re.findall(r"token-weighted mean ([\d.]+)", printed)]
    chunks = re.search(r"chunks \(token-weighted\)\s+([\d.]+)\s+([\d.]+)", printed)
    assert [float(chunks.group(1)), float(chunks.group(2))] == pytest.approx(aggregated, abs=2e-4)
    pieces = re.findall(r"piece (\d): '(.*?)' +(\d+) new tokens \(weight ([\d.]+)\) CLIP-S ([\d.]+)", printed)
    assert len(pieces) == 6
    for shared in (0, 1):  # the two captions differ in their last sentence only: the first two pieces are equal
        ending = shared + 3
        assert (pieces[shared][1], pieces[shared][4]) == (pieces[ending][1], pieces[ending][4])
    for first in (0, 3):
        weights = np.array([float(piece[3]) for piece in pieces[first : first + 3]])
        scores = np.array([float(piece[4]) for piece in pieces[first : first + 3]])
        assert float(weights @ scores) == pytest.approx(aggregated[first // 3], abs=2e-3)
