"""``streamfix demo``: one command, no model, no network, a few seconds."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from streamfix.seen import assemble
from streamfix.tools.demo import SCENARIOS, run_demo


def test_demo_prints_every_scenario_side_by_side() -> None:
    out = io.StringIO()
    t0 = time.monotonic()
    assert run_demo(width=140, out=out) == 0
    assert time.monotonic() - t0 < 5
    text = out.getvalue()
    for sc in SCENARIOS:
        assert sc.title in text
    assert text.count("│ through streamfix") == len(SCENARIOS)


def test_demo_shows_the_repairs_that_need_no_detector() -> None:
    out = io.StringIO()
    run_demo(width=200, scenarios=["repeated-name", "loop"], out=out)
    text = out.getvalue()
    # directly, the SDK's merge concatenates the repeated names; through streamfix, one call
    assert "get_weatherget_weather" in text
    assert "│ tool_calls[0]: get_weather(" in text
    assert '"cut":"repetition"' in text


def test_demo_unknown_scenario() -> None:
    assert run_demo(scenarios=["nope"], out=io.StringIO()) == 2


def test_demo_assembler_merges_like_the_sdk() -> None:
    from streamfix.tools.demo import _repeated_name_call

    seen = assemble(b"".join(_repeated_name_call()))
    assert seen.calls[0]["name"] == "get_weather" * 3 and seen.done


def test_demo_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streamfix", "demo", "--width", "120"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "through streamfix" in proc.stdout
