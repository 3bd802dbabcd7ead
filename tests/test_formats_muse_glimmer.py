"""Muse Glimmer's messages (`` to=RECIPIENT<|message|>``) and its
``<atem:function_calls>`` calls (issue 35; the engine corpus holds
llama.cpp's cases): ``to=self`` is reasoning, ``to=user`` the answer, a
message to a tool holding a block is a call, and a block inside the answer
or the reasoning is text. Harmony's calls, which share the header, still
read."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.formats.registry import by_name

from .support.detectutil import check_split_invariant, result, run_pieces


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": props}},
    }


REQUEST: dict[str, Any] = {
    "model": "muse/glimmer",
    "messages": [{"role": "user", "content": "x"}],
    "tools": [
        _tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}),
        _tool("note", {"text": {"type": "string"}, "tags": {"type": "array"}}),
    ],
}

BLOCK = (
    "<atem:function_calls>\n"
    '<atem:invoke name="get_weather">\n'
    '<atem:parameter name="city">Paris</atem:parameter>\n'
    '<atem:parameter name="days">3</atem:parameter>\n'
    "</atem:invoke>\n"
    "</atem:function_calls>"
)
WEATHER = ("get_weather", {"city": "Paris", "days": 3})

REASONED_CALL = (
    " to=self<|message|>I should look it up.<|eom|>"
    f"<|start|>assistant to=get_weather<|message|>{BLOCK}"
)


def test_format_is_registered_before_harmony() -> None:
    assert by_name("muse_glimmer").priority < by_name("harmony").priority


def test_reasoning_then_a_call() -> None:
    content, reasoning, calls, finish = check_split_invariant(REASONED_CALL, REQUEST)
    assert (content, reasoning, calls, finish) == (
        "",
        "I should look it up.",
        [WEATHER],
        "tool_calls",
    )


def test_the_first_message_a_call() -> None:
    text = f" to=get_weather<|message|>{BLOCK}<|eom|>"
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert (content, calls) == ("", [WEATHER])


def test_the_answer_then_a_call() -> None:
    text = f" to=user<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|>{BLOCK}"
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert (content.strip(), calls) == ("Checking.", [WEATHER])


def test_values_as_the_schema_says_and_spaces_kept() -> None:
    text = (
        " to=note<|message|><atem:function_calls>\n"
        '<atem:invoke name="note">\n'
        '<atem:parameter name="text">  two spaces </atem:parameter>\n'
        '<atem:parameter name="tags">["a", "b"]</atem:parameter>\n'
        "</atem:invoke>\n"
        '<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Rome</atem:parameter>\n'
        "</atem:invoke>\n"
        "</atem:function_calls>"
    )
    _, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [
        ("note", {"text": "  two spaces ", "tags": ["a", "b"]}),
        ("get_weather", {"city": "Rome"}),
    ]


def test_a_message_token_slipped_into_the_invoke_name() -> None:
    """Ollama's Glimmer tests: the model writes ``<|message|>`` in the name,
    after it, or for the ``">`` that ends it; the call is the tool's."""
    params = '<atem:parameter name="city">Paris</atem:parameter>\n'
    for name in (
        'get_weather<|message|>">\n',
        "get_weather<|message|>",
        'get_<|message|>weather">',
        'get_weather<|message|><|message|>">',
    ):
        invoke = f'<atem:invoke name="{name}{params}</atem:invoke>'
        block = f"<atem:function_calls>\n{invoke}\n</atem:function_calls>"
        text = f" to=get_weather<|message|>{block}<|eot|>"
        got = check_split_invariant(text, REQUEST)
        assert got[:3] == ("", "", [("get_weather", {"city": "Paris"})]), name
    # in a value it is the value's
    block = BLOCK.replace(">Paris<", ">Paris <|message|> France<")
    got = check_split_invariant(f" to=get_weather<|message|>{block}", REQUEST)
    assert got[2] == [("get_weather", {"city": "Paris <|message|> France", "days": 3})]


def test_a_header_without_its_recipient_holding_a_block() -> None:
    """Ollama's Glimmer tests: the model leaves out the recipient, at the
    reply's start (``<|message|>``) or after its reasoning
    (``<|start|>assistant<|message|>``); a block of offered tools' calls is
    the call, anything else is text."""
    got = check_split_invariant(f"<|message|>{BLOCK}<|eom|>", REQUEST)
    assert got[:3] == ("", "", [WEATHER])
    text = f" to=self<|message|>Let me look.<|eom|><|start|>assistant<|message|>{BLOCK}<|eom|>"
    assert check_split_invariant(text, REQUEST)[:3] == ("", "Let me look.", [WEATHER])
    text = f"<|message|>{BLOCK}<|start|>assistant to=user<|message|>Done<|eot|>"
    assert check_split_invariant(text, REQUEST)[:3] == ("Done", "", [WEATHER])
    other = BLOCK.replace("get_weather", "other_tool")
    assert check_split_invariant(f"<|message|>{other}", REQUEST)[:3] == (other, "", [])
    assert check_split_invariant("<|message|>Hello.", REQUEST)[:3] == ("Hello.", "", [])


def test_a_block_in_the_answer_is_text() -> None:
    text = f" to=user<|message|>You call it so:\n{BLOCK}<|eot|>"
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert (content, calls) == (f"You call it so:\n{BLOCK}", [])


def test_a_block_in_the_reasoning_is_reasoning() -> None:
    text = f" to=self<|message|>Maybe {BLOCK} then.<|eom|><|start|>assistant to=user<|message|>Hi"
    content, reasoning, calls, _ = check_split_invariant(text, REQUEST)
    assert (content, reasoning, calls) == ("Hi", f"Maybe {BLOCK} then.", [])


def test_prose_starting_with_to_is_text() -> None:
    for text in ("to=5 is the index we want.", "to= the end", "to=do: buy milk"):
        content, _, calls, _ = check_split_invariant(text, REQUEST)
        assert (content, calls) == (text, []), text


def test_a_harmony_call_after_the_shared_header_still_reads() -> None:
    text = (
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Oslo"}<|call|>'
    )
    _, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [("get_weather", {"city": "Oslo"})]
    text = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}'
    _, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [("get_weather", {"city": "Oslo"})]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(REASONED_CALL) - 1), max_size=8))
def test_any_split_gives_the_same_whole(cuts: list[int]) -> None:
    bounds = [0, *sorted(set(cuts)), len(REASONED_CALL)]
    pieces = [REASONED_CALL[a:b] for a, b in pairwise(bounds)]
    got = result(run_pieces(pieces, REQUEST)[0])
    assert got == ("", "I should look it up.", [WEATHER], "tool_calls")
