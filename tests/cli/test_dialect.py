"""One command-line dialect (issue 32, point 7): every command's parser, walked.

Outside the Trainer-based training commands every option is kebab-case; those keep transformers' `TrainingArguments`
spelling (snake_case). One concept has one flag in a command and one spelling across the commands of a dialect; a
renamed option's former spellings still parse, are hidden from --help and print once what replaced them.
"""

import argparse
import importlib
import re
import runpy
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER_COMMANDS = {"scripts/train_pacs.py", "scripts/train_pearl.py", "scripts/train_polos.py",
                    "scripts/train_deneb.py", "scripts/train_captioner.py"}  # fmt: skip
# Commands whose --output is a file (a directory is --output-dir / --output_dir everywhere).
OUTPUT_FILE_COMMANDS = {
    "pacs-score",
    "pacs-pp score",
    "pacs-pp evaluate-captions",
    "scripts/space_screenshot.py",
    "scripts/pretrain_pearl_hadamard.py",
}
# concept -> (its kebab-case spelling, its Trainer spelling, every spelling that names it)
CONCEPTS = {
    "output directory": ("--output-dir", "--output_dir", {"--output-dir", "--output_dir", "--output"}),
    "resume": ("--resume", "--resume_from_checkpoint", {"--resume", "--resume_from_checkpoint"}),
    "epochs": ("--epochs", "--num_train_epochs", {"--epochs", "--num_train_epochs", "--num-train-epochs"}),
    "model": ("--model", "--model_name_or_path", {"--model", "--model_name_or_path", "--model-name-or-path", "--init"}),
}
KEBAB = re.compile(r"^(--[a-z0-9]+(-[a-z0-9]+)*|-[a-zA-Z])$")
SNAKE = re.compile(r"^--[a-z0-9]+(_[a-z0-9]+)*$")


class Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def captured_parser(call) -> argparse.ArgumentParser:
    """The parser a command builds, taken at its first parse (nothing runs)."""

    def capture(self, *args, **kwargs):
        raise Captured(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        try:
            call()
        except Captured as captured:
            return captured.parser
    raise AssertionError(f"{call} parsed no arguments")


def with_subcommands(name: str, parser: argparse.ArgumentParser) -> dict:
    parsers = {name: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, subparser in action.choices.items():
                parsers.update(with_subcommands(f"{name} {command}", subparser))
    return parsers


def every_parser() -> dict[str, argparse.ArgumentParser]:
    from modeling_pacs.cli import main, score_main

    parsers = with_subcommands("pacs-score", captured_parser(lambda: score_main([])))
    parsers.update(with_subcommands("pacs-pp", captured_parser(lambda: main([]))))
    for script in sorted((REPO_ROOT / "scripts").glob("*.py")):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "argv", [str(script)])
            parser = captured_parser(lambda script=script: runpy.run_path(str(script), run_name="__main__"))
        parsers.update(with_subcommands(f"scripts/{script.name}", parser))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO_ROOT / "space"))
        parsers["space/app.py"] = captured_parser(lambda: importlib.import_module("app").main([]))
    return parsers


PARSERS = every_parser()


def visible_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions
            if action.option_strings and action.help != argparse.SUPPRESS and action.dest != "help"]  # fmt: skip


def test_every_command_is_walked():
    assert {"pacs-score", "pacs-pp score", "pacs-pp make-tiny", "pacs-pp convert", "pacs-pp register-metric",
            "scripts/score_corpus.py", "space/app.py"} <= set(PARSERS)  # fmt: skip
    assert TRAINER_COMMANDS <= set(PARSERS)
    for command in TRAINER_COMMANDS:  # each trains through transformers' Trainer
        module = REPO_ROOT / "modeling_pacs" / "cli" / Path(command).name
        assert "Trainer" in module.read_text(encoding="utf-8"), command


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_one_dialect_and_one_flag_per_concept(command):
    parser = PARSERS[command]
    trainer = command in TRAINER_COMMANDS
    for action in visible_actions(parser):
        if trainer:  # HfArgumentParser adds a kebab twin of each snake_case option: the same action
            snake = [spelling for spelling in action.option_strings if SNAKE.match(spelling)]
            assert snake, (command, action.option_strings)
            assert set(action.option_strings) <= {*snake, *(spelling.replace("_", "-") for spelling in snake)}
        else:
            assert all(KEBAB.match(spelling) for spelling in action.option_strings), (command, action.option_strings)
    for concept, (kebab, snake, spellings) in CONCEPTS.items():
        if concept == "output directory" and command in OUTPUT_FILE_COMMANDS:
            spellings = spellings - {"--output"}
        flags = [action.option_strings for action in visible_actions(parser) if set(action.option_strings) & spellings]
        assert len(flags) <= 1, (command, concept, flags)
        for option_strings in flags:
            assert option_strings[0] == (snake if trainer else kebab), (command, concept, option_strings)


def filler(action: argparse.Action) -> list[str]:
    """A value that `action` accepts."""
    if action.choices:
        return [str(next(iter(action.choices)))]
    return (
        ["1"] if action.type in (int, float) or getattr(action.type, "__name__", "").startswith("positive") else ["x"]
    )


FORMER_SPELLINGS = [
    (command, action.dest, spelling, implied)
    for command, parser in sorted(PARSERS.items())
    for action in parser._actions
    for spelling, implied in getattr(action, "former_spellings", {}).items()
]


def test_the_renamed_options_are_the_expected_ones():
    renamed = {(command, spelling) for command, _, spelling, _ in FORMER_SPELLINGS}
    for converter in ("convert", "convert-longclip", "convert-polos", "convert-beit3", "convert-pearl"):
        assert (f"pacs-pp {converter}", "--output") in renamed
    assert {("scripts/evaluate_benchmarks.py", "--output"), ("scripts/train_polos.py", "--model"),
            ("scripts/train_captioner.py", "--init"), ("scripts/train_pearl.py", "--init"),
            ("scripts/train_pearl.py", "--output"), ("scripts/train_pearl.py", "--epochs"),
            ("scripts/train_pearl.py", "--resume")} <= renamed  # fmt: skip


@pytest.mark.parametrize(("command", "dest", "spelling", "implied"), FORMER_SPELLINGS)
def test_former_spellings_still_parse_and_warn_once(command, dest, spelling, implied, capsys):
    parser = PARSERS[command]
    target = next(action for action in parser._actions if action.dest == dest and action.help != argparse.SUPPRESS)
    assert not re.search(rf"{re.escape(spelling)}(?![\w-])", parser.format_help()), "--help shows a former spelling"
    argv = []
    for action in parser._actions:
        if action is not target and (action.required or not action.option_strings):
            argv += [*action.option_strings[:1], *filler(action)]
    given = [] if implied is not None else filler(target)
    arguments = parser.parse_args([*argv, spelling, *given, spelling, *given])
    expected = implied if implied is not None else (target.type or str)(given[0])
    assert getattr(arguments, dest) == expected
    replacement = target.option_strings[0] + (f" {implied}" if implied is not None else "")
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {spelling} is deprecated and will be removed: use {replacement}"
    ]
