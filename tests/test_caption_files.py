"""Caption files' image values: relative paths resolve against the image root; URLs and dicts reach the one image
validator as they are, so a URL is refused by name instead of becoming a missing local file."""

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
