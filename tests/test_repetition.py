"""The repetition cutter (streamfix/transforms/repetition.py): loops of
every period and shape are cut within issue 4's bound at every chunking;
legitimate repetitive structure is not."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import streamfix
from streamfix.chain import Chain
from streamfix.chunks import view_of
from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.transforms.repetition import (
    CHECK_EVERY,
    COUNTED_ARG_CHARS,
    COUNTED_BOUND_CHARS,
    COUNTED_BOUND_COPIES,
    COUNTED_CHARS,
    COUNTED_COPIES,
    COUNTED_MAX_DIGITS,
    COUNTED_MAX_PERIOD,
    COUNTED_MIN_PERIOD,
    COUNTED_SHIFT,
    COUNTED_WINDOW,
    LONG_AT,
    MAX_PERIOD,
    STRUCTURED_BOUND,
    RepetitionCutter,
    _Channel,
    check_interval,
    required_span,
    structured,
)

from .support.streamutil import (
    CAPTURES,
    SHAPES_REQUEST,
    assemble,
    chunk,
    run_sse,
    split_at,
    split_sizes,
    sse,
    text_stream,
    tool,
)

PROSE = (
    "Streaming repairs have to be cheap. The proxy sits between a client and a small "
    "model, and every chunk passes through it, so the common case must cost about as "
    "much as decoding the JSON once.\n\n"
)
CODE_BLOCK = (
    "```python\n"
    "def fetch(url: str, retries: int = 3) -> bytes:\n"
    "    for attempt in range(retries):\n"
    "        try:\n"
    "            return urlopen(url, timeout=10).read()\n"
    "        except OSError as exc:\n"
    "            log.warning('attempt %d failed: %s', attempt, exc)\n"
    "    raise RuntimeError('giving up')\n"
    "```\n"
)
PARAGRAPH = (
    "The committee met again on Tuesday to review the proposal, and after a long "
    "discussion it was agreed that the budget would be revised before the next "
    "meeting, with particular attention paid to the cost of maintenance. "
)


def _long_unit(n: int) -> str:
    rnd = random.Random(n)
    words = ["alpha", "beta", "gamma", "delta", "loop", "node", "edge", "river", "stone"]
    out = ""
    while len(out) < n:
        out += rnd.choice(words) + rnd.choice([" ", ", ", ". ", "\n"])
    return out[:n]


#: (name, text before the loop, the repeated unit). The loop is the unit
#: repeated far past any bound.
LOOPS: list[tuple[str, str, str]] = [
    ("one char", PROSE, "a"),
    ("newlines", PROSE, "\n"),
    ("spaces", PROSE, " "),
    ("tabs", "def f():\n", "\t"),
    ("closing braces", '{"a": ', "}"),
    ("token", PROSE, "the "),
    ("ha", "That is funny: ", "ha "),
    ("two chars", PROSE, "ab"),
    ("seven chars", PROSE, "abcdefg"),
    ("json zeros", '{"values": [', "0, "),
    ("sentence", PROSE, "I am sorry, but I cannot help with that request. "),
    ("line", PROSE, "The cat sat on the mat.\n"),
    ("table row", "| a | b |\n|---|---|\n", "| 1 | 2 |\n"),
    ("rule lines", PROSE, "=" * 80 + "\n"),
    ("tool tag", PROSE, "<tool_call>\n"),
    ("emoji", PROSE, "😀"),
    ("cjk sentence", "答案如下：", "我们需要重新考虑这个问题。"),
    ("paragraph", PROSE, PARAGRAPH),
    ("code block", PROSE, CODE_BLOCK),
    ("period 1000", PROSE, _long_unit(1000)),
    ("period 2048", PROSE, _long_unit(MAX_PERIOD)),
    ("after 30 KB of text", _long_unit(30_000) + PROSE, "Let me check that again. "),
    ("json object", "[", '{"id": 7, "name": "widget", "tags": ["a", "b"]}, '),
]


#: The loops above whose copy is structured (issue 24: short, mostly not
#: letters, or one character not a blank): a grid, a table of zeros or a
#: run of ``a`` a user asked for looks the same, so they are cut within
#: ``STRUCTURED_BOUND`` instead (module doc). Blanks and an emoji are not.
STRUCTURED_LOOPS = {
    "one char",
    "closing braces",
    "json zeros",
    "table row",
    "rule lines",
    "json object",
}


def _bound(unit: str) -> int:
    """How far past its start a loop of ``unit`` may run before the cut."""
    return STRUCTURED_BOUND if structured(unit) else max(4 * len(unit), 400)


def test_which_loops_are_structured() -> None:
    assert {name for name, _, unit in LOOPS if structured(unit)} == STRUCTURED_LOOPS


def _loop_text(prefix: str, unit: str) -> tuple[str, int, int]:
    """The text, where its loop starts, and the loop's period."""
    p = len(unit)
    copies = (_bound(unit) + max(4 * p, 400) * 2) // p + 3
    text = prefix + unit * copies
    start = len(prefix)
    while start > 0 and text[start - 1] == text[start - 1 + p]:
        start -= 1
    return text, start, p


def _pieces(text: str, how: str | int) -> list[str]:
    if how == "whole":
        return [text]
    if isinstance(how, int):
        return [text[i : i + how] for i in range(0, len(text), how)]
    rnd = random.Random(len(text))
    out, i = [], 0
    while i < len(text):
        n = rnd.randint(1, 8)
        out.append(text[i : i + n])
        i += n
    return out


def _ctx() -> Context:
    return Context.of(None, {})


def _cut(pieces: list[str], channel: str = "content") -> tuple[str, Delta | None, Context]:
    """Feed pieces to a cutter as one channel; what reached the client and
    the delta that stopped the turn (None if none did)."""
    ctx = _ctx()
    cutter = RepetitionCutter(ctx)
    out = ""
    for i, piece in enumerate(pieces):
        d = Delta(content=piece) if channel == "content" else Delta(reasoning=piece)
        if i == len(pieces) - 1:
            cutter.close(d)
        else:
            cutter.feed(d)
        out += getattr(d, channel) or ""
        if d.stop:
            return out, d, ctx
    return out, None, ctx


