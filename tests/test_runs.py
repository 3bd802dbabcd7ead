"""Runs: many plain events of the learned shape in one read, through the
chain at once (``SSESession._run``, ``Chain.feed_plain_run``, each step's
``feed_texts``). Whatever the texts hold (markers, a marker cut between two
events, a loop, a reasoning tag, escapes), a run must give exactly what the
same events give one per read, and what every event decoded gives."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfix
import streamfix.chain as chain_mod
from streamfix.chain import PASS, Chain
from streamfix.chunks import decode_view
from streamfix.context import Context
from streamfix.transforms.detect import RUN_SEP, ToolTagDetector, matcher_for
from streamfix.transforms.repetition import RepetitionCutter
from streamfix.transforms.residue import ResidueStripper

from .support.streamutil import assemble, chunk, run_sse, split_at, tool
from .test_shape import no_shapes

WEATHER = {"tools": [tool("get_weather", {"city": {"type": "string"}})]}
_CALL_ID = re.compile(rb"call_[0-9a-f]{24}")
_STEP_TYPES = (RepetitionCutter, ToolTagDetector, ResidueStripper)


def event(text: str) -> bytes:
    return b"data: " + orjson.dumps(chunk(text)) + b"\n\n"


ROLE = b"data: " + orjson.dumps(chunk(role="assistant", content="")) + b"\n\n"
END = b"data: " + orjson.dumps(chunk(finish="stop")) + b"\n\ndata: [DONE]\n\n"

# Pieces of text that each concern some step: markers whole and cut
# (with and without ``<``/``[``: code calls, ``call:``, fences), a word
# glued to a name marker's start, brackets, reasoning tags, blanks, a NUL
# (the run scan's separator), non-ASCII. None holds a quote: a middle with
# one ends the run (``_QUOTED`` adds a few).
_PIECES = st.sampled_from(
    [
        " the",
        " weather",
        " will",
        " c",
        " call",
        ":",
        " get",
        "_weather",
        "get_weather",
        "(",
        "city",
        "=",
        "'Paris'",
        ")",
        "<tool",
        "_call>",
        "</tool_call>",
        "[",
        "TOOL_CALLS]",
        "{",
        "}",
        "<think>",
        "</think>",
        "\n",
        "\n\n",
        "  ",
        "`",
        "```",
        "back\\slash",
        "\x00",
        "café",
        "日本",
        "",
    ]
)
_QUOTED = st.sampled_from(['{"name": "get_weather", "arguments": {"city": "Paris"}}', ' "q"'])
_TEXTS = st.lists(
    st.one_of(_PIECES, _PIECES, _PIECES, st.text(max_size=5), _QUOTED), min_size=6, max_size=60
)


def outputs(texts: list[str], request: dict[str, Any] | None, cuts: list[int]) -> list[bytes]:
    """The output for the same events read four ways: one per read, all in
    one read, cut at ``cuts``, and every event decoded (no shapes)."""
    events = [ROLE, *(event(t) for t in texts), END]
    whole = b"".join(events)
    outs = [
        run_sse(events, request),
        run_sse([whole], request),
        run_sse(split_at(whole, cuts), request),
    ]
    with no_shapes():
        outs.append(run_sse([whole], request))
    return [_CALL_ID.sub(b"call_", o) for o in outs]


@settings(max_examples=300, deadline=None)
@given(_TEXTS, st.sampled_from([None, WEATHER]), st.lists(st.integers(0, 6000), max_size=5))
def test_a_run_reads_as_its_events_one_by_one(
    texts: list[str], request: dict[str, Any] | None, cuts: list[int]
) -> None:
    one, whole, cut, decoded = outputs(texts, request, cuts)
    assert whole == one
    assert cut == one
    assert decoded == one


def varying(i: int, text: str, spaced: bool = False) -> bytes:
    """Event ``i``, with bytes around its content that no other event has
    (a sequence number before it, per-token logprobs after it): no shape
    is learned, and runs of them are decoded runs. ``spaced``: JSON with
    spaces after the colons, as Python's ``json.dumps`` writes it."""
    obj = chunk(text, extra={"x_seq": i})
    obj["choices"][0]["logprobs"] = {"content": [{"token": text, "logprob": -0.5}]}
    return b"data: " + (json.dumps(obj).encode() if spaced else orjson.dumps(obj)) + b"\n\n"


