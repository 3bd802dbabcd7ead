"""What a client assembles from a reply, as the OpenAI SDK merges a stream
(strings of a tool-call delta concatenated by ``index``) or reads a whole
completion, and how the commands print it: shared by the probe and replay
(``server/probe.py``, ``server/replay.py``), the operator page, the demo and
``streamfix.testing``."""

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
    #: Parts of the reply that are not what the format says (a ``delta``
    #: that is a string, ``arguments`` that are a number, a ``null``
    #: choice): left out of the view, each said once here.
    odd: list[str] = field(default_factory=list)


def _obj(seen: Seen, value: Any, what: str) -> dict[str, Any]:
    """``value`` if it is an object; else {} and a note (None: nothing)."""
    if isinstance(value, dict):
        return value
    if value is not None:
        _note(seen, f"{what} is {_kind(value)}, not an object: left out")
    return {}


def _objs(seen: Seen, value: Any, what: str) -> list[dict[str, Any]]:
    """The objects of the array ``value``; anything else noted."""
    if value is None:
        return []
    if not isinstance(value, list):
        _note(seen, f"{what} is {_kind(value)}, not an array: left out")
        return []
    out = []
    for i, v in enumerate(value):
        if isinstance(v, dict):
            out.append(v)
        else:
            _note(seen, f"{what}[{i}] is {_kind(v)}, not an object: left out")
    return out


def _str(seen: Seen, value: Any, what: str) -> str:
    """``value`` if it is a string; else "" and a note (None: nothing)."""
    if isinstance(value, str):
        return value
    if value is not None:
        _note(seen, f"{what} is {_kind(value)}, not a string: left out")
    return ""


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__} ({str(value)[:40]!r})"


def _note(seen: Seen, note: str) -> None:
    if note not in seen.odd and len(seen.odd) < 20:
        seen.odd.append(note)


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
        for ch in _objs(seen, obj.get("choices"), "a chunk's choices"):
            delta = _obj(seen, ch.get("delta"), "a delta")
            seen.content += _str(seen, delta.get("content"), "a delta's content")
            seen.reasoning += _reasoning(seen, delta)
            for tc in _objs(seen, delta.get("tool_calls"), "a delta's tool_calls"):
                index = tc.get("index", 0)
                if not isinstance(index, int):
                    _note(seen, f"a tool call's index is {_kind(index)}: read as 0")
                    index = 0
                slot = seen.calls.setdefault(index, {"name": "", "arguments": ""})
                fn = _obj(seen, tc.get("function"), "a tool call's function")
                slot["name"] += _str(seen, fn.get("name"), "a call's name")
                slot["arguments"] += _str(seen, fn.get("arguments"), "a call's arguments")
            _finish(seen, ch)
    return seen


def _reasoning(seen: Seen, part: dict[str, Any]) -> str:
    value = part.get("reasoning_content") or part.get("reasoning")
    return _str(seen, value, "reasoning") if value else ""


def _finish(seen: Seen, ch: dict[str, Any]) -> None:
    if ch.get("finish_reason"):
        seen.finish = str(ch["finish_reason"])
    if isinstance(ch.get("streamfix"), dict):
        seen.ext = ch["streamfix"]


def seen_of_completion(obj: Any) -> Seen:
    """A non-streamed reply (a completion, or an error object) as a view."""
    seen = Seen()
    if not isinstance(obj, dict):
        seen.errors.append(f"not a JSON object: {str(obj)[:80]}")
        return seen
    if "error" in obj:
        err = obj["error"]
        seen.errors.append(str(err.get("message") if isinstance(err, dict) else err))
        return seen
    for ch in _objs(seen, obj.get("choices"), "the choices"):
        msg = _obj(seen, ch.get("message"), "a message")
        seen.content += _str(seen, msg.get("content"), "a message's content")
        seen.reasoning += _reasoning(seen, msg)
        for i, tc in enumerate(_objs(seen, msg.get("tool_calls"), "a message's tool_calls")):
            fn = _obj(seen, tc.get("function"), "a tool call's function")
            seen.calls[i] = {
                "name": _str(seen, fn.get("name"), "a call's name"),
                "arguments": _str(seen, fn.get("arguments"), "a call's arguments"),
            }
        _finish(seen, ch)
    return seen


def _text_choices(seen: Seen, choices: Any) -> None:
    for ch in _objs(seen, choices, "the choices"):
        seen.content += _str(seen, ch.get("text"), "a choice's text")
        _finish(seen, ch)


def assemble_text(data: bytes) -> Seen:
    """A streamed text completion as a client joins it: each choice's text."""
    seen = Seen()
    for obj in chunks_of(data, seen):
        _text_choices(seen, obj.get("choices"))
    return seen


def seen_of_text_completion(obj: Any) -> Seen:
    """A whole text completion (or an error object) as a view."""
    if not isinstance(obj, dict) or "error" in obj:
        return seen_of_completion(obj)
    seen = Seen()
    _text_choices(seen, obj.get("choices"))
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
    for o in seen.odd:
        lines.append(f"odd: {o}")
    return lines
