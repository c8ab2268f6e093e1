"""Argument types and parser helpers shared by every command line of the package."""

import argparse
import logging
import re
import sys
import textwrap
from pathlib import Path

from ..errors import InputError


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


# ---------------------------------------------------------------------------------------------------- one dialect
# The command lines speak one dialect: kebab-case (`--output-dir`, `--model`, `--resume`), except the Trainer-based
# training commands, which keep transformers' `TrainingArguments` spelling (`--output_dir`, `--model_name_or_path`,
# `--resume_from_checkpoint`, `--num_train_epochs`). A renamed option keeps its former spellings for now: they parse,
# are hidden from --help, and print once what replaced them (tests/cli/test_dialect.py checks every command).
def add_renamed_argument(parser, name: str, *former: str, **kwargs) -> argparse.Action:
    """`parser.add_argument(name, **kwargs)`, also accepting the `former` spellings of the option, which warn."""
    action = kwargs.pop("action", None)
    base = parser._registry_get("action", action, action)

    class RenamedOption(base):
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string in former:
                warn_former_spelling(self, option_string, name)
            super().__call__(parser, namespace, values, option_string)

    renamed = parser.add_argument(name, *former, action=RenamedOption, **kwargs)
    renamed.option_strings = [name]  # --help, usage and error messages name the current spelling only
    renamed.former_spellings = {spelling: None for spelling in former}  # spelling -> argument it implies (none)
    return renamed


