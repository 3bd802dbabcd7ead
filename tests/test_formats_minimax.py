"""MiniMax M2's blocks with a close the model left out (Ollama's MiniMax M2
parser tests): in a block the wrapper's close ended, a missing
``</invoke>`` or last ``</parameter>`` is implied by the close after it; in
a block the stream cut, it is a value cut off, never lifted."""

from __future__ import annotations

from typing import Any

from streamfix.formats.minimax import MiniMax

from .support.detectutil import check_split_invariant

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
    },
}
REQUEST: dict[str, Any] = {"model": "minimax-m2", "messages": [], "tools": [TOOL]}
TOKYO = ("get_weather", {"location": "Tokyo"})
OPEN, CLOSE = "<minimax:tool_call>\n", "</minimax:tool_call>"
INVOKE = '<invoke name="get_weather">\n<parameter name="location">Tokyo'


def test_a_missing_invoke_close_is_implied_by_the_wrapper_close() -> None:
    text = OPEN + INVOKE + "</parameter>\n" + CLOSE
    assert check_split_invariant(text, REQUEST)[:3] == ("", "", [TOKYO])


def test_a_missing_parameter_close_is_implied_by_the_invoke_close() -> None:
    text = OPEN + INVOKE + "</invoke>\n" + CLOSE + "\nDone."
    assert check_split_invariant(text, REQUEST)[:3] == ("Done.", "", [TOKYO])


def test_a_block_the_stream_cut_lifts_no_cut_value() -> None:
    fmt = MiniMax()
    tools: dict[str, Any] = {}
    assert fmt.parse(OPEN + INVOKE + "\n", tools) is None
    assert fmt.parse(OPEN + INVOKE + "</parameter>\n<invoke", tools) is None
    # the well-formed block reads as before
    got = fmt.parse(OPEN + INVOKE + "</parameter>\n</invoke>\n" + CLOSE, tools)
    assert got is not None and [(c.name, c.arguments) for c in got] == [TOKYO]
