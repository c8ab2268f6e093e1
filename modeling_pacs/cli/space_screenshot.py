"""Take the documentation's screenshot of the Space (docs/images/space.png): start `space/app.py --tiny` on a free
port, open it in Chromium (Playwright), score the first example and save the page.

The Space runs offline on the tiny model with random weights: the picture shows the layout and a scored result, not
meaningful numbers. Run it from a checkout of the repository (the Space is `space/app.py`, not part of the package);
it needs the `demo` extra and Playwright's Chromium (`pip install 'pacs-pp[demo,dev]'`, then `playwright install
chromium`, or `--chromium /usr/bin/chromium`).
"""

import argparse
import os
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
DEFAULT_OUTPUT = REPO_ROOT / "docs" / "images" / "space.png"
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


def take_space_screenshot(output: Path = DEFAULT_OUTPUT, chromium: str | None = DEFAULT_CHROMIUM) -> Path:
    """Start the Space on the tiny model, score its first example in Chromium and save a PNG of the page to `output`.

    `chromium`: a Chromium executable (None: Playwright's own). Returns `output`.
    """
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
                    page.get_by_text("a red disc in the middle of a white image", exact=True).click()  # example 1
                    wait = START_SECONDS * 1000  # the first request loads the models
                    sync_api.expect(page.locator("#captions textarea")).not_to_have_value("", timeout=wait)
                    page.locator("#score-button").click()
                    sync_api.expect(page.locator("#best-caption textarea")).not_to_have_value("", timeout=wait)
                    page.locator("#scores-table [data-testid='cell-2-4']").wait_for()
                    page.wait_for_timeout(1500)  # the bar chart draws after the table
                    page.evaluate("window.scrollTo(0, 0)")  # clicking the example scrolled down
                    chart = page.locator("#scores-chart").bounding_box()
                    bottom = chart["y"] + chart["height"] + 16
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


def build_parser() -> argparse.ArgumentParser:
    head, _, rest = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(description=head, epilog=rest)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="PNG to write (default: %(default)s)")
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
        path = take_space_screenshot(args.output, args.chromium)
    print(f"screenshot of the Space saved to {path}")
    return 0


__all__ = ["build_parser", "main", "take_space_screenshot"]
