"""The Gradio Space (space/app.py), run as a real server: gradio_client calls of every endpoint, 20 concurrent
requests, error messages, and an end-to-end test in Debian's headless Chromium driven by Playwright.

Every score the Space shows is checked against direct `PACSModel.score` calls on the same models in this process.
The Space runs offline on tiny random models: `PACS_SPACE_TINY=1` for the built-in tiny entry, plus a local model
directory (seed 1, whose cosines are positive, so scores are not all clipped to 0) as the default entry.
"""

import contextlib
import importlib.util
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import PIL.Image
import pytest
import torch
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from playwright.sync_api import expect, sync_playwright

from modeling_pacs.evaluation.captions import java_available
from modeling_pacs.loading import load_model
from modeling_pacs.models.inputs import load_image
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.helpers import assert_scores_close

REPO_ROOT = Path(__file__).resolve().parents[2]
APP = REPO_ROOT / "space" / "app.py"
EXAMPLES = REPO_ROOT / "space" / "examples"
RED_CIRCLE = EXAMPLES / "red_circle.png"
TINY_CHOICE = "tiny (random weights)"
# The compare tab's metrics on a --tiny Space: the selector's pair first, then every tiny model of the CLIP backbone.
TINY_METRICS = ["tiny:clip_s", "tiny", "tiny:pac_s", "tiny:polos", "tiny:pearl", "tiny:deneb"]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Markdown and HTML that a renderer would turn into an image, bold text or a link, and a tag that would swallow text.
HOSTILE_CAPTION = "<img src=x onerror=alert(1)> <unk> stays **bold** [link](http://x) & $$x$$"
# Generous: the CPU is shared, and the first request loads the models.
SERVER_START_SECONDS = 240
REQUEST_SECONDS = 240


def free_port() -> int:
    """A port that is free now (gradio cannot be given port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def space_root(tmp_path_factory):
    """A private folder for models, caches and logs; `load_model("tiny")` here and in the server share its cache."""
    root = tmp_path_factory.mktemp("space")
    previous_cache = os.environ.get("PACS_PP_CACHE")
    os.environ["PACS_PP_CACHE"] = str(root / "pacs_pp_cache")
    yield root
    if previous_cache is None:
        os.environ.pop("PACS_PP_CACHE", None)
    else:
        os.environ["PACS_PP_CACHE"] = previous_cache


@contextlib.contextmanager
def running_space(root: Path, name: str, arguments: list[str], space_id: str | None):
    """`space/app.py --tiny ARGUMENTS` on a free port, with its own HF_HOME and upload folder, `SPACE_ID` set or not."""
    port = free_port()
    environment = dict(os.environ)
    environment.update(
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HOME=str(root / f"{name}_hf_home"),
        HF_HUB_OFFLINE="1",
        GRADIO_TEMP_DIR=str(root / f"{name}_gradio_tmp"),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), environment.get("PYTHONPATH", "")]),
    )
    environment.pop("SPACE_ID", None)
    if space_id is not None:
        environment["SPACE_ID"] = space_id
    log_path = root / f"{name}.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, str(APP), "--port", str(port), "--tiny", *arguments],
            cwd=REPO_ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield {
            "process": server,
            "url": f"http://127.0.0.1:{port}/",
            "log": log_path,
            "upload_folder": root / f"{name}_gradio_tmp",
        }
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def space_server(space_root):
    """The Space as run locally: `--tiny --model LOCAL`, no `SPACE_ID` (typed local paths are allowed); beside it,
    under "public", the Space as the Hub runs it: `SPACE_ID` set, tiny entry only.

    Both boot while `space_models` builds the local model (loaded on the first request only).
    """
    local_model = space_root / "pac-s-pp-seed1"
    with (
        running_space(space_root, "local", ["--model", str(local_model)], space_id=None) as server,
        running_space(space_root, "public", [], space_id="pacs-pp/pac-s-pp-demo") as public,
    ):
        yield {**server, "local_model": local_model, "public": public}


@pytest.fixture(scope="module")
def public_space_url(space_server, space_url) -> str:
    public = space_server["public"]
    wait_until_serving(public["url"], public["process"], public["log"])
    return public["url"]


@pytest.fixture(scope="module")
def space_models(space_root, space_server):
    """Local tiny models for the Space and for direct engine calls."""
    clip_directory = space_root / "clip-s-seed1"
    pac_directory = space_server["local_model"]
    make_tiny_model(clip_directory, variant="clip_s", seed=1)
    make_tiny_model(pac_directory, variant="pac_s_pp", seed=1)
    # CLIP-S of a local model uses the CLIP its config names: point it at the local tiny CLIP.
    set_base_model_id(pac_directory, str(clip_directory))
    orphan_directory = space_root / "pac-s-pp-without-clip"
    shutil.copytree(pac_directory, orphan_directory)
    set_base_model_id(orphan_directory, str(space_root / "no-such-clip"))
    return {
        "root": space_root,
        "local": str(pac_directory),
        "orphan": str(orphan_directory),
        "engines": {
            str(pac_directory): (load_model(str(clip_directory)), load_model(str(pac_directory))),
            TINY_CHOICE: (load_model("tiny:clip_s"), load_model("tiny")),
        },
    }


def set_base_model_id(model_directory: Path, base_model_id: str):
    config_path = model_directory / "config.json"
    config = json.loads(config_path.read_text())
    config["base_model_id"] = base_model_id
    config_path.write_text(json.dumps(config, indent=2))


@pytest.fixture(scope="module")
def space_url(space_server, space_models) -> str:
    """The running Space's URL, once it answers."""
    wait_until_serving(space_server["url"], space_server["process"], space_server["log"])
    return space_server["url"]


