"""GLM calls as the engines' other tests write them (issue 35): arguments as
``key=value`` words after the name (mlx-lm), and a call written
JSON-escaped, a literal ``\\n`` between the tags and ``\\"`` in the values
(SGLang's GLM 4.5 test)."""

from __future__ import annotations

from typing import Any

from .support.detectutil import check_split_invariant

REQUEST: dict[str, Any] = {
    "model": "zai-org/GLM-4.7",
    "messages": [{"role": "user", "content": "x"}],
    "chat_template_kwargs": {"enable_thinking": False},
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "multiply",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "todo_write",
                "parameters": {"type": "object", "properties": {"todos": {"type": "array"}}},
            },
        },
    ],
}


def test_key_value_words_after_the_name() -> None:
    text = '<tool_call>multiply a=3 b="4"</tool_call>'
    assert check_split_invariant(text, REQUEST) == (
        "",
        "",
        [("multiply", {"a": 3, "b": 4})],
        "tool_calls",
    )


def test_prose_after_the_name_is_not_key_value_words() -> None:
    text = "<tool_call>multiply the two numbers please</tool_call>"
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [] and content == text  # unreadable: given back


def test_a_call_written_json_escaped() -> None:
    text = (
        "<tool_call>todo_write\\n<arg_key>todos</arg_key>\\n"
        '<arg_value>[{\\"id\\": \\"1\\", \\"task\\": \\"a\\"}]</arg_value>\n</tool_call>'
    )
    assert check_split_invariant(text, REQUEST) == (
        "",
        "",
        [("todo_write", {"todos": [{"id": "1", "task": "a"}]})],
        "tool_calls",
    )


def test_an_array_value_written_json_escaped_in_plain_tags() -> None:
    # SGLang's GLM-4.7 test: only the value's quotes are escaped.
    text = (
        "<tool_call>todo_write<arg_key>todos</arg_key>"
        '<arg_value>[{\\"id\\": \\"1\\", \\"task\\": \\"a\\"}]</arg_value>\n</tool_call>'
    )
    assert check_split_invariant(text, REQUEST) == (
        "",
        "",
        [("todo_write", {"todos": [{"id": "1", "task": "a"}]})],
        "tool_calls",
    )


def test_a_string_value_with_escaped_quotes_stays_its_text() -> None:
    request = {
        **REQUEST,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "note",
                    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
                },
            }
        ],
    }
    text = '<tool_call>note<arg_key>text</arg_key><arg_value>[\\"a\\"]</arg_value></tool_call>'
    _, _, calls, _ = check_split_invariant(text, request)
    assert calls == [("note", {"text": '[\\"a\\"]'})]


# Ollama's GLM parser tests (model/parsers/glm46_test.go): a value's lost
# close before the next pair, and a reply that stops inside the close.


def test_a_value_that_lost_its_close_before_the_next_pair() -> None:
    text = (
        "<tool_call>multiply\n<arg_key>a</arg_key>\n<arg_value>3<arg_key>b</arg_key>\n"
        "<arg_value>4</arg_value></tool_call>"
    )
    assert check_split_invariant(text, REQUEST) == (
        "",
        "",
        [("multiply", {"a": 3, "b": 4})],
        "tool_calls",
    )


def test_an_undeclared_pair_inside_an_unclosed_value_stays_its_text() -> None:
    text = (
        "<tool_call>todo_write\n<arg_key>todos</arg_key>\n<arg_value>[]<arg_key>x</arg_key>"
        "<arg_value>1</arg_value></tool_call>"
    )
    _, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [("todo_write", {"todos": "[]<arg_key>x</arg_key><arg_value>1"})]


def test_a_reply_that_stops_inside_the_close() -> None:
    text = "<tool_call>multiply\n<arg_key>a</arg_key>\n<arg_value>3</arg_value></tool_"
    assert check_split_invariant(text, REQUEST) == ("", "", [("multiply", {"a": 3})], "tool_calls")


def test_a_reply_that_ends_inside_a_call_before_a_required_argument() -> None:
    request = {
        **REQUEST,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "write",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                        "required": ["path", "content"],
                    },
                },
            }
        ],
    }
    text = "<tool_call>write\n<arg_key>path</arg_key>\n<arg_value>out.txt</arg_value>"
    content, _, calls, _ = check_split_invariant(text, request)
    assert calls == [] and content == text  # not run: given back
    whole = text + "\n<arg_key>content</arg_key>\n<arg_value>hi</arg_value>"
    _, _, calls, _ = check_split_invariant(whole, request)
    assert calls == [("write", {"path": "out.txt", "content": "hi"})]


def test_a_key_that_holds_angle_brackets() -> None:
    request = {
        **REQUEST,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {
                        "type": "object",
                        "properties": {"x<1>": {"type": "string"}, "a>b": {"type": "string"}},
                    },
                },
            }
        ],
    }
    text = (
        "<tool_call>f\n<arg_key>x<1></arg_key>\n<arg_value>v</arg_value>\n"
        "<arg_key>a>b</arg_key>\n<arg_value>w</arg_value></tool_call>"
    )
    _, _, calls, _ = check_split_invariant(text, request)
    assert calls == [("f", {"x<1>": "v", "a>b": "w"})]


def test_ling_3_reasons_by_default() -> None:
    # Ling 3's template opens <think> unless thinking is off (Ollama's
    # Bailing parser tests): with no switch, the text before a lone close
    # is reasoning.
    request = {**REQUEST, "model": "inclusionAI/Ling-3.0-flash"}
    del request["chat_template_kwargs"]
    content, reasoning, calls, _ = check_split_invariant("plan</think>The answer.", request)
    assert (content, reasoning, calls) == ("The answer.", "plan", [])


def test_glm_5_3_flash_json_after_the_name_and_an_open_run() -> None:
    # GLM-5.3-Flash (SGLang's glm53_flash_detector): NAME>{json}, the call
    # left open, the next <tool_call> starting the next one.
    text = '<tool_call>multiply>{"a": 3, "b": 4}'
    assert check_split_invariant(text, REQUEST) == (
        "",
        "",
        [("multiply", {"a": 3, "b": 4})],
        "tool_calls",
    )
    text = 'Sure.<tool_call>multiply>{"a": 3}<tool_call>multiply>{"b": 2}'
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert content == "Sure."
    assert calls == [("multiply", {"a": 3}), ("multiply", {"b": 2})]


def test_glm_5_3_flash_a_call_marker_inside_a_value_is_data() -> None:
    text = '<tool_call>todo_write>{"todos": ["<tool_call>x"]}'
    _, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [("todo_write", {"todos": ["<tool_call>x"]})]


def test_a_name_then_a_greater_than_sign_in_prose_is_text() -> None:
    text = "The <tool_call>tags> are markers."
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [] and content == text
