"""The detector's matcher costs little per tool (issue 25, item 1).

A new set of offered tools used to cost a matcher compiled from a trie of
every marker, the tool names' ``NAME(`` ones included: 45 s of CPU for 512
names of 256 characters. Now only the registry's markers are compiled, once;
the names' markers are found by a regex of one shape and a set lookup
(``detect._Names``). These tests pin the cost structurally (no regex grows
with the names; a generous time bound the old build missed by 20x), and
that the detector decides exactly as the compiled trie did: against a
reference matcher with every marker in one trie (the old build), on
random texts, tool names and splits.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.formats import markers_for
from streamfix.spec import ToolSpec
from streamfix.transforms import detect
from streamfix.transforms.detect import RUN_SEP, Matcher, ToolTagDetector, matcher_for

from .support.streamutil import chunk, sse, tool
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app


def names(n: int, length: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [
        "".join(rnd.choice(string.ascii_letters) for _ in range(length - 6)) + f"_{i:05d}"
        for i in range(n)
    ]


def specs(tool_names: list[str]) -> dict[str, ToolSpec]:
    return {n: ToolSpec(n, {"type": "object"}) for n in tool_names}


class CountCompiles:
    """Counts ``re.compile`` calls (and the longest pattern) meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.patterns: list[str] = []
        real = re.compile

        def counting(pattern: Any, flags: int = 0) -> re.Pattern[Any]:
            self.patterns.append(str(pattern))
            return real(pattern, flags)

        monkeypatch.setattr(re, "compile", counting)


# -- the cost ----------------------------------------------------------------


@pytest.mark.parametrize(("n", "length"), [(50, 16), (512, 64), (512, 256)])
def test_a_new_tool_set_compiles_one_small_regex(
    monkeypatch: pytest.MonkeyPatch, n: int, length: int
) -> None:
    Matcher({})  # the registry's markers: compiled once, for every set
    count = CountCompiles(monkeypatch)
    m = Matcher(specs(names(n, length)))
    # One regex, whose pattern holds the names' first characters only: its
    # size does not grow with the names (the old build compiled five, each
    # of them holding every name, megabytes of pattern for 512 x 256).
    assert len(count.patterns) <= 1
    assert all(len(p) < 300 for p in count.patterns), [len(p) for p in count.patterns]
    assert m.names is not None and len(m.names.markers) == 3 * n


def test_the_largest_tool_set_the_proxy_takes_builds_in_milliseconds() -> None:
    # 512 names of 256 characters (``validate.MAX_TOOLS`` x
    # ``MAX_TOOL_NAME_CHARS``): 45 s of CPU before, about 3 ms now. The
    # bound is generous (a loaded 2-core machine), far below the old cost.
    Matcher({})
    tools = specs(names(512, 256, seed=11))
    t0 = time.process_time()
    m = Matcher(tools)
    assert time.process_time() - t0 < 2.0
    call = f"{next(iter(tools))}(x=1)"
    got = detector_run(m, tools, [call[:100], call[100:]], "stop")
    assert got[1] == [(next(iter(tools)), '{"x":1}')]


def test_absurd_names_are_not_looked_for_as_name_calls() -> None:
    """Names with ``(`` or NUL in them, or a blank first (no API allows
    one): their ``NAME(`` markers are left out, nothing else is."""
    tools = specs(["a(b", " lead", "nul\x00x", "get weather", "get_weather"])
    m = Matcher(tools)
    assert m.names is not None
    assert "get weather(" in m.names.markers and "[get weather(" in m.names.markers
    assert "[ lead(" in m.names.markers and " lead(" not in m.names.markers
    assert not any("a(b" in x or "\x00" in x for x in m.names.markers)
    got = detector_run(m, tools, ['get_weather(city="Paris")'], "stop")
    assert got[1] == [("get_weather", '{"city":"Paris"}')]


# -- the same decisions as the trie of every marker ----------------------------