def wait_until_serving(url: str, server: subprocess.Popen, log_path: Path):
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the Space exited with code {server.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(url + "config", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the Space did not answer within {SERVER_START_SECONDS} s:\n{log_path.read_text()}")


@pytest.fixture(scope="module")
def client(space_url):
    return Client(space_url, verbose=False)


def engine_scores(engines, image: Path, captions: list[str], references: list[str]) -> dict[str, dict[str, float]]:
    """Direct core calls: {caption: {score name: value}}; the expected values of every Space result."""
    clip_s, pac_s = engines
    images = [str(image)] * len(captions)
    clip_output = clip_s.score(images, captions)
    pac_output = pac_s.score(images, captions, references=[references] * len(captions) if references else None)
    expected = {}
    for index, caption in enumerate(captions):
        expected[caption] = {"CLIP-S": float(clip_output.scores[index]), "PAC-S++": float(pac_output.scores[index])}
        if references:
            expected[caption]["RefPAC-S++"] = float(pac_output.ref_scores[index])
    return expected


def assert_results_match(details: dict, expected: dict[str, dict[str, float]], ranked_by: str):
    results = details["results"]
    assert details["ranked_by"] == ranked_by
    assert [row["rank"] for row in results] == list(range(1, len(expected) + 1))
    assert sorted(row["caption"] for row in results) == sorted(expected)
    for row in results:
        for name, value in expected[row["caption"]].items():
            assert row[name] == pytest.approx(value, rel=1e-6, abs=1e-7), (row["caption"], name)
        assert set(row) == {"rank", "caption", *expected[row["caption"]]}
    ranking_values = [row[ranked_by] for row in results]
    assert ranking_values == sorted(ranking_values, reverse=True)


def compare(client: Client, image, captions: list[str], references: list[str], metrics: list[str], rank_by=""):
    return client.predict(
        handle_file(str(image)),
        "\n".join(captions),
        "\n".join(references),
        metrics,
        rank_by,
        api_name="/compare",
    )


def score(client: Client, image, captions: list[str], references: list[str], model: str):
    return client.predict(
        handle_file(str(image)) if image is not None else None,
        "\n".join(captions),
        "\n".join(references),
        model,
        api_name="/score",
    )


# ---------------------------------------------------------------------------------------------------- endpoints
def test_the_guides_client_snippet_runs_against_the_tiny_space(space_url, space_models, monkeypatch, capsys):
    """docs/guides/space.md#call-it-from-python as written, against this Space instead of port 7860: it picks the
    first model `/list_models` offers, so it runs on the --tiny Space as on the Hub's."""
    from tests.test_doc_examples import fenced_blocks

    (snippet,) = [
        block.code for block in fenced_blocks(REPO_ROOT / "docs" / "guides" / "space.md") if "Client(" in block.code
    ]
    assert 'Client("http://127.0.0.1:7860/")' in snippet
    monkeypatch.chdir(REPO_ROOT)
    exec(snippet.replace("http://127.0.0.1:7860/", space_url), {})
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("Loaded as API")]
    assert lines[0] == str([space_models["local"], TINY_CHOICE])
    assert [line.split()[0] for line in lines[1:3]] == ["1", "2"]  # one row per candidate, best first
    # the first two metrics of this Space: the operator's model (PAC-S++), then the tiny CLIP-S
    assert lines[3:] == [f"RefPAC-S++ {sorted(['PAC-S++', 'RefPAC-S++', 'CLIP-S', 'RefCLIP-S'])}"]


def test_named_endpoints_and_model_list(client, space_models):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert set(endpoints) == {
        "/score", "/score_mode", "/list_models", "/score_video", "/compare", "/compare_mode", "/list_metrics"
    }  # fmt: skip
    assert client.predict(api_name="/list_models") == [space_models["local"], TINY_CHOICE]
    ngrams = ["bleu", "rouge_l"] if java_available() else []
    metrics = [space_models["local"], *TINY_METRICS, *ngrams]
    assert client.predict(api_name="/list_metrics") == metrics


def test_score_with_references_matches_engine(client, space_models):
    captions = ["a red circle on a white background", "a blue square", "a photo of a dog"]
    references = ["a red disc in the middle of a white image", "a red circle"]
    model = space_models["local"]
    best, table, chart, details = score(client, RED_CIRCLE, captions, references, model)

    expected = engine_scores(space_models["engines"][model], RED_CIRCLE, captions, references)
    assert all(value > 0 for row in expected.values() for value in row.values())  # seed 1: nothing clipped to 0
    assert_results_match(details, expected, ranked_by="RefPAC-S++")
    assert details["model"] == model
    ranked = sorted(expected, key=lambda caption: -expected[caption]["RefPAC-S++"])
    assert best.startswith(f"“{ranked[0]}”\n")
    assert f"RefPAC-S++ {expected[ranked[0]]['RefPAC-S++']:.4f}" in best
    assert "random weights" not in best  # said only for the built-in tiny entry (and in the page banner)
    # The table shows the same ranking to four decimals.
    assert table["headers"] == ["#", "caption", "CLIP-S", "PAC-S++", "RefPAC-S++"]
    for rank, (row, caption) in enumerate(zip(table["metadata"]["display_value"], ranked), start=1):
        names = ["CLIP-S", "PAC-S++", "RefPAC-S++"]
        assert row == [str(rank), caption, *(f"{expected[caption][name]:.4f}" for name in names)]
    # One bar per (caption, score), labelled by rank.
    bars = {bar: value for bar, _, value in chart["data"]}
    assert len(bars) == 9
    assert bars["#01 · RefPAC-S++"] == pytest.approx(expected[ranked[0]]["RefPAC-S++"], rel=1e-6)
    assert bars["#03 · CLIP-S"] == pytest.approx(expected[ranked[2]]["CLIP-S"], rel=1e-6)


def test_score_without_references_tiny_entry_matches_engine(client, space_models):
    captions = ["a green triangle on a black background", "a photo of a dog"]
    image = EXAMPLES / "green_triangle.png"
    best, table, _, details = score(client, image, captions, [], TINY_CHOICE)
    expected = engine_scores(space_models["engines"][TINY_CHOICE], image, captions, [])
    assert_results_match(details, expected, ranked_by="PAC-S++")
    assert table["headers"] == ["#", "caption", "CLIP-S", "PAC-S++"]
    assert "(ranked by PAC-S++)" in best
    assert "Tiny model with random weights: these numbers are meaningless." in best


def test_local_model_whose_clip_cannot_be_loaded_scores_without_clip_s(client, space_models):
    captions = ["a red circle", "a blue square"]
    best, table, _, details = score(client, RED_CIRCLE, captions, [], space_models["orphan"])
    _, pac_s = space_models["engines"][space_models["local"]]  # same weights: the orphan is a copy
    output = pac_s.score([str(RED_CIRCLE)] * 2, captions)
    expected = {caption: {"PAC-S++": float(value)} for caption, value in zip(captions, output.scores)}
    assert_results_match(details, expected, ranked_by="PAC-S++")
    assert table["headers"] == ["#", "caption", "PAC-S++"]
    assert "CLIP-S is not shown" in best and "no-such-clip" in best


@pytest.fixture(scope="module")
def huge_image(space_models) -> Path:
    path = space_models["root"] / "huge.png"
    PIL.Image.new("RGB", (5000, 4000), (200, 30, 30)).save(path)
    return path


@pytest.mark.parametrize(
    "case, message",
    [
        ("no image", "upload an image first"),
        ("no captions", "enter at least one candidate caption, one per line"),
        ("too many captions", "got 17 captions; the limit is 16: remove 1 of them"),
        ("caption too long", "caption 2 ('" + "x" * 40 + "...') is 301 characters long; the limit is 300"),
        ("too many references", "got 11 references; the limit is 10: remove 1 of them"),
        ("image too large", "the image 'huge.png' is 5000x4000 = 20.0 megapixels; the limit is 16.8: downscale"),
        ("not an image", "the uploaded file 'notes.png' could not be read as an image: upload a PNG, JPEG"),
        ("unknown model", "model 'ViT-H/99' is neither one of ['tiny (random weights)'] nor an existing local"),
    ],
)
def test_errors_reach_the_client(client, space_models, huge_image, case, message):
    image, captions, references, model = RED_CIRCLE, ["a red circle"], [], space_models["local"]
    if case == "no image":
        image = None
    elif case == "no captions":
        captions = ["", "   "]
    elif case == "too many captions":
        captions = [f"caption {index}" for index in range(17)]
    elif case == "caption too long":
        captions = ["short", "x" * 301]
    elif case == "too many references":
        references = [f"reference {index}" for index in range(11)]
    elif case == "image too large":
        image = huge_image
    elif case == "not an image":
        image = space_models["root"] / "notes.png"
        image.write_text("these are notes, not an image")
    elif case == "unknown model":
        model = "ViT-H/99"
    with pytest.raises(AppError) as raised:
        score(client, image, captions, references, model)
    assert message in str(raised.value)


def test_twenty_concurrent_requests_equal_direct_engine_calls(client, space_models):
    images = sorted(EXAMPLES.glob("*.png"))
    model = space_models["local"]
    requests = []
    for index in range(20):
        captions = [f"a picture number {index}", f"shape {index % 7} on a plain background", "a photo of a dog"]
        references = [f"reference {index}"] if index % 2 else []
        requests.append((images[index % len(images)], captions[: 1 + index % 3], references))
    jobs = [
        client.submit(handle_file(str(image)), "\n".join(captions), "\n".join(references), model, api_name="/score")
        for image, captions, references in requests
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        expected = list(pool.map(lambda request: engine_scores(space_models["engines"][model], *request), requests))
    for job, (_, _, references), expected_scores in zip(jobs, requests, expected):
        details = job.result(timeout=REQUEST_SECONDS)[3]
        assert_results_match(details, expected_scores, ranked_by="RefPAC-S++" if references else "PAC-S++")


def test_twenty_concurrent_comparisons_equal_direct_engine_calls(client, space_models):
    """20 clients compare metrics at once, with the /score requests of other clients: each column of each result is
    the engine's score; two PAC-S++ models get headings that name them."""
    local = space_models["local"]
    clip_s, tiny = space_models["engines"][TINY_CHOICE]
    local_pac_s = space_models["engines"][local][1]
    images = sorted(EXAMPLES.glob("*.png"))
    requests = []
    for index in range(20):
        captions = [f"a picture number {index}", f"shape {index % 5} on a plain background", "a photo of a dog"]
        references = [f"reference {index}"] if index % 2 else []
        metrics = [["tiny:clip_s", "tiny"], [local, "tiny", "tiny:clip_s"]][index % 2]
        rank_by = ["", "CLIP-S", "PAC-S++"][index % 3] if index % 2 == 0 else "RefPAC-S++ [tiny]"
        requests.append((images[index % len(images)], captions[: 1 + index % 3], references, metrics, rank_by))
    jobs = [
        client.submit(handle_file(str(image)), "\n".join(captions), "\n".join(references), metrics, rank_by,
                      api_name="/compare")
        for image, captions, references, metrics, rank_by in requests
    ]  # fmt: skip
    others = [
        client.submit(handle_file(str(RED_CIRCLE)), "a red circle", "", TINY_CHOICE, api_name="/score")
        for _ in range(5)
    ]
    for job, (image, captions, references, metrics, rank_by) in zip(jobs, requests):
        details = job.result(timeout=REQUEST_SECONDS)[2]
        images_given = [str(image)] * len(captions)
        references_given = [references] * len(captions) if references else None
        clip_output = clip_s.score(images_given, captions, references=references_given)
        expected = {"CLIP-S": clip_output.scores.tolist()}
        if references:
            expected["RefCLIP-S"] = clip_output.ref_scores.tolist()
        tiny_output = tiny.score(images_given, captions, references=references_given)
        if local in metrics:
            local_output = local_pac_s.score(images_given, captions, references=references_given)
            expected[f"PAC-S++ [{local}]"] = local_output.scores.tolist()
            expected[f"RefPAC-S++ [{local}]"] = local_output.ref_scores.tolist()
            expected["PAC-S++ [tiny]"] = tiny_output.scores.tolist()
            expected["RefPAC-S++ [tiny]"] = tiny_output.ref_scores.tolist()
        else:
            expected["PAC-S++"] = tiny_output.scores.tolist()
        assert set(details["columns"]) == set(expected)
        ranked_by = rank_by or "CLIP-S"
        assert details["ranked_by"] == ranked_by
        rows = details["results"]
        assert [row["rank"] for row in rows] == list(range(1, len(captions) + 1))
        assert [row[ranked_by] for row in rows] == sorted((row[ranked_by] for row in rows), reverse=True)
        by_caption = {row["caption"]: row for row in rows}
        for heading, values in expected.items():
            assert_scores_close([by_caption[caption][heading] for caption in captions], values)
    for job in others:
        assert job.result(timeout=REQUEST_SECONDS)[3]["results"][0]["caption"] == "a red circle"


# ---------------------------------------------------------------------------------------------------- browser
def artifact_directory(tmp_path: Path) -> Path:
    """Where screenshots go: $PACS_TEST_ARTIFACTS when set (CI keeps them), else the test's `tmp_path`: a test run
    writes nothing into the repository."""
    directory = Path(os.environ.get("PACS_TEST_ARTIFACTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def starts_with(prefix: str) -> re.Pattern:
    return re.compile("^" + re.escape(prefix))


def require_chromium():
    if CHROMIUM.is_file():
        return
    reason = f"Debian's chromium is not installed at {CHROMIUM}: run `bash scripts/setup.sh --tests` as root"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def test_browser_upload_type_click_and_read_scores(space_url, space_models, tmp_path):
    require_chromium()
    captions = ["a red circle on a white background", "a blue square", "a photo of a dog"]
    references = ["a red disc in the middle of a white image"]
    expected = engine_scores(space_models["engines"][space_models["local"]], RED_CIRCLE, captions, references)
    ranked = sorted(expected, key=lambda caption: -expected[caption]["RefPAC-S++"])
    screenshot = artifact_directory(tmp_path) / "space_end_to_end.png"
    example_captions = ["a blue square on a pale yellow background", "a red circle", "a green triangle"]
    example_references = "a dark blue square in the centre"
    example_expected = engine_scores(
        space_models["engines"][space_models["local"]],
        EXAMPLES / "blue_square.png",
        example_captions,
        [example_references],
    )
    example_best = max(example_expected, key=lambda caption: example_expected[caption]["RefPAC-S++"])
    compared = [HOSTILE_CAPTION, *captions[:2]]
    compare_expected = engine_scores(space_models["engines"][TINY_CHOICE], RED_CIRCLE, compared, references)
    compare_best = {
        name: max(compared, key=lambda caption: compare_expected[caption][name]) for name in ("CLIP-S", "RefPAC-S++")
    }
    compare_screenshot = artifact_directory(tmp_path) / "space_compare.png"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(REQUEST_SECONDS * 1000)
            expect.set_options(timeout=REQUEST_SECONDS * 1000)
            dialogs = []
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(space_url)
            best_caption = page.locator("#best-caption textarea")
            message = page.locator("#message textarea")

            # A violated limit is shown once, as text in the message box: no toast, no "Error" badge on the outputs.
            page.locator("#captions textarea").fill("it's a caption")
            page.locator("#score-button").click()
            expect(message).to_have_value("No image: upload an image first (or click one of the examples below)")
            error_badges = page.locator("span.error").count()
            tabs = [name.strip() for name in page.get_by_role("tab").all_inner_texts()]  # the page is rendered now
            toasts = page.locator(".toast-body").count()

            page.locator("input[type=file]").first.set_input_files(str(RED_CIRCLE))
            page.locator("#captions textarea").fill("\n".join(captions))
            page.locator("#references textarea").fill("\n".join(references))
            page.locator("#score-button").click()
            expect(best_caption).to_have_value(starts_with(f"“{ranked[0]}”\n"))
            expect(page.locator("#message")).to_be_hidden()  # a scored request clears the message
            page.locator("#scores-table [data-testid='cell-2-4']").wait_for()
            page.screenshot(path=str(screenshot), full_page=True)

            headers = page.locator("#scores-table th").all_inner_texts()
            rows = [
                [page.locator(f"#scores-table [data-testid='cell-{row}-{column}']").inner_text() for column in range(5)]
                for row in range(3)
            ]

            # Clicking an example fills the form; scoring it ranks its captions.
            page.get_by_text(example_references, exact=True).click()
            expect(page.locator("#captions textarea")).to_have_value("\n".join(example_captions))  # waits for it
            page.locator("#score-button").click()
            expect(best_caption).to_have_value(starts_with(f"“{example_best}”\n"))

            # A caption is text everywhere: no element, link or script is made from it, and nothing is swallowed.
            page.locator("#captions textarea").fill(HOSTILE_CAPTION)
            page.locator("#references textarea").fill("")
            page.locator("#score-button").click()
            expect(best_caption).to_have_value(starts_with(f"“{HOSTILE_CAPTION}”\n"))
            expect(page.locator("#scores-table [data-testid='cell-0-1']")).to_have_text(HOSTILE_CAPTION)
            # Messages are plain text: a caption quoted in one reads verbatim, quotes and tags included.
            page.locator("#captions textarea").fill("it's <b>bold</b> <img src=x>" + "x" * 300)
            page.locator("#score-button").click()
            expect(message).to_have_value(
                starts_with("Caption too long: caption 1 ('it's <b>bold</b> <img src=x>xxxxxxxxxxxx...') is 328 ")
            )

            # The compare tab (default metrics: the tiny CLIP-S and PAC-S++), ranked by the first column, then by
            # "Rank by" without scoring again; the hostile caption is text in its table too.
            page.get_by_role("tab", name="Compare metrics").click()
            page.locator("#compare-image input[type=file]").set_input_files(str(RED_CIRCLE))
            page.locator("#compare-captions textarea").fill("\n".join(compared))
            page.locator("#compare-references textarea").fill("\n".join(references))
            page.locator("#compare-button").click()
            compare_caption = page.locator("#compare-best-caption textarea")
            expect(compare_caption).to_have_value(starts_with(f"“{compare_best['CLIP-S']}”\nCLIP-S "))
            page.locator("#compare-rank-by input").click()
            page.get_by_role("option", name="RefPAC-S++", exact=True).click()
            expect(compare_caption).to_have_value(starts_with(f"“{compare_best['RefPAC-S++']}”\nRefPAC-S++ "))
            expect(page.locator("#compare-table")).to_contain_text(HOSTILE_CAPTION)
            compare_headers = page.locator("#compare-table th").all_inner_texts()
            page.screenshot(path=str(compare_screenshot), full_page=True)
            hostile_elements = page.locator(
                "img[src='x'], a[href='http://x'], #best-caption strong, #scores-table strong, #message b, "
                "#compare-best-caption strong, #compare-table strong"
            )
            hostile_count = hostile_elements.count()
        finally:
            browser.close()

    assert hostile_count == 0
    assert dialogs == []  # the onerror handler never ran
    assert tabs == ["Image", "Video", "Compare metrics"]
    assert [header.strip() for header in compare_headers] == ["#", "caption", "CLIP-S", "RefCLIP-S", "PAC-S++",
                                                              "RefPAC-S++"]  # fmt: skip
    assert (error_badges, toasts) == (0, 0)

    assert [header.strip() for header in headers] == ["#", "caption", "CLIP-S", "PAC-S++", "RefPAC-S++"]
    for rank, (row, caption) in enumerate(zip(rows, ranked), start=1):
        names = ["CLIP-S", "PAC-S++", "RefPAC-S++"]
        assert [cell.strip() for cell in row] == [str(rank), caption, *(f"{expected[caption][n]:.4f}" for n in names)]
    assert screenshot.stat().st_size > 10_000 and compare_screenshot.stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------------- in process
def load_app_module():
    specification = importlib.util.spec_from_file_location("pacs_space_app", APP)
    module = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(module)
    return module


def test_typed_model_paths_are_refused_on_a_public_space(space_models):
    app = load_app_module()
    cache = app.ModelCache(app.TINY_CHOICES, local_model=space_models["local"], allow_typed_paths=False)
    with pytest.raises(app.gr.Error, match="typed model paths are disabled on a public Space"):
        cache.get(space_models["orphan"])
    assert cache.get(space_models["local"]).clip_s is not None  # the operator's own model stays available


# ---------------------------------------------------------------------------------------------------- hostile input
REFUSED_IMAGE = (
    "the image is not a file uploaded to this Space: upload it again (API clients: send it with "
    "gradio_client.handle_file, which uploads it first)"
)


def call_score_endpoint(url: str, data: list) -> tuple[str, dict]:
    """A hand-made API call, as any HTTP client can send it: POST the inputs, read the event stream's last event."""
    with httpx.Client(base_url=url + "gradio_api/", timeout=REQUEST_SECONDS) as http:
        event_id = http.post("call/score", json={"data": data}).raise_for_status().json()["event_id"]
        stream = http.get(f"call/score/{event_id}").raise_for_status().text
    events = re.findall(r"^event: (\w+)\ndata: (.*)$", stream, flags=re.MULTILINE)
    name, payload = events[-1]
    return name, json.loads(payload)


def server_paths(root: Path, upload_folder: Path) -> dict[str, str]:
    """Server paths a visitor may post as the image: files, a folder, a missing file, a way out of the upload folder."""
    outside_image = root / "outside.png"
    PIL.Image.new("RGB", (8, 8), (1, 2, 3)).save(outside_image)
    return {
        "system file": "/etc/passwd",
        "folder": "/etc",
        "missing file": str(root / "no-such-image.png"),
        "dot-dot out of the upload folder": f"{upload_folder}/../../../../../../../../etc/passwd",
        "image outside the upload folder": str(outside_image),
        "bundled example": str(RED_CIRCLE),
        "the upload folder itself": str(upload_folder),
        "relative path": "../../../../etc/passwd",
        "URL": "http://127.0.0.1:1/image.png",
    }


@pytest.mark.parametrize("space_id", [None, "pacs-pp/pac-s-pp-demo"], ids=["local", "public"])
def test_server_paths_posted_as_the_image_are_refused_with_one_message(space_id, request, space_root):
    """Whatever the path (existing or not, file or folder), the answer is the same: nothing about the server leaks.

    gradio itself refuses paths tagged as `gradio.FileData` outside its upload folder (before the handler runs;
    `show_error=False` keeps its message, which echoes the path, out of the reply); the handler refuses the rest.
    """
    url = request.getfixturevalue("space_url" if space_id is None else "public_space_url")
    upload_folder = space_root / ("local_gradio_tmp" if space_id is None else "public_gradio_tmp")
    model = TINY_CHOICE
    untagged, tagged = {}, {}
    for case, path in server_paths(space_root, upload_folder).items():
        untagged[case] = call_score_endpoint(url, [{"path": path}, "a cat", "", model])
        tagged[case] = call_score_endpoint(
            url, [{"path": path, "meta": {"_type": "gradio.FileData"}}, "a cat", "", model]
        )
    refused = ("error", {"error": REFUSED_IMAGE, "duration": 10, "visible": True, "title": "Image not accepted"})
    assert untagged == {case: refused for case in untagged}
    gradio_refused = ("error", {"error": None})  # gradio checks tagged paths before the handler; inside, the handler
    assert tagged == {case: refused if case == "the upload folder itself" else gradio_refused for case in tagged}
    assert call_score_endpoint(url, ["/etc/passwd", "a cat", "", model]) == ("error", {"error": None})


def png_of_size(path: Path, width: int, height: int, rows: int | None = None) -> Path:
    """A PNG of one grey row repeated (zlib compresses it to almost nothing); with `rows`, its data stops there."""
    row = b"\x00" + b"\x80" * width
    data = zlib.compress(row * (height if rows is None else rows), 9)
    chunks = [
        (b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)),
        (b"IDAT", data),
        (b"IEND", b""),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        file.write(b"\x89PNG\r\n\x1a\n")
        for kind, body in chunks:
            file.write(struct.pack(">I", len(body)) + kind + body)
            file.write(struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    return path


@pytest.mark.parametrize(
    "width, height, message",
    [
        (1, 15000, "the image 'strip.png' is 1x15000 pixels; the longer side may be at most 20 times the shorter"),
        (200000, 1, "the image 'strip.png' is 200000x1 pixels; the longer side may be at most 20 times the shorter"),
        (20000, 20000, "the image 'strip.png' is far too large (over 89 megapixels); the limit is 16.8: downscale"),
    ],
)
def test_extreme_images_are_refused_from_the_header(client, space_root, width, height, message):
    """Refused before decoding: a narrow strip would be resized to 224 x (224 x its aspect ratio) pixels."""
    rows = height if width * height <= 200_000 else 1  # the header alone must refuse it: no need for its data
    strip = png_of_size(space_root / str(width) / "strip.png", width, height, rows=rows)
    assert strip.stat().st_size < 20_000
    with pytest.raises(AppError) as raised:
        score(client, strip, ["a grey strip"], [], TINY_CHOICE)
    assert message in str(raised.value)


def test_images_within_the_aspect_limit_and_odd_files(client, space_models):
    """20:1 is accepted (and equals a direct engine call); a truncated PNG and an EPS file are refused as not images."""
    root = space_models["root"]
    wide = root / "wide" / "wide.png"
    wide.parent.mkdir()
    PIL.Image.new("RGB", (400, 20), (10, 200, 30)).save(wide)
    _, _, _, details = score(client, wide, ["a green bar"], [], TINY_CHOICE)
    expected = engine_scores(space_models["engines"][TINY_CHOICE], wide, ["a green bar"], [])
    assert_results_match(details, expected, ranked_by="PAC-S++")

    truncated = root / "truncated.png"
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    PIL.Image.fromarray(noise).save(root / "noise.png")
    truncated.write_bytes((root / "noise.png").read_bytes()[:4000])  # a valid header, then the data stops
    eps = root / "drawing.eps"
    eps.write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    for path in (truncated, eps):
        with pytest.raises(AppError) as raised:
            score(client, path, ["a drawing"], [], TINY_CHOICE)
        assert f"the uploaded file '{path.name}' could not be read as an image: upload a PNG, JPEG" in str(raised.value)


def test_captions_are_text_in_the_heading_table_and_json(client, space_models):
    captions = ["<img src=x onerror=alert(1)>", "<unk> is not swallowed", "**bold**", "[link](http://x)", "a & b $$x$$"]
    best, table, chart, details = score(client, RED_CIRCLE, captions, [], TINY_CHOICE)
    expected = engine_scores(space_models["engines"][TINY_CHOICE], RED_CIRCLE, captions, [])
    assert_results_match(details, expected, ranked_by="PAC-S++")
    ranked = sorted(captions, key=lambda caption: -expected[caption]["PAC-S++"])
    assert best.splitlines()[0] == f"“{ranked[0]}”"
    assert [row[1] for row in table["metadata"]["display_value"]] == ranked
    assert [row["caption"] for row in details["results"]] == ranked
    assert all(caption not in bar for bar, _, _ in chart["data"] for caption in captions)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("captions", ["a list", "of captions"], "the captions must be text (one per line), got list"),
        ("references", {"a": 1}, "the references must be text (one per line), got dict"),
        ("captions", "x\n" * 10_001, "the captions box holds 20002 characters; the limit is 20000: remove some"),
        ("model", 7, "the model must be the name of a selector entry (at most 1000 characters)"),
        ("model", None, "the model must be the name of a selector entry (at most 1000 characters)"),
        ("model", "  ", "pick a model in the list"),
        (
            "captions",
            "<b>bold</b>" + "x" * 300,
            "caption 1 ('<b>bold</b>" + "x" * 29 + "...') is 311 characters long; the limit is 300",
        ),
        ("model", "<a href=http://x>model</a>", "model '<a href=http://x>model</a>' is neither one of"),
    ],
)
def test_malformed_form_values_get_a_message(client, space_url, field, value, message):
    """API clients can post any JSON: each form value gets a message naming it; user text in messages is quoted
    verbatim (messages are plain text: the page shows them in a text box)."""
    data = {"captions": "a red circle", "references": "", "model": TINY_CHOICE}
    data[field] = value
    with pytest.raises(AppError) as raised:
        client.predict(
            handle_file(str(RED_CIRCLE)), data["captions"], data["references"], data["model"], api_name="/score"
        )
    assert message in str(raised.value)


def test_public_space_refuses_typed_paths_and_lists_its_entries(public_space_url, space_models):
    public = Client(public_space_url, verbose=False)
    assert public.predict(api_name="/list_models") == [TINY_CHOICE]
    # The compare tab takes metric names only: no path, and a path posted as a metric is an unknown metric.
    ngrams = ["bleu", "rouge_l"] if java_available() else []
    assert public.predict(api_name="/list_metrics") == [*TINY_METRICS, *ngrams]
    with pytest.raises(AppError) as raised:
        compare(public, RED_CIRCLE, ["a red circle"], [], [space_models["local"]])
    assert f"unknown metric '{space_models['local'][:40]}..." in str(raised.value)
    with pytest.raises(AppError) as raised:
        score(public, RED_CIRCLE, ["a red circle"], [], space_models["local"])
    assert "typed model paths are disabled on a public Space" in str(raised.value)


# ---------------------------------------------------------------------------------------------------- in process
@pytest.fixture
def app(tmp_path, monkeypatch):
    """The app module, with gradio's upload folder in `tmp_path / "uploads"`."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "uploads"))
    (tmp_path / "uploads").mkdir()
    return load_app_module()


def test_upload_paths_must_resolve_into_the_upload_folder(app, tmp_path):
    uploads = tmp_path / "uploads"
    inside = uploads / "0123abcd" / "red_circle.png"
    inside.parent.mkdir()
    shutil.copy(RED_CIRCLE, inside)
    assert app.uploaded_path({"path": str(inside), "orig_name": "../../<b>cat</b>.png"}) == (
        str(inside.resolve()),
        "../../<b>cat</b>.png",  # a name, quoted as plain text; never used as a path
    )
    assert app.uploaded_path({"path": str(inside)}) == (str(inside.resolve()), "red_circle.png")
    link = uploads / "link.png"
    link.symlink_to(RED_CIRCLE)
    refused = [
        {"path": str(link)},  # a link out of the folder
        {"path": str(uploads / "0123abcd" / ".." / ".." / "outside.png")},
        {"path": str(uploads) + "-sibling/red_circle.png"},  # a prefix of the folder's name is not the folder
        {"path": str(inside) + "\x00.png"},
        {"path": 42},
        "red_circle.png",
        ["a", "list"],
    ]
    for image in refused:
        with pytest.raises(app.gr.Error) as raised:
            app.uploaded_path(image)
        assert raised.value.message == REFUSED_IMAGE, image
    for empty in (None, {}, {"path": ""}, {"path": None}):
        with pytest.raises(app.gr.Error, match="upload an image first"):
            app.uploaded_path(empty)


def test_uploaded_image_decodes_as_the_engine_decodes_a_path(app, tmp_path):
    upload = tmp_path / "uploads" / "grey16.png"
    values = (np.arange(12 * 10, dtype=np.uint16).reshape(10, 12) * 500).astype(np.uint16)
    PIL.Image.fromarray(values).save(upload)
    decoded = app.check_image({"path": str(upload)})
    expected = (values // 256).astype(np.uint8)  # 16-bit rescaled (the high byte), not clipped
    assert decoded.mode == "RGB" and decoded.size == (12, 10)
    np.testing.assert_array_equal(np.asarray(decoded), np.repeat(expected[..., None], 3, axis=2))
    np.testing.assert_array_equal(np.asarray(decoded), np.asarray(load_image(upload)))


def test_uploads_the_image_rules_refuse_are_refused_with_the_rules_message(app, tmp_path):
    """A float TIFF outside [0, 1] and a 32-bit TIFF beyond 16 bits: the engine's `ImageInputError`, as a gr.Error
    that names the upload (never the server's path)."""
    uploads = tmp_path / "uploads"
    cases = {
        "float.tif": (np.full((10, 12), 200.0, np.float32), r"with values from 200 to 200: float32 images must lie"),
        "deep.tif": (np.full((10, 12), 70000, np.int32), r"16-bit images must lie within 0-65535"),
    }
    for name, (values, message) in cases.items():
        PIL.Image.fromarray(values).save(uploads / name)
        with pytest.raises(app.gr.Error) as raised:
            app.check_image({"path": str(uploads / name), "orig_name": name})
        expected = rf"the image '{re.escape(name)}' is a PIL image, mode [IF], 12x10 .*{message}"
        assert re.match(expected, raised.value.message), raised.value.message
        assert raised.value.title == "Image refused" and str(uploads) not in raised.value.message


@pytest.mark.parametrize(
    "host, space_id, public",
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("192.168.1.20", None, True),
        ("my-server.example", None, True),
        ("127.0.0.1", "pacs-pp/pac-s-pp-demo", True),
    ],
)
def test_public_means_on_the_hub_or_reachable_from_other_machines(app, monkeypatch, host, space_id, public):
    monkeypatch.delenv("SPACE_ID", raising=False)
    if space_id:
        monkeypatch.setenv("SPACE_ID", space_id)
    assert app.is_public(host) is public


@pytest.mark.parametrize("value", ["0", "-1", "two", "", "2.5"])
def test_concurrency_setting_is_validated(app, monkeypatch, value):
    monkeypatch.setenv("PACS_SPACE_CONCURRENCY", value)
    with pytest.raises(ValueError, match=f"PACS_SPACE_CONCURRENCY={value!r} is not a whole number of at least 1"):
        app.concurrency_limit()
    monkeypatch.setenv("PACS_SPACE_CONCURRENCY", "3")
    assert app.concurrency_limit() == 3


def test_model_loading_errors_are_detailed_locally_and_neutral_in_public(app, tmp_path):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    choices = {"broken": (str(empty), str(empty))}
    with pytest.raises(app.gr.Error) as raised:
        app.ModelCache(choices, local_model=None, allow_typed_paths=True).get("broken")
    assert f"could not load model '{empty}'" in raised.value.message
    with pytest.raises(app.gr.Error) as raised:
        app.ModelCache(choices, local_model=None, allow_typed_paths=False).get("broken")
    assert re.fullmatch(
        r"model 'broken' is not available on this server right now \(incident [0-9a-f]{8}, logged\): pick another "
        r"entry or try again later",
        raised.value.message,
    )


class NaNModel:
    """Stands in for a faulty PACSModel: the second caption's score is NaN."""

    config = type("Config", (), {"model_type": "pac_s_pp", "score_names": ("PAC-S++", "RefPAC-S++")})()

    def score(self, images, captions, references=None):
        scores = torch.tensor([0.5, float("nan")] + [0.1] * (len(captions) - 2))
        return type("Output", (), {"scores": scores, "ref_scores": None})()


def test_non_finite_scores_are_never_shown(app):
    request = app.ScoreRequest(image=PIL.Image.new("RGB", (4, 4)), captions=["a", "<b>b</b>", "c"], references=[])
    with pytest.raises(app.gr.Error) as raised:
        app.score_request(request, app.ScoringModels(clip_s=None, pac_s=NaNModel()))
    assert raised.value.message == (
        "PAC-S++ of caption 2 ('<b>b</b>') came out as nan, not a number: the model is faulty (this is "
        "logged); pick another model"
    )


@pytest.mark.parametrize(
    "error, message",
    [
        (
            RuntimeError("[enforce fail at /root/secret/alloc.cpp:42]"),
            r"could not score this request: internal error \(incident [0-9a-f]{8}, logged on the server\); try again, "
            r"and report the incident if it persists",
        ),
        (
            MemoryError(),
            r"the server ran out of memory scoring this request: try again later, with a smaller image or fewer "
            r"captions",
        ),
    ],
)
def test_unexpected_errors_show_no_class_message_or_path(app, tmp_path, monkeypatch, error, message):
    upload = tmp_path / "uploads" / "red_circle.png"
    shutil.copy(RED_CIRCLE, upload)

    def failing_score_request(request, models, mode=None):
        raise error

    pac_s_pp = SimpleNamespace(config=SimpleNamespace(model_type="pac_s_pp"))  # what the mode check reads
    monkeypatch.setattr(app.ModelCache, "get", lambda cache, choice: SimpleNamespace(pac_s=pac_s_pp))
    monkeypatch.setattr(app, "score_request", failing_score_request)
    demo = app.build_demo(tiny=True, public=True)
    score_function = next(function.fn for function in demo.fns.values() if function.api_name == "score")
    with pytest.raises(app.gr.Error) as raised:
        score_function({"path": str(upload)}, "a red circle", "", TINY_CHOICE)
    assert re.fullmatch(message, raised.value.message)


def test_public_space_shows_the_operators_model_by_name_never_by_path(app, space_models):
    local = space_models["local"]
    demo = app.build_demo(tiny=True, local_model=local, public=True)
    page = json.dumps(demo.config, default=repr)  # repr: the compare tab's gr.State holds its delete callback
    assert "local model: pac-s-pp-seed1 (this server's model)" in page  # the compare tab's list names it so too
    assert "local model: pac-s-pp-seed1" in page
    assert local not in page and str(space_models["root"]) not in page
    cache = app.ModelCache(app.TINY_CHOICES, local_model=local, allow_typed_paths=False)
    assert cache.local_entry == "local model: pac-s-pp-seed1"
    assert cache.get("local model: pac-s-pp-seed1").clip_s is not None
    # Run locally, the selector shows the path itself (the operator's own machine).
    assert app.ModelCache(app.TINY_CHOICES, local_model=local, allow_typed_paths=True).local_entry == local


def test_public_space_hides_why_a_local_models_clip_is_missing(app, space_models):
    cache = app.ModelCache(app.TINY_CHOICES, local_model=space_models["orphan"], allow_typed_paths=False)
    models = cache.get(space_models["orphan"])
    assert models.clip_s is None
    assert models.clip_s_unavailable_reason == "its CLIP could not be loaded on this server"


def test_uploads_are_deleted_after_an_hour(app):
    assert app.build_demo(tiny=True, public=True).delete_cache == (3600, 3600)


def page_event(demo, name: str):
    """The function behind the page's button (not an API endpoint), by the name `page_handler` gives it."""
    handlers = [function.fn for function in demo.fns.values() if function.fn.__name__ == f"{name}_in_page"]
    assert len(handlers) == 1
    return handlers[0]


def test_page_has_an_image_tab_and_a_video_tab_holding_their_forms(app, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    demo = app.build_demo(tiny=True, public=True)
    tabs = [block for block in demo.blocks.values() if isinstance(block, app.gr.Tab)]
    assert [tab.label for tab in tabs] == ["Image", "Video", "Compare metrics"]
    for tab, kind in zip(tabs, (app.gr.Image, app.gr.File, app.gr.Image), strict=True):
        inside = list(tab.children)
        forms = []
        while inside:
            block = inside.pop()
            forms += [block] if isinstance(block, kind) else []
            inside += getattr(block, "children", [])
        assert len(forms) == 1, (tab.label, kind)


def test_page_shows_an_error_once_as_plain_text_and_refuses_server_files(app, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    page = page_event(app.build_demo(tiny=True, public=True), "score")
    caption = "it's <b>bold</b> & " + "x" * 300
    message, *outputs = page({"path": str(RED_CIRCLE)}, "a red circle", "", app.TINY_CHOICE)
    assert outputs == [None, None, None, None]  # results emptied, no "Error" badge on them
    assert message["visible"] is True
    assert message["value"] == "Image not accepted: " + app.REFUSED_IMAGE_MESSAGE  # a server file, by its path
    uploaded = tmp_path / "uploads" / "0123abcd" / "red_circle.png"
    uploaded.parent.mkdir()
    shutil.copy(RED_CIRCLE, uploaded)
    message, *outputs = page({"path": str(uploaded)}, caption, "", app.TINY_CHOICE)
    assert message["value"] == (
        "Caption too long: caption 1 ('it's <b>bold</b> & xxxxxxxxxxxxxxxxxxxxx...') is 319 characters long; the "
        "limit is 300: shorten it"
    )  # verbatim: no &#x27; or &lt;b&gt;
    message, best, *_ = page({"path": str(uploaded)}, "a red circle", "", app.TINY_CHOICE)
    assert message == {"__type__": "update", "value": "", "visible": False} and best.startswith("“a red circle”")


def test_offline_default_model_says_so_once_with_the_fix(app, tmp_path, monkeypatch):
    """The Hub models cannot be loaded (no network): one message, the core's reason and the Space's fix."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    reason = "'openai/clip-vit-base-patch32' is not a local model directory and the Hugging Face Hub did not provide it"

    def offline(name, *arguments, **keywords):
        raise OSError(reason)

    monkeypatch.setattr(app, "load_model", offline)
    demo = app.build_demo(tiny=False, public=False)
    page = page_event(demo, "score")
    uploaded = tmp_path / "uploads" / "0123abcd" / "red_circle.png"
    uploaded.parent.mkdir()
    shutil.copy(RED_CIRCLE, uploaded)
    default = next(iter(app.HUB_CHOICES))
    message, *outputs = page({"path": str(uploaded)}, "a red circle", "", default)
    clip_s_name = app.HUB_CHOICES[default][0]
    assert message["value"] == (
        f"Model not available: could not load model '{clip_s_name}': {reason}\n{app.OFFLINE_FIX}"
    )
    assert message["value"].count("Model not available") == 1 and outputs == [None, None, None, None]
    assert "--tiny" in app.OFFLINE_FIX and "--model DIR" in app.OFFLINE_FIX


# ---------------------------------------------------------------------------------------------------- after failures
MODEL_DAMAGES = {  # a broken model directory, as a half-finished copy or a bad edit leaves it
    "empty folder": lambda directory: [path.unlink() for path in directory.iterdir() if path.is_file()],
    "config not JSON": lambda directory: (directory / "config.json").write_text("{not json"),
    "config not an object": lambda directory: (directory / "config.json").write_text("[1]"),
    "invalid option in config": lambda directory: (directory / "config.json").write_text(
        json.dumps({**json.loads((directory / "config.json").read_text()), "w": "x"})
    ),
    "weights missing": lambda directory: [path.unlink() for path in directory.glob("*.safetensors")],
    "weights truncated": lambda directory: [
        path.write_bytes(path.read_bytes()[:100]) for path in directory.glob("*.safetensors")
    ],
}


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("space-cache")
    make_tiny_model(root / "clip", variant="clip_s", seed=1)
    make_tiny_model(root / "pac", variant="pac_s_pp", seed=1)
    return {"clip": root / "clip", "pac": root / "pac"}


@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("damage", MODEL_DAMAGES)
def test_a_failed_model_load_is_not_cached_and_the_repaired_model_loads_on_the_next_request(
    app, tiny_pair, tmp_path, damage, public
):
    broken = tmp_path / "pac"
    shutil.copytree(tiny_pair["pac"], broken)
    MODEL_DAMAGES[damage](broken)
    cache = app.ModelCache({"entry": (str(tiny_pair["clip"]), str(broken))}, None, allow_typed_paths=not public)
    with pytest.raises(app.gr.Error, match="could not load model|is not available on this server"):
        cache.get("entry")
    assert cache.loaded == {}
    shutil.rmtree(broken)
    shutil.copytree(tiny_pair["pac"], broken)  # repaired
    request = app.ScoreRequest(PIL.Image.open(RED_CIRCLE).convert("RGB"), ["a red circle", "a dog"], ["a red disc"])
    table = app.score_request(request, cache.get("entry"))
    fresh = app.score_request(request, app.ScoringModels(load_model(str(tiny_pair["clip"])), load_model(str(broken))))
    assert list(table["caption"]) == list(fresh["caption"])
    for column in app.score_columns(fresh):
        assert_scores_close(table[column].tolist(), fresh[column].tolist())


def test_a_failed_request_leaves_the_cached_models_scoring_as_fresh_ones(app, tiny_pair):
    cache = app.ModelCache({"entry": (str(tiny_pair["clip"]), str(tiny_pair["pac"]))}, None, allow_typed_paths=True)
    image = PIL.Image.open(RED_CIRCLE).convert("RGB")
    bad_requests = [
        app.ScoreRequest(image, ["a red circle", None], []),
        app.ScoreRequest(image, ["a red circle"], [None]),
        app.ScoreRequest(image, [3], ["a red disc"]),
    ]
    for bad in bad_requests:
        with pytest.raises((ValueError, TypeError)):
            app.score_request(bad, cache.get("entry"))
    request = app.ScoreRequest(image, ["a red circle", "a dog"], ["a red disc"])
    table = app.score_request(request, cache.get("entry"))
    fresh_models = app.ScoringModels(load_model(str(tiny_pair["clip"])), load_model(str(tiny_pair["pac"])))
    fresh = app.score_request(request, fresh_models)
    for column in app.score_columns(fresh):
        assert_scores_close(table[column].tolist(), fresh[column].tolist())


@pytest.mark.filterwarnings("ignore:some .* are longer than the text encoder")
def test_truncated_captions_are_noted_under_the_result(app):
    model = make_tiny_model(variant="clip_s", seed=2)
    long_caption = " ".join(f"Part {index} shows a red circle on a plain white background." for index in range(9))
    request = app.ScoreRequest(
        image=PIL.Image.new("RGB", (8, 8)), captions=["a red circle", long_caption], references=[]
    )
    models = app.ScoringModels(clip_s=None, pac_s=model)
    table = app.score_request(request, models)
    summary = app.summary_text(table, models, random_weights=True)
    assert "1 caption(s) are longer than the text encoder's context (77 tokens for CLIP) and were truncated" in summary
    short = app.score_request(app.ScoreRequest(request.image, ["a red circle"], []), models)
    assert "truncated" not in app.summary_text(short, models, random_weights=True)


@pytest.mark.filterwarnings("ignore:some .* are longer than the text encoder")
@pytest.mark.parametrize("model_name", ["tiny:polos", "tiny:pearl"])
def test_truncated_captions_of_polos_and_pearl_are_noted_with_their_fix(app, model_name):
    from modeling_pacs.models.inputs import SHORTEN_FIX

    model = load_model(model_name, device="cpu")
    long_caption = " ".join(f"Part {index} shows a red circle on a plain white background." for index in range(9))
    image = PIL.Image.new("RGB", (8, 8))
    request = app.ScoreRequest(image=image, captions=["a red circle", long_caption], references=["a circle"])
    models = app.ScoringModels(clip_s=None, pac_s=model)
    summary = app.summary_text(app.score_request(request, models), models, random_weights=True)
    assert (
        "1 caption(s) are longer than a text encoder's context and were truncated: their scores read only the first "
        f"tokens ({SHORTEN_FIX})."
    ) in summary
    short = app.score_request(app.ScoreRequest(image, ["a red circle"], ["a circle"]), models)
    assert "truncated" not in app.summary_text(short, models, random_weights=True)


@pytest.mark.parametrize("model_type", ["fleur", "llava"])
def test_llm_judges_are_not_served_even_as_the_operators_model(app, tmp_path, model_type):
    """FLEUR (a FLEUR directory, or transformers' LLaVA it wraps) has no selector entry, and a typed path or the
    operator's `--model` is refused before anything loads, with the reason from its spec (`not_in_space`)."""
    from modeling_pacs.registry import METRICS

    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "config.json").write_text(json.dumps({"model_type": model_type}))  # nothing else: nothing may load
    reason = METRICS["fleur"].capabilities.not_in_space
    assert reason.startswith("a LLaVA-1.5-13B judge needs a GPU") and not any(
        "FLEUR" in label for label in app.HUB_CHOICES
    )
    served = app.ModelCache(app.TINY_CHOICES, local_model=str(judge), allow_typed_paths=False)
    typed = app.ModelCache(app.TINY_CHOICES, local_model=None, allow_typed_paths=True)
    for cache, entry, label in ((served, served.local_entry, served.local_entry), (typed, str(judge), str(judge))):
        with pytest.raises(app.gr.Error) as raised:
            cache.get(entry)
        assert raised.value.message == f"'{app.shown(label)}' is a FLEUR model, which this app does not serve: {reason}"
