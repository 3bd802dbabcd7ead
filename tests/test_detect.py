"""The tool-tag detector's rules (transforms/detect.py): tool awareness,
cut-off calls, markup vs text, unrecognised markup, the fast path, the
hold-back bound, and the real llama.cpp capture."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.session import SSESession
from streamfix.transforms.detect import MAX_GAP_WS, QUIET_LEN, QUIET_MAX, ToolTagDetector

from .support.detectutil import check_split_invariant, result, run_parts, run_pieces
from .support.streamutil import (
    CAPTURES,
    SHAPES_REQUEST,
    assemble,
    fix_text,
    split_bytes,
    split_sizes,
    text_stream,
    tool,
)

LO = '{"name": "lookup_order", "arguments": {"order_id": "A-1"}}'


def detector(request: dict[str, Any] | None = SHAPES_REQUEST, **opts: Any) -> ToolTagDetector:
    return ToolTagDetector(Context.of(request, opts))


# -- the real capture --------------------------------------------------------

WEATHER = {
    "model": "m",
    "messages": [],
    "tools": [tool("get_weather", {"city": {"type": "string"}}, ["city"])],
}


@pytest.mark.parametrize("size", [1, 7, 64, 10**6])
def test_capture_toolcall_as_text_is_a_structured_call(size: int) -> None:
    data = (CAPTURES / "d_toolcall_as_text.sse").read_bytes()
    a, report = run_parts(split_bytes(data, size), WEATHER)
    assert a.content == ""
    assert a.calls() == [("get_weather", {"city": "Tokyo"})]
    assert a.finish_reason == "tool_calls"
    assert a.done and not a.errors
    assert report.counts["lifted.hermes"] == 1


def test_capture_one_of_two_calls() -> None:
    data = (CAPTURES / "d3_toolcall_as_text_then_more.sse").read_bytes()
    for size in (1, 5, 10**6):
        a, _ = run_parts(split_bytes(data, size), WEATHER)
        assert (a.content, a.calls()) == ("", [("get_weather", {"city": "Berlin"})])


def test_capture_prose_is_untouched() -> None:
    data = (CAPTURES / "d2_toolcall_as_text_zeroshot.sse").read_bytes()
    plain, _ = run_parts([data], {"model": "m", "messages": []})
    for size in (1, 3, 10**6):
        a, report = run_parts(split_bytes(data, size), WEATHER)
        assert (a.content, a.tool_calls, a.finish_reason) == (
            plain.content,
            [],
            plain.finish_reason,
        )
        assert not report.counts.get("unrecognised_markup")


def test_capture_without_tools_is_untouched() -> None:
    data = (CAPTURES / "d_toolcall_as_text.sse").read_bytes()
    a, _ = run_parts([data], {"model": "m", "messages": []})
    assert a.content.startswith("<tool_call>") and a.tool_calls == []


# -- tool awareness ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "content", "count"),
    [
        # A wrapped call to a tool not offered: markup, stripped and counted.
        (
            'Hi.<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>',
            "Hi.",
            "stripped.unoffered_call",
        ),
        # Wrapped but not parseable: recognised and unreadable, given back
        # as text (issue 35: never as nothing; held back only on request,
        # ``test_unreadable_region_held_back_on_request``).
        (
            "<tool_call>lookup_order please</tool_call>Ok",
            "<tool_call>lookup_order please</tool_call>Ok",
            "given_back.unreadable",
        ),
        # Bare JSON naming no offered tool: text.
        (
            '{"name": "delete_all", "arguments": {}}',
            '{"name": "delete_all", "arguments": {}}',
            None,
        ),
        # Code naming no offered tool is never a candidate.
        ('delete_all(x="1")', 'delete_all(x="1")', None),
        # <tools> around prose stays text.
        ("<tools> are what you use </tools>", "<tools> are what you use </tools>", None),
        # ... but around a call to an unknown tool it is markup.
        ('<tools>{"name": "nope", "arguments": {}}</tools>', "", "stripped.unoffered_call"),
    ],
)
def test_offered_names_only(text: str, content: str, count: str | None) -> None:
    assert check_split_invariant(text)[:3] == (content, "", [])
    _, report = run_pieces([text])
    if count:
        assert report.counts[count] == 1
        assert report.unrecognised


def test_no_tools_nothing_is_rewritten() -> None:
    text = "<tool_call>" + LO + "</tool_call>"
    a, report = run_pieces(list(text), {"model": "m", "messages": []})
    assert a.content == text and a.tool_calls == [] and a.finish_reason == "stop"
    assert not report.counts


def test_bare_json_failing_schema_is_text() -> None:
    # create_ticket requires a title: as a bare candidate, this is not a call.
    text = '{"name": "create_ticket", "arguments": {"priority": 1}}'
    assert check_split_invariant(text) == (text, "", [], "stop")


def test_wrapped_call_failing_schema_is_still_lifted_and_counted() -> None:
    text = '<tool_call>{"name": "create_ticket", "arguments": {"priority": "1"}}</tool_call>'
    a, report = run_pieces([text])
    assert a.calls() == [("create_ticket", {"priority": 1})]
    assert report.counts["invalid_arguments"] == 1


def test_arguments_converted_by_schema() -> None:
    text = (
        '<tool_call>{"name": "create_ticket", "arguments": {"title": 5, "priority": "2"}}'
        "</tool_call>"
    )
    assert check_split_invariant(text)[2] == [("create_ticket", {"title": "5", "priority": 2})]


# -- cut-off calls -----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'Let me look.<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A',
        "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nA-",
        '{"name": "lookup_order", "arguments": {"order_',
        "Sure.\nlookup_order(order_id='A",
        '```json\n{"name": "lookup_order", "arguments": {',
    ],
)
def test_cut_off_call_is_neither_call_nor_text(text: str) -> None:
    got = check_split_invariant(text, finish="length")
    before = (
        text.split("<")[0]
        if text.startswith("Let")
        else text.split("\n")[0]  # the newline before the call is layout
        if text.startswith("Sure")
        else ""
    )
    assert got == (before, "", [], "length")
    _, report = run_pieces([text], finish="length")
    assert report.truncated_call


@pytest.mark.parametrize("space", ["", " "])
def test_dsml_section_cut_in_second_call_keeps_the_first(space: str) -> None:
    """DeepSeek V3.2 / V4 / V4.1 at the token limit inside a section's second
    invoke: the first invoke closed before the cut and is a whole call."""
    b = f"｜DSML｜{space}"
    text = (
        f'<{b}calls>\n<{b}invoke name="lookup_order">\n'
        f'<{b}parameter name="order_id" string="true">F-6</{b}parameter>\n</{b}invoke>\n'
        f'<{b}invoke name="create_ticket">\n<{b}parameter name="title"'
    )
    got = check_split_invariant(text, finish="length")
    assert got == ("", "", [("lookup_order", {"order_id": "F-6"})], "tool_calls")
    cut_first = text.split("F-6")[0] + "F"
    assert check_split_invariant(cut_first, finish="length") == ("", "", [], "length")


def test_glm_call_cut_before_its_close_is_not_a_call() -> None:
    """GLM 4.7 at the token limit after a value but before ``</tool_call>``:
    another argument may have followed, so the call is cut off."""
    text = "<tool_call>create_ticket<arg_key>title</arg_key><arg_value>x</arg_value>"
    assert check_split_invariant(text, finish="length") == ("", "", [], "length")


def test_unfinished_wrapped_call_without_length_is_stripped() -> None:
    text = 'Ok.<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A'
    a, report = run_pieces([text])
    assert (a.content, a.tool_calls, a.finish_reason) == (text, [], "stop")
    assert report.counts["given_back.unreadable"] == 1 and not report.truncated_call
    # Text before it: the reply is not empty and will not be asked again, so
    # even a caller that asks again gets it back (issue 35: never as nothing).
    a, report = run_pieces([text], hold_unreadable=True)
    assert (a.content, a.tool_calls, a.finish_reason) == (text, [], "stop")
    assert report.counts["given_back.unreadable"] == 1 and not report.truncated_call


def test_unreadable_region_held_back_on_request() -> None:
    """A caller that asks again (the proxy) holds an unreadable region back:
    the reply is then empty, and says so; else it goes out as text."""
    text = "<tool_call>lookup_order please</tool_call>"
    for pieces in ([text], list(text)):
        a, report = run_pieces(pieces, hold_unreadable=True)
        assert (a.content, a.tool_calls) == ("", [])
        assert report.counts["stripped.unparsed_call"] == 1 and report.empty_after_repair
        a, report = run_pieces(pieces)
        assert (a.content, a.tool_calls) == (text, [])
        assert report.counts["given_back.unreadable"] == 1 and not report.empty_after_repair


def test_held_unreadable_region_is_given_back_when_the_reply_has_more() -> None:
    """Held back only while it is all the reply has: text after it, or a
    call lifted beside it, means the reply is not asked again, so the
    region goes out as text, in place (a client saw "Sure." and lost the
    region through the proxy before)."""
    region = "<tool_call>lookup_order please</tool_call>"
    for text in (region + "\n\nSure.", "\n" + region + " Then done.", "Sure. " + region):
        for pieces in ([text], list(text)):
            a, report = run_pieces(pieces, hold_unreadable=True)
            assert (a.content, a.tool_calls) == (text, []), pieces
            assert report.counts["given_back.unreadable"] == 1 and not report.empty_after_repair
    call = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
    for pieces in ([region + call], list(region + call)):
        a, report = run_pieces(pieces, hold_unreadable=True)
        assert a.content == region and [c["function"]["name"] for c in a.tool_calls] == [
            "lookup_order"
        ]
        assert report.counts["given_back.unreadable"] == 1


@pytest.mark.parametrize(
    ("text", "content"),
    [
        # the reply starts with the call: the blanks after it are layout
        # (vLLM test_lfm2_tool_parser.py test_tool_call)
        ("<tool_call>" + LO + "</tool_call>\n\nChecking now.", "Checking now."),
        # and so is a blank left before stripped markup (the Hunyuan A13B
        # ``</answer>``: vLLM test_hunyuan_a13b_tool_parser.py)
        ("<tool_call>" + LO + "</tool_call>\n</answer>", ""),
        # text before the call: the blanks after it join the two
        ("Sure.\n<tool_call>" + LO + "</tool_call>\nChecking now.", "Sure.\nChecking now."),
    ],
)
def test_blanks_after_the_call_the_reply_starts_with(text: str, content: str) -> None:
    got = check_split_invariant(text)
    assert got == (content, "", [("lookup_order", {"order_id": "A-1"})], "tool_calls")


def test_unfinished_bare_candidate_without_length_is_text() -> None:
    text = '{"name": "lookup_order", "arguments": {"order_'
    assert check_split_invariant(text) == (text, "", [], "stop")


def test_cut_off_prose_json_is_text() -> None:
    text = '{"name": "Alice", "age": 3, "bio": "An engin'
    assert check_split_invariant(text, finish="length") == (text, "", [], "length")


def test_complete_call_then_cut_off_text() -> None:
    text = "<tool_call>" + LO + "</tool_call>\nAnd then I will"
    got = check_split_invariant(text, finish="length")
    # The blank between the call the reply starts with and the text is layout.
    assert got == ("And then I will", "", [("lookup_order", {"order_id": "A-1"})], "tool_calls")


# -- bounds ------------------------------------------------------------------


def test_oversized_wrapped_region_is_stripped() -> None:
    text = (
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "'
        + "x" * 500
        + '"}}</tool_call>after'
    )
    a, report = run_pieces(
        [text[i : i + 10] for i in range(0, len(text), 10)],
        max_call_chars=100,
        repetition=False,
        split_reasoning=False,
    )
    assert (a.content, a.tool_calls) == ("after", [])
    assert report.counts["stripped.oversized_call"] == 1


def test_oversized_bare_region_is_text() -> None:
    text = '{"name": "lookup_order", "arguments": {"order_id": "' + "x" * 500 + '"}}'
    a, _ = run_pieces(
        [text[i : i + 10] for i in range(0, len(text), 10)],
        max_call_chars=100,
        repetition=False,
        split_reasoning=False,
    )
    assert (a.content, a.tool_calls) == (text, [])


# -- unrecognised markup -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Sure <|tool_result|> something",
        "text <｜tool▁output▁begin｜> more",
        "a <tool_response>x</tool_response>",
        "[TOOL_RESULTS] nothing",
    ],
)
def test_unrecognised_markup_is_counted_and_sampled_not_stripped(text: str) -> None:
    for pieces in ([text], list(text)):
        d = detector()
        out = []
        for p in pieces:
            dl = Delta(content=p)
            d.feed(dl)
            out.append(dl.content or "")
        dl = Delta(finish_reason="stop")
        d.close(dl)
        out.append(dl.content or "")
        assert "".join(out) == text
        assert d.ctx.report.counts["unrecognised_markup"] >= 1
        assert d.ctx.report.unrecognised


def test_plain_prose_is_not_unrecognised() -> None:
    _, report = run_pieces(["Use <b>bold</b> and [link](x) and a < b > c."])
    assert report.counts["unrecognised_markup"] == 0


# -- the fast path and the hold-back bound -----------------------------------


def test_plain_chunk_is_the_same_object() -> None:
    d = detector()
    d.feed(Delta(content="Hello"))  # the reply's start decided
    for piece in ["Hello there", ", friend", " — how", " are you?"]:
        dl = Delta(content=piece)
        d.feed(dl)
        assert dl.content is piece


def test_marker_prefix_held_then_released() -> None:
    d = detector()
    d.feed(Delta(content="Hi."))
    dl = Delta(content=" <tool_")
    d.feed(dl)
    assert dl.content == ""  # blanks after a sentence, before a marker: layout if a call follows
    dl = Delta(content="box> ok")
    d.feed(dl)
    assert dl.content == " <tool_box> ok"
    dl = Delta(content=" and <tool_")
    d.feed(dl)
    assert dl.content == " and "  # blanks after a word are content: not held


ALPHABET = st.sampled_from(
    [
        "a",
        " ",
        "\n",
        "<",
        ">",
        "{",
        "}",
        "[",
        "(",
        ")",
        "`",
        "tool",
        "_call",
        "call:",
        "lookup_order",
        "```",
        "<tool_call>",
        "{{",
        "refresh_cache(",
        "é",
        "\u200b",
        '"',
    ]
)


@given(st.lists(ALPHABET, max_size=40), st.lists(st.integers(1, 6), min_size=1, max_size=40))
def test_hold_back_bound(tokens: list[str], sizes: list[int]) -> None:
    """Outside a region, what is held never exceeds the documented bound,
    and joining every piece released gives the text back when nothing
    was lifted or stripped."""
    text = "".join(tokens)
    d = detector()
    out: list[str] = []
    i = 0  # text fed so far
    for piece in split_sizes(text, sizes):
        dl = Delta(content=piece)
        i += len(piece)
        d.feed(dl)
        out.append(dl.content or "")
        if not d.in_region:
            assert d.held <= d.hold_bound
            # Only blanks and a marker prefix are ever held.
            held_text = text[:i][len("".join(out)) :] if not d.ctx.report.counts else None
            if held_text is not None:
                assert len(held_text.rstrip()) <= len(held_text) and len(held_text) == d.held
    dl = Delta(finish_reason="stop")
    d.close(dl)
    out.append(dl.content or "")
    if not d.ctx.report.counts and not d.ctx.report.truncated_call:
        assert "".join(out) == text


def test_hold_bound_is_longest_prefix_plus_gap() -> None:
    d = detector()
    assert d.hold_bound == MAX_GAP_WS + d.m.maxlen - 1  # layout blanks, a marker's prefix
    d.feed(Delta(content="Hi"))
    assert d.hold_bound == MAX_GAP_WS + d.m.maxlen - 1  # the same after text


def test_blanks_after_a_sentence_are_held_until_the_next_text() -> None:
    """Blanks after a sentence's end are held (layout if a call follows, as
    the reference parsers leave them out) and go out in front of the next
    text; other text goes out as the upstream's own bytes."""
    pieces = ["Steps:", "\n\n", "1.", " Open", "\n", "   ", " it.", "\n", "x", "\n"]
    stream = text_stream(pieces)
    session = SSESession(SHAPES_REQUEST)
    events = [e + b"\n\n" for e in stream.split(b"\n\n") if e]
    outs = [session.feed(e) for e in events]
    # held after a sentence's end ("\n\n" after "Steps:", "\n" after " it."), and the
    # text after them carries what was held; the rest is the upstream's own bytes
    changed = [o != e for e, o in zip(events[1:], outs[1:], strict=False)][: len(pieces)]
    assert changed == [False, True, True, False, False, False, False, True, True, False]
    a = assemble(b"".join(outs) + session.close())
    assert a.content == "".join(pieces)  # nothing lost: the last blank at the end


