"""DENEB's `score` refuses an empty or whitespace-only caption (candidate or reference) before encoding anything,
naming the item, which caption it is, and the fix."""

import re

import pytest

from modeling_pacs.loading import load_model
from tests.fixtures.helpers import random_image


@pytest.fixture(scope="module")
def deneb():
    return load_model("tiny:deneb")


@pytest.mark.parametrize(
    ("candidates", "references", "message"),
    [
        (["a cat", ""], [["a cat"], ["a dog"]],
         "item 1: the candidate is empty (''): DENEB cannot score an empty caption. Fix: give a non-empty caption or "
         "drop the item"),
        (["   ", "a dog"], [["a cat"], ["a dog"]],
         "item 0: the candidate is empty ('   '): DENEB cannot score an empty caption. Fix: give a non-empty caption "
         "or drop the item"),
        (["a cat", "a dog"], [["a cat"], ["a dog", "\t\n"]],
         "item 1: reference 1 is empty ('\\t\\n'): DENEB cannot compare with an empty reference. Fix: give a "
         "non-empty reference or drop it (or drop the item)"),
    ],
)  # fmt: skip
def test_an_empty_caption_is_refused_naming_the_item(deneb, candidates, references, message):
    images = [random_image(seed=0), random_image(seed=1)]
    for mode in ("per_item", "official"):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            deneb.score(images, candidates, references, mode=mode)
