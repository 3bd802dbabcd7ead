"""Python call syntax as models write it (issue 35, ``streamfix/pycalls.py``,
``toolargs.parse_call_args``): the literals Python itself refuses but whose
reading is certain, and each call of a list read on its own."""

from __future__ import annotations

from typing import Any

import pytest

from streamfix.formats import UNREADABLE
from streamfix.formats._family import python_calls
from streamfix.formats.hermes_tags import json_calls
from streamfix.formats.pythonic import pythonic_calls
from streamfix.pycalls import read_args, read_calls
from streamfix.spec import tools_of
from streamfix.toolargs import convert_value, parse_call_args

from .support.detectutil import check_split_invariant, run_pieces


@pytest.mark.parametrize(
    ("src", "keywords"),
    [
        ("enabled=true", {"enabled": True}),
        ("field=null", {"field": None}),
        ("role=None, active=false", {"role": None, "active": False}),
        ('from="SFO", to="NYC"', {"from": "SFO", "to": "NYC"}),
        ('config={"enabled": true, "note": null}', {"config": {"enabled": True, "note": None}}),
        ("opts={'deep': [true, {'x': null}]}", {"opts": {"deep": [True, {"x": None}]}}),
        ("tags={'urgent', 'bug'}", {"tags": ["urgent", "bug"]}),
        ("month=07, day=09", {"month": 7, "day": 9}),
        ("command='sed -n '360,450p' f.py'", {"command": "sed -n '360,450p' f.py"}),
        ('cmd="cat <<EOF\nhello\nEOF"', {"cmd": "cat <<EOF\nhello\nEOF"}),
        ("path=r'C:\\temp', n=-3.5, m=0x1F", {"path": "C:\\temp", "n": -3.5, "m": 31}),
    ],
)
def test_literals_models_write(src: str, keywords: dict[str, Any]) -> None:
    assert parse_call_args(src) == ([], keywords)


@pytest.mark.parametrize(
    "src",
    [
        "x=y",  # a variable: code
        "x=b'z'",  # bytes are not JSON
        "x=1e999",  # JSON has no infinity
        "x='it's'",  # one inner quote: the reading is not certain
        "x=1+2",  # an expression
        "**kw",
    ],
)
def test_what_is_not_a_literal_is_code(src: str) -> None:
    assert parse_call_args(src) is None
    assert read_args(src) is None


def test_an_expression_python_parses_is_not_reread() -> None:
    # Python parses this (it is code): the lenient reader never sees it,
    # so its quotes are not taken for one string.
    assert parse_call_args("x='a' if y else 'b'") is None


TOOLS = tools_of(
    {
        "tools": [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in ("get_weather", "search")
        ]
    }
)


def test_one_bad_call_leaves_its_siblings() -> None:
    for text in (
        "[bad(x=b'z'), get_weather(city=\"X\")]",
        '[bad(x=1e999), get_weather(city="X")]',
        '[bad(x="a" + "b"), get_weather(city="X")]',
        '[bad(x=\'broken), get_weather(city="X")]',
    ):
        calls = pythonic_calls(text, TOOLS)
        assert calls is not None, text
        assert calls[0] is UNREADABLE and calls[1].name == "get_weather", text
    assert read_calls("[bad(x=y)]") == [None]
    assert pythonic_calls("[bad(x=y)]", TOOLS) is None  # nothing readable
    got = python_calls('get_weather(city="X", on=true)\nsearch(q=b"z")')
    assert got is not None and got[0].arguments == {"city": "X", "on": True}
    assert got[1] is UNREADABLE


def test_one_bad_json_object_of_a_block_leaves_the_others() -> None:
    block = (
        '{"name": "get_weather", "arguments": {"city": "Seattle"}}\n{invalid json here}\n'
        '{"name": "search", "arguments": {"query": "x"}}'
    )
    got = json_calls(block)
    assert got is not None and [c.name for c in got if c is not UNREADABLE] == [
        "get_weather",
        "search",
    ]
    assert json_calls(block, siblings=False) is None
    junk = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, "junk"]'
    got = json_calls(junk)
    assert got is not None and got[1] is UNREADABLE


def test_siblings_through_the_chain() -> None:
    from .support.streamutil import SHAPES_REQUEST

    names = [t["function"]["name"] for t in SHAPES_REQUEST["tools"]]
    assert "lookup_order" in names
    good = '{"name": "lookup_order", "arguments": {"order_id": "A-1"}}'
    text = f"<tool_call>\n[{good}, 7]\n</tool_call>"
    content, _, calls, finish = check_split_invariant(text)
    assert (content, calls, finish) == ("", [("lookup_order", {"order_id": "A-1"})], "tool_calls")
    _, report = run_pieces([text])
    assert report.counts["dropped_call.unreadable"] == 1


def test_python_literal_as_an_object_or_array_value() -> None:
    assert convert_value("{'category': 'books', 'in_stock': True}", {"type": "object"}) == {
        "category": "books",
        "in_stock": True,
    }
    assert convert_value("['fiction', 'new']", {"type": "array"}) == ["fiction", "new"]
    assert convert_value("{'x': 1e999}", {"type": "object"}) == "{'x': 1e999}"


def test_a_bad_line_of_a_minimax_block_leaves_the_others() -> None:
    """MiniMax M1's ``<tool_calls>``, one JSON object per line (vLLM's
    parser test): the good lines are lifted, the bad one counted."""
    text = (
        '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Seattle"}}\n'
        '{invalid json here}\n{"name": "search", "arguments": {"query": "x"}}\n</tool_calls>'
    )
    request = {
        "model": "MiniMax-M1",
        "messages": [],
        "tools": [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in ("get_weather", "search")
        ],
    }
    content, _, calls, _ = check_split_invariant(text, request)
    assert content == ""
    assert calls == [("get_weather", {"city": "Seattle"}), ("search", {"query": "x"})]
    _, report = run_pieces([text], request)
    assert report.counts["dropped_call.unreadable"] == 1
