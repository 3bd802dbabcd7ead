"""Kimi K2 calls written one after another without ``<|tool_call_end|>``
between them (llama.cpp's Kimi K2 tests): the next
``<|tool_call_begin|>`` outside a string ends the call before it, so both
are read; inside a JSON string it is data."""

from __future__ import annotations

from typing import Any

from .support.detectutil import check_split_invariant


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props}
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = [
    _tool("special_function", {"arg1": {"type": "integer"}}),
    _tool("python", {"code": {"type": "string"}}),
]


def _request() -> dict[str, Any]:
    return {
        "model": "moonshotai/Kimi-K2-Instruct",
        "messages": [{"role": "user", "content": "x"}],
        "tools": TOOLS,
    }


def _call(name: str, n: int, args: str) -> str:
    return f"<|tool_call_begin|>functions.{name}:{n}<|tool_call_argument_begin|>{args}"


def test_calls_without_their_end_tokens() -> None:
    text = (
        "Two calls. "
        + _call("special_function", 0, '{"arg1": 1}')
        + _call("python", 1, '{"code": "print(1)"}')
    )
    content, _, calls, finish = check_split_invariant(text, _request())
    assert calls == [("special_function", {"arg1": 1}), ("python", {"code": "print(1)"})]
    assert content == "Two calls. " and finish == "tool_calls"


def test_the_token_inside_a_string_is_data() -> None:
    code = 'print(\\"<|tool_call_begin|>\\")'
    text = _call("python", 0, '{"code": "' + code + '"}') + "<|tool_call_end|>"
    _, _, calls, _ = check_split_invariant(text, _request())
    assert calls == [("python", {"code": 'print("<|tool_call_begin|>")'})]
