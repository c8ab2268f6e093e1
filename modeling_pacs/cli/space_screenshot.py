"""Take the documentation's screenshots of the Space: start `space/app.py --tiny` on a free port, open it in Chromium
(Playwright), score the first example and save the page: the Image tab (docs/images/space.png) or, with `--tab
compare`, the Compare metrics tab with ROUGE-L beside the models where Java runs (docs/images/space-compare.png).

The Space runs offline on the tiny model with random weights: the picture shows the layout and a scored result, not
meaningful numbers. Run it from a checkout of the repository (the Space is `space/app.py`, not part of the package);
it needs the `demo` extra and Playwright's Chromium (`pip install 'pacs-pp[demo,dev]'`, then `playwright install
chromium`, or `--chromium /usr/bin/chromium`).
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from ..extras import require
from .arguments import add_example
from .errors import reports_errors

REPO_ROOT = Path(__file__).resolve().parents[2]
SPACE_APP = REPO_ROOT / "space" / "app.py"
DEFAULT_OUTPUTS = {"image": REPO_ROOT / "docs" / "images" / "space.png",
                   "compare": REPO_ROOT / "docs" / "images" / "space-compare.png"}  # fmt: skip
TABS = tuple(DEFAULT_OUTPUTS)
# The first example of the Space (space/app.py EXAMPLES): typed into the compare tab, whose form has no example click.
EXAMPLE_IMAGE = REPO_ROOT / "space" / "examples" / "red_circle.png"
EXAMPLE_CAPTIONS = "a red circle on a white background\na blue square\na photo of a dog"
EXAMPLE_REFERENCES = "a red disc in the middle of a white image"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
START_SECONDS = 240
# The picture: the page from its title down to the ranked table and the chart (the examples below are left out).
WIDTH = 1280
VIEWPORT = {"width": WIDTH, "height": 1000}


def free_port() -> int:
    """A port free now (gradio refuses port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_serving(url: str, server: subprocess.Popen, log_path: Path):
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the Space exited with code {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "config", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the Space did not answer within {START_SECONDS} s:\n{log_path.read_text()[-3000:]}")


def take_space_screenshot(
    output: Path | None = None, chromium: str | None = DEFAULT_CHROMIUM, tab: str = "image"
) -> Path:
    """Start the Space on the tiny model, score its first example in Chromium and save a PNG of the page to `output`.

    `chromium`: a Chromium executable (None: Playwright's own). `tab`: `"image"` (down to the chart) or `"compare"`
    (the Compare metrics tab, down to its table). `output` None: the tab's picture in docs/images. Returns `output`.
    """
    if tab not in TABS:
        raise ValueError(f"tab must be one of {list(TABS)}, got {tab!r}")
    output = DEFAULT_OUTPUTS[tab] if output is None else output
    require("playwright", "dev", "The Space screenshot")
    from playwright import sync_api

    if not SPACE_APP.is_file():
        raise FileNotFoundError(f"{SPACE_APP} not found: run this from a checkout of the repository")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="space-screenshot-") as scratch:
        port = free_port()
        environment = {
            **os.environ,
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HOME": str(Path(scratch) / "hf_home"),
            "HF_HUB_OFFLINE": "1",
            "GRADIO_TEMP_DIR": str(Path(scratch) / "uploads"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        environment.pop("SPACE_ID", None)
        log_path = Path(scratch) / "space.log"
        with log_path.open("w") as log:
            server = subprocess.Popen(
                [sys.executable, str(SPACE_APP), "--tiny", "--port", str(port)],
                cwd=REPO_ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_until_serving(url, server, log_path)
            with sync_api.sync_playwright() as playwright:
                launch = {"headless": True, "args": ["--no-sandbox", "--disable-gpu"]}
                if chromium:
                    launch["executable_path"] = chromium
                browser = playwright.chromium.launch(**launch)
                try:
                    page = browser.new_page(viewport=VIEWPORT)
                    page.set_default_timeout(START_SECONDS * 1000)
                    page.goto(url)
                    bottom = score_image_tab(page) if tab == "image" else score_compare_tab(page)
                    page.screenshot(
                        path=str(output), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": bottom}
                    )
                except (AssertionError, sync_api.Error) as error:
                    raise RuntimeError(f"the Space did not show a scored result: {error}") from None
                finally:
                    browser.close()
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return output


def score_image_tab(page) -> float:
    """Score the first example in the Image tab; the bottom of the chart, in page pixels."""
    from playwright import sync_api

    page.get_by_text(EXAMPLE_REFERENCES, exact=True).click()  # example 1
    wait = START_SECONDS * 1000  # the first request loads the models
    sync_api.expect(page.locator("#captions textarea")).not_to_have_value("", timeout=wait)
    page.locator("#score-button").click()
    sync_api.expect(page.locator("#best-caption textarea")).not_to_have_value("", timeout=wait)
    page.locator("#scores-table [data-testid='cell-2-4']").wait_for()
    page.wait_for_timeout(1500)  # the bar chart draws after the table
    page.evaluate("window.scrollTo(0, 0)")  # clicking the example scrolled down
    chart = page.locator("#scores-chart").bounding_box()
    return chart["y"] + chart["height"] + 16


def score_compare_tab(page) -> float:
    """Compare the default metrics (and ROUGE-L where the Space offers it) on the first example, ranked by
    RefPAC-S++; the bottom of the table, in page pixels."""
    from playwright import sync_api

    page.get_by_role("tab", name="Compare metrics").click()
    page.locator("#compare-image input[type=file]").set_input_files(str(EXAMPLE_IMAGE))
    page.locator("#compare-captions textarea").fill(EXAMPLE_CAPTIONS)
    page.locator("#compare-references textarea").fill(EXAMPLE_REFERENCES)
    rouge = page.locator("#compare-metrics label").filter(has_text="rouge_l")
    if rouge.count():  # offered where Java runs
        rouge.click()
    page.locator("#compare-button").click()
    wait = START_SECONDS * 1000  # the first request loads the models
    sync_api.expect(page.locator("#compare-best-caption textarea")).not_to_have_value("", timeout=wait)
    page.locator("#compare-rank-by input").click()
    page.get_by_role("option", name="RefPAC-S++", exact=True).click()
    sync_api.expect(page.locator("#compare-best-caption textarea")).to_have_value(re.compile("RefPAC-S"))
    page.wait_for_timeout(500)
    page.evaluate("window.scrollTo(0, 0)")
    table = page.locator("#compare-table").bounding_box()
    return table["y"] + table["height"] + 16


def build_parser() -> argparse.ArgumentParser:
    head, _, rest = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(description=head, epilog=rest)
    parser.add_argument(
        "--output", type=Path, help="PNG to write (default: docs/images/space.png, or space-compare.png for compare)"
    )
    parser.add_argument("--tab", choices=TABS, default="image", help="the tab to score and show (default: %(default)s)")
    parser.add_argument(
        "--chromium",
        default=DEFAULT_CHROMIUM if Path(DEFAULT_CHROMIUM).exists() else None,
        help="Chromium executable (default: %(default)s; none: Playwright's own browser)",
    )
    return add_example(parser, "python scripts/space_screenshot.py --output docs/images/space.png")


@reports_errors("space_screenshot")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with reports_errors("space_screenshot", OSError, RuntimeError):
        path = take_space_screenshot(args.output, args.chromium, args.tab)
    print(f"screenshot of the Space saved to {path}")
    return 0


__all__ = ["build_parser", "main", "take_space_screenshot"]