def _check_cut(text: str, start: int, p: int, out: str, d: Delta | None) -> None:
    assert d is not None, "loop not cut"
    assert text.startswith(out)
    past = len(out) - start
    bound = _bound(text[start : start + p])
    assert past <= bound, f"{past} chars past the loop start reached the client"
    assert len(out) >= min(start + p, len(out)), "text before the loop and one copy are kept"
    assert d.finish_reason == "length"


@pytest.mark.parametrize("how", [1, 3, "random", 64, "whole"])
@pytest.mark.parametrize(("name", "prefix", "unit"), LOOPS, ids=[x[0] for x in LOOPS])
def test_loop_is_cut_within_the_bound(name: str, prefix: str, unit: str, how: str | int) -> None:
    text, start, p = _loop_text(prefix, unit)
    out, d, ctx = _cut(_pieces(text, how))
    _check_cut(text, start, p, out, d)
    assert d is not None
    assert d.ext == {"cut": "repetition", "period": p}
    assert ctx.report.cut is d.ext
    assert ctx.report.counts["loop_cut"] == 1
    if how in (1, "whole"):
        # a whole completion keeps exactly the text before the loop and one copy
        assert len(out) == (start + p if how == "whole" else len(out))


@pytest.mark.parametrize(("name", "prefix", "unit"), LOOPS[:12], ids=[x[0] for x in LOOPS[:12]])
def test_loop_in_reasoning_is_cut(name: str, prefix: str, unit: str) -> None:
    text, start, p = _loop_text(prefix, unit)
    out, d, _ = _cut(_pieces(text, "random"), "reasoning")
    _check_cut(text, start, p, out, d)


@given(st.sampled_from(LOOPS[:20]), st.lists(st.integers(1, 40), min_size=1, max_size=60))
def test_loop_cut_at_any_chunking(loop: tuple[str, str, str], sizes: list[int]) -> None:
    _, prefix, unit = loop
    text, start, p = _loop_text(prefix, unit)
    out, d, _ = _cut(split_sizes(text, sizes))
    _check_cut(text, start, p, out, d)


def test_detection_position_does_not_depend_on_chunking() -> None:
    """Checks run at absolute positions: the same loop is detected at the
    same character whatever the chunking; only the delta's size decides
    how much of the detecting delta is trimmed."""
    text, start, p = _loop_text(PROSE, "The cat sat on the mat.\n")
    whole, _, _ = _cut([text])
    ones, _, _ = _cut(_pieces(text, 1))
    assert len(whole) == start + p
    assert (len(ones) + 1) % CHECK_EVERY == 0  # the detecting character is dropped


_WORDS = ["the", "cat", "sat", "on", "mat", "1.", "2.", "x", "=", "\n", " ", "{", "}", "ab"]


def _first_hit(ch: _Channel, pieces: list[str]) -> tuple[int, int] | None:
    """The loop the channel finds first: (period, absolute position of the
    check that found it), or None."""
    for piece in pieces:
        hit = ch.feed(piece)
        if hit is not None:
            return hit[0], ch.next_check
    return None


