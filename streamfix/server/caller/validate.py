"""What makes a chat request usable: checked before anything is sent, so
that a malformed request is a clear 400 (with ``param``), never an
upstream's puzzling answer or a crash in the chain."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson
from aiohttp import web

from ... import schemas
from ...errors import RequestError
from ...wire.turn import check_stream
from ..upstream.table import tenant_label

if TYPE_CHECKING:
    from ..config import ServerConfig


class Gate(Protocol):
    """What reading a request needs of the proxy (``proxy.Proxy``, which
    sits above this module): its configuration (the timeouts) and its
    count of answered requests."""

    @property
    def cfg(self) -> ServerConfig: ...

    def count(self, endpoint: str, stream: bool, status: int, tenant: str = ...) -> None: ...


#: Most tools one request may offer, and longest tool name (characters):
#: they bound the body's JSON and the detector's matcher for a new set of
#: names (linear in their length, 3.3 ms measured at both limits; see
#: ``transforms.detect``). OpenAI's own limits are 128 tools and 64
#: characters.
MAX_TOOLS = 512
MAX_TOOL_NAME_CHARS = 256

#: Most inputs in one embeddings request (OpenAI's own limit).
MAX_EMBEDDING_INPUTS = 2048

#: Deepest nesting of a request body. orjson reads 1024 levels but writes
#: only 255, and the proxy writes every body it sends (and wraps it in a
#: few levels of its own: a door's translation, a recording): deeper than
#: this would be a 500 later, so it is a 400 now. Real bodies (a tool's
#: schema, content parts) nest a few dozen levels at most.
MAX_DEPTH = 200

#: orjson's own writing limit (levels).
_ORJSON_DEPTH = 255


def loads_request(raw: bytes) -> Any:
    """A request body as JSON; RequestError (400) when it is not JSON or
    nests deeper than ``MAX_DEPTH``."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RequestError("request body is not valid JSON") from None
    # As deep as MAX_DEPTH takes as many brackets: most bodies stop here.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        probe: Any = body
        for _ in range(_ORJSON_DEPTH - MAX_DEPTH):
            probe = [probe]
        try:  # one pass in C: fails exactly when the body nests past MAX_DEPTH
            orjson.dumps(probe)
        except orjson.JSONEncodeError:
            raise RequestError(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    return body


#: When the request arrived (its headers read; the event loop's clock), noted
#: by ``guards.errors_mw``: ``client_timeout`` and ``request_timeout`` count from it.
ARRIVED: Final = web.RequestKey("streamfix_arrived", float)


def arrived(request: web.Request) -> float:
    """When ``request`` arrived (now, if no middleware noted it)."""
    t = request.get(ARRIVED)
    if t is None:
        t = request[ARRIVED] = asyncio.get_running_loop().time()
    return t


async def read_body(proxy: Gate, request: web.Request) -> bytes:
    """The request's body, read within ``client_timeout`` (and
    ``request_timeout``) of its arrival: a client that sends it slower, or
    stalls, is a 408 and its connection is closed (``guards.errors_mw``),
    whatever else it holds. aiohttp bounds neither the body's reading nor
    its pace; the headers are bounded by the server's keep-alive timeout
    (``app.run_options``)."""
    cfg = proxy.cfg
    limits = [t for t in (cfg.client_timeout, cfg.request_timeout) if t > 0]
    if not limits or request.content.is_eof():
        # no bound, or nothing left to wait for: a small body arrives with
        # its headers, and reading it takes no time a bound could cut
        return await request.read()
    limit = min(limits)
    try:
        async with asyncio.timeout_at(arrived(request) + limit):
            return await request.read()
    except TimeoutError:
        raise RequestError(
            f"the request body did not arrive within {limit:g} s",
            status=408,
            code="client_timeout",
            type_="timeout",
        ) from None


async def read_request(
    proxy: Gate,
    request: web.Request,
    endpoint: str,
    check: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """The request's JSON body, checked by ``check``; a body too large, not
    JSON or not usable is counted for ``endpoint`` and raised (the
    middleware answers it in OpenAI's shape)."""
    tenant = tenant_label(request)
    try:
        raw = await read_body(proxy, request)
    except web.HTTPRequestEntityTooLarge:
        proxy.count(endpoint, False, 413, tenant)
        raise
    except RequestError as exc:
        proxy.count(endpoint, False, exc.status, tenant)
        raise
    try:
        return check(loads_request(raw))
    except RequestError as exc:
        proxy.count(endpoint, False, exc.status, tenant)
        raise


def validate_embeddings(body: Any) -> dict[str, Any]:
    """Raise RequestError unless ``body`` is a usable embeddings request:
    ``input`` a string, or a non-empty array of strings or token arrays."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    value = body.get("input")
    if isinstance(value, str):
        return body
    if not isinstance(value, list) or not value:
        raise RequestError("'input' must be a string or a non-empty array", param="input")
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise RequestError(f"at most {MAX_EMBEDDING_INPUTS} inputs per request", param="input")
    ok = all(isinstance(v, str) for v in value) or all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )
    ok = ok or all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value)
    if not ok:
        raise RequestError(
            "'input' must hold strings, or token ids, or arrays of token ids", param="input"
        )
    return body


def validate_completion(body: Any) -> dict[str, Any]:
    """Raise RequestError unless ``body`` is a usable text-completions
    request: a ``prompt`` (a string or an array of them / of token ids)."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    prompt = body.get("prompt")
    if not isinstance(prompt, str | list):
        raise RequestError("'prompt' must be a string or an array", param="prompt")
    check_stream(body)
    v = body.get("max_tokens")
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        raise RequestError("'max_tokens' must be a positive integer", param="max_tokens")
    return body


def validate_chat(body: Any) -> dict[str, Any]:
    """Raise RequestError unless ``body`` is a usable chat request."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    if not all(isinstance(m, dict) for m in messages):
        raise RequestError("each message must be an object", param="messages")
    check_stream(body)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("'tools' must be an array", param="tools")
    if tools is not None and len(tools) > MAX_TOOLS:
        raise RequestError(f"at most {MAX_TOOLS} tools per request", param="tools")
    for i, t in enumerate(tools or ()):
        # Function tools only: other tool types are the upstream's business.
        if not isinstance(t, dict):
            raise RequestError(f"tools[{i}] must be an object", param=f"tools[{i}]")
        if t.get("type", "function") != "function":
            continue
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(
                f"tools[{i}].function must be an object with a non-empty 'name'",
                param=f"tools[{i}].function",
            )
        if len(fn["name"]) > MAX_TOOL_NAME_CHARS:
            raise RequestError(
                f"tools[{i}].function.name is longer than {MAX_TOOL_NAME_CHARS} characters",
                param=f"tools[{i}].function.name",
            )
        if "parameters" in fn and not isinstance(fn["parameters"], dict | None):
            raise RequestError(
                f"tools[{i}].function.parameters must be a JSON Schema object",
                param=f"tools[{i}].function.parameters",
            )
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise RequestError(f"'{key}' must be a positive integer", param=key)
    check_json_schema(body)
    return body


def check_json_schema(body: dict[str, Any]) -> None:
    """A ``response_format`` schema streamfix will run: references only
    inside it (nothing is fetched), none dangling, patterns RE2 reads
    (``streamfix.schemas``); else a 400 naming what is refused."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return
    js = fmt.get("json_schema")
    try:
        schemas.check(js.get("schema") if isinstance(js, dict) else None)
    except schemas.SchemaRefused as exc:
        raise RequestError(
            f"response_format.json_schema.schema: {exc}",
            param="response_format.json_schema.schema",
        ) from None