# -- several calls, text kept verbatim ---------------------------------------


def test_text_between_calls_is_kept_in_order() -> None:
    text = (
        "First:\n<tool_call>" + LO + "</tool_call>\nthen **this** text,\n"
        "call:refresh_cache{}\nand finally `code`."
    )
    got = check_split_invariant(text)
    assert got == (
        "First:\nthen **this** text,\n\nand finally `code`.",  # layout only after "First:"
        "",
        [("lookup_order", {"order_id": "A-1"}), ("refresh_cache", {})],
        "tool_calls",
    )


def test_structured_and_text_calls_together() -> None:
    from .support.streamutil import chunk, sse

    data = sse(
        [
            chunk(role="assistant", content=""),
            chunk("<tool_call>" + LO + "</tool_call>"),
            chunk(
                tool_calls=[
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "refresh_cache", "arguments": "{}"},
                    }
                ]
            ),
            chunk(finish="tool_calls"),
        ]
    )
    a, _ = run_parts([data])
    assert sorted(n for n, _ in a.calls()) == ["lookup_order", "refresh_cache"]
    assert a.finish_reason == "tool_calls"
    assert result(a)[0] == ""


MIX = st.sampled_from(
    [
        "Hello",
        " ",
        "\n",
        "<tool_call>" + LO + "</tool_call>",
        '<tool_call>{"name": "nope"}</tool_call>',
        "<tool_",
        "lookup_order(order_id='A-1')",
        "refresh_cache()",
        "call:refresh_cache{}",
        "call: me",
        "```python\nx = 1\n```",
        '```json\n{"name": "refresh_cache"}\n```',
        "{",
        "}",
        "[",
        '{"name": "refresh_cache"}',
        "{{ refresh_cache }}",
        "<think>",
        "</think>",
        "<|tool_result|>",
        "é🎉",
        "`",
    ]
)