@given(
    st.integers(0, 2**32),
    st.integers(0, 3000),
    st.one_of(st.none(), st.integers(1, MAX_PERIOD + 60)),
    st.lists(st.integers(65, 3000), min_size=1, max_size=8),
)
def test_screened_checks_find_what_each_check_finds(
    seed: int, before: int, period: int | None, sizes: list[int]
) -> None:
    """Pieces of 64 characters or more meet several checks at once, which
    one screen (``quiet``) may skip together; pieces under 64 characters
    meet one check at a time. The same loop is found at the same check
    either way: near-repetitive text of few words, then a loop of any
    period (or none), then a numbered list that loops."""
    rnd = random.Random(seed)
    text = "".join(rnd.choice(_WORDS) for _ in range(before))
    if period is not None:
        unit = "".join(rnd.choice(_WORDS) for _ in range(period))[:period]
        text += unit * (_bound(unit) // len(unit) + 2)
    text += "".join(f"{i}. same item\n" for i in range(1, 40))
    small = _first_hit(_Channel(), split_sizes(text, [rnd.randint(1, 63) for _ in range(50)]))
    large = _first_hit(_Channel(), split_sizes(text, sizes))
    assert small == large
    assert small is not None  # the numbered list at the end, at least


@pytest.mark.parametrize("period", [1, 3, 64, 100, 101, 300, 512, 513, 1000, MAX_PERIOD])
def test_screened_checks_at_every_loop_onset(period: int) -> None:
    """The same, for a loop starting at every position of the check grid
    (it repeats every ``CHECK_EVERY * LONG_EVERY`` = 256 characters): a
    screen of checks that reached too far, or searched too short a range,
    would miss a loop that starts inside it."""
    for onset in range(600, 600 + 256):
        rnd = random.Random(onset)
        before = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(onset))
        unit = "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ ") for _ in range(period))
        text = before + unit * (_bound(unit) // period + 2)
        small = _first_hit(_Channel(), split_sizes(text, [rnd.randint(1, 63) for _ in range(9)]))
        large = _first_hit(_Channel(), split_sizes(text, [rnd.randint(200, 3000)]))
        assert small == large, onset
        assert small is not None and small[0] == period


# -- legitimate repetition is not a loop -----------------------------------

TABLE = "| name | qty | price |\n|---|---:|---:|\n" + "".join(
    f"| item{i} | {i * 3 % 17} | {i * 1.25:.2f} |\n" for i in range(200)
)
JSON_ARRAY = orjson.dumps(
    [
        {"id": i, "name": f"user{i}", "active": i % 3 == 0, "score": (i * 37) % 101}
        for i in range(300)
    ],
    option=orjson.OPT_INDENT_2,
).decode()
_PARTS = ("valve", "pump", "gauge")
NUMBERED = "".join(f"{i}. Step {i}: check the {_PARTS[i % 3]}\n" for i in range(1, 200))
NOT_LOOPS: list[tuple[str, str]] = [
    ("markdown table", TABLE),
    ("rules", "".join(f"## Section {i}\n\n" + "-" * 80 + "\n\ntext\n\n---\n\n" for i in range(40))),
    ("equals line", PROSE + "=" * 80 + "\n" + PROSE),
    ("ha ha ha", "And then he said: " + "ha " * 20 + "and left. " + PROSE * 3),
    ("json array of similar objects", JSON_ARRAY),
    ("numbered list", NUMBERED),
    ("bullet list", "".join(f"- item number {i}\n" for i in range(300))),
    ("repeated code lines", "def f(x):\n" + "    x = x + 1\n" * 20 + "    return x\n" + PROSE),
    ("csv", "id,name,qty\n" + "".join(f"{i},name{i % 7},{i * 13 % 50}\n" for i in range(500))),
    ("numeric array", str([random.Random(i).randrange(100) for i in range(2000)])),
    ("three copies of a long block", PROSE + (CODE_BLOCK * 3) + PROSE),
    ("an 80-char rule of each kind", "".join(c * 80 + "\n" for c in "=-#*~_.") * 3),
]


@pytest.mark.parametrize(("name", "text"), NOT_LOOPS, ids=[x[0] for x in NOT_LOOPS])
@pytest.mark.parametrize("how", [1, "random", "whole"])
def test_legitimate_repetition_is_not_cut(name: str, text: str, how: str | int) -> None:
    out, d, ctx = _cut(_pieces(text, how))
    assert d is None
    assert out == text
    assert ctx.report.cut is None


def test_required_span_meets_the_bound() -> None:
    for p in range(1, MAX_PERIOD + 1):
        assert required_span(p) + check_interval(p) < max(4 * p, 400)
        assert required_span(p) >= 3 * p  # never fewer than three copies


# -- through the chain -----------------------------------------------------


def test_real_exact_loop_capture_is_cut() -> None:
    data = (CAPTURES / "e_repetition_cat_mat_exact_loop.sse").read_bytes()
    for req in (None, SHAPES_REQUEST):
        for size in (len(data), 7, 1):
            out = run_sse([data[i : i + size] for i in range(0, len(data), size)], req)
            a = assemble(out)
            assert a.finish_reason == "length"
            assert a.ext is not None and a.ext["cut"] == "repetition"
            assert a.done
            assert a.content.startswith("In the morning, a cat sat on the mat,\n")
            assert len(a.content) < 600


def test_real_numbered_loop_capture_is_cut() -> None:
    """``N. Ananasaki (Agra)``: only a running number changes; the
    numbered-list check catches it within 400 characters of its start."""
    data = (CAPTURES / "e_repetition_fruits_numbered_loop.sse").read_bytes()
    a = assemble(run_sse(data))
    assert a.finish_reason == "length"
    assert a.ext == {"cut": "repetition", "period": 20}
    start = a.content.index("3. Ananasaki")
    assert len(a.content) - start <= 400


def test_cut_ends_the_stream_and_stops_the_session() -> None:
    text, start, p = _loop_text(PROSE, "again and again ")
    data = text_stream(_pieces(text, 3))
    session = streamfix.SSESession(None)
    out = session.feed(data)
    assert session.stopped and session.finished
    assert session.report.cut == {"cut": "repetition", "period": p}
    a = assemble(out)
    assert a.done and a.finish_reason == "length"
    assert a.ext == {"cut": "repetition", "period": p}
    assert len(a.content) - start <= 400


def _completion(text: str) -> dict[str, Any]:
    """A non-streamed completion whose reply is ``text``."""
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        ],
    }


def test_non_streamed_completion_is_cut() -> None:
    text, start, p = _loop_text(PROSE, "I will try again. ")
    out = streamfix.fix_completion(_completion(text))
    ch = out["choices"][0]
    assert ch["message"]["content"] == text[: start + p]
    assert ch["finish_reason"] == "length"
    assert ch["streamfix"] == {"cut": "repetition", "period": p}


def test_loop_in_tool_arguments_drops_the_call() -> None:
    """A loop inside a structured call's arguments: the call is broken, no
    call reaches the client, the turn ends with ``length``."""
    req = {"tools": [tool("write", {"text": {"type": "string"}})]}
    args = '{"text": "' + "la la " * 200 + '"}'
    chunks = [chunk(role="assistant")]
    for i in range(0, len(args), 4):
        frag = {"index": 0, "function": {"arguments": args[i : i + 4]}}
        if i == 0:
            frag.update(id="call_1", type="function")
            frag["function"] = {"name": "write", "arguments": args[:4]}
        chunks.append(chunk(tool_calls=[frag]))
    chunks.append(chunk(finish="tool_calls"))
    out = run_sse(sse(chunks), req)
    a = assemble(out)
    assert a.tool_calls == []
    assert a.finish_reason == "length"
    assert a.ext == {"cut": "repetition", "period": 3}
    assert a.done


def test_each_call_is_its_own_channel() -> None:
    """Two calls' arguments interleaved are separate channels: identical
    arguments in two calls are not a loop."""
    cutter = RepetitionCutter(_ctx())
    piece = '{"q": "the same long argument text for both calls", "n": 1}'
    for _ in range(3):
        d = Delta(arg_text=[(0, piece), (1, piece)])
        cutter.feed(d)
        assert not d.stop


def test_channels_are_separate() -> None:
    """200 characters of ``wait`` in content and 200 in reasoning: 400
    together would be a loop, but each channel alone is under the span."""
    cutter = RepetitionCutter(_ctx())
    for _ in range(50):
        d = Delta(content="wait", reasoning="wait")
        cutter.feed(d)
        assert not d.stop
    for _ in range(50):
        d = Delta(reasoning="wait")
        cutter.feed(d)
        if d.stop:
            break
    assert d.stop  # reasoning alone reaches the span


def test_option_off_never_cuts() -> None:
    text, _, _ = _loop_text(PROSE, "again ")
    a = assemble(run_sse(text_stream(_pieces(text, 5)), None, repetition=False))
    assert a.content == text and a.ext is None