def reference(tools: dict[str, ToolSpec]) -> Matcher:
    """The old build: every marker (the names' included) in one trie."""
    m = Matcher(tools)
    mk = markers_for(tools)
    m.trie = detect._Trie(mk.anywhere, mk.leading)
    m.names = None
    m.run_scan = detect._RunScan(m.trie.run_scan, None)
    return m


#: Tool sets whose names share prefixes, collide with each other's
#: markers (``[x(`` is pythonic for ``x`` and a code call of ``[x``), with
#: the registry's (``call:``, ``functools[``, ``<tool_call>``), hold
#: blanks, dots, dashes and other scripts.
TOOL_SETS = [
    ["get_weather", "get", "get_weather_now", "a"],
    ["call", "call:x", "functions", "fn.x", "x-y", "tool_call", "functools"],
    ["get weather", "天气", "a.b:c", "z", "<tool_call>"],
    ["[x", "x", "functions.x", "x."],
    ["ab" * 60 + "c", "ab" * 60 + "d", "ab"],
]
_REFERENCE: dict[int, Matcher] = {}
_NEW: dict[int, Matcher] = {}


def matchers(k: int) -> tuple[Matcher, Matcher]:
    if k not in _NEW:
        tools = specs(TOOL_SETS[k])
        _NEW[k] = Matcher(tools)
        _REFERENCE[k] = reference(tools)
    return _NEW[k], _REFERENCE[k]


