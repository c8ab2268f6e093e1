"""The Space's "Compare metrics" tab (space/app.py), in process: its columns against direct `model.score` calls and
against `evaluate_captions` (what `pacs-pp evaluate-captions` computes), its ranking, its messages for bad choices, one
load per model, and no server path reachable through it; the scoring mode of the metrics that have several (both
tabs), and "Rank by" emptied when the chosen metrics change. The tab run as a server (20 concurrent clients, the
browser, captions as text) is tested in tests/space/test_app.py.
"""

import shutil
from pathlib import Path

import pytest

from modeling_pacs.evaluation.captions import evaluate_captions, java_available
from modeling_pacs.loading import load_model
from tests.fixtures.helpers import assert_scores_close
from tests.space.test_app import RED_CIRCLE, load_app_module, page_event

CAPTIONS = ["a red circle on a white background", "a blue <b>square</b>", "a red disc", "a photo of a dog"]
REFERENCES = ["a red disc in the middle of a white image", "a red circle"]
MODELS = ["tiny:clip_s", "tiny"]  # two tiny models: CLIP-S and PAC-S++
JAVA = java_available()
NEEDS_JAVA = pytest.mark.skipif(not JAVA, reason="no working Java: the Space offers BLEU and ROUGE-L only with Java")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app module, with gradio's upload folder in a private folder (holding one uploaded image)."""
    uploads = tmp_path_factory.mktemp("uploads")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(uploads))
        patch.setenv("HF_HOME", str(uploads.parent / "hf_home"))
        module = load_app_module()
        module.upload = uploads / "0123abcd" / "red_circle.png"
        module.upload.parent.mkdir()
        shutil.copy(RED_CIRCLE, module.upload)
        yield module


@pytest.fixture(scope="module")
def loads(app) -> list[str]:
    """Every `load_model` call of the app in this module, by name."""
    calls = []

    def counting_load_model(name, *arguments, **keywords):
        calls.append(name)
        return load_model(name, *arguments, **keywords)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app, "load_model", counting_load_model)
        yield calls


@pytest.fixture(scope="module")
def demo(app, loads):
    return app.build_demo(tiny=True, public=True, ngrams=JAVA)


@pytest.fixture(scope="module")
def engines() -> dict:
    return {name: load_model(name) for name in MODELS}


def compare(demo, app, captions, references, metrics, rank_by=""):
    """The page's Compare button: (message, best, styled table, details, rank-by update, kept table)."""
    page = page_event(demo, "compare_and_keep")
    return page({"path": str(app.upload)}, "\n".join(captions), "\n".join(references), metrics, rank_by)


@pytest.mark.parametrize("references", [REFERENCES, []], ids=["with references", "without references"])
def test_columns_equal_direct_model_calls(app, demo, engines, references):
    message, best, _, details, rank_by, _ = compare(demo, app, CAPTIONS, references, MODELS)
    assert message["visible"] is False
    images = [str(RED_CIRCLE)] * len(CAPTIONS)
    expected = {}
    for model in engines.values():
        output = model.score(images, CAPTIONS, references=[REFERENCES] * len(CAPTIONS) if references else None)
        label_free, label_ref = model.config.score_names
        expected[label_free] = dict(zip(CAPTIONS, output.scores.tolist()))
        if references:
            expected[label_ref] = dict(zip(CAPTIONS, output.ref_scores.tolist()))
    headings = ["CLIP-S", "RefCLIP-S", "PAC-S++", "RefPAC-S++"] if references else ["CLIP-S", "PAC-S++"]
    assert list(expected) == headings
    assert details["columns"] == {
        heading: f"{MODELS[index // (2 if references else 1)]}/{'ref_score' if heading.startswith('Ref') else 'score'}"
        for index, heading in enumerate(headings)
    }
    assert rank_by["choices"] == headings and rank_by["value"] == "CLIP-S" == details["ranked_by"]
    assert sorted(row["caption"] for row in details["results"]) == sorted(CAPTIONS)
    for heading in headings:
        assert_scores_close([row[heading] for row in details["results"]],
                            [expected[heading][row["caption"]] for row in details["results"]])  # fmt: skip
    assert best.startswith(f"“{details['results'][0]['caption']}”\nCLIP-S ")


