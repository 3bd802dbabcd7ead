"""Property tests of the doors (issue 31): for random valid requests
(histories with text, tool calls, tool results, images, system parts),
the upstream's chat request carries every part docs/doors.md says is
mapped, and the reply the SDK accumulates from the stream equals the
non-streamed reply. Through the real SDKs, the proxy (on a vision row)
and a scripted loopback upstream.

And a fuzz of each door's request schema (issue 37, item 9): a rich
valid body with one to three fields replaced by any JSON value or
removed is answered 2xx, or 4xx in the door's error shape; never 5xx."""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfix.tools.local import AppThread

from .support.streamutil import chunk, sse, with_usage
from .support.upstream_fake import FakeUpstream, Received, Reply, completion, proxy_app

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]
phrase = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5, unique=True).map(" ".join)
image = st.binary(min_size=1, max_size=24).map(lambda b: base64.b64encode(b).decode())


@st.composite
def history(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Turns: ("user", [text or ("image", data)]), ("call", (id, name,
    args, result parts)), ("assistant", text)."""
    turns: list[tuple[str, Any]] = []
    for n in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "call", "assistant"])) if n else "user"
        if kind == "user":
            parts = draw(
                st.lists(
                    st.one_of(phrase, image.map(lambda d: ("image", d))), min_size=1, max_size=3
                )
            )
            turns.append(("user", parts))
        elif kind == "call":
            result = draw(
                st.lists(
                    st.one_of(phrase, image.map(lambda d: ("image", d))), min_size=1, max_size=2
                )
            )
            args = {"path": draw(phrase)}
            turns.append(
                ("call", (f"call{n}", draw(st.sampled_from(["read", "write"])), args, result))
            )
        else:
            turns.append(("assistant", draw(phrase)))
    if turns[-1][0] == "assistant":
        turns.append(("user", [draw(phrase)]))
    return turns


reply = st.tuples(phrase, st.one_of(st.none(), phrase))  # text, a call's path


def url(data: str) -> str:
    return f"data:image/png;base64,{data}"


def chat_strings(body: dict[str, Any]) -> tuple[str, set[str], set[str]]:
    """All text of the chat request, its image URLs, its call ids."""
    texts: list[str] = []
    urls: set[str] = set()
    ids: set[str] = set()
    for m in body["messages"]:
        c = m.get("content")
        if isinstance(c, str):
            texts.append(c)
        for p in c if isinstance(c, list) else ():
            if p["type"] == "text":
                texts.append(p["text"])
            else:
                urls.add(p["image_url"]["url"])
        for tc in m.get("tool_calls") or ():
            ids.add(tc["id"])
            texts.append(tc["function"]["arguments"])
        if m.get("role") == "tool":
            ids.add(m["tool_call_id"])
    return "\n".join(texts), urls, ids


def expected(system: str, turns: list[tuple[str, Any]]) -> tuple[list[str], set[str], set[str]]:
    texts = [system]
    urls: set[str] = set()
    ids: set[str] = set()
    for kind, value in turns:
        if kind == "assistant":
            texts.append(value)
        elif kind == "user":
            for p in value:
                (urls.add(url(p[1])) if isinstance(p, tuple) else texts.append(p))
        else:
            call_id, _, args, result = value
            ids.add(call_id)
            texts.append(args["path"])
            for p in result:
                (urls.add(url(p[1])) if isinstance(p, tuple) else texts.append(p))
    return texts, urls, ids


def scripted(text: str, path: str | None) -> Any:
    call = None
    if path is not None:
        call = {
            "id": "r1",
            "type": "function",
            "function": {"name": "read", "arguments": f'{{"path": "{path}"}}'},
        }

    def handler(rec: Received) -> Reply:
        if not rec.body.get("stream"):
            return Reply.json(
                completion(
                    text, [call] if call else None, "tool_calls" if call else "stop", usage=USAGE
                )
            )
        chunks = [chunk(role="assistant"), chunk(text)]
        if call:
            chunks.append(chunk(tool_calls=[{"index": 0, **call}]))
        chunks.append(chunk(finish="tool_calls" if call else "stop"))
        return Reply.stream(with_usage(sse(chunks), USAGE))

    return handler


def check_sent(up: FakeUpstream, system: str, turns: list[tuple[str, Any]]) -> None:
    texts, urls, ids = expected(system, turns)
    for rec in up.chat_requests:
        got_text, got_urls, got_ids = chat_strings(rec.body)
        assert all(t in got_text for t in texts), (texts, got_text)
        assert got_urls == urls and got_ids == ids


TOOLS_A = [
    {"name": n, "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
    for n in ("read", "write")
]
TOOLS_R = [
    {"type": "function", "name": t["name"], "parameters": t["input_schema"]} for t in TOOLS_A
]


def as_messages(turns: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def block(p: Any) -> dict[str, Any]:
        if isinstance(p, tuple):
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": p[1]},
            }
        return {"type": "text", "text": p}

    for kind, value in turns:
        if kind == "user":
            out.append({"role": "user", "content": [block(p) for p in value]})
        elif kind == "assistant":
            out.append({"role": "assistant", "content": value})
        else:
            call_id, name, args, result = value
            out.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
                }
            )
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": call_id,
                            "content": [block(p) for p in result],
                        }
                    ],
                }
            )
    return out


def as_input(turns: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def part(p: Any) -> dict[str, Any]:
        if isinstance(p, tuple):
            return {"type": "input_image", "image_url": url(p[1])}
        return {"type": "input_text", "text": p}

    for kind, value in turns:
        if kind == "user":
            out.append({"role": "user", "content": [part(p) for p in value]})
        elif kind == "assistant":
            out.append({"role": "assistant", "content": [{"type": "output_text", "text": value}]})
        else:
            call_id, name, args, result = value
            out.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": name,
                    "arguments": f'{{"path": "{args["path"]}"}}',
                }
            )
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": [part(p) for p in result],
                }
            )
    return out


#: Fresh ids and times, and what openai-python's stream accumulator adds.
_SDK_ADDED = ("id", "created_at", "parsed", "parsed_arguments")


def strip_ids(obj: Any) -> Any:
    """``obj`` without what differs by design: fresh ids and times, and
    the fields openai-python's stream accumulator adds."""
    if isinstance(obj, dict):
        return {k: strip_ids(v) for k, v in obj.items() if k not in _SDK_ADDED}
    if isinstance(obj, list):
        return [strip_ids(v) for v in obj]
    return obj


USAGE = {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}


class Stack:
    """One scripted upstream (on a vision row) and one proxy, each in its
    own thread, shared by a test's examples (a server per example would
    spend the test's time starting servers)."""

    def __init__(self) -> None:
        self.up = FakeUpstream()
        self.up_thread = AppThread(self.up.app).start()
        self.px = AppThread(proxy_app(self.up_thread.base_url + "#vision=true")).start()

    def script(self, text: str, path: str | None) -> None:
        self.up.requests.clear()
        self.up.handler = scripted(text, path)

    def stop(self) -> None:
        self.px.stop()
        self.up_thread.stop()


@pytest.fixture(scope="module")
def servers() -> Iterator[Stack]:
    s = Stack()
    try:
        yield s
    finally:
        s.stop()


PROPS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@PROPS
@given(phrase, history(), reply)
def test_messages_door_maps_every_part(
    servers: Stack, system: str, turns: list[tuple[str, Any]], out: tuple[str, str | None]
) -> None:
    servers.script(*out)
    with anthropic.Anthropic(api_key="k", base_url=servers.px.root_url, max_retries=0) as client:
        kw: dict[str, Any] = {
            "model": "m",
            "max_tokens": 256,
            "system": [{"type": "text", "text": system}],
            "messages": as_messages(turns),
            "tools": TOOLS_A,
        }
        whole = client.messages.create(**kw)
        with client.messages.stream(**kw) as s:
            streamed = s.get_final_message()
    check_sent(servers.up, system, turns)
    assert strip_ids(streamed.model_dump()) == strip_ids(whole.model_dump())
    assert whole.stop_reason == ("tool_use" if out[1] else "end_turn")


@PROPS
@given(phrase, history(), reply)
def test_responses_door_maps_every_part(
    servers: Stack, system: str, turns: list[tuple[str, Any]], out: tuple[str, str | None]
) -> None:
    servers.script(*out)
    with openai.OpenAI(api_key="k", base_url=servers.px.base_url, max_retries=0) as client:
        kw: dict[str, Any] = {
            "model": "m",
            "instructions": system,
            "input": as_input(turns),
            "tools": TOOLS_R,
        }
        whole = client.responses.create(**kw)
        with client.responses.stream(**kw) as s:
            streamed = s.get_final_response()
    check_sent(servers.up, system, turns)
    assert strip_ids(streamed.model_dump()) == strip_ids(whole.model_dump())


# -- every malformed field is a 4xx in the door's shape (issue 37, item 9) ---------

#: A Messages request using every field the door reads.
MESSAGES_FULL: dict[str, Any] = {
    "model": "m",
    "max_tokens": 100,
    "system": [{"type": "text", "text": "sys"}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                },
                {
                    "type": "document",
                    "title": "t",
                    "source": {"type": "text", "media_type": "text/plain", "data": "doc"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "x"},
                {"type": "thinking", "thinking": "t"},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "r"}],
                }
            ],
        },
    ],
    "tools": TOOLS_A,
    "tool_choice": {"type": "tool", "name": "read", "disable_parallel_tool_use": True},
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 3,
    "stop_sequences": ["END"],
    "metadata": {"user_id": "u"},
    "thinking": {"type": "enabled", "budget_tokens": 50},
    "output_config": {
        "effort": "low",
        "format": {"type": "json_schema", "schema": {"type": "object"}},
    },
}

