"""``streamfix probe`` against the real llama.cpp server (SmolLM2-135M): it
finishes in about a minute, finds the calls this server leaves as text and
says the backend needs streamfix."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

from streamfix.server.probe import CASES, probe
from streamfix.tools.local import LocalServer
from streamfix.tools.probe import render

pytestmark = pytest.mark.e2e

#: The issue's bound is "about a minute"; measured 35 s on two busy cores.
PROBE_BUDGET = 90.0


def test_probe_of_smollm2(llama: LocalServer) -> None:
    began = time.monotonic()
    result = asyncio.run(probe(llama.base_url))
    took = time.monotonic() - began
    out = io.StringIO()
    render(result, out)
    print(out.getvalue())
    assert took < PROBE_BUDGET, took
    assert result.model == "smollm2"
    assert len(result.rows) == 2 * len(CASES)
    assert all(r.status == 200 for r in result.rows), [(r.case.key, r.did) for r in result.rows]
    rows = {(r.case.key, r.stream): r for r in result.rows}
    # llama-cpp-python ignores ``tools``: with the Hermes prompt the model
    # writes its call as <tool_call> text, which streamfix lifts
    lifted = [rows[("call", s)] for s in (True, False)]
    assert any(r.did == ["call as text (hermes)"] for r in lifted), [r.did for r in lifted]
    assert all(not r.did or r.fixed for r in lifted)
    assert result.needs_streamfix
    assert "this backend needs it" in out.getvalue()
