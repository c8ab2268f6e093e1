"""The Gradio Space (space/app.py), run as a real server: gradio_client calls of every endpoint, 20 concurrent
requests, error messages, and an end-to-end test in Debian's headless Chromium driven by Playwright.

Every score the Space shows is checked against direct `PACSModel.score` calls on the same models in this process.
The Space runs offline on tiny random models: `PACS_SPACE_TINY=1` for the built-in tiny entry, plus a local model
directory (seed 1, whose cosines are positive, so scores are not all clipped to 0) as the default entry.
"""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import PIL.Image
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from playwright.sync_api import sync_playwright

from modeling_pacs.loading import load_model
from modeling_pacs.tiny import make_tiny_model

REPO_ROOT = Path(__file__).resolve().parent.parent
APP = REPO_ROOT / "space" / "app.py"
EXAMPLES = REPO_ROOT / "space" / "examples"
RED_CIRCLE = EXAMPLES / "red_circle.png"
TINY_CHOICE = "tiny (random weights)"
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


@pytest.fixture(scope="module")
def space_server(space_root):
    """Start `space/app.py --tiny --model LOCAL` on a free port with its own HF_HOME; stop it afterwards.

    It boots while `space_models` builds the local model (loaded on the first request only).
    """
    port = free_port()
    environment = dict(os.environ)
    environment.update(
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HOME=str(space_root / "hf_home"),
        HF_HUB_OFFLINE="1",
        GRADIO_TEMP_DIR=str(space_root / "gradio_tmp"),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), environment.get("PYTHONPATH", "")]),
    )
    environment.pop("SPACE_ID", None)  # typed local paths must be allowed here
    log_path = space_root / "server.log"
    local_model = space_root / "pac-s-pp-seed1"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, str(APP), "--port", str(port), "--tiny", "--model", str(local_model)],
            cwd=REPO_ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield {"process": server, "url": f"http://127.0.0.1:{port}/", "log": log_path, "local_model": local_model}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


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


def score(client: Client, image, captions: list[str], references: list[str], model: str):
    return client.predict(
        handle_file(str(image)) if image is not None else None,
        "\n".join(captions),
        "\n".join(references),
        model,
        api_name="/score",
    )


# ---------------------------------------------------------------------------------------------------- endpoints
def test_named_endpoints_and_model_list(client, space_models):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert set(endpoints) == {"/score", "/list_models"}
    assert client.predict(api_name="/list_models") == [space_models["local"], TINY_CHOICE]


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
    assert best.startswith(f"### Best caption: “{ranked[0]}”")
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
        ("not an image", "the uploaded file 'notes.png' could not be read as an image (UnidentifiedImageError)"),
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


# ---------------------------------------------------------------------------------------------------- browser
def artifact_directory() -> Path:
    """Where screenshots go: $PACS_TEST_ARTIFACTS, else `artifacts/` at the repository root (git-ignored)."""
    directory = Path(os.environ.get("PACS_TEST_ARTIFACTS", REPO_ROOT / "artifacts"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def require_chromium():
    if CHROMIUM.is_file():
        return
    reason = f"Debian's chromium is not installed at {CHROMIUM}: run `bash scripts/setup.sh --tests` as root"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def test_browser_upload_type_click_and_read_scores(space_url, space_models):
    require_chromium()
    captions = ["a red circle on a white background", "a blue square", "a photo of a dog"]
    references = ["a red disc in the middle of a white image"]
    expected = engine_scores(space_models["engines"][space_models["local"]], RED_CIRCLE, captions, references)
    ranked = sorted(expected, key=lambda caption: -expected[caption]["RefPAC-S++"])
    screenshot = artifact_directory() / "space_end_to_end.png"
    example_captions = ["a blue square on a pale yellow background", "a red circle", "a green triangle"]
    example_references = "a dark blue square in the centre"
    example_expected = engine_scores(
        space_models["engines"][space_models["local"]],
        EXAMPLES / "blue_square.png",
        example_captions,
        [example_references],
    )
    example_best = max(example_expected, key=lambda caption: example_expected[caption]["RefPAC-S++"])

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(REQUEST_SECONDS * 1000)
            page.goto(space_url)

            # A violated limit is shown in the page.
            page.locator("#score-button").click()
            toast = page.locator(".toast-body").filter(has_text="enter at least one candidate caption")
            toast.first.wait_for()
            page.locator(".toast-close").first.click()  # error toasts stay until closed
            toast.first.wait_for(state="detached")

            page.locator("input[type=file]").first.set_input_files(str(RED_CIRCLE))
            page.locator("#captions textarea").fill("\n".join(captions))
            page.locator("#references textarea").fill("\n".join(references))
            page.locator("#score-button").click()
            page.locator("#best-caption").get_by_text(f"Best caption: “{ranked[0]}”").wait_for()
            page.locator("#scores-table [data-testid='cell-2-4']").wait_for()
            page.screenshot(path=str(screenshot), full_page=True)

            headers = page.locator("#scores-table th").all_inner_texts()
            rows = [
                [page.locator(f"#scores-table [data-testid='cell-{row}-{column}']").inner_text() for column in range(5)]
                for row in range(3)
            ]

            # Clicking an example fills the form; scoring it ranks its captions.
            page.get_by_text(example_references, exact=True).click()
            assert page.locator("#captions textarea").input_value() == "\n".join(example_captions)
            page.locator("#score-button").click()
            page.locator("#best-caption").get_by_text(f"Best caption: “{example_best}”").wait_for()
        finally:
            browser.close()

    assert [header.strip() for header in headers] == ["#", "caption", "CLIP-S", "PAC-S++", "RefPAC-S++"]
    for rank, (row, caption) in enumerate(zip(rows, ranked), start=1):
        names = ["CLIP-S", "PAC-S++", "RefPAC-S++"]
        assert [cell.strip() for cell in row] == [str(rank), caption, *(f"{expected[caption][n]:.4f}" for n in names)]
    assert screenshot.stat().st_size > 10_000


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
