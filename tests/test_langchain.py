"""LangChain's ``ChatOpenAI(...).bind_tools([...])`` as a client through the
proxy, against a scripted loopback upstream: structured calls (split
fragments, repeated ids) and text tool calls of several shapes must reach
LangChain as ``AIMessage.tool_calls``, streamed and not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("langchain_openai")

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI

from .support.streamutil import SHAPES_TOOLS, chunk, sse, text_stream
from .support.upstream_fake import (
    AppServer,
    FakeUpstream,
    Reply,
    call_chunks,
    completion,
    proxy_app,
)

QUESTION = "Where is order A1?"


#: (id, the model's text, the calls LangChain must see)
TEXT_SHAPES: list[tuple[str, str, list[tuple[str, dict[str, Any]]]]] = [
    (
        "hermes-tags",
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A1"}}\n</tool_call>',
        [("lookup_order", {"order_id": "A1"})],
    ),
    (
        "qwen-xml",
        "<tool_call>\n<function=create_ticket>\n<parameter=title>\nPrinter on fire\n"
        "</parameter>\n<parameter=priority>\n1\n</parameter>\n</function>\n</tool_call>",
        [("create_ticket", {"title": "Printer on fire", "priority": 1})],
    ),
    (
        "bare-json-fenced",
        '```json\n{"name": "lookup_order", "parameters": {"order_id": "C-3"}}\n```',
        [("lookup_order", {"order_id": "C-3"})],
    ),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_id": "M-1"}}]',
        [("lookup_order", {"order_id": "M-1"})],
    ),
    (
        "two-calls",
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}</tool_call>\n'
        '<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call>',
        [("lookup_order", {"order_id": "A1"}), ("refresh_cache", {})],
    ),
]


def _pieces(text: str, size: int = 3) -> list[str]:
    """The text as a model streams it: a few characters per chunk."""
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.fixture
async def stack() -> AsyncIterator[tuple[FakeUpstream, Any]]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        llm = ChatOpenAI(
            model="m",
            base_url=px.url,
            api_key="sk-test",  # type: ignore[arg-type]
            max_retries=0,
            temperature=0,
        )
        yield up, llm.bind_tools(SHAPES_TOOLS)


def _calls(msg: AIMessage) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["args"]) for c in msg.tool_calls]


async def _streamed(llm: Any) -> AIMessageChunk:
    acc: AIMessageChunk | None = None
    async for part in llm.astream(QUESTION):
        acc = part if acc is None else acc + part
    assert acc is not None
    return acc


async def test_structured_call_streamed(stack: tuple[FakeUpstream, Any]) -> None:
    up, llm = stack
    up.push(Reply.stream(call_chunks("lookup_order", '{"order_id": "A1"}', pieces=4)))
    msg = await _streamed(llm)
    assert _calls(msg) == [("lookup_order", {"order_id": "A1"})]
    assert not msg.invalid_tool_calls
    assert msg.response_metadata.get("finish_reason") == "tool_calls"


async def test_structured_call_with_repeated_id_and_name_streamed(
    stack: tuple[FakeUpstream, Any],
) -> None:
    """llama-cpp-python repeats the id and the name in every delta (capture
    b2): without repair LangChain would join the names."""
    up, llm = stack
    frags = ["{", '"order_id"', ': "A1"', "}"]
    chunks = [chunk(role="assistant")]
    for f in frags:
        tc = {"index": 0, "id": "call_x", "type": "function",
              "function": {"name": "lookup_order", "arguments": f}}  # fmt: skip
        chunks.append(chunk(tool_calls=[tc]))
    chunks.append(chunk(finish="tool_calls"))
    up.push(Reply.stream(sse(chunks)))
    msg = await _streamed(llm)
    assert _calls(msg) == [("lookup_order", {"order_id": "A1"})]


async def test_structured_call_not_streamed(stack: tuple[FakeUpstream, Any]) -> None:
    up, llm = stack
    call = {"id": "call_1", "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}  # fmt: skip
    up.push(Reply.json(completion(None, tool_calls=[call], finish="tool_calls")))
    msg = await llm.ainvoke(QUESTION)
    assert _calls(msg) == [("lookup_order", {"order_id": "A1"})]


async def test_plain_text_stays_text(stack: tuple[FakeUpstream, Any]) -> None:
    up, llm = stack
    up.push(Reply.stream(text_stream(_pieces("Order A1 left <b>today</b>, {not a call}."))))
    msg = await _streamed(llm)
    assert msg.content == "Order A1 left <b>today</b>, {not a call}."
    assert msg.tool_calls == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param(t, e, id=i) for i, t, e in TEXT_SHAPES],
)
async def test_text_tool_call_streamed(
    stack: tuple[FakeUpstream, Any], text: str, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    up, llm = stack
    up.push(Reply.stream(text_stream(_pieces(text))))
    msg = await _streamed(llm)
    assert _calls(msg) == expected
    assert not msg.invalid_tool_calls
    assert not str(msg.content).strip()  # no markup left as text
    assert msg.response_metadata.get("finish_reason") == "tool_calls"


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param(t, e, id=i) for i, t, e in TEXT_SHAPES],
)
async def test_text_tool_call_not_streamed(
    stack: tuple[FakeUpstream, Any], text: str, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    up, llm = stack
    up.push(Reply.json(completion(text)))
    msg = await llm.ainvoke(QUESTION)
    assert _calls(msg) == expected
    assert not str(msg.content).strip()
    assert msg.response_metadata.get("finish_reason") == "tool_calls"