def add_former_flag(parser, flag: str, target: argparse.Action, value: str) -> None:
    """Accept the former flag `flag` (no argument) as `target`'s option with `value`: `--resume` -> `--resume_from_
    checkpoint last`. Hidden from --help; it warns what replaced it."""

    class FormerFlag(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            warn_former_spelling(self, option_string, f"{target.option_strings[0]} {value}")
            setattr(namespace, target.dest, value)

    parser.add_argument(flag, dest=target.dest, nargs=0, action=FormerFlag, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)  # fmt: skip
    target.former_spellings = getattr(target, "former_spellings", {}) | {flag: value}


def warn_former_spelling(action: argparse.Action, spelling: str, replacement: str) -> None:
    """Say once per parser, on stderr, that `spelling` is deprecated and what replaced it."""
    warned = action.__dict__.setdefault("warned", set())
    if spelling not in warned:
        warned.add(spelling)
        print(f"warning: {spelling} is deprecated and will be removed: use {replacement}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------- shared options
DTYPE_CHOICES = ("fp32", "fp16", "bf16")
DEVICE_HELP = "'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1', ..."
DTYPE_HELP = "fp32 gives the reference numbers; fp16/bf16 speed up the GPU encoders (deviation <= ~1e-2)"


def add_device_arguments(parser: argparse.ArgumentParser, dtype_help: str = DTYPE_HELP):
    """`--device` (default auto) and `--dtype` (fp32, fp16, bf16; default fp32), as every scoring command has them."""
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="fp32", help=dtype_help)


# The documentation site (mkdocs.yml's site_url; tests/cli/test_help.py keeps the two equal). Help texts cite pages as
# `docs/<page>.md#<anchor>`, as the code does (tests/test_docs.py checks that they exist); `--help` prints them as
# links to the site, which mean something after a pip install, where the repository's docs/ folder does not exist.
DOCS_SITE_URL = "https://pacs-pp.github.io/pacs-pp/"
DOCS_PAGE = re.compile(r"\bdocs/((?:[\w-]+/)*[\w-]+)\.md(#[\w-]+)?")


def docs_url(text: str) -> str:
    """`text` with every `docs/<page>.md#<anchor>` replaced by the page's address on the documentation site."""

    def link(match: re.Match) -> str:
        page = re.sub(r"(^|/)index$", "", match.group(1))  # mkdocs serves an index page as its folder
        return f"{DOCS_SITE_URL}{page + '/' if page else ''}{match.group(2) or ''}"

    return DOCS_PAGE.sub(link, text)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Description and epilog printed as written, argument help wrapped without cutting a link, and the docs pages
    cited anywhere in the help printed as links to the documentation site."""

    def _fill_text(self, text, width, indent):
        return super()._fill_text(docs_url(text), width, indent)

    def _expand_help(self, action):
        return docs_url(super()._expand_help(action))

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)


LONG_CAPTIONS_HELP = (
    "captions longer than the text encoder's context (77 tokens for CLIP): 'truncate' reads the first tokens, as the "
    "official code does; 'chunks' reads every token, in pieces whose scores are averaged by tokens "
    "(docs/guides/long-captions.md)"
)


def add_long_captions_argument(parser: argparse.ArgumentParser):
    """`--long-captions {truncate,chunks}` (default truncate), as every CLIP-based scoring command has it."""
    parser.add_argument("--long-captions", choices=("truncate", "chunks"), default="truncate", help=LONG_CAPTIONS_HELP)


def long_captions_options(model, mode: str, scoring_mode: str | None = None, **settings) -> dict:
    """The options of `score` / `score_videos` for `--long-captions`, `--mode` and the command's other settings (batch
    sizes, progress; those the model's spec does not declare are left out); an `InputError` for `--long-captions
    chunks` on a model that only truncates, or `--mode` on a model without scoring modes."""
    from ..loading import score_options, scoring_mode_keyword

    try:
        options = score_options(model, mode, **settings)
    except ValueError as error:
        raise InputError(f"--long-captions: {error}") from None
    try:
        return options | scoring_mode_keyword(model, scoring_mode)
    except ValueError as error:
        raise type(error)(f"--mode: {error}") from None


SCORING_MODE_HELP = (
    "how DENEB and Polos batch items: 'per_item' (default: each item alone, every reference used) or 'official' "
    "(the authors' chunks, cut to a chunk's smallest reference count, to reproduce their numbers); other metrics "
    "refuse it (docs/guides/deneb.md)"
)


def add_scoring_mode_argument(parser: argparse.ArgumentParser):
    """`--mode {per_item,official}` (default: the model's own, per_item), for the metrics with scoring modes."""
    parser.add_argument("--mode", choices=("per_item", "official"), help=SCORING_MODE_HELP)


def add_raw_csv_argument(parser: argparse.ArgumentParser):
    """`--raw-csv`: the same flag in every command that writes CSV (`modeling_pacs/csv_output.py`)."""
    parser.add_argument(
        "--raw-csv",
        action="store_true",
        help="write CSV cells as they are (default: a text cell starting with =, +, -, @, tab or carriage return "
        "gets a ' in front, so that a spreadsheet shows it as text instead of running it as a formula)",
    )


def add_verbose_argument(parser: argparse.ArgumentParser):
    """`--verbose`, as every command has it: the libraries' own logs, warnings and loading bars (hidden by default)."""
    parser.add_argument(
        "--verbose", action="store_true", help="also show the libraries' own logs, warnings and loading bars"
    )


def report_truncation(items: list[dict], output, what: str = "captions", fix: str | None = None) -> int:
    """Add each item's `truncated_tokens` and print, once, how many captions were truncated and the fix (`fix`, by
    default `TRUNCATION_FIX`; a model without a piecewise mode names its own as `model.truncation_fix`)."""
    from ..models.inputs import TRUNCATION_FIX

    truncated = getattr(output, "truncated_tokens", None)
    if truncated is None:
        return 0
    truncated = truncated.tolist() if hasattr(truncated, "tolist") else list(truncated)
    for item, count in zip(items, truncated, strict=True):
        item["truncated_tokens"] = count
    reference_counts = getattr(output, "truncated_reference_tokens", None)
    if hasattr(reference_counts, "tolist"):
        reference_counts = reference_counts.tolist()
    count = sum(bool(value) for value in truncated)  # None: an item that was not scored (no references)
    with_references = 0 if reference_counts is None else sum(bool(value) for value in reference_counts)
    if count or with_references:
        logging.getLogger("pacs_pp").warning(
            f"{count} of {len(items)} {what} (and the references of {with_references} items) were longer "
            f"than the text encoder's context and were truncated (column truncated_tokens): {fix or TRUNCATION_FIX}"
        )
    return count


def add_output_arguments(parser: argparse.ArgumentParser, head_dim: bool = True):
    """`--output-dir`, `--overwrite` (and `--head-dim`), the same for every converter."""
    add_renamed_argument(
        parser,
        "--output-dir",
        "--output",
        required=True,
        type=Path,
        help="directory to write (empty unless --overwrite)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing model directory")
    if head_dim:
        from ..pacs.spec import OPENAI_HEAD_DIM

        parser.add_argument(
            "--head-dim",
            type=int,
            default=OPENAI_HEAD_DIM,
            help=f"attention head size used to derive head counts (default {OPENAI_HEAD_DIM}, as every released CLIP)",
        )


def docstring_parser(doc: str, **kwargs) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first paragraph and whose epilog (examples included) is the
    rest, printed as written."""
    head, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(
        description=head, epilog=rest or None, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
    )


def add_example(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """End `parser`'s help with `Example:` and one command to copy (every --help of the package ends so, and the
    epilog holds no other `Example(s):` section); the description and epilog are then printed as written, with the
    documentation pages they cite as links to the site (`HelpFormatter`)."""
    example = f"Example:\n  {command}"
    parser.epilog = f"{parser.epilog.rstrip()}\n\n{example}" if parser.epilog else example
    parser.formatter_class = HelpFormatter
    return parser


__all__ = [
    "DOCS_SITE_URL",
    "DTYPE_CHOICES",
    "HelpFormatter",
    "add_device_arguments",
    "add_example",
    "add_former_flag",
    "add_long_captions_argument",
    "add_scoring_mode_argument",
    "add_output_arguments",
    "add_raw_csv_argument",
    "add_verbose_argument",
    "docs_url",
    "add_renamed_argument",
    "docstring_parser",
    "long_captions_options",
    "report_truncation",
    "positive_float",
    "positive_int",
    "warn_former_spelling",
]
