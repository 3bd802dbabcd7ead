"""Requests and helpers shared by the end-to-end tests."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson

from tests.support.streamutil import Assembled, assemble

GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

#: A system prompt and one worked example: SmolLM2-135M then writes the
#: call as text (``<tool_call>{…}</tool_call>``), as capture
#: ``d_toolcall_as_text.sse`` shows. llama-cpp-python ignores ``tools``
#: under ``tool_choice: auto`` (capture ``c_tools_nostream.json``), so the
#: call arrives as content.
TOOL_AS_TEXT_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You call tools. Answer only with a tool call in this format: "
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    },
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    },
    {"role": "user", "content": "What is the weather in Tokyo?"},
]

#: Makes this model loop at temperature 0 without a repetition penalty
#: (capture ``e_repetition_cat_mat_exact_loop.sse``).
LOOP_REQUEST: dict[str, Any] = {
    "model": "smollm2",
    "messages": [
        {"role": "user", "content": "Write a poem where every line is: the cat sat on the mat."}
    ],
    "max_tokens": 300,
    "temperature": 0,
    "repeat_penalty": 1.0,
}

_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def valid_calls_in(text: str, tools: tuple[str, ...] = ("get_weather",)) -> list[tuple[str, Any]]:
    """The ``<tool_call>{json}</tool_call>`` calls in ``text`` that name an
    offered tool with an object of arguments: the reference for what
    streamfix must lift."""
    calls = []
    for m in _CALL_RE.finditer(text):
        try:
            obj = orjson.loads(m.group(1))
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or obj.get("name") not in tools:
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, dict):
            calls.append((obj["name"], args))
    return calls


def post_stream(http: httpx.Client, base_url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """POST a streamed chat request; the status and every byte received."""
    with http.stream("POST", f"{base_url}/chat/completions", json={**body, "stream": True}) as resp:
        data = b"".join(resp.iter_bytes())
        return resp.status_code, data


def post_json(http: httpx.Client, base_url: str, body: dict[str, Any]) -> tuple[int, Any]:
    resp = http.post(f"{base_url}/chat/completions", json={**body, "stream": False})
    return resp.status_code, resp.json() if resp.content else None


def stream_assembled(http: httpx.Client, base_url: str, body: dict[str, Any]) -> Assembled:
    status, data = post_stream(http, base_url, body)
    assert status == 200, data[:500]
    return assemble(data)


def deltas(data: bytes) -> list[dict[str, Any]]:
    """Every choice-0 delta of an SSE body."""
    out = []
    for line in data.split(b"\n"):
        if line.startswith(b"data: {"):
            obj = orjson.loads(line[6:])
            for ch in obj.get("choices") or []:
                if ch.get("index", 0) == 0:
                    out.append(ch.get("delta") or {})
    return out
