"""canitoolcall's corpus: real outputs of nine model families (rendered from
the official templates or taken from the engines' own tests) with the
reference parse, judged by canitoolcall's own strict check.

Each fixture runs with fresh state, one configuration for all, through
``fix_completion`` and through ``fix_sse`` per character and at random
cuts (``tests/conformance.py``); the streamed results must equal the
non-streamed one. The fixtures we do not pass are listed with the reason
in ``tests/conformance_known.py``; they are expected to fail (strictly: a
listed fixture that starts passing fails here until it leaves the list).
"""

from __future__ import annotations

import pytest
from canitoolcall.fixtures import Fixture
from canitoolcall.pytest_plugin import assert_equivalent
from hypothesis import given, settings
from hypothesis import strategies as st

from .support.conformance import check, fixtures, parse_nonstream, parse_stream
from .support.conformance_known import KNOWN

FIXTURES = fixtures()
PASSING = [fx for fx in FIXTURES if fx.id not in KNOWN]


def _param(fx: Fixture) -> object:
    why = KNOWN.get(fx.id)
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(fx, id=fx.id, marks=marks)


@pytest.mark.parametrize("fx", [_param(fx) for fx in FIXTURES])
def test_fixture_conforms(fx: Fixture) -> None:
    why = check(fx)
    assert why is None, why


def test_the_known_failures_are_fixtures() -> None:
    ids = {fx.id for fx in FIXTURES}
    assert set(KNOWN) <= ids, sorted(set(KNOWN) - ids)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PASSING), st.lists(st.integers(1, 9), min_size=1, max_size=12))
def test_any_cut_gives_the_nonstreamed_parse(fx: Fixture, sizes: list[int]) -> None:
    text, pieces, i, k = fx.raw_output, [], 0, 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        pieces.append(text[i : i + n])
        i, k = i + n, k + 1
    assert_equivalent(parse_nonstream(fx), parse_stream(fx, pieces))
