"""Structured output (``response_format``): the corpus of malformed replies,
whole and streamed at every split, the negative set byte for byte, and the
rewriter's rules one by one (``transforms/jsonout.py``, ``jsonsyntax.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.session import SSESession
from streamfix.transforms.jsonsyntax import JsonRewriter
from tests.support.streamutil import assemble, chunk, fixed_whole, sse, text_stream

CORPUS = json.loads((Path(__file__).parent / "data" / "json_output_corpus.json").read_text())
CASES = CORPUS["cases"]
NEGATIVE = CORPUS["negative"]


def request(schema: dict[str, Any] | None, strict: bool = False) -> dict[str, Any]:
    if schema is None:
        fmt: dict[str, Any] = {"type": "json_object"}
    else:
        fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
        if strict:
            fmt["json_schema"]["strict"] = True
    return {"model": "m", "messages": [], "response_format": fmt}


def streamed(pieces: list[str], req: dict[str, Any], finish: str = "stop") -> tuple[Any, Any]:
    session = SSESession(req)
    out = session.feed(text_stream(pieces, finish)) + session.close()
    return assemble(out), session.report


def splits(text: str) -> list[list[str]]:
    """Every cut in two, and one character at a time."""
    out = [[text[:i], text[i:]] for i in range(1, len(text))]
    out.append(list(text))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_whole(case: dict[str, Any]) -> None:
    choice, report = fixed_whole(case["content"], request(case["schema"]), case["finish"])
    content = choice["message"]["content"]
    if case.get("invalid"):
        assert report.json_invalid
        assert choice["streamfix"]["json"] == "invalid"
        if case["expected"] is not None:
            assert orjson.loads(content) == case["expected"]
        return
    assert report.json_invalid is None, report.json_invalid
    assert orjson.loads(content) == case["expected"]
    assert "streamfix" not in choice
    assert any(k.startswith("json_") or k == "reasoning_split" for k in report.counts)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_streamed_equals_whole_at_every_split(case: dict[str, Any]) -> None:
    req = request(case["schema"])
    choice, report = fixed_whole(case["content"], req, case["finish"])
    want = choice["message"]["content"] or ""
    for pieces in splits(case["content"]):
        got, rep = streamed(pieces, req, case["finish"])
        assert got.content == want, pieces
        assert got.ext == choice.get("streamfix"), pieces
        assert rep.json_invalid == report.json_invalid
        assert not got.errors and got.done


@pytest.mark.parametrize("neg", NEGATIVE)
def test_valid_reply_passes_byte_for_byte(neg: dict[str, Any]) -> None:
    """The same text, whole and streamed at any split, and the upstream's
    own bytes at every split (a chunk that ends in a comma, a key or a
    number waits whole for the next: ``chain``'s module doc)."""
    content = neg["content"]
    req = request(neg["schema"])
    choice, report = fixed_whole(content, req)
    assert choice["message"]["content"] == content
    assert not report.counts and report.json_invalid is None
    data = text_stream([content])
    session = SSESession(req)
    assert session.feed(data) + session.close() == data
    for pieces in splits(content):
        got, rep = streamed(pieces, req)
        assert got.content == content, pieces
        assert not rep.counts and got.ext is None
        data = text_stream(pieces)
        session = SSESession(req)
        assert session.feed(data) + session.close() == data, pieces


@pytest.mark.parametrize("case", CASES[:8], ids=[c["name"] for c in CASES[:8]])
def test_no_response_format_is_never_touched(case: dict[str, Any]) -> None:
    req = {"model": "m", "messages": []}
    data = text_stream([case["content"]])
    session = SSESession(req)
    assert session.feed(data) + session.close() == data
    choice, _ = fixed_whole(case["content"], req)
    assert choice["message"]["content"] == case["content"]
    # a response_format of type text is no JSON request either
    req = {**req, "response_format": {"type": "text"}}
    choice, _ = fixed_whole(case["content"], req)
    assert choice["message"]["content"] == case["content"]


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from([c for c in CASES if not c.get("invalid")]),
    cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=12),
)
def test_any_split_property(case: dict[str, Any], cuts: list[int]) -> None:
    text = case["content"]
    points = sorted({c for c in cuts if c < len(text)})
    pieces, prev = [], 0
    for p in points:
        pieces.append(text[prev:p])
        prev = p
    pieces.append(text[prev:])
    req = request(case["schema"])
    got, _ = streamed(pieces, req, case["finish"])
    assert orjson.loads(got.content) == case["expected"]