@given(st.sampled_from(LOOPS[:20]), st.integers(1, 9))
def test_plain_text_lane_agrees_with_feed(loop: tuple[str, str, str], size: int) -> None:
    """The chain's plain-text lane (``feed_text``, then ``feed`` with the
    same text when it declines) cuts exactly where ``feed`` alone does."""
    _, prefix, unit = loop
    text, _, _ = _loop_text(prefix, unit)
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    full, d_full, _ = _cut(pieces)
    cutter = RepetitionCutter(_ctx())
    lane = ""
    for piece in pieces:
        if cutter.feed_text(piece):
            lane += piece
            continue
        d = Delta(content=piece)
        cutter.feed(d)
        lane += d.content or ""
        assert d.stop and d.ext == (d_full.ext if d_full else None)
        break
    assert lane == full


ARG_LOOPS = [
    ("json array of zeros", '{"values": [', "0, "),
    ("json object", '{"rows": [', '{"id": 1, "ok": true}, '),
    ("string", '{"text": "', "la di da "),
    ("escaped newlines", '{"code": "', "print(1)\\n"),
]


@pytest.mark.parametrize("size", [1, 5, 64])
@pytest.mark.parametrize(("name", "prefix", "unit"), ARG_LOOPS, ids=[x[0] for x in ARG_LOOPS])
def test_loop_in_arguments_stops_within_the_bound(
    name: str, prefix: str, unit: str, size: int
) -> None:
    """Each call's arguments are a channel of their own: a loop there
    stops the turn (the chain then abandons the call) within the bound."""
    text, start, p = _loop_text(prefix, unit)
    cutter = RepetitionCutter(_ctx())
    fed = 0
    for i in range(0, len(text), size):
        d = Delta(arg_text=[(3, f"{i},"), (0, text[i : i + size])])
        cutter.feed(d)
        fed = i + size
        if d.stop:
            break
    assert d.stop
    assert d.ext == {"cut": "repetition", "period": p}
    assert fed - size - start <= _bound(unit)


@given(st.sampled_from(LOOPS[:20]), st.lists(st.integers(0, 6000), max_size=20))
def test_byte_splits_of_the_stream_do_not_matter(
    loop: tuple[str, str, str], cuts: list[int]
) -> None:
    """Through ``fix_sse``: any split of the upstream's bytes (inside UTF-8
    sequences too) gives the same cut as the unsplit stream."""
    _, prefix, unit = loop
    text, _, _ = _loop_text(prefix, unit)
    data = text_stream(_pieces(text, "random"))
    whole = assemble(run_sse(data))
    split = assemble(run_sse(split_at(data, cuts)))
    assert (split.content, split.ext, split.finish_reason) == (
        whole.content,
        whole.ext,
        whole.finish_reason,
    )
    assert whole.ext is not None


# -- counted loops (issue 18) ----------------------------------------------


