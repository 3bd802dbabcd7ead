"""Tool narrowing on outside data: BFCL's ``live_multiple`` questions (the
``bfcl-eval`` package's data; ``.ci/run`` installs it pinned, with
``--no-deps``), each with its own functions pooled with distractors from
the other questions (``bench/narrow.py``). At 50 tools per turn the
lexical ranker must keep the needed function among at most 6 tools shown
in at least 95% of the turns it narrows, and decline few turns.
Deterministic (a seeded pool): not a timing test."""

from __future__ import annotations

import os

import pytest

from bench.narrow import BFCL_VERSION, bfcl_dir, lexical, load

DATA = bfcl_dir()
if DATA is None:
    # .ci/run installs it (and runs with STREAMFIX_E2E=require): missing there is a failure
    if os.environ.get("CI") or os.environ.get("STREAMFIX_E2E") == "require":
        pytest.fail(
            f"bfcl-eval's data is missing: pip install --no-deps bfcl-eval=={BFCL_VERSION}",
            pytrace=False,
        )
    pytest.skip(
        f"bfcl-eval is not installed (pip install --no-deps bfcl-eval=={BFCL_VERSION})",
        allow_module_level=True,
    )


def test_the_data_is_the_whole_set() -> None:
    assert DATA is not None
    questions = load(DATA)
    assert len(questions) == 1053 and all(q.gold for q in questions)


@pytest.mark.parametrize(
    ("tools", "least_recall", "most_declined"),
    [(20, 0.97, 0.05), (50, 0.95, 0.08), (100, 0.94, 0.12)],
)
def test_recall_of_the_needed_tool_among_those_shown(
    tools: int, least_recall: float, most_declined: float
) -> None:
    assert DATA is not None
    r = lexical(load(DATA), tools)
    assert r.turns == 1053
    assert r.most_shown <= 6
    assert r.recall_narrowed >= least_recall, r
    assert r.declined / r.turns <= most_declined, r