# -- the modes -------------------------------------------------------------


def test_clean_json_streams_as_it_comes() -> None:
    """A clean reply is not held: a chunk whose tail is decided leaves at
    once as its own bytes; one that ends in a key, a comma or a number
    waits whole for the next, and then both leave as they came. (A chunk
    ending in a string's closing quote waits too: the next character says
    whether the quote ends the string.)"""
    req = request(CASES[0]["schema"])
    pieces = ['{"name": "Ad', 'a", "age": ', "36", "}"]
    raws = [sse([chunk(p)], done=False) for p in pieces]
    session = SSESession(req)
    outs = [session.feed(raw) for raw in raws]
    assert outs == [raws[0], b"", b"", raws[1] + raws[2] + raws[3]]
    assert not session.chain.holding_json


def test_fenced_reply_streams_after_the_fence() -> None:
    req = request(CASES[0]["schema"])
    session = SSESession(req)
    assert assemble(session.feed(sse([chunk("```json\n")], done=False))).content == ""
    out = session.feed(sse([chunk('{"name": "Ad')], done=False))
    assert assemble(out).content == '{"name": "Ad'


def test_strict_holds_to_the_end_then_coerces() -> None:
    schema = CASES[0]["schema"]
    req = request(schema, strict=True)
    session = SSESession(req)
    head = [chunk(role="assistant", content=""), chunk('{"name": "Ada", '), chunk('"age": "36"}')]
    out = session.feed(sse(head, done=False))
    assert assemble(out).content == ""
    assert session.chain.holding_json
    rest = session.feed(sse([chunk(finish="stop")], done=True)) + session.close()
    assert orjson.loads(assemble(out + rest).content) == {"name": "Ada", "age": 36}
    assert session.report.counts["json_coerced"] == 1


def test_streamed_value_that_fails_the_schema_gets_the_note() -> None:
    got, report = streamed(['{"name": "Ada"', "}"], request(CASES[0]["schema"]))
    assert got.content == '{"name": "Ada"}'
    assert got.ext is not None and got.ext["json"] == "invalid"
    assert "age" in got.ext["error"] and report.json_invalid


def test_tool_call_turn_is_not_an_invalid_reply() -> None:
    req = {
        **request(CASES[0]["schema"]),
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    comp_choice, report = fixed_whole('<tool_call>{"name": "f", "arguments": {}}</tool_call>', req)
    assert comp_choice["message"]["tool_calls"]
    assert report.json_invalid is None


def test_held_reply_past_the_bound_is_released_with_a_reason() -> None:
    req = request(None, strict=False)
    text = "x" * 300 + " {" + '"a": 1}'
    session = SSESession(req, max_call_chars=100)
    out = session.feed(text_stream([text[:150], text[150:]]))
    out += session.close()
    assert assemble(out).content == text
    assert session.report.counts["json_too_long"] == 1
    assert session.report.json_invalid


# -- the rewriter's rules --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want", "kind"),
    [
        ('{"a": [1, 2,],}', '{"a": [1, 2]}', "json_comma"),
        ("{'a': 'b'}", '{"a": "b"}', "json_quote"),
        ('{"a": None, "b": True}', '{"a": null, "b": true}', "json_literal"),
        ('{"a": 1 /* x */}', '{"a": 1 }', "json_comment"),
        ('{"a": "\\*"}', '{"a": "\\\\*"}', "json_escape"),
        ('{"a": "x\ty"}', '{"a": "x\\ty"}', "json_control"),
        ('{"a": "\x01"}', '{"a": "\\u0001"}', "json_control"),
        ("{a: 1}", '{"a": 1}', "json_key"),
        ('{"a": [1', '{"a": [1]}', "json_closed"),
        ('{"a": "tex', '{"a": "tex"}', "json_closed"),
        ('{"a": 1, "b', '{"a": 1}', "json_closed"),
        ('{"a": 1, "b": ', '{"a": 1}', "json_dropped"),
    ],
)
def test_rewriter_rule(text: str, want: str, kind: str) -> None:
    for pieces in splits(text):
        rw = JsonRewriter()
        out = "".join(rw.feed(p) for p in pieces) + rw.close()
        assert out == want, pieces
        assert rw.counts[kind] >= 1
        json.loads(out)


