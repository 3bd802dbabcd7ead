"""Test helpers shared by every test module: build upstream SSE streams,
feed them through the chain at any chunking, and assemble what a client
(the OpenAI SDK's merge rules) would see."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

import streamfix

#: Raw SSE recorded from llama.cpp's server with SmolLM2-135M (see the README
#: beside them for how and with which server version).
CAPTURES = Path(__file__).resolve().parent.parent / "captures" / "llama-cpp-python-smollm2"


def tool(
    name: str, properties: dict[str, Any] | None = None, required: Sequence[str] = ()
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": properties or {},
                "required": list(required),
            },
        },
    }


#: The tools offered in the shape examples (tests/test_formats_core.py).
SHAPES_TOOLS = [
    tool("lookup_order", {"order_id": {"type": "string"}}, ["order_id"]),
    tool(
        "create_ticket", {"title": {"type": "string"}, "priority": {"type": "integer"}}, ["title"]
    ),
    tool("refresh_cache"),
]
SHAPES_REQUEST: dict[str, Any] = {"model": "m", "messages": [], "tools": SHAPES_TOOLS}


def chunk(
    content: str | None = None,
    *,
    finish: str | None = None,
    role: str | None = None,
    index: int = 0,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    obj: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if extra:
        obj.update(extra)
    return obj


def sse(chunks: Iterable[dict[str, Any]], done: bool = True) -> bytes:
    out = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


def text_stream(pieces: Sequence[str], finish: str = "stop", done: bool = True) -> bytes:
    """An upstream stream: a role chunk, one chunk per piece of content, a
    finish chunk, ``[DONE]``."""
    return sse(
        [chunk(role="assistant", content="")] + [chunk(p) for p in pieces] + [chunk(finish=finish)],
        done,
    )


def with_usage(data: bytes, usage: dict[str, Any]) -> bytes:
    """``data`` (a stream ending in ``[DONE]``) with a usage chunk (no
    choices, as servers send it with ``include_usage``) before the end."""
    tail = sse([{**chunk(), "choices": [], "usage": usage}], done=False)
    return data.replace(b"data: [DONE]\n\n", tail + b"data: [DONE]\n\n")


_S = TypeVar("_S", str, bytes)


def split_bytes(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def split_at(data: _S, cuts: Iterable[int]) -> list[_S]:
    """``data`` (bytes or text) cut at the offsets in ``cuts`` that fall
    inside it."""
    points = sorted({c for c in cuts if 0 < c < len(data)})
    parts, prev = [], 0
    for p in points:
        parts.append(data[prev:p])
        prev = p
    parts.append(data[prev:])
    return parts


def split_sizes(text: str, sizes: Sequence[int]) -> list[str]:
    """``text`` cut into pieces of the given sizes, cycling through them."""
    pieces, i, k = [], 0, 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        pieces.append(text[i : i + n])
        i += n
        k += 1
    return pieces


async def _aiter(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for p in parts:
        yield p


def run_sse(
    parts: bytes | Sequence[bytes], request: dict[str, Any] | None = None, **options: Any
) -> bytes:
    """Feed ``parts`` (or one bytes object) through ``fix_sse``; the output."""
    if isinstance(parts, bytes):
        parts = [parts]

    async def go() -> bytes:
        return b"".join([b async for b in streamfix.fix_sse(_aiter(parts), request, **options)])

    return asyncio.run(go())


@dataclass
class Assembled:
    """What a client assembles from a stream (OpenAI SDK merge rules:
    strings appended, tool calls merged by index)."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    ext: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    comments: int = 0
    chunks: int = 0

    def calls(self) -> list[tuple[str, Any]]:
        """(name, decoded arguments) per call, in order."""
        return [
            (c["function"]["name"], orjson.loads(c["function"]["arguments"] or "{}"))
            for c in self.tool_calls
        ]


def assemble(data: bytes) -> Assembled:
    a = Assembled()
    by_index: dict[int, dict[str, Any]] = {}
    for block in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not block.strip():
            continue
        lines = block.split(b"\n")
        payload = b"\n".join(
            line[6:] if line.startswith(b"data: ") else line[5:]
            for line in lines
            if line.startswith(b"data:")
        )
        if not any(line.startswith(b"data:") for line in lines):
            a.comments += 1
            continue
        if payload == b"[DONE]":
            a.done = True
            continue
        obj = orjson.loads(payload)
        if "error" in obj:
            a.errors.append(obj["error"])
            continue
        a.chunks += 1
        for ch in obj.get("choices") or []:
            if ch.get("index", 0) != 0:
                continue
            d = ch.get("delta") or {}
            a.content += d.get("content") or ""
            a.reasoning += d.get("reasoning_content") or d.get("reasoning") or ""
            for tc in d.get("tool_calls") or []:
                cur = by_index.setdefault(
                    tc["index"],
                    {"id": None, "type": None, "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    cur["id"] = tc["id"]
                if tc.get("type"):
                    cur["type"] = tc["type"]
                fn = tc.get("function") or {}
                cur["function"]["name"] += fn.get("name") or ""
                cur["function"]["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                a.finish_reason = ch["finish_reason"]
            if ch.get("streamfix"):
                a.ext = ch["streamfix"]
    a.tool_calls = [by_index[i] for i in sorted(by_index)]
    return a


def fix_text(
    pieces: Sequence[str],
    request: dict[str, Any] | None = SHAPES_REQUEST,
    finish: str = "stop",
    **options: Any,
) -> Assembled:
    """Convenience: content pieces -> upstream stream -> streamfix -> assembled."""
    return assemble(run_sse(text_stream(pieces, finish), request, **options))


def tc(
    index: int | None = None,
    id: str | None = None,
    name: str | None = None,
    args: str | None = None,
) -> dict[str, Any]:
    """One structured tool-call fragment as servers stream it (only the
    keys given)."""
    out: dict[str, Any] = {}
    if index is not None:
        out["index"] = index
    if id is not None:
        out["id"] = id
        out["type"] = "function"
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if args is not None:
        fn["arguments"] = args
    if fn:
        out["function"] = fn
    return out


def stream_of(*pieces: list[dict[str, Any]], finish: str = "tool_calls") -> bytes:
    """A stream of tool-call fragments, one chunk per list, then ``finish``."""
    return sse(
        [chunk(role="assistant")] + [chunk(tool_calls=p) for p in pieces] + [chunk(finish=finish)]
    )


def fixed_whole(
    content: str, request: dict[str, Any], finish: str = "stop"
) -> tuple[dict[str, Any], Any]:
    """The chain's non-streamed result for a reply of ``content``: the
    choice it returns, and the request's report."""
    from streamfix.chain import Chain
    from streamfix.context import Context

    comp = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
    }
    ctx = Context.of(request, {})
    return Chain(ctx).complete(comp)["choices"][0], ctx.report
