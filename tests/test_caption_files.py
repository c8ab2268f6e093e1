"""Caption files' image values: relative paths resolve against the image root; URLs and dicts reach the one image
validator as they are, so a URL is refused by name instead of becoming a missing local file."""

import re
from pathlib import Path

import pytest

from modeling_pacs.caption_files import resolve_image
from modeling_pacs.models.inputs import ImageInputError, load_image


def test_relative_paths_resolve_and_urls_stay_urls(tmp_path):
    assert resolve_image("cats/1.jpg", tmp_path) == str(tmp_path / "cats" / "1.jpg")
    assert resolve_image({"bytes": None, "path": "cats/1.jpg"}, tmp_path) == str(tmp_path / "cats" / "1.jpg")
    for url in ("https://example.com/cat.jpg", "s3://bucket/cat.jpg"):
        for value in (url, {"bytes": None, "path": url}):
            resolved = resolve_image(value, Path("/data/images"))
            assert resolved == url
            with pytest.raises(ImageInputError, match=r"^image 7 \('.*'\) is a URL: images are never downloaded"):
                load_image(resolved, 7)


CSV_CASES = {  # text -> the rows Python's csv module reads, or the line an unclosed quote opens on
    'image,caption\na.png,"a ""big"" dog"\nb.png,"two\nlines"\n\nc.png,cat\n': [
        (2, {"image": "a.png", "caption": 'a "big" dog'}),
        (3, {"image": "b.png", "caption": "two\nlines"}),
        (6, {"image": "c.png", "caption": "cat"}),
    ],
    'image,caption\na.png,a "dog" here\nb.png,"x"y\n': [  # stray quotes: kept as the lenient dialect keeps them
        (2, {"image": "a.png", "caption": 'a "dog" here'}),
        (3, {"image": "b.png", "caption": "xy"}),
    ],
    'image,caption\na.png,"ok"': [(2, {"image": "a.png", "caption": "ok"})],  # no final newline
    'image,caption\na.png,a dog\nb.png,"a cat\nc.png,cow\n': 3,
    'image,caption\na.png,"x"y\n\nb.png,"never\nmore\n': 4,  # a stray quote earlier does not hide it
    'image,caption\na.png,"ok': 2,
}


@pytest.mark.parametrize("text", CSV_CASES)
def test_csv_rows_match_the_csv_module_and_an_unclosed_quote_is_refused(text, tmp_path):
    import csv

    from modeling_pacs.caption_files import csv_records
    from modeling_pacs.corpus_scoring import csv_rows

    path = tmp_path / "captions.csv"
    path.write_text(text)
    expected = CSV_CASES[text]
    if isinstance(expected, list):
        with path.open(newline="") as handle:
            assert list(csv_records(handle)) == expected
        with path.open(newline="") as handle:  # the same records as csv.DictReader's
            assert [record for _, record in expected] == list(csv.DictReader(handle))
        assert list(csv_rows(path)) == [record for _, record in expected]
        return
    message = f"{path}: line {expected}: a quoted cell opens on this line and is never closed"
    with path.open(newline="") as handle, pytest.raises(ValueError, match=re.escape(message)):
        list(csv_records(handle))
    with pytest.raises(ValueError, match=re.escape(message)):
        list(csv_rows(path))
