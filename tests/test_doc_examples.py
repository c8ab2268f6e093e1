"""The documented examples run as written: every fenced command and Python block of `README.md` and `docs/` is marked
runnable or not (with the reason), and each page's runnable blocks are run, in order, offline, on tiny models.

The marking convention (docs/contributing.md#examples-that-run) is an HTML comment on the line before the fence,
invisible on GitHub and on the site:

- `<!-- runnable -->`: a shell block runs with `bash -e`, a Python block with `python -c`, in the page's folder;
- `<!-- runnable: continues -->`: a Python block that goes on from the page's previous Python block (the two run in
  one process, as a reader runs them in one session);
- `<!-- not-runnable: KIND; why -->`, KIND one of `NOT_RUNNABLE`: the block is shown, not run.

Each page runs in a fresh folder holding a copy of `examples/` and links to `scripts/`, `space/`, `metric/` and
`benchmarks/`, so its commands read the documented paths and write their outputs there, with its own `HF_HOME`
(evaluate's module cache, `register-metric`'s target) and no network. The tiny models are built once per test session
into one shared `PACS_PP_CACHE`. A shell block that starts with `bash scripts/setup.sh [--tests] &&` runs without
that installation step, which the test environment has done.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py", "pycon"}
# What keeps a block from running here, and what the page must then offer instead.
NOT_RUNNABLE = {
    "real-weights": "needs converted or downloaded weights; the page has a runnable tiny twin",
    "data": "needs files that are not shipped (official checkpoints, COCO, benchmark releases, your corpus)",
    "gpu": "needs GPUs or several machines",
    "network": "downloads code or files",
    "install": "installs packages, or runs the whole test suite",
    "excerpt": "a fragment: placeholders (`...`) or names defined by the surrounding text",
    "long": "minutes to hours of work (benchmarks, training runs)",
    "tested-elsewhere": "needs a running server or the like, and the named test runs it",
    "repository": "rewrites the repository's committed files (the pictures of the docs)",
}
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(runnable|not-runnable)\s*(?::\s*(.*?))?\s*-->\s*$")
SETUP_PREFIX = re.compile(r"^bash scripts/setup\.sh( --tests)? && ", flags=re.M)
LINKED = ("scripts", "space", "metric", "benchmarks")
TIMEOUT = 300


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "runnable", "not-runnable" or None (unmarked)
    option: str  # after the colon: "continues", or "KIND; why"

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """The shell and Python blocks of a page, with the marker on the line before each (blank lines between allowed)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, language = match.group(1), match.group(2).lower()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        if language in SHELL | PYTHON:
            previous = index - 1
            while previous >= 0 and not lines[previous].strip():
                previous -= 1
            marker = MARKER.match(lines[previous]) if previous >= 0 else None
            code = textwrap.dedent("\n".join(line.removeprefix(indent) for line in lines[index + 1 : end]))
            blocks.append(
                Block(
                    page,
                    index + 1,
                    "python" if language in PYTHON else "bash",
                    code + "\n",
                    marker.group(1) if marker else None,
                    (marker.group(2) or "") if marker else "",
                )
            )
        index = end + 1
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in fenced_blocks(page)]
RUNNABLE_PAGES = sorted({block.page for block in ALL_BLOCKS if block.marker == "runnable"})


def continues_python(block: Block) -> bool:
    page_blocks = fenced_blocks(block.page)
    position = next(index for index, other in enumerate(page_blocks) if other.line == block.line)
    previous = page_blocks[position - 1] if position else None
    return (
        block.language == "python"
        and previous is not None
        and previous.language == "python"
        and (previous.marker == "runnable")
    )


def test_blocks_markers_and_steps_are_read_as_the_convention_says(tmp_path):
    """Markers on the line before the fence (blank lines between allowed), fences indented in a list item, other
    languages ignored, and a continuing Python block joined to the one before it."""
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- runnable -->\n```bash\necho one\n```\n"
        "<!-- runnable -->\n\n```python\nx = 1\n```\n"
        "<!-- runnable: continues -->\n```python\nprint(x)\n```\n"
        "- item\n  <!-- not-runnable: data; your files -->\n  ```bash\n  cat my.json\n  ```\n"
        "```text\nignored\n```\n```python\nunmarked = True\n```\n",
        encoding="utf-8",
    )
    blocks = fenced_blocks(page)
    assert [(block.line, block.language, block.marker, block.option, block.code) for block in blocks] == [
        (3, "bash", "runnable", "", "echo one\n"),
        (8, "python", "runnable", "", "x = 1\n"),
        (12, "python", "runnable", "continues", "print(x)\n"),
        (17, "bash", "not-runnable", "data; your files", "cat my.json\n"),
        (23, "python", None, "", "unmarked = True\n"),
    ]
    steps = run_steps([block for block in blocks if block.marker == "runnable"])
    assert [[block.line for block in step] for step in steps] == [[3], [8, 12]]