def test_rewriter_releases_nothing_a_later_character_could_change() -> None:
    """What ``feed`` released is a prefix of the final text at every step."""
    text = "{'a': [1, 2,], b: True, // c\n 'd': \"x\\*\"}"
    rw = JsonRewriter()
    released = ""
    for ch in text:
        released += rw.feed(ch)
    final = released + rw.close()
    assert final == '{"a": [1, 2], "b": true, \n "d": "x\\\\*"}'


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": "x" "b"}', '{"a" "b" "c"}', "{]"])
def test_rewriter_does_not_guess(text: str) -> None:
    rw = JsonRewriter()
    out = rw.feed(text) + rw.close()
    assert rw.error is not None
    json.loads(out)  # what was released is completed to valid syntax


def test_rewriter_depth_is_bounded() -> None:
    rw = JsonRewriter()
    out = rw.feed("[" * 600)
    assert rw.error is not None
    assert json.loads(out + rw.close()) is not None


# -- issue 36: certain readings, and the guesses refused --------------------


@pytest.mark.parametrize(
    ("text", "want", "kind"),
    [
        ('{"a": (1, 2)}', '{"a": [1, 2]}', "json_tuple"),
        ('{"a": ()}', '{"a": []}', "json_tuple"),
        ('{"a": (1)}', '{"a": 1}', "json_tuple"),
        ('{"a": ("x",)}', '{"a": ["x"]}', "json_tuple"),
        ("((1, 2), (3, 4))", "[[1, 2], [3, 4]]", "json_tuple"),
        (
            '{"a": 1_000, "b": .5, "c": 1., "d": -.5}',
            '{"a": 1000, "b": 0.5, "c": 1.0, "d": -0.5}',
            "json_number",
        ),
        (
            '{"a": TRUE, "b": False, "c": Null}',
            '{"a": true, "b": false, "c": null}',
            "json_literal",
        ),
        ("{\u201ca\u201d: \u201cb\u201d, \u2018c\u2019: 1}", '{"a": "b", "c": 1}', "json_quote"),
        ('{5: "x"}', '{"5": "x"}', "json_key"),
        ('{"a":\xa0\u200b1}', '{"a":1}', "json_space"),
        ("[,1, 2]", "[1, 2]", "json_comma"),
        ('{/* c */,"a": 1}', '{"a": 1}', "json_comma"),
        ('{"a" 1, "b" "c"}', '{"a": 1, "b": "c"}', "json_colon"),
        ('[{"b": 2]', '[{"b": 2}]', "json_bracket"),
        ('{"a": [1, 2\n```', '{"a": [1, 2\n]}', "json_closed"),
        ('{"a": "say "hi" now"}', '{"a": "say \\"hi\\" now"}', "json_inner_quote"),
        ('{"a": "[x]("https://e.com")"}', '{"a": "[x](\\"https://e.com\\")"}', "json_inner_quote"),
        ('{"k"e"y": 1}', '{"k\\"e\\"y": 1}', "json_inner_quote"),
        ('"The TV is 24" wide"', '"The TV is 24\\" wide"', "json_inner_quote"),
        ('{"a": "x" + "y"+"z"}', '{"a": "xyz"}', "json_concat"),
        ('["a" "b" 2]', '["a" ,"b" ,2]', "json_comma"),
    ],
)
def test_rewriter_certain_rule(text: str, want: str, kind: str) -> None:
    """Each rule of issue 36 whose reading is certain, at every split."""
    for pieces in splits(text):
        rw = JsonRewriter()
        out = "".join(rw.feed(p) for p in pieces) + rw.close()
        assert out == want, pieces
        assert rw.error is None, (rw.error, pieces)
        assert rw.counts[kind] >= 1
        json.loads(out)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "tex',  # a reply that stopped inside a string: where did it end?
        '["a", "b]',
        '{"a": 1, "b": ',  # a key with no value
        '{"a": {"b": 1 // c }, "d": 2}',  # a comment over the closers, to the end
        '{"a": ""b"}',  # an empty string and a word, or a quote inside?
        '["a,"b"]',  # a missing end quote after the comma?
        '["a" b", "c"]',  # the next value's opening quote missing?
        '{"a": "x\n"y"}',
        '{"a": "x "y" z" "w"}',  # inner quotes, then another string
        "(1)",  # a value in parentheses, or a tuple missing its comma
        '{"a": "\\a"}',  # an escape of C with a meaning of its own
        "[{]",
        '[[{"a": 1], 2], 3]',  # a closer of an outer container, and more after it
        '{"a": NaN}',
        '{a":"b"}',  # a colon right after a bare key's stray quote
    ],
)
def test_rewriter_refuses_a_guess(text: str) -> None:
    for pieces in splits(text):
        rw = JsonRewriter()
        out = "".join(rw.feed(p) for p in pieces) + rw.close()
        assert rw.error is not None, (out, pieces)
        json.loads(out)  # what was released is completed to valid syntax


