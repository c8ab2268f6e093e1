"""Counting tokens never changes the settings scoring tokenizes with, on any thread (`inputs.untruncated_token_ids`).

A fast tokenizer rewrites its shared truncation/padding state on every call whose settings differ from the last
call's. The Space scores requests on several threads, so a count (nothing cut, nothing padded) on one thread used to
hand scoring on another a ragged batch ("expected sequence of length 9 at dim 1 (got 11)"). The rule: every call with
other settings than the encoder's goes through `untruncated_token_ids`, on a private copy of the tokenizer.
"""

import re
import threading
from pathlib import Path

import torch

from modeling_pacs.models.inputs import untruncated_token_ids
from modeling_pacs.testing.pacs import make_tiny_model
from tests.fixtures.helpers import assert_scores_close

PACKAGE = Path(__file__).resolve().parents[2] / "modeling_pacs"
SHORT = ["a dog", "a red circle on a white background", "two cats sleeping on a sofa near the window"]
LONG = [" ".join(f"Part {index} shows a dog on the grass." for index in range(12))]


def test_counting_and_tokenizing_on_many_threads_equal_one_thread():
    """8 threads x 150 rounds, alternating the encoder's tokenization and counts. With counting on the shared
    tokenizer this failed in about 1 of 20 calls here (ragged batches, uncut 150-token rows)."""
    model = make_tiny_model(seed=3).eval()
    captions = [*SHORT, *LONG]
    expected_ids = model.tokenize(captions)["input_ids"]
    expected_counts = model.truncated_tokens(captions).tolist()
    failures = []

    def work(thread: int):
        for round_ in range(150):
            try:
                if (thread + round_) % 2:
                    assert model.truncated_tokens(captions).tolist() == expected_counts
                    untruncated_token_ids(model.tokenizer, LONG * 2)
                else:
                    assert torch.equal(model.tokenize(captions)["input_ids"], expected_ids)
            except Exception as error:  # noqa: BLE001 - collected and reported below with its thread
                failures.append(f"thread {thread}, round {round_}: {type(error).__name__}: {error}"[:200])

    threads = [threading.Thread(target=work, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_scores_on_several_threads_equal_one_thread():
    model = make_tiny_model(seed=3).eval()
    images = [torch.full((3, 16, 16), value / 10) for value in range(4)]
    captions = [*SHORT, *LONG]
    expected = model.score(images, captions).scores
    results, failures = [], []

    def work():
        try:
            for _ in range(3):
                results.append(model.score(images, captions).scores)
                model.truncated_tokens(LONG * 4)
        except Exception as error:  # noqa: BLE001
            failures.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(results) == 12
    for scores in results:
        assert_scores_close(scores, expected)


def test_untruncated_ids_equal_the_tokenizer_with_nothing_cut_and_leave_its_settings():
    model = make_tiny_model(seed=3)
    texts = [*SHORT, *LONG]
    ids = untruncated_token_ids(model.tokenizer, texts)
    assert [len(row) for row in ids] == [len(model.tokenizer(text)["input_ids"]) for text in texts]
    assert max(len(row) for row in ids) > model.config.max_text_length  # nothing was cut
    assert untruncated_token_ids(model.tokenizer, ["a dog"], add_special_tokens=False) == [
        model.tokenizer("a dog", add_special_tokens=False)["input_ids"]
    ]
    backend = getattr(model.tokenizer, "backend_tokenizer", None)
    if backend is not None:  # a fast tokenizer: its own state is never touched by counting
        model.tokenize(SHORT)
        before = (backend.truncation, backend.padding)
        untruncated_token_ids(model.tokenizer, LONG)
        assert (backend.truncation, backend.padding) == before
    assert untruncated_token_ids(model.tokenizer, []) == []


def test_no_tokenizer_call_cuts_or_pads_differently_outside_the_one_door():
    """Counting calls (truncation=False, add_special_tokens=False, padding=False) on a model's tokenizer live only in
    `untruncated_token_ids`."""
    pattern = re.compile(r"tokenizer\((?:[^()]|\([^()]*\))*?(truncation=False|add_special_tokens=False|padding=False)")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert found == [], (
        "tokenizer calls with counting settings outside modeling_pacs.models.inputs.untruncated_token_ids: "
        f"{found}; route them through it (a fast tokenizer's settings are shared state)"
    )