@NEEDS_JAVA
def test_columns_equal_what_evaluate_captions_computes(app, demo):
    """Model and n-gram columns against `evaluate_captions` (pacs-pp evaluate-captions), one item per caption."""
    metrics = ["tiny", "bleu", "rouge_l"]
    _, _, _, details, _, _ = compare(demo, app, CAPTIONS, REFERENCES, metrics)
    items = [{"image_id": index, "image": str(RED_CIRCLE), "caption": caption, "references": REFERENCES}
             for index, caption in enumerate(CAPTIONS)]  # fmt: skip
    evaluation = evaluate_captions(items, metrics=metrics, duplicates="separate", progress=False)
    ngram_columns = ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L"]
    assert list(details["columns"]) == ["PAC-S++", "RefPAC-S++", *ngram_columns]
    assert list(details["columns"].values()) == list(evaluation.corpus)  # the CLI's score columns, in order
    by_caption = {row["caption"]: row for row in evaluation.items}
    for row in details["results"]:
        for heading, column in details["columns"].items():
            if column in ngram_columns:  # the same code on the same tokens: the same floats
                assert row[heading] == by_caption[row["caption"]][column], (heading, row["caption"])
            else:
                assert_scores_close([row[heading]], [by_caption[row["caption"]][column]])


def test_ranking_by_any_column_and_reranking_without_rescoring(app, demo, engines, monkeypatch):
    _, _, _, details, rank_by, kept = compare(demo, app, CAPTIONS, REFERENCES, MODELS, rank_by="RefPAC-S++")
    output = engines["tiny"].score([str(RED_CIRCLE)] * len(CAPTIONS), CAPTIONS, references=[REFERENCES] * 4)
    expected_order = [CAPTIONS[index] for index in sorted(range(4), key=lambda index: -output.ref_scores[index])]
    assert [row["caption"] for row in details["results"]] == expected_order
    assert [row["rank"] for row in details["results"]] == [1, 2, 3, 4]
    assert details["ranked_by"] == rank_by["value"] == "RefPAC-S++"
    rerank = page_event(demo, "rerank")
    monkeypatch.setattr(app, "compare_request", lambda *arguments: pytest.fail("re-ranking scored again"))
    for heading in rank_by["choices"]:
        message, best, table, reranked = rerank(kept, heading)
        values = [row[heading] for row in reranked["results"]]
        assert values == sorted(values, reverse=True) and reranked["ranked_by"] == heading
        assert [row["rank"] for row in reranked["results"]] == [1, 2, 3, 4]
        assert best.startswith(f"“{reranked['results'][0]['caption']}”\n{heading} {values[0]:.4f} (ranked by")
        assert table.data["caption"].tolist() == [row["caption"] for row in reranked["results"]]
        for column in rank_by["choices"]:  # each caption keeps its numbers
            assert {row["caption"]: row[column] for row in reranked["results"]} == {
                row["caption"]: row[column] for row in details["results"]
            }


@pytest.mark.parametrize(
    "metrics, references, rank_by, message",
    [
        ([], [], "", "No metrics: pick at least one metric in the list"),
        (["tiny", "ViT-H/99"], [], "", "Unknown metric: unknown metric 'ViT-H/99': pick from ['tiny:clip_s', 'tiny',"),
        (["/etc"], [], "", "Unknown metric: unknown metric '/etc': pick from"),  # no paths, even as a metric
        ({"tiny": 1}, [], "", "Unknown metric: the metrics must be a list of names, as /list_metrics returns them"),
        (["tiny:polos"], [], "", "No references: tiny:polos (Polos) is a reference-based metric: enter at least one"),
    ],
)
def test_a_bad_choice_gets_one_message_in_the_page(app, demo, metrics, references, rank_by, message):
    shown, *outputs = compare(demo, app, ["a red circle"], references, metrics, rank_by)
    assert shown["visible"] is True and shown["value"].startswith(message)
    assert outputs == [None] * 5


def test_rank_by_a_column_the_result_lacks(app, demo):
    """An API call gets a message naming the columns; the page, whose "Rank by" still names a column of the previous
    comparison (here RefPAC-S++, before the references were removed), ranks by the first column and shows it."""
    api = next(function.fn for function in demo.fns.values() if function.api_name == "compare")
    for rank_by, shown in (("RefPAC-S++", "RefPAC-S++"), (["CLIP-S"], "list")):
        with pytest.raises(app.gr.Error) as raised:
            api({"path": str(app.upload)}, "a red circle", "", MODELS, rank_by)
        assert raised.value.message == (
            f"cannot rank by '{shown}': the columns of this comparison are ['CLIP-S', 'PAC-S++']"
        )
    message, best, _, details, rank_by, _ = compare(demo, app, ["a red circle", "a dog"], [], MODELS, "RefPAC-S++")
    assert message["visible"] is False and details["ranked_by"] == rank_by["value"] == "CLIP-S"
    assert "(ranked by CLIP-S)" in best