#: A Responses request using every field the door reads.
RESPONSES_FULL: dict[str, Any] = {
    "model": "m",
    "instructions": "sys",
    "input": [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": url("AAAA")},
                {
                    "type": "input_file",
                    "filename": "a.txt",
                    "file_data": "data:text/plain;base64,aGk=",
                },
            ],
        },
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "x"}, {"type": "refusal", "refusal": "no"}],
        },
        {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "y"},
    ],
    "tools": [
        *TOOLS_R,
        {
            "type": "custom",
            "name": "g",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"},
        },
        {
            "type": "namespace",
            "name": "ns",
            "tools": [{"type": "function", "name": "f", "parameters": {}}],
        },
    ],
    "tool_choice": {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "read"}],
    },
    "temperature": 0.5,
    "top_p": 0.9,
    "max_output_tokens": 50,
    "parallel_tool_calls": True,
    "metadata": {"a": "b"},
    "reasoning": {"effort": "low"},
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
}

#: Words the doors compare fields with, so that a mutation often lands
#: on a known branch with a wrong neighbour.
_WORDS = ["", "x", "m", "read", "tool", "auto", "any", "none", "text", "function", "user"]
_WORDS += ["assistant", "json_schema", "enabled", "base64", "image", "data:text/plain,x"]
json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(_WORDS),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "name", "text", "content", "source", "id"]), inner, max_size=3
        )
    ),
    max_leaves=6,
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*at, i))


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with one to three fields, at any depth, replaced by any
    JSON value or removed (never ``stream``: both answers are checked)."""
    body = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from([p for p in _paths(body) if p and p[0] != "stream"]))
        parent: Any = body
        for key in where[:-1]:
            parent = parent[key]
        if draw(st.booleans()) and draw(st.booleans()):
            del parent[where[-1]]
        else:
            parent[where[-1]] = draw(json_value)
    body["stream"] = draw(st.booleans())
    return body


FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def check_door_answer(path: str, r: httpx.Response) -> None:
    """2xx, or 4xx in the door's own error shape."""
    assert r.status_code < 500, (r.status_code, r.text[:400])
    if r.status_code < 300:
        return
    err = r.json()
    if path == "/v1/messages":
        assert err["type"] == "error" and isinstance(err["error"]["type"], str), err
        assert isinstance(err["error"]["message"], str)
    else:
        assert isinstance(err["error"]["type"], str) and isinstance(err["error"]["message"], str)


@FUZZ
@given(mutated(MESSAGES_FULL))
def test_any_malformed_messages_field_is_a_4xx_in_anthropic_shape(
    servers: Stack, body: dict[str, Any]
) -> None:
    servers.script('{"ok": true}', None)
    r = httpx.post(servers.px.root_url + "/v1/messages", json=body, timeout=30)
    check_door_answer("/v1/messages", r)


@FUZZ
@given(mutated(RESPONSES_FULL))
def test_any_malformed_responses_field_is_a_4xx_in_openai_shape(
    servers: Stack, body: dict[str, Any]
) -> None:
    servers.script('{"ok": true}', None)
    r = httpx.post(servers.px.root_url + "/v1/responses", json=body, timeout=30)
    check_door_answer("/v1/responses", r)


@pytest.mark.parametrize("choice", [{"type": []}, {}, {"type": {}}, {"type": 3}, []])
def test_a_malformed_tool_choice_is_a_400_not_a_500(servers: Stack, choice: Any) -> None:
    """The Messages bodies that found it (a 500 with a traceback)."""
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(
        servers.px.root_url + "/v1/messages", json={**body, "tool_choice": choice}, timeout=30
    )
    assert r.status_code == 400
    check_door_answer("/v1/messages", r)