@given(st.lists(MIX, max_size=12), st.lists(st.integers(0, 10**6), max_size=10))
def test_any_mix_is_split_invariant(tokens: list[str], cuts: list[int]) -> None:
    """Whatever the text, any chunking gives the same result as whole."""
    from .support.detectutil import check_byte_cuts

    text = "".join(tokens)
    check_byte_cuts(text, cuts)
    check_byte_cuts(text, cuts, finish="length")


@pytest.mark.parametrize(
    "opening", ["```python\n", "```\nls -la", '```json\n{"port": 1', "```html\n<div>"]
)
def test_code_fence_is_released_as_it_streams(opening: str) -> None:
    """A fence that cannot hold a call is opaque: released at once, and
    not searched (a call-looking line inside stays text)."""
    d = detector()
    d.feed(Delta(content="Here:\n"))
    released = ""
    for piece in [opening, "\n", "lookup_order(order_id='A-1')\n", "x = 1\n"]:
        dl = Delta(content=piece)
        d.feed(dl)
        released += dl.content or ""
    assert released.lstrip("\n").startswith(opening)  # the held newline goes out before it
    assert "lookup_order(order_id='A-1')\n" in released
    assert not d.in_region


def test_a_marker_that_starts_like_a_line_start_marker_is_held_mid_line() -> None:
    """Regression: ``[`` (a list that counts only at the start of a line)
    matched first, was rejected mid-line, and the scan moved on, so a
    ``[TOOL_CALLS]`` arriving one character at a time was released as text.
    (Masked in tests while the reasoning splitter held every reply's start.)"""
    text = 'Before. [TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_id": "F-6"}}] Done.'
    for pieces in ([text], list(text), [text[:9], text[9:]]):
        a = fix_text(pieces)
        assert a.calls() == [("lookup_order", {"order_id": "F-6"})]
        assert a.content == "Before. Done."  # the text around the call, less the layout blank


