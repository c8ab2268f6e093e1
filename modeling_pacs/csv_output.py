"""CSV that a spreadsheet opens safely: every CSV file the package writes goes through `csv_text`.

A text cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to a spreadsheet
(`=HYPERLINK("http://x","y")` in a caption is evaluated when the file is opened). As OWASP's CSV-injection guidance
says, such a cell is written with a single quote in front (`'=HYPERLINK(...)`), which makes the spreadsheet show it as
text. Numbers stay numbers: a float or int cell (a score, `-0.5`) is never changed, and neither is a text cell that is
a plain decimal number (an image id `-1`, a caption `-0.5`), which a spreadsheet reads as that number, not a formula.
`raw=True` (the commands' `--raw-csv`) writes every cell as it is. JSON and JSON lines are never changed.
See docs/concepts/bad-input.md ("Output files are safe to open").
"""

import csv
import io
import re
from collections.abc import Iterable, Sequence

# OWASP, "CSV Injection": the characters that start a formula in Excel, LibreOffice Calc and Google Sheets.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def escape_cell(value):
    """`value` as it is safe in a spreadsheet: a text cell that a spreadsheet would read as a formula gets a `'` in
    front; numbers, plain-number text, empty cells and other text are returned unchanged.

    >>> escape_cell('=HYPERLINK("http://x","y")'), escape_cell("-0.5"), escape_cell(-0.5), escape_cell("a dog")
    ('\\'=HYPERLINK("http://x","y")', '-0.5', -0.5, 'a dog')
    """
    if isinstance(value, str) and value.startswith(FORMULA_TRIGGERS) and not PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(fieldnames: Sequence[str], rows: Iterable[dict], raw: bool = False) -> str:
    """The CSV text of `rows` (dicts keyed by `fieldnames`, header first), every cell through `escape_cell` unless
    `raw`. The one CSV writer of the package (`pacs-score`, `pacs-pp score --video`, `pacs-pp evaluate-captions`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    escape = (lambda value: value) if raw else escape_cell
    writer.writerow([escape(name) for name in fieldnames])
    for row in rows:
        writer.writerow([escape(row.get(name)) for name in fieldnames])
    return buffer.getvalue()


__all__ = ["FORMULA_TRIGGERS", "csv_text", "escape_cell"]
