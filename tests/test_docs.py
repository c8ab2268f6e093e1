"""The documentation site: `mkdocs build --strict` passes (a broken internal link or anchor, a page missing from the
nav or an API reference that no longer resolves fails it), every `docs/<page>.md#<anchor>` cited in the code names a
page and a heading that exist, no citation of the unshipped notes is left, and the README stays a front page."""

import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from tests.fixtures.docs_images import BENCHMARK_PLOT, write_benchmark_plot

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
CODE_FOLDERS = ("modeling_pacs", "scripts", "space", "benchmarks", "tests", "examples", "metric")
CITATION = re.compile(r"\bdocs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?")
# The section citations of the unshipped design notes (the spec notes and the benchmark notes, by name and section
# sign), assembled so that this file does not match itself.
OLD_CITATION = re.compile(r"\b" + "SPEC" + r"(-polos|-pearl)?\b(\.md)?\s*(§|A\d)|\b" + "BENCHMARKS" + r"\.md\b")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
README_LIMIT = 300
TEST_COMMAND = "bash scripts/setup.sh --tests && python3 -m pytest -q -n 2 tests"


def slugify(text: str) -> str:
    """Python-Markdown's `toc` slug of a heading's text (inline code and emphasis markers dropped)."""
    text = re.sub(r"[`*]", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def page_anchors(page: Path) -> set[str]:
    """Heading ids of a Markdown page: an explicit `{#id}` or the `toc` slug; fenced code is skipped."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            text = match.group(2)
            explicit = EXPLICIT_ID.search(text)
            anchors.add(explicit.group(1) if explicit else slugify(text))
    return anchors


def code_files():
    for folder in CODE_FOLDERS:
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".md", ".sh"} and path.is_file():
                yield path


def test_code_citations_of_docs_pages_resolve():
    """Every `docs/...md#anchor` in the code points at an existing page and, when an anchor is given, at one of its
    headings; at least the spec pages are cited, so the scan cannot pass by finding nothing."""
    problems, cited = [], set()
    for path in code_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITATION.finditer(line):
                page, anchor = match.groups()
                cited.add(page)
                target = DOCS / page
                where = f"{path.relative_to(REPO_ROOT)}:{number}: docs/{page}" + (f"#{anchor}" if anchor else "")
                if not target.is_file():
                    problems.append(f"{where}: no such page")
                elif anchor and anchor not in page_anchors(target):
                    problems.append(f"{where}: no heading with that anchor (has {sorted(page_anchors(target))})")
    assert not problems, "\n".join(problems)
    assert {"spec/pacs.md", "spec/polos.md", "spec/pearl.md", "spec/benchmarks.md"} <= cited


def test_no_citation_of_the_unshipped_notes_is_left():
    leftovers = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in code_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OLD_CITATION.search(line)
    ]
    assert not leftovers, "cite a docs page (docs/spec/...md#anchor) or the paper instead:\n" + "\n".join(leftovers)


def test_anchor_parser_matches_the_toc_slugs():
    """The anchors the citation check expects, for the heading forms the pages use."""
    assert slugify("Benchmark data layouts") == "benchmark-data-layouts"
    assert slugify("The CPU encoder path (`modeling_pacs/models/fast_clip.py`)") == (
        "the-cpu-encoder-path-modeling_pacsmodelsfast_clippy"
    )
    assert slugify("Measured (CPU, fp32)") == "measured-cpu-fp32"
    spec = page_anchors(DOCS / "spec" / "pacs.md")
    assert {"metric", "video", "training", "checkpoints", "scst", "evaluation"} <= spec


def test_readme_is_a_front_page():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_LIMIT
    assert TEST_COMMAND in readme
    assert "## Layout" in readme and "## Citation" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO_ROOT / link).is_file(), link


def test_mkdocs_build_strict(tmp_path):
    missing = [
        name
        for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "latex2mathml")
        if importlib.util.find_spec(name.split(".")[0]) is None
    ]
    if missing:
        pytest.skip(f"the documentation tools are not installed ({', '.join(missing)}): pip install -e '.[dev]'")
    env = dict(
        os.environ,
        NO_MKDOCS_2_WARNING="1",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The API reference rendered the public classes, and a docstring example survived as code.
    models = (tmp_path / "site" / "reference" / "models" / "index.html").read_text(encoding="utf-8")
    for name in ("PACSModel", "PACSConfig", "PolosModel", "PearlModel", "score_videos"):
        assert f'id="modeling_pacs.{name}' in models or f"modeling_pacs.PACSModel.{name}" in models, name
    assert "&gt;&gt;&gt;" in models
    # A docs page cited in a docstring is a link on the API pages, never plain text.
    for page in sorted((tmp_path / "site" / "reference").rglob("index.html")):
        text = page.read_text(encoding="utf-8")
        plain = [match.group(0) for match in CITATION.finditer(text) if not text.startswith("</a>", match.end())]
        assert not plain, f"{page.parent.name}: docs citations that are not links: {plain}"
    assert '<a href="../../spec/pacs/#video">docs/spec/pacs.md#video</a>' in models
    # The formulas are MathML in the pages (rendered at build time), and no page loads a script from elsewhere.
    spec = (tmp_path / "site" / "spec" / "pacs" / "index.html").read_text(encoding="utf-8")
    assert spec.count("<math") > 10 and "\\(" not in spec and "\\[" not in spec
    for page in (tmp_path / "site").rglob("*.html"):
        assert not re.search(r'<script[^>]+src="(https?:)?//', page.read_text(encoding="utf-8")), page


def test_benchmark_plot_of_the_docs_is_what_the_harness_draws(tmp_path):
    """`python -m tests.fixtures.docs_images` regenerates the committed picture: a PNG of the same size (bytes may
    differ with another matplotlib or font), referenced by the benchmarks guide."""
    pytest.importorskip(
        "matplotlib", reason="the harness draws plots with matplotlib: pip install 'pacs-pp[benchmarks]'"
    )
    import PIL.Image

    produced = write_benchmark_plot(tmp_path)
    committed = DOCS / "images" / BENCHMARK_PLOT
    assert produced.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with PIL.Image.open(produced) as new, PIL.Image.open(committed) as old:
        assert new.size == old.size
        assert len(set(new.convert("L").getdata())) > 2  # points, axes and labels were drawn
    assert f"../images/{BENCHMARK_PLOT}" in (DOCS / "guides" / "benchmarks.md").read_text(encoding="utf-8")
