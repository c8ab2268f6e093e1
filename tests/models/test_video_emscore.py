"""`score_videos` against EMScore's formulas in NumPy (tests/references/emscore.py) on features of OpenAI's original
CLIP code with the same tiny weights: IDF table, P/R/F, coarse, per-component maxima over references, Eq. 14, and
EMScore's padding bug, which `score_videos` does not reproduce.

EMScore's own code is not committed. With a checkout of it (`git clone https://github.com/ShiYaya/emscore`, then
`PACS_EMSCORE_DIR=$PWD/emscore pytest tests/models/test_video_emscore.py`) its `emscore/utils.py` and
`emscore/scorer.py` are loaded by file path and checked against both `score_videos` and the NumPy reference."""

import importlib.util
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.fixtures.helpers import assert_scores_close
from tests.models.test_video import (
    CAPTIONS,
    REFERENCES,
    as_images,
    end_of_text_id,
    original_and_ours,  # noqa: F401 (fixture)
    original_token_features,
    original_video_inputs,
    random_frames,
)
from tests.references.emscore import (
    combined_components,
    default_idf_corpus,
    emscore_batch_video_match,
    idf_lookup,
    idf_table,
    reference_components,
    video_components,
)
from tests.references.original_clip import original_tokenize

FRAMES = [random_frames(4, 60), random_frames(3, 61), random_frames(5, 62)]
COMPONENT_NAMES = (
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
HOW_TO_RUN_EMSCORE = (
    "EMScore's own code is not part of this repository; to compare with it run "
    "`git clone https://github.com/ShiYaya/emscore; "
    "PACS_EMSCORE_DIR=$PWD/emscore pytest tests/models/test_video_emscore.py`"
)


def components(output, item: int) -> list[float]:
    return [float(getattr(output, name)[item]) for name in COMPONENT_NAMES]


def reference_inputs(original):
    """The original code's token features and ids of every caption and reference, and each clip's frame features."""
    texts = sorted({*CAPTIONS, *(reference for item in REFERENCES for reference in item)})
    return original_video_inputs(original, texts, FRAMES)


def reference_table(ids: dict[str, list[int]], idf: bool) -> tuple[dict[int, float], float]:
    """EMScore's default IDF table of the call (the references flattened per candidate), or uniform weights."""
    if not idf:
        return {}, 1.0
    return idf_table([ids[text] for text in default_idf_corpus(CAPTIONS, REFERENCES)], end_of_text_id())


def reference_scores(original, idf: bool) -> list[list[float]]:
    """Per item, the 11 components of `COMPONENT_NAMES` computed by the NumPy reference."""
    tokens, ids, frames = reference_inputs(original)
    table, unseen = reference_table(ids, idf)

    def weights(text: str) -> np.ndarray:
        return idf_lookup(table, unseen, ids[text])

    rows = []
    for item, caption in enumerate(CAPTIONS):
        video = video_components(tokens[caption], weights(caption), frames[item])
        references = [(tokens[reference], weights(reference)) for reference in REFERENCES[item]]
        reference = reference_components(tokens[caption], weights(caption), references)
        rows.append([*video, *reference, combined_components(video, reference).score])
    return rows


def score_ours(ours, idf: bool, batch_size: int = 64):
    videos = [as_images(clip) for clip in FRAMES]
    return ours.score_videos(videos, CAPTIONS, references=REFERENCES, idf=idf, batch_size=batch_size)


# ------------------------------------------------------------------------------------ against the NumPy reference
def test_idf_table_equals_emscore_rule(original_and_ours):  # noqa: F811
    """EMScore's default corpus (a reference shared by two candidates counts twice): same ids, same weights."""
    original, ours = original_and_ours
    _, ids, _ = reference_inputs(original)
    assert all(ids[text][-1] == end_of_text_id() for text in ids)
    expected, unseen = reference_table(ids, idf=True)
    table = ours.build_idf_table(default_idf_corpus(CAPTIONS, REFERENCES))
    assert sorted(table.weights) == sorted(expected)
    assert 0 in expected  # every corpus caption is shorter than 77 tokens: the pad id is in every set
    for token, value in expected.items():
        assert table.weights[token] == pytest.approx(value, abs=1e-12), token
    assert table.unseen == pytest.approx(unseen, abs=1e-12)


@pytest.mark.parametrize("idf", [True, False], ids=["idf", "no_idf"])
def test_scores_equal_numpy_emscore(original_and_ours, idf):  # noqa: F811
    """Every component and the final Eq. 14 score agree to 1e-5, item by item."""
    original, ours = original_and_ours
    output = score_ours(ours, idf)
    for item, expected in enumerate(reference_scores(original, idf)):
        assert_scores_close(components(output, item), expected, atol=1e-5, what=f"item {item}")


def test_emscore_batches_change_negative_scores_ours_do_not(original_and_ours):  # noqa: F811
    """In one batch EMScore turns negative maxima of shorter items into 0 (padding multiplied by the mask);
    `score_videos` gives every item its own result whatever shares the batch."""
    original, ours = original_and_ours
    tokens, _, frames = reference_inputs(original)
    ones = [np.ones(len(tokens[caption])) for caption in CAPTIONS]
    batched = emscore_batch_video_match([(tokens[c], w, f) for c, w, f in zip(CAPTIONS, ones, frames)])
    alone = [video_components(tokens[c], w, f) for c, w, f in zip(CAPTIONS, ones, frames)]
    output = score_ours(ours, idf=False)
    one_by_one = score_ours(ours, idf=False, batch_size=1)
    assert_scores_close(output.video_precision, [part.precision for part in alone], atol=1e-5)
    assert_scores_close(output.video_precision, one_by_one.video_precision)
    emscore_batched_precision = np.array([precision for precision, _, _ in batched])
    assert np.abs(emscore_batched_precision - output.video_precision.numpy()).max() > 1e-2  # the bug is real here
    assert (output.video_precision < 0).any()


# ------------------------------------------------------------------------ against EMScore's code, when checked out
class EMScoreTextModel:
    """EMScore's modified CLIP: `encode_text(text, local=True)` returns every position's projected embedding."""

    def __init__(self, model):
        self.model = model

    def encode_text(self, text, local=False):
        return original_token_features(self.model, text)


def clip_tokenize(texts):
    """`clip.tokenize`: one string or a list."""
    return original_tokenize([texts] if isinstance(texts, str) else list(texts))


class InProcessPool:
    """`multiprocessing.Pool` for `get_idf_dict`, without forking the pytest process."""

    def __init__(self, processes=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def map(self, function, iterable):
        return [function(item) for item in iterable]


def load_emscore(folder: Path, original) -> types.ModuleType:
    """EMScore's `scorer` module loaded from `folder/emscore`, with `clip.load` giving the original CLIP code on our
    tiny weights (`clip` and `cv2` are stubbed while it loads; the files are not changed)."""
    package_dir = folder / "emscore"
    missing = [name for name in ("utils.py", "scorer.py") if not (package_dir / name).is_file()]
    if missing:
        pytest.fail(
            f"PACS_EMSCORE_DIR={str(folder)!r} is not a checkout of ShiYaya/emscore: {missing} not in {package_dir}"
        )
    clip_stub = types.ModuleType("clip")
    clip_stub.load = lambda name, device=None: (EMScoreTextModel(original), None)
    clip_stub.tokenize = clip_tokenize
    package = types.ModuleType("emscore_original")
    package.__path__ = [str(package_dir)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "clip", clip_stub)
        patch.setitem(sys.modules, "cv2", types.ModuleType("cv2"))
        patch.setitem(sys.modules, "emscore_original", package)
        modules = {}
        for name in ("utils", "scorer"):
            spec = importlib.util.spec_from_file_location(f"emscore_original.{name}", package_dir / f"{name}.py")
            modules[name] = importlib.util.module_from_spec(spec)
            patch.setitem(sys.modules, spec.name, modules[name])
            spec.loader.exec_module(modules[name])
    modules["utils"].Pool = InProcessPool
    return modules["scorer"]


@pytest.fixture(scope="module")
def emscore(original_and_ours):  # noqa: F811
    folder = os.environ.get("PACS_EMSCORE_DIR")
    if not folder:
        pytest.skip(HOW_TO_RUN_EMSCORE)
    return load_emscore(Path(folder), original_and_ours[0])


def run_emscore(scorer, original, frames, candidates, references, idf):
    """`EMScorer.score` with frame features in its `vid_feat_cache` (normalised, as its `encode_video` does)."""
    _, _, frame_features = original_video_inputs(original, [], frames)
    cache = {
        f"video_{index}": torch.nn.functional.normalize(torch.from_numpy(features), dim=-1)
        for index, features in enumerate(frame_features)
    }
    vids = [f"video_{index}" for index in range(len(candidates))]
    emscorer = scorer.EMScorer(vid_feat_cache=cache, device="cpu")
    return emscorer.score(candidates, references, vids=vids, verbose=False, idf=idf, batch_size=64)


def run_emscore_alone(scorer, original, item, idf):
    """EMScore on one item. A lone reference is given twice: with one candidate and one reference EMScore's
    `squeeze()` leaves a 0-dim tensor that its own max-over-references code cannot slice (a crash of the original)."""
    references = REFERENCES[item] if len(REFERENCES[item]) > 1 else REFERENCES[item] * 2
    return run_emscore(scorer, original, FRAMES[item : item + 1], CAPTIONS[item : item + 1], [references], idf)


def emscore_idf_table(scorer, original, monkeypatch) -> dict:
    """The IDF dict EMScore builds for the whole call (its `get_idf_dict`, then its end-of-text rule, in place)."""
    captured = []

    def capture(*args, **kwargs):
        captured.append(get_idf_dict(*args, **kwargs))
        return captured[-1]

    get_idf_dict = scorer.get_idf_dict
    monkeypatch.setattr(scorer, "get_idf_dict", capture)
    run_emscore(scorer, original, FRAMES, CAPTIONS, REFERENCES, idf=True)
    monkeypatch.setattr(scorer, "get_idf_dict", get_idf_dict)
    return captured[0]


def emscore_components(results, item: int = 0) -> list[float]:
    video, reference, combined = results["EMScore(X,V)"], results["EMScore(X,X*)"], results["EMScore(X,V,X*)"]
    values = [video[key] for key in ("figr_P", "figr_R", "figr_F", "cogr", "full_F")]
    values += [reference[key] for key in ("figr_P", "figr_R", "figr_F", "cogr", "full_F")]
    values.append(combined["full_F"])
    return [float(value.reshape(-1)[item]) for value in values]


@pytest.mark.parametrize("idf", [True, False], ids=["idf", "no_idf"])
def test_scores_equal_emscore_code(emscore, original_and_ours, idf, monkeypatch):  # noqa: F811
    """Item by item (EMScore alone in its batch, so its padding bug cannot fire), with EMScore's IDF table of the
    whole call: every component and the final Eq. 14 score agree to 1e-5 with `score_videos` and the reference."""
    original, ours = original_and_ours
    table = emscore_idf_table(emscore, original, monkeypatch) if idf else False
    if idf:
        _, ids, _ = reference_inputs(original)
        expected, unseen = reference_table(ids, idf=True)
        assert set(expected) <= set(table)
        for token, value in table.items():
            assert value == pytest.approx(expected.get(token, unseen), abs=1e-12), token
    output = score_ours(ours, idf)
    numpy_rows = reference_scores(original, idf)
    for item in range(len(CAPTIONS)):
        theirs = emscore_components(run_emscore_alone(emscore, original, item, table))
        assert_scores_close(components(output, item), theirs, atol=1e-5, what=f"item {item}")
        assert_scores_close(numpy_rows[item], theirs, atol=1e-5, what=f"reference, item {item}")


def test_emscore_code_batch_bug_matches_the_reference_model(emscore, original_and_ours):  # noqa: F811
    """EMScore's batched call equals `emscore_batch_video_match` (its padding modelled in NumPy), not `score_videos`."""
    original, ours = original_and_ours
    batched = run_emscore(emscore, original, FRAMES, CAPTIONS, REFERENCES, idf=False)["EMScore(X,V)"]
    tokens, _, frames = reference_inputs(original)
    items = [(tokens[caption], np.ones(len(tokens[caption])), clip) for caption, clip in zip(CAPTIONS, frames)]
    theirs = np.stack([batched[key].numpy() for key in ("figr_P", "figr_R", "figr_F")], axis=1)
    assert_scores_close(theirs, np.array(emscore_batch_video_match(items)), atol=1e-5)
    output = score_ours(ours, idf=False)
    assert np.abs(theirs[:, 0] - output.video_precision.numpy()).max() > 1e-2
