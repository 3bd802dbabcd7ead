"""Gemma 4's own slips around its call tokens (Ollama's Gemma 4 parser
tests, issue 15315): a string delimiter left dangling, a string
property's value written without delimiters, and the tool-response token
the model may write after its call."""

from __future__ import annotations

from typing import Any

from streamfix.formats.gemma import G4_CLOSE, G4_OPEN, G4_QUOTE

from .support.detectutil import check_split_invariant

Q = G4_QUOTE


def _request(**props: list[str]) -> dict[str, Any]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "type": "object",
                    "properties": {a: {"type": "string"} for a in args},
                },
            },
        }
        for name, args in props.items()
    ]
    return {"model": "gemma4:31b", "messages": [{"role": "user", "content": "hi"}], "tools": tools}


def _call(body: str) -> str:
    return G4_OPEN + body + G4_CLOSE


def test_an_unclosed_last_string_is_no_call() -> None:
    """Ollama closes it before the ``}``; the family table holds this shape
    as no call (``tests/support/family_cases.py``), kept so."""
    req = _request(bash=["path", "command"])
    got = check_split_invariant(_call(f"call:bash{{command:{Q}ls}}"), req)
    assert got[2] == []


def test_a_dangling_delimiter_after_a_quoted_value_is_dropped() -> None:
    req = _request(grep=["include", "pattern"])
    text = _call(f"call:grep{{include:{Q}*.py{Q},pattern:':\\s*\\w+'{Q}}}")
    got = check_split_invariant(text, req)
    assert got[:3] == ("", "", [("grep", {"include": "*.py", "pattern": ":\\s*\\w+"})])


def test_a_value_closed_but_never_opened_is_a_string() -> None:
    """SGLang's Gemma 4 tests: the model drops the opening delimiter."""
    req = _request(web_search=["query", "city"])
    for body, args in [
        (f"query:weather in Tokyo{Q}", {"query": "weather in Tokyo"}),
        (f"query:Paris, France{Q},city:{Q}x{Q}", {"query": "Paris, France", "city": "x"}),
        (f"query:[{Q}a{Q},b{Q}]", {"query": ["a", "b"]}),
    ]:
        got = check_split_invariant(_call(f"call:web_search{{{body}}}"), req)
        assert got[:3] == ("", "", [("web_search", args)]), body


def test_a_raw_string_value_is_read_only_with_the_schema() -> None:
    value = "\n\n# Title\n\nIt's (really) long, with commas: and colons."
    text = _call("call:write{content:" + value)
    got = check_split_invariant(text, _request(write=["content"]))
    assert got[:3] == ("", "", [("write", {"content": value})])
    # a value that opens as JSON, or a property the schema does not say is a
    # string, is not guessed at
    number = {
        "model": "gemma4:31b",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "write",
                    "parameters": {"type": "object", "properties": {"content": {"type": "number"}}},
                },
            }
        ],
    }
    assert check_split_invariant(text, number)[2] == []
    counted = _call("call:write{content:12 apples, 3 pears")
    assert check_split_invariant(counted, _request(write=["content"]))[2] == []


def test_the_tool_response_token_after_a_call_is_debris() -> None:
    req = _request(get_weather=["location"])
    call = _call(f"call:get_weather{{location:{Q}Paris{Q}}}")
    got = check_split_invariant(call + "<|tool_response>Done.", req)
    assert got[:3] == ("Done.", "", [("get_weather", {"location": "Paris"})])
