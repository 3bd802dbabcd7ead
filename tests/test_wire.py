"""The doors' pure parts (``streamfix.wire``): request translation tables,
and the encoders fed repaired chat SSE bytes, cut anywhere."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from streamfix.errors import RequestError
from streamfix.sse import DONE_EVENT
from streamfix.wire.messages import MessagesDoor, reshape_error
from streamfix.wire.responses import ResponsesDoor, _custom_input
from streamfix.wire.turn import TurnEncoder, merge_system

from .support.streamutil import chunk, sse

USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
CALL = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "Write", "arguments": '{"file_path": "/a", "content": "hi"}'},
}
#: A repaired stream as the chain sends it: reasoning, text, a whole call,
#: the finish, usage, [DONE].
TURN = sse(
    [
        chunk(role="assistant"),
        chunk(reasoning="Think "),
        chunk(reasoning="more. ü"),
        chunk("Hello "),
        chunk("wörld"),
        chunk(tool_calls=[CALL]),
        chunk(finish="tool_calls"),
        {**chunk(), "choices": [], "usage": USAGE},
    ]
)
WRITE = {"name": "Write", "input_schema": {"type": "object"}}


def messages_door(**kw: Any) -> MessagesDoor:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    return MessagesDoor({**body, "tools": [WRITE], **kw})


def responses_door(**kw: Any) -> ResponsesDoor:
    tool = {"type": "function", "name": "Write", "parameters": {"type": "object"}}
    return ResponsesDoor({"model": "m", "input": "x", "tools": [tool], **kw})


def normalised(data: bytes) -> list[dict[str, Any]]:
    """The events of ``data`` with ids and times made equal."""
    text = re.sub(r"(msg|resp|fc|rs|ctc|tsc)_[0-9a-f]{24}", r"\1_X", data.decode())
    text = re.sub(r'"created_at":\d+', '"created_at":0', text)
    return [orjson.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


def feed_all(enc: TurnEncoder, parts: list[bytes]) -> bytes:
    return b"".join(enc.feed(p) for p in parts)


DOORS = [pytest.param(messages_door, id="messages"), pytest.param(responses_door, id="responses")]


@pytest.mark.parametrize("door", DOORS)
def test_encoders_are_split_invariant(door: Any) -> None:
    whole = normalised(door().encoder().feed(TURN))
    for size in (1, 2, 3, 7, 50):
        parts = [TURN[i : i + size] for i in range(0, len(TURN), size)]
        assert normalised(feed_all(door().encoder(), parts)) == whole, size


@pytest.mark.parametrize("door", DOORS)
def test_non_streamed_reply_is_the_streams_final_object(door: Any) -> None:
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning_content": "Think more. ü",
                    "content": "Hello wörld",
                    "tool_calls": [{k: v for k, v in CALL.items() if k != "index"}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": USAGE,
    }
    d = door()
    reply = normalised(b"data: " + orjson.dumps(d.reply(completion)) + b"\n\n")[0]
    events = normalised(door().encoder().feed(TURN))
    if isinstance(d, MessagesDoor):
        assert reply["content"] == [
            {"type": "thinking", "thinking": "Think more. ü", "signature": ""},
            {"type": "text", "text": "Hello wörld"},
            {
                "type": "tool_use",
                "id": "call_1",
                "name": "Write",
                "input": {"file_path": "/a", "content": "hi"},
            },
        ]
        assert reply["stop_reason"] == events[-2]["delta"]["stop_reason"] == "tool_use"
        assert reply["usage"] == events[-2]["usage"] == {"input_tokens": 5, "output_tokens": 3}
    else:
        final = events[-1]["response"]
        assert events[-1]["type"] == "response.completed"
        assert reply["output"] == final["output"]
        assert [o["type"] for o in reply["output"]] == ["reasoning", "message", "function_call"]
        assert reply["usage"] == final["usage"] and reply["usage"]["total_tokens"] == 8


def test_messages_keepalive_is_a_ping_and_an_error_ends_the_stream() -> None:
    enc = messages_door().encoder()
    first = enc.feed(b": keep-alive\n\n")
    assert first.count(b"event: ping") == 2  # the opening one and the keep-alive
    assert first.startswith(b"event: message_start\n")
    out = enc.feed(
        sse([chunk("part")], done=False)
        + b'data: {"error":{"message":"upstream died","type":"upstream_error"}}\n\n'
    )
    assert out.endswith(
        b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
        b'"message":"upstream died"}}\n\n'
    )
    assert enc.feed(DONE_EVENT) == b""  # nothing after the error


def test_responses_keepalive_is_an_in_progress_event() -> None:
    enc = responses_door().encoder()
    events = normalised(enc.feed(b": keep-alive\n\n") + enc.feed(b": keep-alive\n\n"))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.in_progress",
        "response.in_progress",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2, 3]


def test_responses_error_is_failed_then_an_error_the_sdk_raises() -> None:
    enc = responses_door().encoder()
    out = enc.feed(b'data: {"error":{"message":"gone","type":"upstream_error","code":"x"}}\n\n')
    events = normalised(out)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
        "error",
    ]
    assert events[2]["response"]["error"] == {"code": "x", "message": "gone"}
    assert events[3]["error"]["message"] == "gone"  # the key openai's Stream raises on
    assert [e["sequence_number"] for e in events] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("finish", "messages_reason", "responses_type"),
    [
        ("stop", "end_turn", "response.completed"),
        ("length", "max_tokens", "response.incomplete"),
        # no call was sent: an ordinary end, not tool_use (issue 31)
        ("tool_calls", "end_turn", "response.completed"),
        ("content_filter", "refusal", "response.incomplete"),
    ],
)
def test_finish_reasons(finish: str, messages_reason: str, responses_type: str) -> None:
    data = sse([chunk("x"), chunk(finish=finish)])
    m = normalised(messages_door().encoder().feed(data))
    assert m[-2]["delta"]["stop_reason"] == messages_reason
    r = normalised(responses_door().encoder().feed(data))
    assert r[-1]["type"] == responses_type


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "a"}], [{"role": "user", "content": "a"}]),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "system", "content": "env"},
                {"role": "developer", "content": "dev"},
            ],
            [{"role": "system", "content": "env\n\ndev"}, {"role": "user", "content": "a"}],
        ),
        (
            [{"role": "system", "content": "s"}, {"role": "system", "content": ""}],
            [{"role": "system", "content": "s"}],
        ),
    ],
)
def test_merge_system(messages: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert merge_system(messages) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('{"input": "*** Begin Patch"}', "*** Begin Patch"),
        ('{"patch": "only string"}', "only string"),
        ('{"a": "x", "b": "y"}', '{"a": "x", "b": "y"}'),
        ('"a JSON string"', "a JSON string"),
        ("not json at all", "not json at all"),
    ],
)
def test_custom_tool_input(args: str, expected: str) -> None:
    assert _custom_input(args) == expected


@pytest.mark.parametrize(
    ("thinking", "config", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, None, "low"),
        ({"type": "enabled", "budget_tokens": 4000}, None, "medium"),
        ({"type": "enabled", "budget_tokens": 31999}, None, "high"),
        ({"type": "adaptive"}, {"effort": "high"}, "high"),
        ({"type": "adaptive"}, None, "medium"),
        ({"type": "disabled"}, None, None),
    ],
)
def test_thinking_is_a_reasoning_effort(
    thinking: dict[str, Any], config: dict[str, Any] | None, effort: str | None
) -> None:
    kw: dict[str, Any] = {"thinking": thinking}
    if config is not None:
        kw["output_config"] = config
    assert messages_door(**kw).chat_body.get("reasoning_effort") == effort


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.content",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 3}]},
            "messages.0.content",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"description": "no name"}],
            },
            "tools.0",
        ),
    ],
)
def test_messages_bad_requests(body: Any, param: str | None) -> None:
    with pytest.raises(RequestError) as info:
        MessagesDoor(body)
    assert info.value.param == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": [3]}, "input[0]"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "tools": [{"type": "custom"}]}, "tools"),
    ],
)
def test_responses_bad_requests(body: Any, param: str | None) -> None:
    with pytest.raises(RequestError) as info:
        ResponsesDoor(body)
    assert info.value.param == param


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            400,
            b'{"error": {"message": "bad", "type": "invalid_request_error"}}',
            {"type": "invalid_request_error", "message": "bad"},
        ),
        (401, b'{"error": "no key"}', {"type": "authentication_error", "message": "no key"}),
        (502, b"<html>gateway</html>", {"type": "api_error", "message": "<html>gateway</html>"}),
        (503, b"{}", {"type": "overloaded_error", "message": "{}"}),
        (429, b'{"error": {"message": "slow"}}', {"type": "rate_limit_error", "message": "slow"}),
    ],
)
def test_errors_in_anthropic_shape(status: int, body: bytes, expected: dict[str, str]) -> None:
    assert orjson.loads(reshape_error(status, body)) == {"type": "error", "error": expected}


def test_server_tools_are_dropped_and_counted() -> None:
    m = messages_door(tools=[WRITE, {"type": "bash_20250124", "name": "bash"}])
    assert [t["function"]["name"] for t in m.chat_body["tools"]] == ["Write"]
    assert m.dropped == {"dropped_tool": 1}
    r = responses_door(tools=[{"type": "web_search"}, {"type": "file_search"}])
    assert "tools" not in r.chat_body and r.dropped == {"dropped_tool": 2}
