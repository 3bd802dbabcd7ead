"""The corpus of broken model replies from other projects' suites
(tests/data/json_repair_corpus.json): each case whole and streamed at a few
splits through the chain with ``response_format``. A case streamfix gets
wrong today is listed in tests/support/json_corpus_known.py with how it
fails; the test fails on an unlisted failure, on a listed case failing
another way, and on a listed case that now passes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.json_corpus_known import KNOWN
from tests.support.jsoncorpus import CASES, failure, streamed, whole
from tests.support.streamutil import split_sizes

IDS = [c["id"] for c in CASES]


def test_the_cases_are_well_formed() -> None:
    assert len(IDS) == len(set(IDS))
    for c in CASES:
        assert c["text"] and c["finish_reason"] in ("stop", "length"), c["id"]
        assert set(c["origin"]) == {"repo", "file", "test"}, c["id"]
        assert c["class"] in ("certain", "guess"), c["id"]
        assert ("expect" in c) == (c["class"] == "certain"), c["id"]


def test_the_known_failures_are_cases() -> None:
    assert set(KNOWN) <= set(IDS), sorted(set(KNOWN) - set(IDS))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_whole(case: dict[str, Any]) -> None:
    got = failure(case, whole(case))
    known = KNOWN.get(case["id"])
    if known is None:
        assert got is None, f"{got}: {case['text']!r}"
    else:
        assert got == known[0], f"listed as {known[0]} ({known[1][1]}), now {got or 'right'}"


def _splits(text: str) -> list[list[str]]:
    return [
        [text[: len(text) // 2], text[len(text) // 2 :]],
        list(text),
        split_sizes(text, [3, 1, 5]),
    ]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_streamed_equals_whole(case: dict[str, Any]) -> None:
    want = whole(case)
    for pieces in _splits(case["text"]):
        assert streamed(case, pieces) == want, pieces


@settings(max_examples=150, deadline=None)
@given(
    case=st.sampled_from(CASES),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=16),
)
def test_any_split_equals_whole(case: dict[str, Any], cuts: list[int]) -> None:
    """Split invariance of the JSON step on the corpus: any cut of the reply
    gives what the whole gives (the value, the note, the refusal)."""
    text = case["text"]
    points = sorted({c for c in cuts if c < len(text)})
    pieces, prev = [], 0
    for p in points:
        pieces.append(text[prev:p])
        prev = p
    pieces.append(text[prev:])
    assert streamed(case, pieces) == whole(case), pieces
