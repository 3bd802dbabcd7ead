"""IQuest-Q1's ``<iquest_tool_call>`` calls (SGLang ``iquest_q1_detector.py``
and its tests): GLM's argument pairs, string values kept exactly."""

from __future__ import annotations

from typing import Any

from streamfix.formats.iquest import IQuest

from .support.detectutil import check_split_invariant, run_pieces

RUN: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run",
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "count": {"type": "integer"},
                "enabled": {"type": "boolean"},
                "items": {"type": "array"},
            },
        },
    },
}
REQUEST: dict[str, Any] = {"model": "IQuestLab/IQuest-Q1", "messages": [], "tools": [RUN]}
CALL = (
    "<iquest_tool_call>run\n"
    '<arg_key>code</arg_key><arg_value>  "123"\n</arg_value>'
    "<arg_key>count</arg_key> <arg_value>42</arg_value>\n"
    "<arg_key>enabled</arg_key><arg_value>true</arg_value>"
    "<arg_key>items</arg_key><arg_value>[1, null]</arg_value></iquest_tool_call>"
)
ARGS = {"code": '  "123"\n', "count": 42, "enabled": True, "items": [1, None]}


def test_a_call_with_typed_values_and_text_around() -> None:
    got = check_split_invariant("before" + CALL + "after", REQUEST)
    assert got == ("beforeafter", "", [("run", ARGS)], "tool_calls")
    _, report = run_pieces([CALL + CALL], REQUEST)
    assert report.counts["lifted.iquest"] == 2


def test_a_call_without_arguments() -> None:
    text = "<iquest_tool_call>run</iquest_tool_call>"
    assert check_split_invariant(text, REQUEST) == ("", "", [("run", {})], "tool_calls")


def test_an_unfinished_call_at_the_end_is_text() -> None:
    text = "before<iquest_tool_call>run<arg_key>code</arg_key>"
    assert check_split_invariant(text, REQUEST) == (text, "", [], "stop")


def test_a_string_parameter_declared_by_reference_keeps_its_text() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {
                "$defs": {"code": {"type": "string"}},
                "type": "object",
                "properties": {"code": {"$ref": "#/$defs/code"}},
            },
        },
    }
    request = {**REQUEST, "tools": [tool]}
    text = (
        "<iquest_tool_call>run<arg_key>code</arg_key><arg_value>42</arg_value></iquest_tool_call>"
    )
    assert check_split_invariant(text, request) == ("", "", [("run", {"code": "42"})], "tool_calls")


def test_the_format_reads_only_its_own_tag() -> None:
    fmt = IQuest()
    assert fmt.parse(CALL, {}) is not None
    assert fmt.parse("<tool_call>run</tool_call>", {}) is None
    assert fmt.is_complete(CALL) and not fmt.is_complete(CALL[: -len("</iquest_tool_call>")])