def _counted(prefix: str, unit: Callable[[int], str], first: int = 1, step: int = 1) -> str:
    """``prefix``, then ``unit(n)`` for ``n`` counting from ``first`` by
    ``step`` far past the bound."""
    copies = max(COUNTED_BOUND_CHARS // len(unit(first)), COUNTED_BOUND_COPIES) * 3
    return prefix + "".join(unit(first + step * i) for i in range(copies))


def _counted_start(text: str, prefix: str, unit: str) -> int:
    """Where the loop starts: the text before it, less the characters it
    shares with the end of the first copy."""
    start, p = len(prefix), len(unit)
    while start > 0 and text[start - 1] == text[start - 1 + p]:
        start -= 1
    return start


def _counted_bound(text: str, start: int, unit: Callable[[int], str], first: int, step: int) -> int:
    """Issue 18's bound: max(16 copies, 1000 characters) past the start."""
    longest = max(len(unit(first + step * i)) for i in range(COUNTED_BOUND_COPIES))
    return max(COUNTED_BOUND_COPIES * longest, COUNTED_BOUND_CHARS)


def _day(n: int) -> str:
    return f"Day {n}: I checked the weather and it rained again.\n"


_PARAGRAPH_N = (
    "Attempt {}: I called the search tool with the same query as before, and it "
    "returned the same three results, none of which answer the question. The best "
    "next step is to call the search tool again with the same query and see whether "
    "the results change this time. "
)

#: (name, text before the loop, the unit for counter n, first n, step).
COUNTED_LOOPS: list[tuple[str, str, Callable[[int], str], int, int]] = [
    ("Step N:", PROSE, lambda n: f"Step {n}: Check the configuration file again.\n", 5, 1),
    ("Attempt N", PROSE, lambda n: f"Attempt {n}: the server did not answer, retrying. ", 7, 1),
    ("(N)", PROSE, lambda n: f"Retrying the request to the backend server ({n})...\n", 1, 1),
    ("#N", PROSE, lambda n: f"#{n} The answer is still not ready, waiting.\n", 1, 1),
    ("item N of", PROSE, lambda n: f"Processing item {n} of 500 in the upload queue.\n", 1, 1),
    ("Day N", PROSE, _day, 1, 1),
    ("counting down", PROSE, lambda n: f"T-minus {n}: still waiting for the reply.\n", 400, -1),
    ("step of 7", PROSE, lambda n: f"At {n} minutes the build had still not finished.\n", 7, 7),
    ("99 to 100", PROSE, lambda n: f"Checking replica {n} of the database cluster now.\n", 95, 1),
    (
        "two counters",
        PROSE,
        lambda n: f"Round {n}, try {2 * n}: the tests are failing in the same test module.\n",
        3,
        1,
    ),
    (
        "alternating pair",
        PROSE,
        lambda n: f"Attempt {n}: connecting to the server.\nAttempt {n}: the connection failed.\n",
        1,
        1,
    ),
    (
        "numbered and counted",
        PROSE,
        lambda n: f"{n}. Step {n}: Check the configuration file.\n",
        1,
        1,
    ),
    ("cjk", "答案如下：\n", lambda n: f"第{n}步：我们需要重新检查配置文件，然后再试一次。\n", 1, 1),
    ("long paragraph", PROSE, lambda n: _PARAGRAPH_N.format(n), 1, 1),
    ("no newline", "Thinking: ", lambda n: f"iteration {n} of the same reasoning again, ", 1, 1),
    (
        "numbers that stay",
        PROSE,
        lambda n: f"Attempt {n} of 10: error 503 from 10.0.0.7 port 8080, retrying the request.\n",
        1,
        1,
    ),
]
_COUNTED_IDS = [x[0] for x in COUNTED_LOOPS]


def _check_counted(
    loop: tuple[str, str, Callable[[int], str], int, int], out: str, d: Delta | None, text: str
) -> None:
    _, prefix, unit, first, step = loop
    assert d is not None, "counted loop not cut"
    assert text.startswith(out)
    start = _counted_start(text, prefix, unit(first))
    past = len(out) - start
    bound = _counted_bound(text, start, unit, first, step)
    assert past <= bound, f"{past} chars past the loop start reached the client (bound {bound})"
    assert d.finish_reason == "length"
    assert d.ext is not None and d.ext["cut"] == "repetition"


@pytest.mark.parametrize("how", [1, 3, "random", 64, "whole"])
@pytest.mark.parametrize("loop", COUNTED_LOOPS, ids=_COUNTED_IDS)
def test_counted_loop_is_cut_within_the_bound(
    loop: tuple[str, str, Callable[[int], str], int, int], how: str | int
) -> None:
    _, prefix, unit, first, step = loop
    text = _counted(prefix, unit, first, step)
    out, d, ctx = _cut(_pieces(text, how))
    _check_counted(loop, out, d, text)
    assert d is not None and d.ext is not None
    assert d.ext == {"cut": "repetition", "period": d.ext["period"], "counted": True}
    assert ctx.report.cut is d.ext and ctx.report.counts["loop_cut"] == 1
    if how == "whole":
        # a whole completion keeps the text before the loop and one copy
        start = _counted_start(text, prefix, unit(first))
        assert out == text[: start + len(unit(first))]


@pytest.mark.parametrize("loop", COUNTED_LOOPS, ids=_COUNTED_IDS)
def test_counted_loop_in_reasoning_is_cut(
    loop: tuple[str, str, Callable[[int], str], int, int],
) -> None:
    _, prefix, unit, first, step = loop
    text = _counted(prefix, unit, first, step)
    out, d, _ = _cut(_pieces(text, "random"), "reasoning")
    _check_counted(loop, out, d, text)
    assert d is not None and d.ext is not None and d.ext["counted"] is True


@given(st.sampled_from(COUNTED_LOOPS), st.lists(st.integers(1, 40), min_size=1, max_size=60))
def test_counted_loop_cut_at_any_chunking(
    loop: tuple[str, str, Callable[[int], str], int, int], sizes: list[int]
) -> None:
    _, prefix, unit, first, step = loop
    text = _counted(prefix, unit, first, step)
    out, d, _ = _cut(split_sizes(text, sizes))
    _check_counted(loop, out, d, text)


_VOCAB = ["server", "answer", "request", "checking", "again", "config", "retrying", "the"]
_VOCAB += ["model", "output", "waiting", "result", "query", "search", "tool", "call"]


@st.composite
def counted_units(draw: st.DrawFn) -> tuple[str, Callable[[int], str], int, int]:
    """A unit of words with one or two numbers anywhere (each moving or
    not), enough letters per moving number, a first value and a step."""
    seg = st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=6).map(" ".join)
    parts = [
        draw(seg),
        draw(st.lists(st.sampled_from(_VOCAB), min_size=4, max_size=8).map(" ".join)),
    ]
    two = draw(st.booleans())
    if two:
        parts.append(draw(seg))
    end = draw(st.sampled_from([".\n", ". ", "\n", ", ", "; "]))
    first = draw(st.integers(0, 2000))
    step = draw(st.integers(-3, 9).filter(bool))
    if step < 0:
        first += 400  # stays positive past the bound
    other = draw(st.sampled_from([0, 1, 2, 10]))  # the second number's step
    lead = draw(st.sampled_from(["", "(", "#", "Step "]))

    def unit(n: int) -> str:
        text = f"{parts[0]} {lead}{n}: {parts[1]}"
        if two:
            text += f" {first // 3 + other * n} {parts[2]}"
        return text + end

    letters = sum(map(str.isalpha, unit(first)))
    assume(letters >= 20 * (1 + (two and other != 0)) + 4)
    prefix = draw(st.sampled_from([PROSE, "", "Let me think.\n", _long_unit(900)]))
    return prefix, unit, first, step


@given(counted_units(), st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_any_counted_loop_is_cut_at_any_chunking(
    loop: tuple[str, Callable[[int], str], int, int], sizes: list[int]
) -> None:
    """Random units: words, a number anywhere (after ``(``, ``#``,
    ``Step `` or a word), maybe a second one moving by another step or
    standing still, any first value and non-zero step, split anywhere."""
    prefix, unit, first, step = loop
    note(f"units: {unit(first)!r} {unit(first + step)!r}")
    text = _counted(prefix, unit, first, step)
    out, d, _ = _cut(split_sizes(text, sizes))
    _check_counted(("random", prefix, unit, first, step), out, d, text)
    assert d is not None and d.ext is not None and d.ext.get("counted") is True


@pytest.mark.parametrize("onset", range(600, 600 + LONG_AT, 7))
def test_screened_checks_find_the_same_counted_loop(onset: int) -> None:
    """Pieces of 64 characters or more meet several checks at once and
    share one screen (``quiet``), which runs the counted screen of the long
    check among them: a counted loop starting anywhere on the check grid is
    found at the same check as with small pieces."""
    rnd = random.Random(onset)
    before = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(onset))
    text = before + "".join(_day(n) for n in range(1, 60))
    small = _first_hit(_Channel(), split_sizes(text, [rnd.randint(1, 63) for _ in range(9)]))
    large = _first_hit(_Channel(), split_sizes(text, [rnd.randint(200, 3000)]))
    assert small == large, onset
    assert small is not None


