"""mkdocs hook: the formulas become MathML when the site is built, so a browser shows them with no script and no
network (MathML Core: Chromium, Firefox, Safari).

`pymdownx.arithmatex` (generic mode) keeps each formula's LaTeX out of Markdown's hands and wraps it as
`<span class="arithmatex">\\(...\\)</span>` (inline) or `<div class="arithmatex">\\[...\\]</div>` (display); this hook
replaces each wrapper's LaTeX by `latex2mathml`'s MathML, keeping the LaTeX as the formula's annotation. A formula
that cannot be converted fails the build, naming the page and the formula.
"""

import html
import re

try:
    from latex2mathml.converter import convert
except ImportError as error:  # the docs tools are the `dev` extra
    raise ImportError(
        "the documentation renders its formulas with latex2mathml: pip install -e '.[dev]' "
        "(or bash scripts/setup.sh --tests)"
    ) from error

WRAPPED = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\])\s*</(?P=tag)>',
    flags=re.S,
)


def mathml(match: re.Match, page_name: str) -> str:
    display = match.group("display") is not None
    latex = html.unescape(match.group("display") if display else match.group("inline")).strip()
    latex = re.sub(r"(?<!\\)\\\n", r"\\ ", latex)  # TeX's control space written at a line end: `\` + newline
    try:
        markup = convert(latex, display="block" if display else "inline")
    except Exception as error:  # latex2mathml raises its own family for unsupported commands
        raise ValueError(f"{page_name}: the formula {latex!r} cannot be rendered as MathML: {error}") from error
    return f'<{match.group("tag")} class="arithmatex">{markup}</{match.group("tag")}>'


def on_page_content(html_text: str, page, config, files) -> str:
    return WRAPPED.sub(lambda match: mathml(match, page.file.src_uri), html_text)
