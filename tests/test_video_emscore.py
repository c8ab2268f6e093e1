"""`score_videos` against EMScore's ORIGINAL code (tests/original_emscore.py) run on OpenAI's original CLIP code with
the same tiny weights: IDF table, P/R/F, coarse, per-component maxima over references, Eq. 14. And EMScore's
padding bug, which `score_videos` does not reproduce."""

import numpy as np
import pytest
import torch

from tests.helpers import assert_scores_close
from tests.original_clip import original_tokenize
from tests.original_emscore import EMScorer
from tests.test_video import (
    CAPTIONS,
    REFERENCES,
    as_images,
    original_and_ours,  # noqa: F401 (fixture)
    original_token_features,
    original_video_inputs,
    random_frames,
)


class EMScoreTextModel:
    """EMScore's modified CLIP: `encode_text(text, local=True)` returns every position's projected embedding."""

    def __init__(self, model):
        self.model = model

    def encode_text(self, text, local=False):
        return original_token_features(self.model, text)


def clip_tokenize(texts):
    """`clip.tokenize`: one string or a list."""
    return original_tokenize([texts] if isinstance(texts, str) else list(texts))


def run_emscore(original, frames, candidates, references, idf, batch_size=64):
    """EMScore's `EMScorer.score` with frame features in its `vid_feat_cache` (normalised, as `encode_video` does)."""
    _, _, frame_features = original_video_inputs(original, [], frames)
    cache = {
        f"video_{index}": torch.nn.functional.normalize(torch.from_numpy(f), dim=-1)
        for index, f in enumerate(frame_features)
    }
    scorer = EMScorer(vid_feat_cache=cache, device="cpu", model=EMScoreTextModel(original), tokenizer=clip_tokenize)
    vids = [f"video_{index}" for index in range(len(candidates))]
    return scorer.score(candidates, references, vids=vids, verbose=False, idf=idf, batch_size=batch_size)


def emscore_idf_table(original, frames, candidates, references, monkeypatch) -> dict:
    """The IDF dict EMScore builds for a whole call (its `get_idf_dict`, then its end-of-text rule, in place)."""
    import tests.original_emscore as emscore

    captured = []

    def capture(*args, **kwargs):
        captured.append(original_get_idf_dict(*args, **kwargs))
        return captured[-1]

    original_get_idf_dict = emscore.get_idf_dict
    monkeypatch.setattr(emscore, "get_idf_dict", capture)
    run_emscore(original, frames, candidates, references, idf=True)
    monkeypatch.setattr(emscore, "get_idf_dict", original_get_idf_dict)
    return captured[0]


def components(output, item):
    return [
        float(getattr(output, name)[item])
        for name in (
            "video_precision",
            "video_recall",
            "video_f",
            "video_coarse",
            "video_scores",
            "reference_precision",
            "reference_recall",
            "reference_f",
            "reference_coarse",
            "reference_scores",
            "scores",
        )
    ]


def emscore_components(results, item=0):
    video, reference, combined = results["EMScore(X,V)"], results["EMScore(X,X*)"], results["EMScore(X,V,X*)"]
    values = [video[key] for key in ("figr_P", "figr_R", "figr_F", "cogr", "full_F")]
    values += [reference[key] for key in ("figr_P", "figr_R", "figr_F", "cogr", "full_F")]
    values.append(combined["full_F"])
    return [float(value.reshape(-1)[item]) for value in values]


FRAMES = [random_frames(4, 60), random_frames(3, 61), random_frames(5, 62)]


def run_emscore_alone(original, item, idf):
    """EMScore on one item. A lone reference is given twice: with one candidate and one reference EMScore's
    `squeeze()` leaves a 0-dim tensor that its own max-over-references code cannot slice (a crash of the original)."""
    references = REFERENCES[item] if len(REFERENCES[item]) > 1 else REFERENCES[item] * 2
    return run_emscore(original, FRAMES[item : item + 1], CAPTIONS[item : item + 1], [references], idf)


@pytest.mark.parametrize("idf", ["default", "off"])
def test_scores_equal_emscore_original_code(original_and_ours, idf, monkeypatch):  # noqa: F811
    """Item by item (EMScore alone in its batch, so its padding bug cannot fire), with EMScore's IDF table of the
    whole call: every component and the final Eq. 14 score agree to 1e-5."""
    original, ours = original_and_ours
    table = emscore_idf_table(original, FRAMES, CAPTIONS, REFERENCES, monkeypatch) if idf == "default" else False
    output = ours.score_videos(
        [as_images(clip) for clip in FRAMES], CAPTIONS, references=REFERENCES, idf=idf == "default"
    )
    for item in range(len(CAPTIONS)):
        theirs = run_emscore_alone(original, item, table)
        assert_scores_close(components(output, item), emscore_components(theirs), atol=1e-5, what=f"item {item}")


def test_emscore_batches_change_negative_scores_ours_do_not(original_and_ours):  # noqa: F811
    """EMScore's batched call turns negative maxima of shorter items into 0 (padding multiplied by the mask);
    `score_videos` gives every item its own result whatever shares the batch."""
    original, ours = original_and_ours
    batched = run_emscore(original, FRAMES, CAPTIONS, REFERENCES, idf=False)
    output = ours.score_videos([as_images(clip) for clip in FRAMES], CAPTIONS, references=REFERENCES, idf=False)
    alone = [run_emscore_alone(original, item, False) for item in range(3)]
    their_batched_precision = batched["EMScore(X,V)"]["figr_P"].numpy()
    their_alone_precision = [float(result["EMScore(X,V)"]["figr_P"].reshape(-1)[0]) for result in alone]
    assert_scores_close(output.video_precision, their_alone_precision, atol=1e-5)
    assert np.abs(their_batched_precision - np.array(their_alone_precision)).max() > 1e-2  # the bug is real here
    assert (output.video_precision < 0).any()
