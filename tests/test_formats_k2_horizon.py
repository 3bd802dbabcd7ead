"""K2 Horizon calls (issue 35): ``<ifm|tool_calls>`` around
``<ifm|tool_call>NAME<ifm|arg_key>k</ifm|arg_key><ifm|arg_value>v</ifm|arg_value></ifm|tool_call>``
(an optional ``<ifm|arg_type>``; a JSON object in the call tag), as vLLM's
``k2_horizon_tool_parser.py`` and its reasoning tests read them. A call
after the prompt-opened reasoning ends it. A group holding anything but
calls is not one; prose that mentions the tag is text."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.formats import k2_horizon

from .support.detectutil import check_byte_cuts, check_split_invariant
from .support.streamutil import tool

REQUEST: dict[str, Any] = {
    "model": "k2-horizon",
    "messages": [{"role": "user", "content": "x"}],
    "tools": [
        tool("ping"),
        tool("search", {"query": {"type": "string"}, "count": {"type": "integer"}}, ["query"]),
    ],
}

PING = "<ifm|tool_calls><ifm|tool_call>ping</ifm|tool_call></ifm|tool_calls>"
TWO = (
    "<ifm|tool_calls>\n<ifm|tool_call>search<ifm|arg_key>query</ifm|arg_key>"
    "<ifm|arg_value>007</ifm|arg_value><ifm|arg_key>count</ifm|arg_key>"
    "<ifm|arg_type>integer</ifm|arg_type><ifm|arg_value> 5 </ifm|arg_value></ifm|tool_call>\n"
    '<ifm|tool_call>{"name": "ping", "arguments": {}}</ifm|tool_call>\n</ifm|tool_calls>'
)


def test_the_call_ends_the_prompt_opened_reasoning() -> None:
    """vLLM's ``test_composed_streaming_reasoning_to_tool_handoff``."""
    assert check_split_invariant("plan" + PING, REQUEST) == (
        "",
        "plan",
        [("ping", {})],
        "tool_calls",
    )


def test_typed_pairs_and_a_json_call_after_the_reasoning() -> None:
    content, reasoning, calls, _ = check_split_invariant("plan</ifm|think>Sure." + TWO, REQUEST)
    assert (content, reasoning) == ("Sure.", "plan")
    assert calls == [("search", {"query": "007", "count": 5}), ("ping", {})]


def test_a_group_with_stray_text_or_a_doubled_key_is_not_a_call() -> None:
    fmt = k2_horizon.K2Horizon()
    stray = "<ifm|tool_calls>note<ifm|tool_call>ping</ifm|tool_call></ifm|tool_calls>"
    doubled = (
        "<ifm|tool_calls><ifm|tool_call>search<ifm|arg_key>query</ifm|arg_key><ifm|arg_value>a"
        "</ifm|arg_value><ifm|arg_key>query</ifm|arg_key><ifm|arg_value>b</ifm|arg_value>"
        "</ifm|tool_call></ifm|tool_calls>"
    )
    assert fmt.parse(stray, {}) is None and fmt.parse(doubled, {}) is None


def test_a_mention_of_the_tag_in_prose_is_text() -> None:
    request = {**REQUEST, "model": "m"}
    text = "The template wraps calls in <ifm|tool_calls> and so on."
    content, _, calls, _ = check_split_invariant(text, request)
    assert (content, calls) == (text, [])


@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from(["plan" + PING, "plan</ifm|think>" + TWO, "a</ifm|think>b " + PING]),
    cuts=st.lists(st.integers(0, 3000), max_size=10),
)
def test_any_byte_split_gives_the_whole_result(text: str, cuts: list[int]) -> None:
    check_byte_cuts(text, cuts, REQUEST)


def test_a_call_without_the_group() -> None:
    """SGLang's ``test_k2_v3_detector.py`` writes ``<ifm|tool_call>`` alone;
    one that does not parse is shown as the model wrote it."""
    text = (
        "<ifm|tool_call>search<ifm|arg_key>query</ifm|arg_key><ifm|arg_value>a</ifm|arg_value>"
        '</ifm|tool_call><ifm|tool_call>{"name": "ping", "arguments": {}}</ifm|tool_call>'
    )
    request = {**REQUEST, "chat_template_kwargs": {"enable_thinking": False}}
    assert check_split_invariant(text, request) == (
        "",
        "",
        [("search", {"query": "a"}), ("ping", {})],
        "tool_calls",
    )


def test_a_parameter_declared_by_a_local_reference_is_typed_by_it() -> None:
    """SGLang's ``test_local_schema_ref_preserves_xml_string_value``: ``$ref``
    to a string in the tool's own ``$defs`` keeps ``123`` text."""
    params = {
        "type": "object",
        "$defs": {"Id": {"type": "string"}, "N": {"$ref": "#/$defs/Id"}},
        "properties": {"id": {"$ref": "#/$defs/N"}, "n": {"$ref": "#/$defs/missing"}},
    }
    request = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": params}}],
    }
    text = (
        "<ifm|tool_call>lookup<ifm|arg_key>id</ifm|arg_key><ifm|arg_value>123</ifm|arg_value>"
        "</ifm|tool_call>"
    )
    _, _, calls, _ = check_split_invariant(text, request)
    assert calls == [("lookup", {"id": "123"})]