@NEEDS_JAVA
def test_ngram_metrics_need_references_and_java(app, demo):
    shown, *_ = compare(demo, app, ["a red circle"], [], ["tiny", "bleu", "rouge_l"])
    assert shown["value"] == (
        "No references: bleu and rouge_l compare each caption with references: enter at least one reference, or "
        "leave them out"
    )
    without_java = app.build_demo(tiny=True, public=True, ngrams=False)
    shown, *_ = compare(without_java, app, ["a red circle"], REFERENCES, ["bleu"])
    assert shown["value"] == (
        "Unknown metric: bleu is not offered by this server: it needs Java (pycocoevalcap's PTB tokenizer), which is "
        "not installed here; pick a model metric"
    )
    assert "bleu" not in str(without_java.config) and "bleu" in str(demo.config)


def test_no_server_file_is_read_and_captions_stay_text(app, demo):
    page = page_event(demo, "compare_and_keep")
    for path in ("/etc/passwd", str(RED_CIRCLE), str(Path(app.upload).parent / ".." / ".." / "x.png")):
        shown, *outputs = page({"path": path}, "a red circle", "", MODELS, "")
        assert shown["value"] == "Image not accepted: " + app.REFUSED_IMAGE_MESSAGE and outputs == [None] * 5
    _, best, table, details, _, _ = compare(demo, app, ["<img src=x onerror=alert(1)> **b**"], [], MODELS)
    assert best.startswith("“<img src=x onerror=alert(1)> **b**”\n")
    assert table.data["caption"].tolist() == ["<img src=x onerror=alert(1)> **b**"]
    assert details["results"][0]["caption"] == "<img src=x onerror=alert(1)> **b**"


def test_each_model_loads_once_whichever_tab_names_it(app, demo, loads):
    """The module's requests, and more through both tabs, loaded each model once (the Image tab's tiny entry is the
    compare tab's `tiny:clip_s` and `tiny`)."""
    score_page = page_event(demo, "score")
    for _ in range(2):
        assert compare(demo, app, ["a red circle"], [], MODELS)[0]["visible"] is False
        assert score_page({"path": str(app.upload)}, "a red circle", "", app.TINY_CHOICE)[0]["visible"] is False
    assert set(MODELS) <= set(loads) and sorted(loads) == sorted(set(loads))


def test_deneb_compares_with_references_and_asks_for_them_without(app, demo):
    """A reference-based family the registry added (DENEB) is offered by the tiny Space: its column is the engine's
    score with references, and without references the page asks for them."""
    deneb = load_model("tiny:deneb")
    _, _, _, details, _, _ = compare(demo, app, CAPTIONS, REFERENCES, ["tiny:deneb"])
    output = deneb.score([str(RED_CIRCLE)] * len(CAPTIONS), CAPTIONS, references=[REFERENCES] * len(CAPTIONS))
    (heading,) = details["columns"]
    expected = dict(zip(CAPTIONS, output.scores.tolist()))
    assert_scores_close([row[heading] for row in details["results"]],
                        [expected[row["caption"]] for row in details["results"]])  # fmt: skip
    message = compare(demo, app, CAPTIONS, [], ["tiny:deneb"])[0]
    assert message["visible"] is True and "reference-based metric: enter at least one reference" in message["value"]


# ---------------------------------------------------------------------------------------------------- scoring modes
def app_event(demo, name: str):
    """A function the page calls on a change (not a button), by its name."""
    (handler,) = [function.fn for function in demo.fns.values() if function.fn.__name__ == name]
    return handler


@pytest.fixture(scope="module")
def deneb_engine():
    return load_model("tiny:deneb")


def recorded_modes(monkeypatch, engine) -> list:
    """The `mode` of every `score` call of `engine`'s class (the app's cached model is another instance)."""
    modes, original = [], type(engine).score

    def recording(self, *arguments, **keywords):
        modes.append(keywords.get("mode"))
        return original(self, *arguments, **keywords)

    monkeypatch.setattr(type(engine), "score", recording)
    return modes


