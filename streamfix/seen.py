"""What a client assembles from a stream, as the OpenAI SDK merges it
(strings of a tool-call delta concatenated by ``index``), and how the tools
print it: shared by ``demo``, ``probe`` and ``replay``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from .jsoncodec import loads_lenient
from .sse import DONE, SSEDecoder

#: The one tool the demo and the probe offer.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@dataclass
class Seen:
    content: str = ""
    reasoning: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish: str | None = None
    errors: list[str] = field(default_factory=list)
    done: bool = False
    chunks: int = 0
    ext: dict[str, Any] | None = None  # the "streamfix" field of a finish


def chunks_of(data: bytes, seen: Seen) -> Iterator[dict[str, Any]]:
    """The chunk objects of a stream as a client reads them (leniently, as
    the SDKs do); ``[DONE]``, the chunk count and error events go into
    ``seen``."""
    dec = SSEDecoder()
    for ev in dec.feed(data) + dec.close():
        if ev.data is None:
            continue
        if ev.data == DONE:
            seen.done = True
            continue
        obj = loads_lenient(ev.data)  # as the SDK reads it
        seen.chunks += 1
        if isinstance(obj, dict) and "error" in obj:
            err = obj["error"]
            seen.errors.append(str(err.get("message") if isinstance(err, dict) else err))
            continue
        if isinstance(obj, dict):
            yield obj


def assemble(data: bytes) -> Seen:
    """Merge deltas as the OpenAI SDK does (strings concatenated by index)."""
    seen = Seen()
    for obj in chunks_of(data, seen):
        for ch in obj.get("choices") or ():
            delta = ch.get("delta") or {}
            seen.content += delta.get("content") or ""
            seen.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
            for tc in delta.get("tool_calls") or ():
                slot = seen.calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                seen.finish = ch["finish_reason"]
            if isinstance(ch.get("streamfix"), dict):
                seen.ext = ch["streamfix"]
    return seen


def describe(seen: Seen) -> list[str]:
    lines = []
    content = seen.content
    if len(content) > 160:
        lines.append(f"content: {content[:100]!r}… ({len(content)} chars in all)")
    else:
        lines.append(f"content: {content!r}")
    if seen.reasoning:
        lines.append(f"reasoning_content: {seen.reasoning!r}")
    for i, c in sorted(seen.calls.items()):
        lines.append(f"tool_calls[{i}]: {c['name']}({c['arguments']})")
    if not seen.calls:
        lines.append("tool_calls: none")
    lines.append(f"finish_reason: {seen.finish}")
    if seen.ext:
        lines.append(f"streamfix: {orjson.dumps(seen.ext).decode()}")
    for e in seen.errors:
        lines.append(f"error: {e}")
    return lines
