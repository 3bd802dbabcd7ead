"""Apertus 1.5's template never opens ``<|inner_prefix|>`` in the prompt
(Ollama's Apertus 1.5 parser tests): with thinking on, a sentence before a
call is the answer's; reasoning the model opens itself is still reasoning."""

from __future__ import annotations

from typing import Any

from .support.detectutil import check_split_invariant

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
REQUEST: dict[str, Any] = {
    "model": "apertus1.5:8b",
    "messages": [],
    "tools": [TOOL],
    "chat_template_kwargs": {"enable_thinking": True},
}
CALL = '<|tools_prefix|>[{"get_weather":{"city":"Zurich"}}]<|tools_suffix|>'
ZURICH = ("get_weather", {"city": "Zurich"})


def test_thinking_on_the_prompt_opens_no_reasoning() -> None:
    got = check_split_invariant("I will check." + CALL, REQUEST)
    assert got[:3] == ("I will check.", "", [ZURICH])


def test_its_own_reasoning_is_still_reasoning() -> None:
    text = "<|inner_prefix|>Need weather.<|inner_suffix|>I will check." + CALL
    got = check_split_invariant(text, REQUEST)
    assert got[:3] == ("I will check.", "Need weather.", [ZURICH])