def test_every_command_and_python_block_is_marked():
    """A shell or Python block says whether it runs; a runnable one has no option but `continues` (after a Python
    block); a block that is not runnable names one of the known reasons and says why."""
    problems = []
    for block in ALL_BLOCKS:
        if block.marker is None:
            problems.append(f"{block.where}: no <!-- runnable --> / <!-- not-runnable: KIND; why --> before the block")
        elif block.marker == "runnable" and block.option not in ("", "continues"):
            problems.append(f"{block.where}: unknown runnable option {block.option!r}")
        elif block.marker == "runnable" and block.option == "continues" and not continues_python(block):
            problems.append(f"{block.where}: `continues` is for a Python block right after a runnable Python block")
        elif block.marker == "not-runnable":
            kind, _, why = block.option.partition(";")
            if kind.strip() not in NOT_RUNNABLE or not why.strip():
                problems.append(f"{block.where}: say `KIND; why`, KIND one of {sorted(NOT_RUNNABLE)}")
    assert not problems, "\n".join(problems)
    assert len(ALL_BLOCKS) > 50  # the scan found the pages' blocks


def test_pages_with_blocks_needing_real_weights_have_a_runnable_twin():
    """A block that needs real weights sits on a page that also shows a tiny-model version that runs."""
    lacking = sorted(
        {
            block.where
            for block in ALL_BLOCKS
            if block.marker == "not-runnable"
            and block.option.startswith("real-weights")
            and block.page not in RUNNABLE_PAGES
        }
    )
    assert not lacking, "no runnable tiny twin on the page of: " + ", ".join(lacking)


def test_the_convention_is_documented():
    page = (REPO_ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    for text in ("<!-- runnable -->", "<!-- runnable: continues -->", "<!-- not-runnable:", *NOT_RUNNABLE):
        assert text in page, text


@pytest.fixture(scope="session")
def shared_model_cache(tmp_path_factory) -> Path:
    """One `PACS_PP_CACHE` for every page: each tiny model is built once per session."""
    return tmp_path_factory.mktemp("doc_examples_cache")


def page_folder(root: Path) -> Path:
    """A folder as a checkout looks to a reader: `examples/` copied (commands may write beside it), the code linked."""
    folder = root / "work"
    shutil.copytree(REPO_ROOT / "examples", folder / "examples")
    for name in LINKED:
        (folder / name).symlink_to(REPO_ROOT / name, target_is_directory=True)
    return folder


def environment(home: Path, cache: Path) -> dict[str, str]:
    """Offline, this checkout's code first (also for `pacs-score` / `pacs-pp`), a fresh HF_HOME per page."""
    return {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "HF_HOME": str(home),
        "PACS_PP_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "MPLBACKEND": "Agg",
    }


def run_step(command: list[str], blocks: list[Block], folder: Path, env: dict[str, str]):
    completed = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    where = " + ".join(block.where for block in blocks)
    assert completed.returncode == 0, (
        f"{where} failed (exit {completed.returncode}):\n{blocks[-1].code}\n"
        f"--- stdout\n{completed.stdout[-3000:]}\n--- stderr\n{completed.stderr[-5000:]}"
    )


def run_steps(blocks: list[Block]):
    """The page's runnable blocks in order: shell blocks one by one, a Python block with the blocks that continue it
    as one program."""
    steps = []
    for block in blocks:
        if block.option == "continues" and steps and steps[-1][-1].language == "python":
            steps[-1].append(block)
        else:
            steps.append([block])
    return steps


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=[str(page.relative_to(REPO_ROOT)) for page in RUNNABLE_PAGES])
def test_runnable_blocks_of_the_page_run(page, tmp_path, shared_model_cache):
    folder = page_folder(tmp_path)
    env = environment(tmp_path / "hf_home", shared_model_cache)
    runnable = [block for block in fenced_blocks(page) if block.marker == "runnable"]
    for step in run_steps(runnable):
        if step[0].language == "bash":
            command = ["bash", "-e", "-o", "pipefail", "-c", SETUP_PREFIX.sub("", step[0].code)]
        else:
            command = [sys.executable, "-c", "".join(block.code for block in step)]
        run_step(command, step, folder, env)
