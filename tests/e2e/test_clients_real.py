"""Real clients through streamfix serve against the real model: the OpenAI
Python SDK (streaming, non-streaming, the streaming helper) and LangChain's
``ChatOpenAI.bind_tools`` (streamed and not).

The model (SmolLM2-135M, shown one worked example) writes its call as
``<tool_call>{…}</tool_call>`` text most of the time. The reference is the
reply the server sent for the same request (recorded by the relay): when it
holds a valid call, the client must see exactly that call, structured.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from streamfix.tools.local import AppThread
from tests.e2e.common import GET_WEATHER, TOOL_AS_TEXT_MESSAGES, valid_calls_in
from tests.e2e.relay import RecordingRelay

pytestmark = pytest.mark.e2e

Calls = list[tuple[str, Any]]
MAX_TOKENS = 60


@pytest.fixture(scope="module")
def sdk(proxy: AppThread) -> Any:
    with openai.OpenAI(api_key="sk-local", base_url=proxy.base_url, max_retries=0) as client:
        yield client


def _check(relay: RecordingRelay, mark: int, calls: Calls, content: str | None) -> None:
    direct = relay.only_chat_since(mark).content()
    expected = valid_calls_in(direct)
    assert "<tool_call>" not in (content or "")
    if expected:
        assert calls == expected, f"server wrote {direct!r}"


def _kwargs() -> dict[str, Any]:
    return {
        "model": "smollm2",
        "messages": TOOL_AS_TEXT_MESSAGES,
        "tools": [GET_WEATHER],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }


def test_sdk_not_streamed(sdk: Any, relay: RecordingRelay) -> None:
    mark = relay.mark()
    out = sdk.chat.completions.create(**_kwargs())
    msg = out.choices[0].message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
    _check(relay, mark, calls, msg.content)
    if calls:
        assert out.choices[0].finish_reason == "tool_calls"


def test_sdk_streamed(sdk: Any, relay: RecordingRelay) -> None:
    mark = relay.mark()
    content, by_index, finish = "", {}, None
    for ev in sdk.chat.completions.create(**_kwargs(), stream=True):
        if not ev.choices:
            continue
        delta = ev.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            cur = by_index.setdefault(tc.index, ["", ""])
            cur[0] += (tc.function and tc.function.name) or ""
            cur[1] += (tc.function and tc.function.arguments) or ""
        finish = ev.choices[0].finish_reason or finish
    calls = [(n, json.loads(a)) for n, a in (by_index[i] for i in sorted(by_index))]
    _check(relay, mark, calls, content)
    if calls:
        assert finish == "tool_calls"


def test_sdk_stream_helper(sdk: Any, relay: RecordingRelay) -> None:
    """``client.chat.completions.stream`` accumulates the tool calls itself."""
    mark = relay.mark()
    done_events = []
    with sdk.chat.completions.stream(**_kwargs()) as stream:
        for ev in stream:
            if ev.type == "tool_calls.function.arguments.done":
                done_events.append(ev.name)
        final = stream.get_final_completion()
    msg = final.choices[0].message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
    _check(relay, mark, calls, msg.content)
    assert done_events == [n for n, _ in calls]


@pytest.fixture(scope="module")
def chat_model(proxy: AppThread) -> Any:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(
        model="smollm2",
        base_url=proxy.base_url,
        api_key="sk-local",
        max_retries=0,
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    return llm.bind_tools([GET_WEATHER])


def _lc_calls(msg: Any) -> Calls:
    return [(c["name"], c["args"]) for c in msg.tool_calls]


def test_langchain_not_streamed(chat_model: Any, relay: RecordingRelay) -> None:
    mark = relay.mark()
    msg = chat_model.invoke(TOOL_AS_TEXT_MESSAGES)
    _check(relay, mark, _lc_calls(msg), str(msg.content))
    assert not msg.invalid_tool_calls


def test_langchain_streamed(chat_model: Any, relay: RecordingRelay) -> None:
    mark = relay.mark()
    acc = None
    for part in chat_model.stream(TOOL_AS_TEXT_MESSAGES):
        acc = part if acc is None else acc + part
    assert acc is not None
    _check(relay, mark, _lc_calls(acc), str(acc.content))
    assert not acc.invalid_tool_calls