def test_the_scoring_mode_reaches_the_metrics_that_have_one(app, demo, deneb_engine, monkeypatch):
    page = page_event(demo, "compare_and_keep")
    image = {"path": str(app.upload)}
    for mode in ("official", "per_item"):
        expected = deneb_engine.score([str(app.upload)] * len(CAPTIONS), CAPTIONS, [REFERENCES] * len(CAPTIONS),
                                      mode=mode).scores.tolist()  # fmt: skip
        modes = recorded_modes(monkeypatch, deneb_engine)
        message, _, _, details, _, _ = page(image, "\n".join(CAPTIONS), "\n".join(REFERENCES), ["tiny:deneb", "tiny"],
                                            "", mode)  # fmt: skip
        assert message["visible"] is False and modes == [mode]  # PAC-S++ (no modes) is scored as always
        by_caption = {row["caption"]: row["DENEB"] for row in details["results"]}
        assert_scores_close([by_caption[caption] for caption in CAPTIONS], expected)
        monkeypatch.undo()


@pytest.mark.parametrize(
    ("metrics", "mode", "message"),
    [
        (["tiny:deneb"], "chunked",
         "Unknown scoring mode: DENEB has no scoring mode 'chunked': choose one of per_item, official"),
        (["tiny:clip_s", "tiny"], "official",
         "Unknown scoring mode: scoring mode 'official' applies to the metrics Polos, DENEB, not to PAC-S++ (pac_s_pp, "
         "pac_s, clip_s), which has one way of batching: leave it out"),
    ],
)  # fmt: skip
def test_a_mode_no_chosen_metric_has_is_one_message_naming_the_valid_ones(app, demo, metrics, mode, message):
    page = page_event(demo, "compare_and_keep")
    shown, *outputs = page({"path": str(app.upload)}, "a red circle", "a red disc", metrics, "", mode)
    assert shown["value"] == message and shown["visible"] is True
    assert all(output is None for output in outputs)


def test_changing_the_metrics_empties_rank_by_and_shows_the_mode_only_for_metrics_with_modes(demo):
    changed = app_event(demo, "chosen_metrics_changed")
    rank_by, kept, mode = changed(["tiny:clip_s", "tiny"])
    assert (rank_by["choices"], rank_by["value"], kept) == ([], None, None)  # no column of the previous comparison
    assert mode["visible"] is False and mode["choices"] == [] and mode["value"] is None
    rank_by, kept, mode = changed(["tiny", "tiny:deneb"])
    assert (rank_by["choices"], rank_by["value"], kept) == ([], None, None)
    assert mode["visible"] is True and mode["choices"] == ["per_item", "official"] and mode["value"] == "per_item"


def test_the_image_tab_shows_the_mode_for_a_model_with_modes_and_forwards_it(app, deneb_engine, monkeypatch):
    local = deneb_engine.name_or_path  # tiny:deneb's folder, as the operator's model
    demo = app.build_demo(tiny=True, local_model=local, public=False)
    mode_choice = app_event(demo, "mode_choice")
    assert mode_choice(app.TINY_CHOICE)["visible"] is False
    shown = mode_choice(local)
    assert shown["visible"] is True and shown["choices"] == ["per_item", "official"]
    score = page_event(demo, "score")
    for mode in ("official", "per_item"):
        modes = recorded_modes(monkeypatch, deneb_engine)
        message, _, _, _, details = score({"path": str(app.upload)}, "\n".join(CAPTIONS), "\n".join(REFERENCES),
                                          local, mode)  # fmt: skip
        assert message["visible"] is False and details["mode"] == mode and modes == [mode]
        monkeypatch.undo()
        expected = deneb_engine.score([str(app.upload)] * len(CAPTIONS), CAPTIONS, [REFERENCES] * len(CAPTIONS),
                                      mode=mode).scores.tolist()  # fmt: skip
        by_caption = {row["caption"]: row["DENEB"] for row in details["results"]}
        assert_scores_close([by_caption[caption] for caption in CAPTIONS], expected)
    message, *_ = score({"path": str(app.upload)}, "a red circle", "", app.TINY_CHOICE, "official")
    assert message["value"].startswith("Unknown scoring mode: scoring mode 'official' applies to the metrics Polos")