def test_counted_bound_holds_for_every_copy_length() -> None:
    """The evidence leaves room for the check spacing and a counter cut at
    the check: whatever a copy's length, the cut comes within the bound."""
    for p in range(COUNTED_MIN_PERIOD, COUNTED_MAX_PERIOD + 1):
        reach = max(COUNTED_COPIES * p, COUNTED_CHARS) + LONG_AT + COUNTED_MAX_DIGITS
        assert reach < max(COUNTED_BOUND_COPIES * p, COUNTED_BOUND_CHARS)
    # the window read back holds the evidence for the longest copy
    assert (COUNTED_COPIES + 1) * (COUNTED_MAX_PERIOD + COUNTED_SHIFT) + 2 * 64 < COUNTED_WINDOW


# Each of these is a real enumeration, kept by one rule of the evidence.
_PLAN = ["Push", "Pull", "Legs"]
COUNTED_NOT_LOOPS: list[tuple[str, str]] = [
    # the numbers must count: squares are not a constant step
    (
        "squares",
        "".join(f"Retrying in {n * n} seconds: the server did not answer.\n" for n in range(1, 80)),
    ),
    # every counter must count: the second number jumps
    (
        "one counter of two jumps",
        "".join(
            f"Row {n}: the north building's sensor reported {(n * 37) % 101} units of rain today.\n"
            for n in range(1, 80)
        ),
    ),
    # COUNTED_LETTERS_PER_COUNTER: a copy of three lines, three counters,
    # 42 letters (and the numbered list above: 6 numbers, 3 counters)
    (
        "a push-pull-legs plan",
        "".join(f"Day {n}: {_PLAN[n % 3]} workout\n" for n in range(1, 181)),
    ),
    # rows that are mostly their number: no 16 characters without a digit
    ("rows with a counter", "id,status\n" + "".join(f"{n},pending\n" for n in range(1, 400))),
    ("numbers", ", ".join(str(n) for n in range(2000))),
    ("numbers, one a line", "".join(f"{n}\n" for n in range(2000))),
    # COUNTED_LETTERS_PER_DIGIT: a log line is mostly its timestamp
    (
        "heartbeat log",
        "".join(
            f"2026-05-01 12:{m:02d}:{s:02d} INFO heartbeat received\n"
            for m in range(3)
            for s in range(60)
        ),
    ),
    # COUNTED_CHARS: twenty short lines are not yet a loop
    (
        "twenty short counted lines",
        _long_unit(800)
        + "".join(f"Chapter {n}: the story continues.\n" for n in range(1, 21))
        + PROSE,
    ),
    # COUNTED_COPIES: nine copies of a long unit are not yet a loop
    ("nine long copies", "".join(_PARAGRAPH_N.format(n) for n in range(1, 10)) + PROSE * 3),
    # COUNTED_MAX_DIGITS: ten-digit numbers are ids, not counters
    (
        "ten-digit ids",
        "".join(
            f"Order {1_000_000_000 + n} was shipped to the customer today.\n" for n in range(300)
        ),
    ),
    # COUNTED_PROBE: no 16 characters in a row without a digit
    (
        "short text between numbers",
        "".join(f"Row {n}: alpha 1 beta 2 gamma 3 delta 4 omega.\n" for n in range(1, 200)),
    ),
    # COUNTED_MAX_PERIOD: a copy longer than 512 characters
    (
        "copies over 512 characters",
        "".join(f"Section {n}. " + _long_unit(520) + "\n" for n in range(1, 20)),
    ),
]


@pytest.mark.parametrize(("name", "text"), COUNTED_NOT_LOOPS, ids=[x[0] for x in COUNTED_NOT_LOOPS])
@pytest.mark.parametrize("how", [1, "random", "whole"])
def test_real_enumerations_are_not_cut(name: str, text: str, how: str | int) -> None:
    """Each entry is kept by the rule named above it (a mutation check:
    dropping the rule cuts the entry)."""
    out, d, ctx = _cut(_pieces(text, how))
    assert d is None
    assert out == text
    assert ctx.report.cut is None


def test_a_counted_loop_that_does_not_count_is_an_exact_loop() -> None:
    """Numbers that stand still make an exact loop: the plain check cuts
    it, and the extension field does not say counted."""
    text = PROSE + "Attempt 3 of 3: the server did not answer, retrying.\n" * 100
    _, d, _ = _cut(_pieces(text, "random"))
    assert d is not None and d.ext == {"cut": "repetition", "period": 53}


def test_counted_loop_through_the_chain_stops_the_session() -> None:
    """Streamed through ``SSESession``: the turn ends with ``length`` and
    the extension field, the session tells the I/O layer to close the
    upstream request."""
    text = _counted(PROSE, _day)
    session = streamfix.SSESession(None)
    out = session.feed(text_stream(_pieces(text, 3)))
    assert session.stopped and session.finished
    a = assemble(out)
    assert a.done and a.finish_reason == "length"
    assert a.ext == {"cut": "repetition", "period": len(_day(1)) + 1, "counted": True}
    assert session.report.cut == a.ext
    assert len(a.content) - len(PROSE) <= COUNTED_BOUND_CHARS


def test_counted_loop_in_think_text_is_cut() -> None:
    """Reasoning written in ``<think>`` in content (split when tools are
    offered): split into reasoning, then cut there."""
    text = "<think>" + _counted("Let me check.\n", _day)
    a = assemble(run_sse(text_stream(_pieces(text, "random")), SHAPES_REQUEST))
    assert a.finish_reason == "length"
    assert a.ext is not None and a.ext["counted"] is True
    assert a.content == "" and a.reasoning.startswith("Let me check.\nDay 1: I checked")
    assert len(a.reasoning) - len("Let me check.\n") <= COUNTED_BOUND_CHARS


def test_non_streamed_counted_loop_is_cut() -> None:
    text = _counted(PROSE, lambda n: f"Attempt {n}: the server did not answer, retrying. ", 7)
    ch = streamfix.fix_completion(_completion(text))["choices"][0]
    unit = "Attempt 7: the server did not answer, retrying. "
    assert ch["message"]["content"] == PROSE + unit
    assert ch["finish_reason"] == "length"
    assert ch["streamfix"] == {"cut": "repetition", "period": len(unit) + 1, "counted": True}


