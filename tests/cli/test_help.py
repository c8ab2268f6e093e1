"""Every command line's --help ends with `Example:` and a command to copy that names the command itself, holds no
other example section, and cites the documentation as links to the site (never as the repository's docs/ paths,
which mean nothing after a pip install).

The commands are listed from the files and the parser, not by hand: every `scripts/*.py`, every
`benchmarks/benchmark_*.py`, `pacs-pp` and each of its subcommands, and `pacs-score`. Scripts run in this process
(`runpy`, as `python scripts/x.py --help` would), for speed.
"""

import re
import runpy
import sys
from pathlib import Path

import pytest

from modeling_pacs.cli import main, score_main
from modeling_pacs.cli.arguments import DOCS_SITE_URL, docs_url
from modeling_pacs.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(ROOT.glob("scripts/*.py")) + sorted(ROOT.glob("benchmarks/benchmark_*.py"))
LAUNCHERS = ("python", "pacs-pp", "pacs-score", "accelerate", "torchrun")


def subcommands() -> list[str]:
    (commands,) = [action for action in build_parser()._actions if action.dest == "command"]
    return list(commands.choices)


def assert_ends_with_example(help_text: str, command: str):
    """The last two non-blank lines are `Example:` and a command line that names `command`; no other line is an
    `Example:` / `Examples:` heading, and no repository path of a docs page is left."""
    lines = [line for line in help_text.splitlines() if line.strip()]
    assert lines[-2].strip() == "Example:", lines[-3:]
    example = lines[-1].strip()
    assert example.split()[0] in LAUNCHERS and re.search(rf"{re.escape(command)}(\s|$)", example), (command, example)
    headings = [line for line in lines if re.fullmatch(r"\s*examples?:\s*", line, flags=re.I)]
    assert headings == ["Example:"], (command, headings)
    assert not re.search(r"\bdocs/\S*\.md", help_text), (command, re.findall(r"\bdocs/\S*\.md\S*", help_text))


def usage_program(help_text: str) -> str:
    """`pacs-pp convert` from `usage: pacs-pp convert [-h] ...`, `x.py` from `usage: x.py [-h] ...`."""
    return re.match(r"usage: (pacs-pp [\w-]+|\S+)", help_text).group(1)


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{path.parent.name}/{path.name}" for path in SCRIPTS])
def test_every_script_help_ends_with_its_example(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"{script.parent.name}/{script.name}", "--help"])
    monkeypatch.syspath_prepend(str(script.parent))  # benchmarks import their benchmarking_utils
    with pytest.raises(SystemExit) as raised:
        runpy.run_path(str(script), run_name="__main__")
    assert raised.value.code in (0, None)
    help_text = capsys.readouterr().out
    program = usage_program(help_text)
    # A converter script is `pacs-pp convert-*` under another name: its example is that command.
    assert_ends_with_example(
        help_text, program if program.startswith("pacs-pp ") else f"{script.parent.name}/{script.name}"
    )


def test_pacs_pp_lists_every_subcommand_and_ends_with_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for command in subcommands():
        assert re.search(rf"^\s+{re.escape(command)}\b", help_text, flags=re.M), command
    assert {
        "score",
        "make-tiny",
        "convert",
        "convert-polos",
        "convert-beit3",
        "convert-pearl",
        "register-metric",
    } <= set(subcommands())
    assert_ends_with_example(help_text, "pacs-pp")


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_help_ends_with_its_example(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert_ends_with_example(capsys.readouterr().out, f"pacs-pp {command}")


def test_pacs_score_help_ends_with_its_example(capsys):
    with pytest.raises(SystemExit):
        score_main(["--help"])
    assert_ends_with_example(capsys.readouterr().out, "pacs-score")


def test_docs_links_lead_to_the_site_of_mkdocs_yml(capsys):
    """The site's address is mkdocs.yml's `site_url`; a cited page becomes its address there (index pages as their
    folder), and the help of `pacs-pp` and of an argument that cites a guide show those links."""
    (site_url,) = re.findall(r"^site_url:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), flags=re.M)
    assert site_url == DOCS_SITE_URL and DOCS_SITE_URL.endswith("/")
    assert docs_url("(docs/guides/long-captions.md)") == f"({DOCS_SITE_URL}guides/long-captions/)"
    assert docs_url("docs/spec/pacs.md#video: P, R") == f"{DOCS_SITE_URL}spec/pacs/#video: P, R"
    assert docs_url("docs/index.md, docs/spec/index.md#specification") == (
        f"{DOCS_SITE_URL}, {DOCS_SITE_URL}spec/#specification"
    )
    with pytest.raises(SystemExit):
        main(["--help"])
    assert f"Documentation: {DOCS_SITE_URL}\n" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        score_main(["--help"])
    assert f"({DOCS_SITE_URL}guides/long-captions/)" in capsys.readouterr().out  # a link is never cut by wrapping