#: Events that are not plain text, to end a decoded run where they stand.
_OTHER = st.sampled_from(
    [
        b"data: " + orjson.dumps(chunk(reasoning="hmm")) + b"\n\n",
        b"data: " + orjson.dumps(chunk(index=1, content="other choice")) + b"\n\n",
        b": keep-alive\n\n",
        b'data: {"id":"x","choices":[{"index":0,"delta":{"content":7}}]}\n\n',
        b"id: 5\ndata: " + orjson.dumps(chunk(" two lines")) + b"\n\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_TEXTS.map(tuple), _OTHER), min_size=1, max_size=4),
    st.sampled_from([None, WEATHER]),
    st.lists(st.integers(0, 20000), max_size=5),
)
def test_a_decoded_run_reads_as_its_events_one_by_one(
    parts: list[tuple[str, ...] | bytes], request: dict[str, Any] | None, cuts: list[int]
) -> None:
    """Events that differ around their content, read many at once: the
    decoded runs give exactly what the same events give one per read,
    whatever the texts hold and whatever other events stand between them
    (reasoning, another choice, a comment, a content that is no string, a
    two-line event)."""
    events, i = [ROLE], 0
    for part in parts:
        if isinstance(part, bytes):
            events.append(part)
            continue
        for text in part:
            events.append(varying(i, text))
            i += 1
    events.append(END)
    whole = b"".join(events)
    one, together, cut = (
        _CALL_ID.sub(b"call_", run_sse(reads, request))
        for reads in (events, [whole], split_at(whole, cuts))
    )
    assert together == one
    assert cut == one


def test_a_loop_inside_a_decoded_run_is_cut_where_it_is_one_by_one() -> None:
    """A loop completed inside a decoded run: cut in the same event, and
    the chunks made at the cut carry that event's own fields (its
    ``x_seq``), as one by one."""
    texts = [" intro"] + [" and", " again"] * 150 + [" never", " sent"]
    events = [ROLE, *(varying(i, t) for i, t in enumerate(texts)), END]
    whole = b"".join(events)
    one = run_sse(events, WEATHER)
    assert run_sse([whole], WEATHER) == one
    a = assemble(one)
    assert a.ext is not None and a.ext["cut"] == "repetition"
    *_, before, last = (orjson.loads(e[6:]) for e in one.split(b"\n\n")[:-2])
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["x_seq"] == before["x_seq"] + 1  # the event the loop completed in


def test_text_held_at_the_end_of_a_decoded_run_goes_out_with_the_last_events_fields() -> None:
    """The stream ends (no finish chunk) after a decoded run whose last
    text is held (a marker's start): the chunk made for it at the end takes
    the last event's own fields, as one by one."""
    texts = [f" w{i}" for i in range(30)] + [" <tool"]
    events = [ROLE, *(varying(i, t) for i, t in enumerate(texts))]
    one = run_sse(events, WEATHER)
    assert run_sse([b"".join(events)], WEATHER) == one
    made = orjson.loads(one.rstrip().rsplit(b"\n\n", 1)[-1][6:])
    assert made["x_seq"] == 30 and made["choices"][0]["delta"]["content"] == "<tool"


def test_a_stream_whose_chunks_stop_differing_gets_its_shape_during_decoded_runs() -> None:
    """Learning goes on (once in ``_LEARN_EVERY`` events) while decoded runs
    read the stream: once its chunks stop differing, a shape is learned and
    the runs after it are runs of the shape."""
    texts = [f" word{i}" for i in range(400)]
    events = [ROLE, *(varying(i, t) if i < 100 else event(t) for i, t in enumerate(texts)), END]
    reads = [b"".join(events[i : i + 20]) for i in range(0, len(events), 20)]
    with mock.patch.object(
        streamfix.SSESession, "_run", autospec=True, side_effect=streamfix.SSESession._run
    ) as shaped:
        out = run_sse(reads, WEATHER)
    assert out == run_sse(events, WEATHER)
    assert shaped.call_count >= 10


def test_plain_events_that_differ_go_to_the_chain_as_decoded_runs() -> None:
    """The point of decoded runs: once learning a shape has failed, a read
    of many plain events that differ around their content goes to the
    chain as one run, with each event's own bytes kept for any it changes."""
    texts = [f" word{i}" for i in range(300)]
    for request, spaced in itertools.product((None, WEATHER), (False, True)):
        whole = b"".join([ROLE, *(varying(i, t, spaced) for i, t in enumerate(texts)), END])
        real = chain_mod.Chain.feed_plain_run
        with mock.patch.object(
            chain_mod.Chain, "feed_plain_run", autospec=True, side_effect=real
        ) as runs:
            session = streamfix.SSESession(request)
            assert session.feed(whole) + session.close() == whole
        assert runs.call_count == 1
        # the role chunk and the first three are decoded one by one while
        # a shape is sought (``_EAGER_LEARNS``)
        assert runs.call_args.args[2] == texts[3:]
        assert runs.call_args.args[5][0] == varying(3, texts[3], spaced)[6:-2]


def test_a_loop_inside_a_run_is_cut_where_it_is_one_by_one() -> None:
    """The repetition cutter sees the run at once; when the run completes
    a loop, it goes back and takes the texts one by one, to cut in the
    very text the loop completes in."""
    texts = [" intro"] + [" and", " again"] * 150 + [" never", " sent"]
    one, whole, cut, decoded = outputs(texts, None, [1000, 2500])
    assert whole == one == cut == decoded
    a = assemble(whole)
    assert a.ext is not None and a.ext["cut"] == "repetition"
    assert "never" not in a.content


def test_a_cut_after_other_changes_in_a_run_ends_the_stream_once() -> None:
    """A run in which calls are lifted, then a loop of them is cut: the
    stream ends once, after the cut, as one by one (each changed event used
    to ask whether the chain had stopped after the whole run, so every one
    of them ended the stream). Found by the decoded-run property test; the
    runs of the learned shape had the same fault."""
    call = "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}"
    texts = [call, call, call, " c"] * 3 + [call, call, call]
    quoted = [t.replace("'", '"') for t in texts]
    for events in (
        [ROLE, *(event(t) for t in texts), END],
        [ROLE, *(varying(i, t) for i, t in enumerate(quoted)), END],
    ):
        one, whole = (
            _CALL_ID.sub(b"call_", run_sse(reads, WEATHER))
            for reads in (events, [b"".join(events)])
        )
        assert whole == one
        assert whole.count(b"data: [DONE]") == 1 and whole.endswith(b"data: [DONE]\n\n")
        assert assemble(whole).ext == {"cut": "repetition", "period": 167}


def test_a_call_split_between_events_of_a_run_is_lifted() -> None:
    """A marker cut between two events of one run: the detector's scan of
    the run sees the prefix that ends the first, and the texts go one by
    one from there; the call comes out structured as it does one by one."""
    texts = [" Let", " me", " check", ".", "\n", "<tool", "_call>", '{"name": "get_weather", ']
    texts += ['"arguments": {"city": "Paris"}}', "</tool", "_call>"]
    one, whole, cut, decoded = outputs(texts, WEATHER, [300])
    assert whole == one == cut == decoded
    a = assemble(whole)
    assert a.calls() == [("get_weather", {"city": "Paris"})]
    assert "<tool" not in a.content


def test_calls_without_angle_brackets_in_a_run_are_lifted() -> None:
    """Markers a cheap character test does not see (a code call, cut or
    whole, a fence): the detector's one search of the run must find them,
    or the call would pass as text."""
    cases = [
        [" a"] * 8 + ["\n", "get", "_weather", "(", "city", "=", "'Paris'", ")"],
        # blanks after it: prose would make the line an example (the code-line rule)
        [" x"] * 3 + ["\n", "get_weather", "(", "city", "=", "'Paris'", ")", "\n"] + ["  "] * 5,
        [" Here", ":", "\n", "```", "\n", "get_weather", "(", "city", "=", "1", ")", "\n", "```"],
    ]
    for texts in cases:
        one, whole, cut, decoded = outputs(texts, WEATHER, [200])
        assert whole == one == cut == decoded
        assert [name for name, _ in assemble(whole).calls()] == ["get_weather"], texts


def test_plain_events_in_one_read_take_the_run_not_the_per_event_lane() -> None:
    """The point of runs: a read of many plain events goes to the chain as
    one run, not as one ``feed_plain`` per event."""
    texts = [f" word{i}" for i in range(300)]
    whole = b"".join([ROLE, *(event(t) for t in texts), END])
    for request in (None, WEATHER):
        with (
            mock.patch.object(
                chain_mod.Chain, "feed_plain", autospec=True, side_effect=chain_mod.Chain.feed_plain
            ) as per_event,
            mock.patch.object(
                chain_mod.Chain,
                "feed_plain_run",
                autospec=True,
                side_effect=chain_mod.Chain.feed_plain_run,
            ) as runs,
        ):
            session = streamfix.SSESession(request)
            assert session.feed(whole) + session.close() == whole
        # The role chunk and the first plain event (the shape is learned
        # from it) are fed alone; the rest is one run.
        assert runs.call_count == 1
        assert runs.call_args.args[2] == texts[1:]
        assert [c.args[2] for c in per_event.call_args_list] == ["", texts[0]]


def test_a_hostile_middle_in_a_run_is_decoded() -> None:
    """A middle that is not one JSON string (a trailing backslash that
    would merge two middles, a second field) makes the run fall back to
    one event at a time: the same output as every event decoded."""
    prefix, suffix = event("X").split(b"X")
    for mid in (b"a\\", b'a","reasoning_content":"b', b"tab\there", b"\xff"):
        events = [ROLE, *(event(f" w{i}") for i in range(20))]
        events += [prefix + mid + suffix, *(event(f" v{i}") for i in range(20)), END]
        whole = b"".join(events)
        for request in (None, WEATHER):
            fast = run_sse([whole], request)
            with no_shapes():
                ref = run_sse([whole], request)
            assert fast == ref


def test_run_scan_finds_prefixes_that_end_a_text_and_skips_glued_names() -> None:
    """``Matcher.run_scan``: a marker's prefix at the end of any text of
    the run (before ``RUN_SEP``, or at the end for the last) is found; a
    name marker glued to the word before it is not (the per-text scan
    would not hold it either)."""
    m = matcher_for(Context.of(WEATHER, {}).tools)
    sep = RUN_SEP
    assert m.run_scan.search(sep.join([" the", " <tool"])) is not None
    assert m.run_scan.search(sep.join([" the", " c", " weather"])) is not None
    assert m.run_scan.search(sep.join([" the", " weather", " c"])) is not None  # the last text
    assert m.run_scan.search(sep.join([" a", " get_wea"])) is not None  # the last text
    assert m.run_scan.search(sep.join([" will", " now"])) is None  # glued: "wil|l"
    assert m.run_scan.search(sep.join([" please", " call:", " me"])) is not None
    assert m.run_scan.search(sep.join([" no", " markers", " here"])) is None


def _steps_state(chain: Chain) -> tuple[Any, ...]:
    """What the lane steps have taken in: the repetition cutter's count of
    characters, the residue stripper's released text and line state, the
    detector's last character and line state."""
    st = chain._choices[0]
    rep, det, res = (next(s for s in st.steps if isinstance(s, t)) for t in _STEP_TYPES)
    res._settle()
    return (rep._content.total, det._prev, det._line_blank, res._last, res._line_head)


@settings(max_examples=200, deadline=None)
@given(_TEXTS, st.lists(st.integers(0, 60), max_size=4))
def test_a_run_feeds_each_step_each_text_once(texts: list[str], cuts: list[int]) -> None:
    """Texts after a decline inside a run resume at the step that had not
    taken them: the steps' state after runs (cut anywhere) is the state
    after the same texts one by one, and so is what the chain returns."""
    texts = [t.replace('"', "'") for t in texts]
    payload = orjson.dumps(chunk("x"))
    one, runs = (Chain(Context.of(WEATHER, {})) for _ in range(2))
    for c in (one, runs):  # the role chunk opens the choice
        c.feed(decode_view(orjson.dumps(chunk(role="assistant", content=""))), payload)
    want = [
        (i, out) for i, t in enumerate(texts) if (out := one.feed_plain(0, t, payload)) != [PASS]
    ]
    got: list[tuple[int, Any]] = []
    bounds = sorted({0, len(texts), *(min(c, len(texts)) for c in cuts)})
    for a, b in itertools.pairwise(bounds):
        part = texts[a:b]
        taken, changes = runs.feed_plain_run(0, part, "".join(part), payload)
        got += [(a + i, out) for i, out in changes]
        # The lane ended inside the run (a loop cut): the rest one by one.
        got += [
            (a + i, out)
            for i in range(taken, len(part))
            if (out := runs.feed_plain(0, part[i], payload)) != [PASS]
        ]
    assert _CALL_ID.sub(b"call_", repr(got).encode()) == _CALL_ID.sub(b"call_", repr(want).encode())
    assert _steps_state(runs) == _steps_state(one)


def test_a_declined_text_is_not_offered_again_to_the_step_that_declined_it() -> None:
    """The repetition cutter takes the text that completes a loop and keeps
    its verdict for the full path that follows; asked again, it would take
    the text twice. Here it sees the run of seven equal texts at once, finds
    the loop, goes back and declines the seventh one by one; that text then
    takes the full path from the cutter, without being offered to it again."""
    call = "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}"
    texts = [call] * 7
    payload = orjson.dumps(chunk("x"))
    one, runs = (Chain(Context.of(WEATHER, {})) for _ in range(2))
    for c in (one, runs):
        c.feed(decode_view(orjson.dumps(chunk(role="assistant", content=""))), payload)
    for t in texts:
        one.feed_plain(0, t, payload)
    taken, _ = runs.feed_plain_run(0, texts, "".join(texts), payload)
    assert taken == len(texts)
    assert _steps_state(runs) == _steps_state(one)
    assert _steps_state(runs)[0] == len(call) * len(texts)  # each text counted once