# -- counted loops in a call's arguments -----------------------------------

_WRITE = {
    "tools": [tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}})]
}


def _step(n: int) -> str:
    return f"Step {n}: check the configuration file again.\n"


def _fox(n: int) -> str:
    """canitoolcall's long-arguments line (its fixtures write 60 of them)."""
    return f"{n:03d}: The quick brown fox jumps over the lazy dog.\n"


def _numbered_file(lines: int, unit: Callable[[int], str] = _fox) -> str:
    return "".join(unit(n) for n in range(lines))


def _structured(body: str, size: int) -> list[dict[str, Any]]:
    """A stream whose call writes ``body`` in structured fragments."""
    args = orjson.dumps({"path": "notes/sample.txt", "content": body}).decode()
    chunks = [chunk(role="assistant")]
    for i in range(0, len(args), size):
        frag: dict[str, Any] = {"index": 0, "function": {"arguments": args[i : i + size]}}
        if i == 0:
            frag.update(id="call_1", type="function")
            frag["function"]["name"] = "write_file"
        chunks.append(chunk(tool_calls=[frag]))
    chunks.append(chunk(finish="tool_calls"))
    return chunks


def _as_text(body: str) -> str:
    """The call written as text in content (Hermes ``<tool_call>``)."""
    call = {"name": "write_file", "arguments": {"path": "notes/sample.txt", "content": body}}
    return "I will write the file.\n<tool_call>\n" + orjson.dumps(call).decode() + "\n</tool_call>"


def _call_stream(body: str, path: str, how: str | int) -> bytes:
    if path == "structured":
        return sse(_structured(body, how if isinstance(how, int) else 5))
    return text_stream(_pieces(_as_text(body), how), finish="stop")


_ARG_PATHS = ["structured", "text"]


@pytest.mark.parametrize("how", [1, 7, "random", "whole"])
@pytest.mark.parametrize("path", _ARG_PATHS)
@pytest.mark.parametrize(
    ("lines", "unit"),
    [(60, _fox), (600, _fox), (600, _step)],
    ids=["canitoolcall's 60 lines", "600 lines", "600 steps"],
)
def test_numbered_data_in_arguments_is_an_argument(
    lines: int, unit: Callable[[int], str], path: str, how: str | int
) -> None:
    """A file of numbered lines, the same but for the number, is a normal
    argument: under ``COUNTED_ARG_CHARS`` it is no loop, whether the call
    comes in structured fragments or written as text in content (the
    detector holds it; the cutter, which runs before it, asks). As prose,
    each would be cut (``test_the_same_lines_in_prose_are_cut``)."""
    body = _numbered_file(lines, unit)
    assert len(body) < COUNTED_ARG_CHARS
    a = assemble(run_sse(_call_stream(body, path, how), _WRITE))
    assert a.ext is None
    assert a.calls() == [("write_file", {"path": "notes/sample.txt", "content": body})]
    assert a.finish_reason == "tool_calls"


def _bare_json(body: str) -> str:
    """The call as a bare JSON object at the reply's start (a leading
    marker: ``{`` opens a call only before any other text)."""
    call = {"name": "write_file", "arguments": {"path": "notes/sample.txt", "content": body}}
    return orjson.dumps(call).decode()


@pytest.mark.parametrize("written", [_as_text, _bare_json], ids=["tagged", "bare json"])
def test_numbered_data_in_a_whole_completion_is_an_argument(
    written: Callable[[str], str],
) -> None:
    """Not streamed: the call and its argument come in one message, which
    the cutter reads before the detector has seen any of it."""
    body = _numbered_file(600)
    out = streamfix.fix_completion(_completion(written(body)), _WRITE)
    ch = out["choices"][0]
    assert "streamfix" not in ch
    assert orjson.loads(ch["message"]["tool_calls"][0]["function"]["arguments"])["content"] == body


@pytest.mark.parametrize("lines", [60, 600])
def test_the_same_lines_in_prose_are_cut(lines: int) -> None:
    """The lines of the tests above, as prose (no call around them, or no
    tools offered): a counted loop, cut within the prose bound."""
    body = _numbered_file(lines)
    for request in (None, _WRITE):
        a = assemble(run_sse(text_stream(_pieces("Here it is:\n" + body, 7)), request))
        assert a.ext is not None and a.ext["counted"] is True
        assert len(a.content) - len("Here it is:\n") <= COUNTED_BOUND_CHARS


def _arg_cut_at(pieces: list[str]) -> int | None:
    """The position in a call's arguments of the check that cut, or None."""
    cutter = RepetitionCutter(_ctx())
    for piece in pieces:
        d = Delta(arg_text=[(0, piece)])
        cutter.feed(d)
        if d.stop:
            assert d.ext is not None and d.ext["counted"] is True
            return cutter._args[0].next_check
    return None


def _arg_bound(unit: Callable[[int], str], first: int, step: int) -> int:
    """``COUNTED_ARG_CHARS``, then the prose bound (max(16 copies, 1000
    characters)) at most."""
    return COUNTED_ARG_CHARS + _counted_bound("", 0, unit, first, step)


def _arg_loop(prefix: str, unit: Callable[[int], str], first: int, step: int) -> tuple[str, int]:
    copies = 2 * COUNTED_ARG_CHARS // len(unit(first)) + 40
    if step < 0:
        first -= step * copies  # no minus sign: one loop all along
    text = prefix + "".join(unit(first + step * i) for i in range(copies))
    return text, _counted_start(text, prefix, unit(first))


@pytest.mark.parametrize("how", [1, 3, "random", 64, "whole"])
@pytest.mark.parametrize("loop", COUNTED_LOOPS, ids=_COUNTED_IDS)
def test_counted_loop_in_arguments_is_cut_past_the_argument_bound(
    loop: tuple[str, str, Callable[[int], str], int, int], how: str | int
) -> None:
    """A counted loop in a call's arguments runs ``COUNTED_ARG_CHARS``
    from its start, then is cut within the prose bound (the cutter follows
    the run from check to check, past the window it reads back)."""
    _, prefix, unit, first, step = loop
    text, start = _arg_loop(prefix, unit, first, step)
    at = _arg_cut_at(_pieces(text, how))
    assert at is not None, "counted loop in arguments not cut"
    assert COUNTED_ARG_CHARS <= at - start <= _arg_bound(unit, first, step)


