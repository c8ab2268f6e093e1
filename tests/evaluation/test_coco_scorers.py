"""The pycocoevalcap-compatible scorers (`ModelScorer`, `CLIPScorer`, `PolosScorer`, ...): in a `COCOEvalCap`-style
loop beside pycocoevalcap's own scorers, their per-item scores (in `gts.keys()` order, as pycocoevalcap's) equal
`model.score` on the same items and `evaluate_captions`' columns (1e-6), their signatures equal evaluate-captions',
images resolve through a mapping or a folder, and bad input is an error naming it."""

from pathlib import Path

import pytest

from modeling_pacs.errors import InputError
from modeling_pacs.evaluation.captions import evaluate_captions
from modeling_pacs.evaluation.coco_scorers import ModelScorer
from modeling_pacs.pacs.coco_scorers import CLIPScorer, PACSppScorer
from modeling_pacs.polos.coco_scorers import PolosScorer
from tests.fixtures.helpers import random_image

# gts in another order than res, and than the ids' sort: pycocoevalcap's scores follow gts.keys()
GTS = {
    42: ["a red disc on a white background", "a red circle"],
    7: ["a blue square", "a dark blue tile in the centre", "a square"],
    300: ["a green triangle"],
}
RES = {7: ["a blue square in the middle"], 300: ["a triangle"], 42: ["a red circle"]}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The same three images under COCO 2014 names, a COCO 2017 name and a plain `<id>.png`."""
    folder = tmp_path_factory.mktemp("coco_images")
    paths = {
        42: folder / "COCO_val2014_000000000042.jpg",
        7: folder / "000000000007.jpg",
        300: folder / "300.png",
    }
    for seed, path in enumerate(paths.values()):
        random_image(seed, (64 + 16 * seed, 48)).save(path)
    return {image_id: str(path) for image_id, path in paths.items()}


def reference_scores(model, images, references=True):
    """`model.score` on the items in gts order: the independent computation."""
    ids = list(GTS)
    output = model.score([images[i] for i in ids], [RES[i][0] for i in ids],
                         references=[GTS[i] for i in ids] if references else None)  # fmt: skip
    return output


def test_scorers_in_a_cocoevalcap_loop_equal_model_score_and_evaluate_captions(images):
    pytest.importorskip("pycocoevalcap")
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    folder = str(Path(images[42]).parent)
    clip_s = CLIPScorer(model="tiny:clip_s", images=folder)  # a folder: COCO 2014, 2017 and plain names
    polos = PolosScorer(model="tiny:polos", images=images)  # a mapping
    pac_s_pp = PACSppScorer(model="tiny", images=images, outputs="score", use_references=False)
    scorers = [
        (Bleu(4), ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"]),
        (Cider(), "CIDEr"),
        (clip_s, clip_s.columns),
        (polos, polos.method()),
        (pac_s_pp, pac_s_pp.method()),
    ]
    evaluation, image_to_eval = {}, {}
    for scorer, method in scorers:  # COCOEvalCap.evaluate's loop
        score, scores = scorer.compute_score(GTS, RES)
        for sc, scs, m in zip(score, scores, method) if isinstance(method, list) else [(score, scores, method)]:
            evaluation[m] = sc
            for image_id, value in zip(GTS.keys(), scs):
                image_to_eval.setdefault(image_id, {})[m] = value
    assert clip_s.columns == ["CLIP-S", "RefCLIP-S"] and polos.method() == "Polos"
    assert pac_s_pp.method() == "PAC-S++" and pac_s_pp.columns == ["PAC-S++"]

    expected = reference_scores(clip_s.model, images)
    for label, values in (("CLIP-S", expected.scores), ("RefCLIP-S", expected.ref_scores)):
        assert [image_to_eval[i][label] for i in GTS] == pytest.approx(values.tolist(), abs=1e-6)
        assert evaluation[label] == pytest.approx(values.double().mean().item(), abs=1e-6)
    polos_scores = reference_scores(polos.model, images).scores.tolist()
    assert [image_to_eval[i]["Polos"] for i in GTS] == pytest.approx(polos_scores, abs=1e-6)
    pac_scores = reference_scores(pac_s_pp.model, images, references=False).scores.tolist()
    assert [image_to_eval[i]["PAC-S++"] for i in GTS] == pytest.approx(pac_scores, abs=1e-6)
    assert set(evaluation) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "CIDEr", "CLIP-S", "RefCLIP-S", "Polos",
                               "PAC-S++"}  # fmt: skip

    # evaluate_captions on the same items: the same per-item values and the same signatures
    items = [{"image_id": i, "image": images[i], "caption": RES[i][0], "references": GTS[i]} for i in GTS]
    result = evaluate_captions(items, metrics=["tiny:clip_s", "tiny:polos"], progress=False)
    rows = {row["image_id"]: row for row in result.items}
    for i in GTS:
        assert rows[i]["tiny:clip_s/score"] == pytest.approx(image_to_eval[i]["CLIP-S"], abs=1e-6)
        assert rows[i]["tiny:clip_s/ref_score"] == pytest.approx(image_to_eval[i]["RefCLIP-S"], abs=1e-6)
        assert rows[i]["tiny:polos/score"] == pytest.approx(image_to_eval[i]["Polos"], abs=1e-6)
    assert clip_s.signature == result.signatures["tiny:clip_s"]
    assert polos.signature == result.signatures["tiny:polos"]
    assert "refs:1-3" in clip_s.signature and "refs:0" in pac_s_pp.signature


def test_image_patterns_and_untokenised_annotation_dicts(images):
    folder = Path(images[42]).parent
    scorer = ModelScorer("tiny:clip_s", images=folder, image_pattern="COCO_val2014_%012d.jpg", outputs="score")
    gts = {42: [{"image_id": 42, "caption": "A red circle."}]}
    score, scores = scorer.compute_score(gts, {42: [{"image_id": 42, "caption": "a red circle"}]})
    assert scores == [pytest.approx(score, abs=0)] and isinstance(score, float)
    braces = ModelScorer(scorer.model, images=folder, image_pattern="{}.png", outputs="score")
    assert braces.images_of([300]) == [images[300]]
    with pytest.raises(InputError, match=r"1 image ids have no file in .*\(7; looked for '7.png'\)"):
        braces.images_of([7])


def test_bad_input_is_named(images):
    scorer = ModelScorer("tiny:clip_s", images=images)
    with pytest.raises(InputError, match=r"res\[7\] holds 2 captions: pycocoevalcap's scorers score one result"):
        scorer.compute_score(GTS, {**RES, 7: ["a square", "a blue square"]})
    with pytest.raises(InputError, match=r"same image ids.*1 only in res \(5\); 1 only in gts \(300\)"):
        scorer.compute_score(GTS, {7: RES[7], 42: RES[42], 5: ["x"]})
    with pytest.raises(InputError, match=r"1 image ids have no image in the images mapping \(8\)"):
        scorer.compute_score({8: ["a"]}, {8: ["b"]})
    with pytest.raises(InputError, match="no file in .*looked for '8.jpg' \\(or .png, ...\\) and the COCO names"):
        ModelScorer(scorer.model, images=Path(images[42]).parent).compute_score({8: ["a"]}, {8: ["b"]})
    with pytest.raises(InputError, match="CLIPScorer scores clip_s, and this model computes pac_s_pp"):
        CLIPScorer(model="tiny", images=images)
    with pytest.raises(InputError, match="Polos scores captions against references: use_references must be True"):
        PolosScorer(model="tiny:polos", images=images, use_references=False)
    with pytest.raises(InputError, match=r"outputs \['ref_score'\]: CLIP-S gives \['score'\] without references"):
        ModelScorer(scorer.model, images=images, outputs="ref_score", use_references=False)


def test_pearl_scorer_needs_a_model():
    from modeling_pacs.pearl.coco_scorers import PearlCOCOScorer

    with pytest.raises(InputError, match="PearlCOCOScorer needs model="):
        PearlCOCOScorer(images={})