def test_a_cut_string_is_cut_not_a_guess() -> None:
    """Only the token limit may end a string: then it is completed and
    counted ``json_cut`` (the step flags the reply as cut), not an error."""
    rw = JsonRewriter()
    out = rw.feed('{"a": "tex') + rw.close(cut=True)
    assert out == '{"a": "tex"}' and rw.error is None and rw.counts["json_cut"] >= 1


def _outcome(text: str, schema: dict[str, Any] | None) -> tuple[Any, str | None, Any]:
    """(the value sent, the note's error, the counts), whole; streamed one
    character a chunk it must be the same."""
    choice, report = fixed_whole(text, request(schema))
    got, sreport = streamed(list(text), request(schema))
    content = choice["message"]["content"]
    assert got.content == content and sreport.json_invalid == report.json_invalid
    value = orjson.loads(content) if report.json_invalid is None else None
    return value, report.json_invalid, report.counts


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}{"b": 2}',
        '{"a": 1}, "b": 2}',
        '{"a": 1}\n["b"]',
        'First: {"a": 1} Second: {"a": 2}',
        'Here it is: {"a": 1}. Or rather {"a": 2}.',
        '```json\n{"a": 1}\n```\n```json\n{"a": 2}\n```',
    ],
)
def test_json_after_the_value_is_never_cut_silently(text: str) -> None:
    _, error, _ = _outcome(text, None)
    assert error is not None and "JSON" in error


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"a": 1}\n\nHope this helps!', "json_prose"),
        ('```json\n{"a": 1}\n```\nAnything else?', "json_fence"),
        ('{"a": 1}}', "json_bracket"),
        # a reference mark in the prose is not a second value
        ('{"a": 1}\n\nThis follows the docs [1].', "json_prose"),
        ('{"a": 1}\n\nAs in [2, 3], the count is one.', "json_prose"),
    ],
)
def test_prose_after_the_value_is_dropped_and_counted(text: str, kind: str) -> None:
    value, error, counts = _outcome(text, None)
    assert error is None and value == {"a": 1} and counts[kind] >= 1


def test_a_value_that_cannot_be_kept_is_said_not_dropped() -> None:
    _, error, _ = _outcome('{"a": NaN, "b": 1}', None)
    assert error is not None and "NaN" in error


def test_an_open_string_in_a_stopped_reply_is_a_guess_a_cut_one_is_cut() -> None:
    _, error, _ = _outcome('{"a": "quick brown fox. }', None)
    assert error is not None and "string" in error
    choice, report = fixed_whole('{"a": "quick brown', request(None), "length")
    assert orjson.loads(choice["message"]["content"]) == {"a": "quick brown"}
    assert report.json_invalid is not None and "token limit" in report.json_invalid


def test_a_later_start_only_after_prose() -> None:
    """A value that began to read and failed is the answer (refused); a
    bracket that failed at its first token is prose, and the next is read."""
    _, error, _ = _outcome('Sure! {"items": [1, ###], "extra": [3]}', {})
    assert error is not None
    value, error, _ = _outcome('Here it is (see below): {"a": 1}', None)
    assert error is None and value == {"a": 1}


def test_top_level_scalar_and_double_serialised_json_by_the_schema() -> None:
    value, error, counts = _outcome('"1"', {"type": "integer"})
    assert error is None and value == 1 and counts["json_coerced"] == 1
    value, error, _ = _outcome("4,", {"type": "integer"})
    assert error is None and value == 4
    schema = {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}
    value, error, _ = _outcome('"{\\"k\\": \\"v\\"}"', schema)
    assert error is None and value == {"k": "v"}
    value, error, _ = _outcome('callback_1({"k": "v"});', schema)
    assert error is None and value == {"k": "v"}
    _, error, _ = _outcome('NumberLong("2")', {"type": "string"})
    assert error is not None
