"""MiniCPM 5 calls (``<function name="…"><param name="…">…</param></function>``,
issue 35; the engine corpus holds llama.cpp's cases): a CDATA value is
taken as it stands, a value is typed by the schema, and prose that only
mentions the tag is text."""

from __future__ import annotations

from typing import Any

from .support.detectutil import check_split_invariant

REQUEST: dict[str, Any] = {
    "model": "openbmb/MiniCPM5-1B",
    "messages": [{"role": "user", "content": "x"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "write",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
                },
            },
        }
    ],
}


def test_values_typed_by_the_schema_and_cdata_as_it_stands() -> None:
    text = (
        '<function name="write"><param name="path">007</param>'
        '<param name="lines">3</param></function>'
    )
    assert check_split_invariant(text, REQUEST)[2] == [("write", {"path": "007", "lines": 3})]
    text = '<function name="write"><param name="path"><![CDATA[a</param>b]]></param></function>'
    assert check_split_invariant(text, REQUEST)[2] == [("write", {"path": "a</param>b"})]


def test_a_mention_of_the_tag_in_prose_is_text() -> None:
    text = 'In XML you write <function name="write, with quotes> and so on.'
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [] and content == text


def test_an_element_with_stray_text_between_params_is_not_lifted() -> None:
    text = (
        '<function name="write"><param name="path">a</param> and then '
        '<param name="lines">3</param></function>'
    )
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [] and "and then" in content  # given back, not dropped


def test_params_in_an_arguments_element() -> None:
    # Ollama's MiniCPM 5 parser test (tool_call_with_arguments_wrapper).
    text = (
        '<function name="write"><arguments><param name="path">a.txt</param>'
        '<param name="lines">3</param></arguments></function>'
    )
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [("write", {"path": "a.txt", "lines": 3})] and not content


def test_a_parameter_written_twice_is_not_lifted() -> None:
    # SGLang's MiniCPM 5 test (test_duplicate_param_names_invalid_v3).
    text = (
        '<function name="write"><param name="path">a.txt</param>'
        '<param name="path">b.txt</param></function>'
    )
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [] and "b.txt" in content  # given back, not run with a guess
