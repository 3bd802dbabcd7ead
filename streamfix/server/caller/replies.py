"""What the proxy answers besides a stream: error bodies in OpenAI's shape,
an upstream's error relayed, a whole reply read (bounded), and a whole
completion turned into the stream a client asked for.

*An upstream's error, relayed.* An OpenAI-shaped error (``{"error": …}``)
goes on as the upstream sent it; any other body (plain text, an HTML page,
FastAPI's ``{"detail": …}``, ``{"message": …}``) is wrapped into one that
keeps the upstream's own words (``upstream_message``: the configured keys
and anything shaped like a key removed first, then cut, so no piece of a
key survives the cut). Either way the upstream's
relayable headers go with it, ``Retry-After`` included, and a status the
proxy words itself is typed as OpenAI types it (``error_type``: a 429 is
``requests`` / ``rate_limit_exceeded``, a 5xx ``server_error``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ... import jsoncodec
from ...bodyreads import BodyReads
from ...sse import DONE_EVENT, encode_data
from .. import record
from ..upstream.pool import NO_RETRY, UpstreamFailure, error_body

#: Largest non-streamed upstream reply read into memory (bytes). A whole
#: completion is kilobytes, megabytes with logprobs; past this the
#: upstream is broken, and reading on would only grow memory.
MAX_REPLY_BYTES = 64 * 1024 * 1024

#: The OpenAI error type of an HTTP status (``error_type``).
STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "requests",
}

#: Characters of an upstream's own error text quoted to the client.
ERROR_TEXT_CHARS = 200


def error_type(status: int) -> str:
    """OpenAI's error type for ``status``: ``server_error`` for a 5xx (their
    500 and 503 bodies say so), ``requests`` for a 429 (with the code
    ``rate_limit_exceeded``), ``invalid_request_error`` for other 4xx."""
    if status >= 500:
        return "server_error"
    return STATUS_TYPES.get(status, "invalid_request_error")


class ReplyTooLarge(aiohttp.ClientPayloadError):
    """A non-streamed upstream reply over ``MAX_REPLY_BYTES`` (handled
    where other payload errors are: a 502 to the client)."""


async def read_reply(resp: aiohttp.ClientResponse, limit: int | None = None) -> bytes:
    """``resp``'s whole body, at most ``limit`` (default ``MAX_REPLY_BYTES``)
    bytes, else ReplyTooLarge."""
    limit = MAX_REPLY_BYTES if limit is None else limit
    parts: list[bytes] = []
    size = 0
    async for part in record.reads(BodyReads(resp.content)):
        size += len(part)
        if size > limit:
            raise ReplyTooLarge(f"reply larger than {limit} bytes")
        parts.append(part)
    return b"".join(parts)


def json_error(
    status: int, message: str, type_: str, code: str | None = None, param: str | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(error_body(message, type_, code, param)),
        content_type="application/json",
    )


def _openai_shaped(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("error"), (dict, str))


def is_error_object(obj: Any) -> bool:
    """A JSON reply that is an error, not a result: ``{"error": …}`` with
    no ``choices`` (or ``data``) beside it. Some servers answer so with an
    HTTP 200."""
    return (
        isinstance(obj, dict)
        and bool(obj.get("error"))
        and not isinstance(obj.get("choices"), list)
        and not isinstance(obj.get("data"), list)
    )


def upstream_message(obj: Any, raw: bytes, redact: Callable[[bytes], bytes] | None) -> str:
    """What an upstream's error body that is not OpenAI-shaped says: its
    ``detail`` or ``message`` (FastAPI, many gateways), else its text;
    redacted (``redact``, then anything shaped like a key: these are the
    proxy's own words), then cut to ``ERROR_TEXT_CHARS``."""
    said: Any = None
    if isinstance(obj, dict):
        said = obj.get("detail", obj.get("message"))
    if said is None or said == "":
        text = raw
    elif isinstance(said, str):
        text = said.encode()
    else:  # FastAPI's validation errors: a list of objects
        text = orjson.dumps(said)
    if redact is not None:
        text = redact(text)
    text = record.scrub_key_shapes(text)
    out = text.decode("utf-8", "replace").strip()
    return out[:ERROR_TEXT_CHARS] + ("…" if len(out) > ERROR_TEXT_CHARS else "")


def relay_error(
    status: int,
    raw: bytes,
    headers: Mapping[str, str],
    content_type: str,
    upstream: str,
    redact: Callable[[bytes], bytes] | None = None,
) -> web.Response:
    """An upstream's error answer for the client, as ``status`` (module
    doc): passed on as is when it is OpenAI-shaped, else wrapped into
    one, with the upstream's words, so SDKs can read it. ``upstream`` is
    how the caller hears the upstream named (``Scope.shown``)."""
    if redact is not None:
        raw = redact(raw)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if _openai_shaped(obj):
        out = web.Response(status=status, body=raw, headers=headers)
        out.content_type = content_type
        return out
    return _wrapped(
        status, upstream, upstream_message(obj, raw, None), headers, f"upstream_{status}"
    )


def _wrapped(
    status: int, upstream: str, text: str, headers: Mapping[str, str] | None, code: str | None
) -> web.Response:
    message = f"upstream {upstream} answered HTTP {status}" + (f": {text}" if text else "")
    if status == 429:
        code = "rate_limit_exceeded"
    out = json_error(status, message, error_type(status), code)
    if headers:
        out.headers.extend(headers)
    return out


def completion_to_sse(completion: dict[str, Any]) -> bytes:
    """A whole ``chat.completion`` as the stream a client expects: per
    choice, one chunk with the message, one with the finish reason; usage
    on the last; then ``[DONE]``."""
    top = {k: v for k, v in completion.items() if k not in ("choices", "usage", "object")}
    top["object"] = "chat.completion.chunk"
    chunks: list[dict[str, Any]] = []
    for pos, ch in enumerate(completion.get("choices") or ()):
        if not isinstance(ch, dict):
            continue
        index = ch.get("index", pos)
        delta = dict(ch.get("message") or {})
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [
                {"index": i, **c} for i, c in enumerate(calls) if isinstance(c, dict)
            ]
        extra = {k: v for k, v in ch.items() if k not in ("index", "message", "finish_reason")}
        chunks.append(
            {**top, "choices": [{"index": index, "delta": delta, **extra, "finish_reason": None}]}
        )
        fin = {"index": index, "delta": {}, "finish_reason": ch.get("finish_reason")}
        chunks.append({**top, "choices": [fin]})
    if "usage" in completion and chunks:
        chunks[-1]["usage"] = completion["usage"]
    return b"".join(encode_data(jsoncodec.dumps(c)) for c in chunks) + DONE_EVENT


def calls_in(obj: dict[str, Any]) -> int:
    n = 0
    for ch in obj.get("choices") or ():
        msg = ch.get("message") if isinstance(ch, dict) else None
        if isinstance(msg, dict) and isinstance(msg.get("tool_calls"), list):
            n += len(msg["tool_calls"])
    return n


def failure_response(
    f: UpstreamFailure,
    told: str,
    redact: Callable[[bytes], bytes] | None = None,
    retried: bool = False,
) -> web.Response:
    """No upstream answered usably: the last one's own error (a 429 or 5xx
    with a body) relayed as ``relay_error`` would, else one made from
    ``f`` (``told``: its message as the caller hears it). The upstream's
    ``Retry-After`` and its other relayable headers go with either;
    ``retried`` (streamfix asked more than once): ``x-should-retry: false``
    too, so the SDK in front does not ask all over again."""
    out = _failure_response(f, told, redact)
    if retried:
        out.headers.update(NO_RETRY)
    return out


def _failure_response(
    f: UpstreamFailure, told: str, redact: Callable[[bytes], bytes] | None
) -> web.Response:
    if f.body and f.status in (429, 500, 502, 503, 504):
        raw = redact(f.body) if redact is not None else f.body
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        if _openai_shaped(obj):
            resp = web.Response(status=f.status, body=raw, headers=f.headers or {})
            resp.content_type = "application/json"
            return resp
        said = upstream_message(obj, raw, None)
        out = json_error(
            f.status,
            f"{told}: {said}" if said else told,
            error_type(f.status),
            "rate_limit_exceeded" if f.status == 429 else f.kind,
        )
    else:
        type_ = "timeout" if f.status == 504 else error_type(f.status)
        code = "rate_limit_exceeded" if f.status == 429 else f.kind
        out = json_error(f.status, told, type_, code)
    if f.headers:
        out.headers.extend(f.headers)
    return out
