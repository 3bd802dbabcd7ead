"""The core text shapes (one example of each, as users report them), each with its variants: run
whole, cut at every character boundary, one character per chunk, and at
random byte cuts of the SSE stream (hypothesis): identical results."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.formats import all_formats, by_name

from .support.detectutil import check_byte_cuts, check_split_invariant, run_pieces

LO: dict[str, Any] = {"order_id": "A-1001"}
Calls = list[tuple[str, dict[str, Any]]]

#: (id, content as the model wrote it, expected content, expected calls)
CASES: list[tuple[str, str, str, Calls]] = [
    # --- wrapper tags around JSON
    (
        "hermes",
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}\n</tool_call>',
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-compact",
        '<tool_call>{"name":"lookup_order","arguments":{"order_id":"A-1001"}}</tool_call>',
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-parameters-name-after",
        '<tool_call>{"parameters": {"order_id": "A-1001"}, "name": "lookup_order"}</tool_call>',
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-python-dict-trailing-commas",
        "<tool_call>\n{'name': 'lookup_order', 'arguments': {'order_id': 'A-1001',},}"
        "\n</tool_call>",
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-functions-prefix",
        '<tool_call>{"name": "functions.lookup_order", "arguments": {"order_id": "A-1001"}}'
        "</tool_call>",
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-arguments-as-json-string",
        '<tool_call>{"name": "lookup_order", "arguments": "{\\"order_id\\": \\"A-1001\\"}"}'
        "</tool_call>",
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-list",
        '<tool_calls>[{"name": "lookup_order", "arguments": {"order_id": "A-1001"}},'
        ' {"name": "refresh_cache", "arguments": {}}]</tool_calls>',
        "",
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    (
        "hermes-two-objects-one-tag",
        '<tool_call>\n{"name": "refresh_cache"}\n{"name": "lookup_order", "arguments": '
        '{"order_id": "A-1001"}}\n</tool_call>',
        "",
        [("refresh_cache", {}), ("lookup_order", LO)],
    ),
    (
        "hermes-first-closing-tag-forgotten",
        '<tool_call>{"name": "refresh_cache"}\n<tool_call>{"name": "lookup_order", '
        '"arguments": {"order_id": "A-1001"}}</tool_call>',
        "",
        [("refresh_cache", {}), ("lookup_order", LO)],
    ),
    (
        "function-call-tag",
        '<function_call>{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}'
        "</function_call>",
        "",
        [("lookup_order", LO)],
    ),
    (
        "tools-tag",
        '<tools>\n    {"name": "lookup_order", "arguments": {"order_id": "A-1001"}}\n</tools>',
        "",
        [("lookup_order", LO)],
    ),
    (
        "response-tag",
        '<response>{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}</response>',
        "",
        [("lookup_order", LO)],
    ),
    (
        "xml-fence-tools",
        '```xml\n<tools>\n    {"name": "lookup_order", "arguments": {"order_id": "B-7"}}\n'
        "</tools>\n```",
        "",
        [("lookup_order", {"order_id": "B-7"})],
    ),
    (
        "text-around-hermes",
        'Let me check.\n<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}'
        "</tool_call>\nDone.",
        "Let me check.\nDone.",
        [("lookup_order", LO)],
    ),
    (
        "two-hermes-with-text-between",
        'A <tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call> B '
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}</tool_call> C',
        "A  B  C",  # blanks after a word are content
        [("refresh_cache", {}), ("lookup_order", LO)],
    ),
    (
        "hermes-closing-tag-missing",
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}\n',
        "",
        [("lookup_order", LO)],
    ),
    (
        # A brace too many after the call (Ollama's tools/tools_test.go):
        # the tag says it is a call, the extra closers are debris.
        "hermes-a-brace-too-many",
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}}\n</tool_call>',
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-a-brace-too-many-closing-tag-missing",
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}}',
        "",
        [("lookup_order", LO)],
    ),
    (
        "hermes-close-tag-inside-a-json-string",
        '<tool_call>\n{"name": "create_ticket", "arguments": {"title": "Use <tool_call> and '
        '</tool_call> tags", "priority": 1}}\n</tool_call>',
        "",
        [("create_ticket", {"title": "Use <tool_call> and </tool_call> tags", "priority": 1})],
    ),
    (
        "hermes-unclosed-string-ends-at-a-close-on-its-own-line",
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A-1001}}\n</tool_call>'
        " Next.",
        # unreadable (the string never closes): given back as text (issue 35)
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A-1001}}\n</tool_call>'
        " Next.",
        [],
    ),
    # --- XML function syntax
    (
        "qwen-xml",
        "<tool_call>\n<function=create_ticket>\n<parameter=title>\nPrinter on fire\n</parameter>\n"
        "<parameter=priority>\n1\n</parameter>\n</function>\n</tool_call>",
        "",
        [("create_ticket", {"title": "Printer on fire", "priority": 1})],
    ),
    (
        "qwen-xml-unwrapped",
        '<function=create_ticket>\n<parameter=title>\n{"a": 1}\n</parameter>\n'
        "<parameter=priority>\n 3 \n</parameter>\n</function>",
        "",
        [("create_ticket", {"title": '{"a": 1}', "priority": 3})],
    ),
    (
        "qwen-xml-no-params",
        "<tool_call>\n<function=refresh_cache>\n</function>\n</tool_call>",
        "",
        [("refresh_cache", {})],
    ),
    (
        "qwen-xml-two-functions",
        "<tool_call>\n<function=refresh_cache>\n</function>\n<function=lookup_order>\n"
        "<parameter=order_id>\nA-1001\n</parameter>\n</function>\n</tool_call>",
        "",
        [("refresh_cache", {}), ("lookup_order", LO)],
    ),
    (
        "qwen-xml-closing-tags-inside-a-value",
        "<tool_call>\n<function=create_ticket>\n<parameter=title>\nClose with </parameter>, "
        "</function> then </tool_call>; open with <parameter=x>.\n</parameter>\n"
        "<parameter=priority>\n2\n</parameter>\n</function>\n</tool_call> Done.",
        "Done.",
        [
            (
                "create_ticket",
                {
                    "title": "Close with </parameter>, </function> then </tool_call>; "
                    "open with <parameter=x>.",
                    "priority": 2,
                },
            )
        ],
    ),
    (
        "qwen-xml-bare-function-close-inside-a-value",
        "<function=create_ticket>\n<parameter=title>\nend it with </function>\n</parameter>\n"
        "</function> Done.",
        "Done.",
        [("create_ticket", {"title": "end it with </function>"})],
    ),
    # --- bare JSON
    (
        "bare-json",
        '{"name": "lookup_order", "arguments": {"order_id": "C-3"}}',
        "",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "bare-json-leading-whitespace",
        '\n\n  {"name": "lookup_order", "parameters": {"order_id": "C-3"}}\n',
        "",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "bare-json-list",
        '[{"name": "lookup_order", "arguments": {"order_id": "C-3"}}, {"name": "refresh_cache"}]',
        "",
        [("lookup_order", {"order_id": "C-3"}), ("refresh_cache", {})],
    ),
    (
        # The reply ends after a whole call without the list's ']'
        # (Ollama's tools/tools_test.go "list partial").
        "bare-json-list-unclosed",
        '[{"name": "lookup_order", "arguments": {"order_id": "C-3"}}, {"name": "refresh_cache"}',
        "",
        [("lookup_order", {"order_id": "C-3"}), ("refresh_cache", {})],
    ),
    (
        "bare-json-list-unclosed-then-prose",
        '[{"name": "lookup_order", "arguments": {"order_id": "C-3"}}\nThat is the shape.',
        '[{"name": "lookup_order", "arguments": {"order_id": "C-3"}}\nThat is the shape.',
        [],
    ),
    (
        "bare-json-list-a-bracket-too-many",
        '[{"name": "lookup_order", "arguments": {"order_id": "C-3"}}]\n]',
        "",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "bare-json-fenced",
        '```json\n{"name": "lookup_order", "arguments": {"order_id": "C-3"}}\n```',
        "",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        # DeepSeek V3 glues the object to the info word (no newline).
        "bare-json-fenced-glued",
        '```json{"name": "lookup_order", "parameters": {"order_id": "C-3"}}```',
        "",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "bare-json-fenced-glued-then-text",
        'Checking.```json{"name": "lookup_order", "arguments": {"order_id": "C-3"}}```',
        "Checking.",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "python-fence-glued-stays-text",
        "```python{x = 1}```",
        "```python{x = 1}```",
        [],
    ),
    (
        "bare-json-openai-shape",
        '{"type": "function", "function": {"name": "lookup_order", "arguments": '
        '"{\\"order_id\\": \\"C-3\\"}"}}',
        "",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "bare-json-python-dict",
        "{'name': 'create_ticket', 'arguments': {'title': 'x', 'priority': '2',},}",
        "",
        [("create_ticket", {"title": "x", "priority": 2})],
    ),
    (
        "bare-json-then-text",
        '{"name": "refresh_cache", "arguments": {}}\nCache refreshed.',
        "Cache refreshed.",
        [("refresh_cache", {})],
    ),
    (
        "bare-json-after-text-on-its-line",
        'Let me look that up.\n{"name": "lookup_order", "arguments": {"order_id": "C-3"}}',
        "Let me look that up.",
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "bare-json-mid-line-is-text",
        'The call is {"name": "lookup_order", "arguments": {"order_id": "C-3"}} here.',
        'The call is {"name": "lookup_order", "arguments": {"order_id": "C-3"}} here.',
        [],
    ),
    # --- one line of code
    (
        "code-call-json",
        'Saving that now.\ncreate_ticket({"title": "Refund request", "priority": 2})',
        "Saving that now.",
        [("create_ticket", {"title": "Refund request", "priority": 2})],
    ),
    (
        "code-call-kwargs",
        'lookup_order(order_id="D-4")\n',
        "",
        [("lookup_order", {"order_id": "D-4"})],
    ),
    (
        "code-call-functions-prefix",
        "functions.lookup_order(order_id='D-4')",
        "",
        [("lookup_order", {"order_id": "D-4"})],
    ),
    (
        # the code-line rule (issue 35): prose after a line of code makes it
        # an example, kept as text in place
        "code-call-no-args-then-text",
        "One moment.\nrefresh_cache()\nAll set.",
        "One moment.\nrefresh_cache()\nAll set.",
        [],
    ),
    (
        "code-call-no-args-then-blanks",
        "One moment.\nrefresh_cache()\n\n",
        "One moment.",
        [("refresh_cache", {})],
    ),
    (
        "code-call-positional-single-param",
        'lookup_order("D-4")',
        "",
        [("lookup_order", {"order_id": "D-4"})],
    ),
    # --- pythonic
    (
        "pythonic-list",
        '[lookup_order(order_id="D-4"), refresh_cache()]',
        "",
        [("lookup_order", {"order_id": "D-4"}), ("refresh_cache", {})],
    ),
    (
        "pythonic-after-text",
        'Checking.\n[lookup_order(order_id="D-4")]',
        "Checking.",
        [("lookup_order", {"order_id": "D-4"})],
    ),
    (
        "tool-code-fence",
        '```tool_code\nlookup_order(order_id="D-4")\n```',
        "",
        [("lookup_order", {"order_id": "D-4"})],
    ),
    (
        "tool-code-fence-print",
        '```tool_code\nprint(default_api.lookup_order(order_id="D-4"))\n```',
        "",
        [("lookup_order", {"order_id": "D-4"})],
    ),
    # --- call: prefixes
    (
        "call-prefix",
        'call:lookup_order{"order_id": "E-5"}',
        "",
        [("lookup_order", {"order_id": "E-5"})],
    ),
    (
        "call-prefix-namespace",
        'call:tools:lookup_order{"order_id": "E-5"}',
        "",
        [("lookup_order", {"order_id": "E-5"})],
    ),
    (
        "call-prefix-after-text",
        "On it. call:create_ticket{'title': 'x', 'priority': 1,}",
        "On it.",  # after a sentence: layout
        [("create_ticket", {"title": "x", "priority": 1})],
    ),
    (
        "call-prefix-bare-keys",
        'call:lookup_order{order_id: "E-5"}',
        "",
        [("lookup_order", {"order_id": "E-5"})],
    ),
    # --- placeholder
    ("placeholder", "{{ refresh_cache }}", "", [("refresh_cache", {})]),
    ("placeholder-tight", "{{refresh_cache}}", "", [("refresh_cache", {})]),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_shape_at_every_split(text: str, content: str, calls: Calls) -> None:
    got = check_split_invariant(text)
    assert got == (content, "", calls, "tool_calls" if calls else "stop")


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_shape_non_streaming_is_the_same(text: str, content: str, calls: Calls) -> None:
    import orjson

    import streamfix

    from .support.streamutil import SHAPES_REQUEST

    completion = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    out = streamfix.fix_completion(completion, SHAPES_REQUEST)
    msg = out["choices"][0]["message"]
    got = [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in msg.get("tool_calls") or []
    ]
    assert got == calls
    assert (msg.get("content") or "") == content
    assert out["choices"][0]["finish_reason"] == ("tool_calls" if calls else "stop")


@given(
    st.sampled_from(CASES),
    st.lists(st.integers(min_value=0, max_value=10**6), max_size=12),
)
def test_shape_random_byte_cuts(case: tuple[str, str, str, Calls], cuts: list[int]) -> None:
    check_byte_cuts(case[1], cuts)


def test_every_core_format_is_registered() -> None:
    names = {f.name for f in all_formats()}
    for n in (
        "hermes",
        "tags",
        "qwen_xml",
        "bare_json",
        "fenced",
        "code_call",
        "pythonic",
        "call_prefix",
        "placeholder",
    ):
        assert n in names
    assert by_name("hermes").priority < by_name("qwen_xml").priority


def test_calls_have_ids_and_indexes() -> None:
    text = '[lookup_order(order_id="D-4"), refresh_cache()]'
    a, _ = run_pieces([text])
    assert [c["id"] for c in a.tool_calls] and all(
        c["id"].startswith("call_") for c in a.tool_calls
    )
    assert len({c["id"] for c in a.tool_calls}) == 2
    assert all(c["type"] == "function" for c in a.tool_calls)


def test_an_unclosed_list_cut_by_the_token_limit_is_no_call() -> None:
    """At a ``length`` cut, a list whose ']' never came may have lost its
    next call: cut off as a whole, not run in part."""
    text = '[{"name": "lookup_order", "arguments": {"order_id": "C-3"}}'
    assert check_split_invariant(text, finish="length") == ("", "", [], "length")
