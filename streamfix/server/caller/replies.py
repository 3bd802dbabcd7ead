"""What the proxy answers besides a stream: error bodies in OpenAI's shape,
an upstream's error relayed, a whole reply read (bounded), and a whole
completion turned into the stream a client asked for."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from ... import jsoncodec
from ...sse import DONE_EVENT, encode_data
from .. import record
from ..upstream.body import BodyReads
from ..upstream.pool import UpstreamFailure, error_body

#: Largest non-streamed upstream reply read into memory (bytes). A whole
#: completion is kilobytes, megabytes with logprobs; past this the
#: upstream is broken, and reading on would only grow memory.
MAX_REPLY_BYTES = 64 * 1024 * 1024

#: The OpenAI error type of the proxy's own HTTP errors.
STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}


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


def relay_error(
    status: int, raw: bytes, headers: CIMultiDict[str], content_type: str, upstream: str
) -> web.Response:
    """An upstream's non-200 answer for the client: passed on as is when it
    is an OpenAI-shaped error (``{"error": …}``), else wrapped into one (an
    HTML page from a gateway, a plain-text 404) so SDKs can read it."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), (dict, str)):
        out = web.Response(status=status, body=raw, headers=headers)
        out.content_type = content_type
        return out
    text = raw[:200].decode("utf-8", "replace").strip()
    message = f"upstream {upstream} answered HTTP {status}" + (f": {text}" if text else "")
    type_ = "invalid_request_error" if status < 500 else "upstream_error"
    return json_error(status, message, type_, f"upstream_{status}")


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


def failure_response(f: UpstreamFailure) -> web.Response:
    """No upstream answered usably: the last one's own OpenAI-shaped error
    (a 429 or 5xx with a body) as it was, else one made from ``f``."""
    if f.body and f.status in (429, 500, 502, 503, 504):
        try:
            obj = orjson.loads(f.body)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("error"), (dict, str)):
            resp = web.Response(status=f.status, body=f.body, headers=f.headers or {})
            resp.content_type = "application/json"
            return resp
    type_ = "timeout" if f.status == 504 else "upstream_error"
    return json_error(f.status, f.message, type_, f.kind)