def fragments(k: int) -> list[str]:
    out = ["(", ")", "[", "]", " ", "\n", "`", ".", "-", ":", "x", "ab", "the ", "{", "}"]
    out += ["functions.", "call:", "<tool_call>", "</tool_call>", '"', "=1", "\x00", "Let me."]
    out += ['{"name": "get", "arguments": {}}', "[TOOL_CALLS]", "functools["]
    for n in TOOL_SETS[k]:
        out += [n, n[: max(1, len(n) // 2)], n[:1], n + "(", f"{n}(q=1)", f"\n{n}(", "[" + n]
    return out


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[list[str]], str, bool]:
    k = draw(st.integers(0, len(TOOL_SETS) - 1))
    text = "".join(draw(st.lists(st.sampled_from(fragments(k)), max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    # Runs of pieces, as the chain's text lane hands them over.
    sizes = draw(st.lists(st.integers(1, 4), min_size=len(pieces), max_size=len(pieces)))
    runs: list[list[str]] = []
    it: Iterator[str] = iter(pieces)
    for size in sizes:
        run = [p for _, p in zip(range(size), it, strict=False)]
        if run:
            runs.append(run)
    return k, runs, draw(st.sampled_from(["stop", "length"])), draw(st.booleans())


def detector_run(
    m: Matcher,
    tools: dict[str, ToolSpec],
    pieces: list[str],
    finish: str,
    runs: list[list[str]] | None = None,
    lane: bool = False,
) -> tuple[list[Any], list[tuple[str, str]], str | None, dict[str, int]]:
    """Feed the pieces (or runs, through the lane) to a detector using
    ``m``; what came out, step by step."""
    ctx = Context.of({"tools": [tool(n) for n in tools]}, {})
    d = ToolTagDetector(ctx)
    d.m = m
    d._quiet = m.quiet
    steps: list[Any] = []
    calls: list[tuple[str, str]] = []

    def full(text: str) -> None:
        delta = Delta(content=text)
        d.feed(delta)
        steps.append((delta.content, d.held))
        calls.extend((c.name, c.arguments) for c in delta.calls or [])
        assert d.held <= d.hold_bound

    for run in runs if runs is not None else [[p] for p in pieces]:
        steps.append(("holds", d.holds_call("".join(run))))
        if lane:
            taken = d.feed_texts(run, "".join(run))
            steps.append(("taken", taken, d.held))
            rest = run[taken:]
            if rest:
                full(rest[0])
            for text in rest[1:]:
                if d.feed_text(text):
                    steps.append(("lane", d.held))
                else:
                    full(text)
        else:
            for text in run:
                full(text)
    end = Delta(content="", finish_reason=finish)
    d.close(end)
    steps.append(end.content)
    calls.extend((c.name, c.arguments) for c in end.calls or [])
    return steps, calls, end.finish_reason, dict(ctx.report.counts)


@settings(max_examples=400, deadline=None)
@given(streams())
def test_decisions_match_the_trie_of_every_marker(
    case: tuple[int, list[list[str]], str, bool],
) -> None:
    k, runs, finish, lane = case
    new, ref = matchers(k)
    tools = specs(TOOL_SETS[k])
    pieces = [p for run in runs for p in run]
    assert detector_run(new, tools, pieces, finish, runs, lane) == detector_run(
        ref, tools, pieces, finish, runs, lane
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(TOOL_SETS) - 1), st.data())
def test_run_scan_matches_the_trie_of_every_marker(k: int, data: st.DataObject) -> None:
    new, ref = matchers(k)
    texts = data.draw(
        st.lists(
            st.lists(st.sampled_from(fragments(k)), max_size=4).map("".join),
            min_size=1,
            max_size=5,
        )
    )
    run = RUN_SEP.join(texts)
    assert (new.run_scan.search(run) is None) == (ref.run_scan.search(run) is None), texts
    for t in texts:
        # ``is_quiet`` may only say so when the search finds nothing.
        if new.is_quiet(t):
            assert ref.is_quiet(t) or not _finds(ref, t), t


def _finds(m: Matcher, text: str) -> bool:
    """Whether a detector with ``m`` holds or starts a region in ``text``
    after a blank (the search, past markers glued to a word)."""
    d = ToolTagDetector(Context.of(None, {}))
    d.m = m
    d._prev = " "
    return d._search(text) is not None


def test_the_shared_regexes_are_built_once() -> None:
    a = matcher_for(specs(["alpha_tool"]))
    b = matcher_for(specs(["beta_tool", "gamma"]))
    assert a.trie is b.trie  # the registry's markers: one compiled set


# -- through the proxy ----------------------------------------------------------


async def _first_byte(url: str, tools: list[str]) -> tuple[float, int]:
    """Seconds until the first byte of a streamed reply; its status."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "tools": [tool(n) for n in tools],
    }
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s, s.post(url + "/chat/completions", json=body) as r:
        await r.content.readany()
        waited = time.monotonic() - t0
        await r.read()
        return waited, r.status


async def test_a_new_tool_set_is_not_kept_waiting_by_the_largest_ones() -> None:
    """While seven requests offering fresh sets of the most and longest
    tools the proxy takes (512 names of 256 characters) are served, a
    request with a new set of 50 tools gets its first byte at once. Before,
    each large set cost 45 s of CPU in the thread pool (six workers on two
    cores) and a new set queued behind them: 88 s measured."""
    from streamfix.server.caller.validate import MAX_TOOL_NAME_CHARS, MAX_TOOLS

    paced = Reply.stream(
        [sse([chunk(role="assistant", content="")], done=False)]
        + [sse([chunk(f"w{i} ")], done=False) for i in range(20)]
        + [sse([chunk(finish="stop")])],
        delay=0.05,
    )
    async with FakeUpstream(paced) as up, AppServer(proxy_app(up.url)) as px:
        large = [
            asyncio.create_task(
                _first_byte(px.url, names(MAX_TOOLS, MAX_TOOL_NAME_CHARS, seed=100 + k))
            )
            for k in range(7)
        ]
        await asyncio.sleep(0.3)
        waited, status = await asyncio.wait_for(_first_byte(px.url, names(50, 20, seed=5)), 30)
        done = await asyncio.wait_for(asyncio.gather(*large), 30)
    assert status == 200 and all(st == 200 for _, st in done)
    # Generous for a loaded 2-core machine; the old build missed it by 40x.
    assert waited < 2.0, waited