def test_quiet_memo_is_bounded_and_only_remembers_scan_misses() -> None:
    """``Matcher.quiet`` stands in for the scan on pieces seen before: it
    holds only short pieces the scan found nothing in, never more than
    ``QUIET_MAX``, and a remembered piece still reads as it did."""
    d = detector()
    m = d.m
    m.quiet.clear()
    for i in range(QUIET_MAX + 10):
        assert m.is_quiet(f" w{i}")
        assert len(m.quiet) <= QUIET_MAX
    assert not m.is_quiet(" <tool_") and " <tool_" not in m.quiet
    assert not m.is_quiet(" lookup_ord") and " lookup_ord" not in m.quiet
    long_piece = "x" * (QUIET_LEN + 1)
    assert m.is_quiet(long_piece) and long_piece not in m.quiet
    # A remembered piece goes through the lane exactly as a new one would.
    d.feed(Delta(content="Hi"))
    assert d.feed_text(" w5") and d.feed_text(" w5")
    assert not d.feed_text(" lookup_ord")


_BARE_FN = "<function=lookup_order>\n<parameter=order_id>\nA-1\n</parameter>\n</function>"
_A1 = ("lookup_order", {"order_id": "A-1"})


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        (_BARE_FN + "\n</tool_call>", "", [_A1]),
        ("Checking.\n\n" + _BARE_FN + "\n</tool_call>\nDone.", "Checking.\nDone.", [_A1]),
        (
            _BARE_FN + "\n</tool_call>\n" + _BARE_FN.replace("A-1", "B-2") + "\n</tool_call>",
            "",
            [_A1, ("lookup_order", {"order_id": "B-2"})],
        ),
        # Not the closer: the text after the call stays (without the
        # blank: layout after the call the reply starts with).
        (_BARE_FN + "\nDone.", "Done.", [_A1]),
        (_BARE_FN + "\n</tool_c Done.", "</tool_c Done.", [_A1]),
    ],
)
def test_stray_closer_after_a_bare_function_goes_with_its_blanks(
    text: str, content: str, calls: list[Any]
) -> None:
    """Qwen3-Coder leaves out the opening ``<tool_call>`` but writes the
    closing one (canitoolcall qwen3-xml/llamacpp-coder-bare-function): the
    closer and the blanks before it are the call's, at every split."""
    got = check_split_invariant(text)
    assert got == (content, "", calls, "tool_calls")


def test_a_call_to_a_tool_not_offered_does_not_take_its_siblings() -> None:
    """One call of a Kimi section names no offered tool (an id without
    ``:N``, vLLM's ``test_kimi_k2_tool_parser.py``): it is dropped and
    counted, the offered one beside it is lifted, at every split."""
    text = (
        "Help. <|tool_calls_section_begin|><|tool_call_begin|>functions.nothing.0"
        ' <|tool_call_argument_begin|>{"order_id": "B-2"}<|tool_call_end|>'
        "<|tool_call_begin|>functions.lookup_order:1"
        ' <|tool_call_argument_begin|>{"order_id": "A-1"}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    got = check_split_invariant(text)
    assert got == ("Help. ", "", [("lookup_order", {"order_id": "A-1"})], "tool_calls")
    assert run_pieces([text])[1].counts.get("dropped_call.unoffered") == 1
