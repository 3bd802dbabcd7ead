"""Kimi K2 calls whose id is a bare counter (``0``, no ``functions.NAME``),
as vLLM's Kimi K2 tests write them (issue 35): the call is the one offered
tool's, or the one tool whose parameters the arguments fit; when no single
tool fits, the call names nothing and is given back as text."""

from __future__ import annotations

from typing import Any

from .support.detectutil import check_split_invariant


def _tool(name: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "parameters": params}}


WEATHER = _tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string"}}, ["city"])
READ = _tool("read_file", {"path": {"type": "string"}}, ["path"])
FORECAST = _tool("get_forecast", {"city": {"type": "string"}}, ["city"])


def _request(*tools: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "moonshotai/Kimi-K2-Instruct",
        "messages": [{"role": "user", "content": "x"}],
        "tools": list(tools),
    }


def _counter_call(args: str) -> str:
    return (
        "Let me check. <|tool_calls_section_begin|><|tool_call_begin|>0 "
        f"<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>"
    )


def test_the_one_tool_offered_is_the_calls() -> None:
    text = _counter_call('{"city": "Tokyo"}')
    content, _, calls, finish = check_split_invariant(text, _request(WEATHER))
    assert calls == [("get_weather", {"city": "Tokyo"})] and finish == "tool_calls"
    assert content == "Let me check. "


def test_the_tool_the_arguments_fit() -> None:
    text = _counter_call('{"city": "Tokyo", "unit": "celsius"}')
    _, _, calls, _ = check_split_invariant(text, _request(READ, WEATHER))
    assert calls == [("get_weather", {"city": "Tokyo", "unit": "celsius"})]


def test_arguments_two_tools_fit_name_no_call() -> None:
    text = _counter_call('{"city": "Tokyo"}')  # get_weather's and get_forecast's
    content, _, calls, _ = check_split_invariant(text, _request(WEATHER, FORECAST, READ))
    assert calls == []
    assert "Tokyo" in content  # given back, not dropped


def test_a_named_call_is_not_renamed() -> None:
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0 "
        '<|tool_call_argument_begin|>{"path": "a.txt"}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    _, _, calls, _ = check_split_invariant(text, _request(READ, WEATHER))
    assert calls == [("read_file", {"path": "a.txt"})]