@settings(max_examples=25, deadline=None)
@given(counted_units(), st.lists(st.integers(1, 200), min_size=1, max_size=30))
def test_any_counted_loop_in_arguments_is_cut_at_any_chunking(
    loop: tuple[str, Callable[[int], str], int, int], sizes: list[int]
) -> None:
    prefix, unit, first, step = loop
    note(f"units: {unit(first)!r} {unit(first + step)!r}")
    text, start = _arg_loop(prefix, unit, first, step)
    at = _arg_cut_at(split_sizes(text, sizes))
    assert at is not None, "counted loop in arguments not cut"
    assert COUNTED_ARG_CHARS <= at - start <= _arg_bound(unit, first, step)


def _countdown(n: int) -> str:
    return f"T-minus {n}: still waiting for the reply.\n"


_HALF = COUNTED_ARG_CHARS * 3 // 5


@pytest.mark.parametrize("lead", range(0, LONG_AT, 5))
@pytest.mark.parametrize(
    ("one", "two"),
    [
        (
            _numbered_file(_HALF // len(_fox(0))),
            _numbered_file(_HALF // 45, _step),
        ),
        # through zero: ``T-minus -1`` is another unit (canonical ``-0``)
        (
            "".join(_countdown(n) for n in range(_HALF // 42, -1, -1)),
            "".join(_countdown(-n) for n in range(1, _HALF // 42)),
        ),
    ],
    ids=["fox lines then steps", "counting down through zero"],
)
def test_a_new_counted_loop_in_arguments_starts_a_new_run(lead: int, one: str, two: str) -> None:
    """Two counted loops one after the other, each shorter than the
    argument bound, their sum longer: not cut (a run is one loop), at any
    phase on the check grid (``lead``: text before them)."""
    text = (PROSE * 2)[:lead] + one + two
    assert len(one) < COUNTED_ARG_CHARS and len(two) < COUNTED_ARG_CHARS < len(one + two)
    assert _arg_cut_at(_pieces(text, 7)) is None


@pytest.mark.parametrize("how", [1, 7, "random", "whole"])
@pytest.mark.parametrize("path", _ARG_PATHS)
def test_counted_loop_in_tool_arguments_drops_the_call(path: str, how: str | int) -> None:
    """Past the argument bound, the call (structured, or held as text by
    the detector) is dropped and the turn ends with ``length``; the
    session tells the I/O layer to close the upstream request."""
    body = _numbered_file(3 * COUNTED_ARG_CHARS // len(_fox(0)))
    data = _call_stream(body, path, how)
    session = streamfix.SSESession(_WRITE)
    # Event by event, counting the characters of the channel fed (content,
    # or the call's arguments) until the session stops.
    out, fed = b"", 0
    for event in data.split(b"\n\n"):
        if not event or session.stopped:
            continue
        out += session.feed(event + b"\n\n")
        if event.startswith(b"data: {"):
            d = orjson.loads(event[6:])["choices"][0]["delta"]
            fed += len(d.get("content") or "")
            fed += sum(len(tc["function"]["arguments"]) for tc in d.get("tool_calls") or [])
    assert session.stopped
    a = assemble(out)
    assert a.tool_calls == []
    assert a.finish_reason == "length"
    assert a.ext is not None and a.ext["counted"] is True
    assert a.done
    assert a.content in ("", "I will write the file.\n", "I will write the file.")
    # where the loop starts in that channel: its first line, as sent
    args = orjson.dumps({"path": "notes/sample.txt", "content": body}).decode()
    start = (_as_text(body) if path == "text" else args).index(orjson.dumps(body).decode()[1:])
    if how != "whole":  # (a whole reply is one event)
        assert COUNTED_ARG_CHARS <= fed - start <= COUNTED_ARG_CHARS + COUNTED_BOUND_CHARS + 7


def test_counted_loop_in_a_whole_completion_drops_the_call() -> None:
    body = _numbered_file(3 * COUNTED_ARG_CHARS // len(_fox(0)))
    ch = streamfix.fix_completion(_completion(_as_text(body)), _WRITE)["choices"][0]
    assert not ch["message"].get("tool_calls")
    assert ch["finish_reason"] == "length"
    assert ch["streamfix"]["counted"] is True


@pytest.mark.parametrize("read", ["a run", "one by one"])
def test_a_run_of_texts_sees_the_call_it_holds(read: str) -> None:
    """Texts read together go through the chain as one run
    (``Chain.feed_plain_run``), which the cutter takes before the detector
    sees any of it; when something in the run is cut, the cutter goes back
    over it text by text, still ahead of the detector. A counted loop in a
    call opened earlier in the run is then in a call all the same: the
    call (a bare JSON object at a line's start, which the reasoning
    splitter lets through in runs) is lifted, and the exact loop after it
    is what is cut, as one by one."""
    call = {"name": "write_file", "arguments": {"path": "a.txt", "content": _numbered_file(60)}}
    text = "Sure.\n" + orjson.dumps(call).decode() + "\nDone. " + "I am done now. " * 100
    pieces = _pieces(text, 7)
    chain = Chain(Context.of(_WRITE, {}))
    role = chunk(role="assistant", content="")
    chain.feed(view_of(role), role)
    if read == "a run":
        taken, _ = chain.feed_plain_run(0, pieces, "".join(pieces), orjson.dumps(chunk("x")))
        assert 0 < taken < len(pieces)
    else:
        for piece in pieces:
            c = chunk(piece)
            chain.feed(view_of(c), c)
            if chain.stopped:
                break
    assert chain.stopped
    assert chain.calls_emitted == 1
    assert chain.report.cut == {"cut": "repetition", "period": len("I am done now. ")}
