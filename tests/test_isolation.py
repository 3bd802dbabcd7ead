"""No request, tenant or model can hurt another; no key, cookie or address
leaks (issue 25, items 3-6 and 8; issue 24, item 9).

Every upstream is a real aiohttp server on loopback and the proxy is the
real app (``streamfix serve``'s ``create_app``).

- An empty or blank key is no key: refused wherever keys are read, and
  the key check never matches an empty token.
- No cookie crosses from one client to another: no cookie jar for the
  upstreams, ``Cookie`` not forwarded, ``Set-Cookie`` not relayed.
- A 500 for one request does not rest its upstream for everyone and is
  not retried on the same row; 500s for several different requests do.
- Upstream keys are redacted on every status and body shape, before any
  cut; recordings are scrubbed across read boundaries; tenants see
  upstream names, never addresses.
- Every 429/5xx keeps its ``Retry-After`` and the upstream's message,
  typed as OpenAI types them; a bad body is a 400, never a 500.
- An HTTP 200 whose body is an error object is an error on every route.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from streamfix.server.config import (
    ConfigError,
    ServerConfig,
    TenantConfig,
    build_config,
    parse_upstream,
)
from streamfix.server.proxy import PROXY
from streamfix.server.record import RECORDER
from streamfix.server.upstream.table import Table
from streamfix.tools.cli import build_parser, config_from_args

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream
from .support.upstream_fake import (
    AppServer,
    FakeUpstream,
    Received,
    Reply,
    completion,
    proxy_app,
    refusing_url,
)

MESSAGES = [{"role": "user", "content": "hi"}]
UPSTREAM_KEY = "sk-zq7w9E2r4T6y8U1i3O5p7A9sDf"  # 29 characters, as in the issue


def chat_body(model: str = "m", stream: bool = False, **kw: Any) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "stream": stream, **kw}


async def call(
    root: str,
    path: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
    method: str = "POST",
    raw: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    async def go() -> tuple[int, dict[str, str], bytes]:
        data = raw if raw is not None else None if payload is None else orjson.dumps(payload)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        async with (
            aiohttp.ClientSession() as s,
            s.request(method, root + path, data=data, headers=hdrs) as r,
        ):
            return r.status, dict(r.headers), await r.read()

    return await asyncio.wait_for(go(), 20)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_of(data: bytes) -> dict[str, Any]:
    err: dict[str, Any] = orjson.loads(data)["error"]
    return err


def stream_error(data: bytes) -> dict[str, Any]:
    """The error event that ends a chat stream."""
    errors = assemble(data).errors
    assert errors, data
    err: dict[str, Any] = errors[0]
    return err


# -- 3. an empty operator key is no key -----------------------------------------------------------


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_key_is_refused_wherever_keys_are_read(tmp_path: Path, blank: str) -> None:
    up = "http://127.0.0.1:9/v1"
    args = build_parser().parse_args(["serve", "--upstream", up, "--api-key", "sk-op"])
    args.api_keys.append(blank)  # as `--api-key ""` gives it
    with pytest.raises(ConfigError, match="api_key"):
        config_from_args(args, {})
    with pytest.raises(ConfigError, match="api_key"):
        build_config({"upstreams": [up]}, {"STREAMFIX_API_KEY": f"sk-op,{blank}"})
    toml = tmp_path / "c.toml"
    cases = {
        "operator": f'api_key = ["sk-op", "{blank}"]\n[[upstream]]\nurl = "{up}"\n',
        "tenant": f'[[upstream]]\nurl = "{up}"\nmodel = "m"\n'
        f'[[tenant]]\nname = "t"\napi_key = ["sk-t", "{blank}"]\nmodels = ["m"]\n',
        "upstream": f'[[upstream]]\nurl = "{up}"\napi_key = "{blank}"\n',
    }
    for where, text in cases.items():
        toml.write_text(text)
        with pytest.raises(ConfigError, match="api_key"):
            build_config({}, {}, str(toml))
        assert where  # each source refused on its own
    with pytest.raises(ConfigError, match="api_key"):
        parse_upstream(f"{up}#api_key={blank}")


async def test_no_authorization_header_is_never_the_operator() -> None:
    """``api_key = ["sk-op", ""]`` made a request without a key the
    operator: every tenant's model, and /metrics under protect_status.
    Such a table is refused; and the key check never matches an empty
    token, whatever the table holds."""
    async with FakeUpstream(Reply.json(completion("ok"))) as up:
        settings: dict[str, Any] = {
            "api_keys": ["sk-op", ""],
            "protect_status": True,
            "tenants": [TenantConfig("t", ("sk-t",), ("m",))],
        }
        with pytest.raises(ConfigError, match="api_key"):
            proxy_app(f"{up.url}#model=m", **settings)
        cfg = ServerConfig(upstreams=[parse_upstream(f"{up.url}#model=m")], api_keys=["sk-op"])
        table = Table(cfg)
        table.keys.append((b"", None))  # however it got there
        assert table.authenticate(b"") == (False, None)
        assert table.authenticate(b"sk-op")[0]


# -- 4. one cookie jar for everyone ----------------------------------------------------------------


def sets_a_cookie(rec: Received) -> Reply:
    if rec.body["messages"][0]["content"] == "from A":
        return Reply.json(completion("a"), headers={"Set-Cookie": "sid=A-SECRET; Path=/"})
    return Reply.json(completion("b"))


A_BODY = {**chat_body(), "messages": [{"role": "user", "content": "from A"}]}


async def test_a_cookie_set_for_one_client_never_goes_out_with_another() -> None:
    """An upstream addressed by host name (aiohttp keeps no cookies for
    bare IPs) sets a cookie in reply to client A: client B's requests,
    streamed or not, and /v1/models never carry it."""
    async with FakeUpstream(handler=sets_a_cookie, routes={"/v1/models": {"data": []}}) as up:
        by_name = f"http://localhost:{up.port}/v1"
        async with AppServer(proxy_app(by_name, retries=0)) as px:
            status, _, _ = await call(px.root, "/v1/chat/completions", A_BODY)
            assert status == 200
            for stream in (False, True):
                status, _, _ = await call(px.root, "/v1/chat/completions", chat_body(stream=stream))
                assert status == 200
            status, _, _ = await call(px.root, "/v1/models", method="GET")
            assert status == 200
    later = up.requests[[r.body for r in up.requests].index(A_BODY) + 1 :]
    assert len(later) == 3
    for rec in later:
        assert "Cookie" not in rec.headers, (rec.path, rec.headers)


async def test_cookies_do_not_cross_the_proxy_either_way() -> None:
    """The upstream's Set-Cookie is not relayed to the client; a client's
    own Cookie (for the proxy's origin) is not sent upstream."""
    async with (
        FakeUpstream(handler=sets_a_cookie) as up,
        AppServer(proxy_app(up.url, retries=0)) as px,
    ):
        for stream in (False, True):
            status, headers, _ = await call(
                px.root,
                "/v1/chat/completions",
                {**A_BODY, "stream": stream},
                {"Cookie": "proxy-session=A-OWN"},
            )
            assert status == 200
            assert "Set-Cookie" not in headers
    assert [r.headers.get("Cookie") for r in up.chat_requests] == [None, None]


# -- 5. a client's bad request can rest the upstream for everyone -----------------------------


def bad_tool_message(rec: Received) -> Reply | None:
    """llama-cpp-python: a ``tool`` message without ``tool_call_id`` is a 500."""
    if rec.method == "POST" and any(
        m.get("role") == "tool" and "tool_call_id" not in m for m in rec.body["messages"]
    ):
        return Reply.error(500, "KeyError: 'tool_call_id'")
    return None


def bad_body(n: int = 0) -> dict[str, Any]:
    msgs = [*MESSAGES, {"role": "tool", "content": f"result {n}"}]
    return {**chat_body("fast"), "messages": msgs}


async def test_one_requests_500_neither_rests_its_upstream_nor_is_asked_again() -> None:
    async with (
        FakeUpstream(Reply.json(completion("one")), handler=bad_tool_message) as one,
        FakeUpstream(Reply.json(completion("two")), handler=bad_tool_message) as two,
    ):
        app = proxy_app(f"{one.url}#model=m,name=fast", f"{two.url}#model=m,name=fast")
        async with AppServer(app) as px:  # retries=2, the default
            for stream in (False, True):
                status, _, data = await call(
                    px.root, "/v1/chat/completions", {**bad_body(), "stream": stream}
                )
                assert status == 500
                assert "tool_call_id" in error_of(data)["message"]
            table = app[PROXY].table
            assert all(u.rested_until == 0.0 for u in table.upstreams)
    # each row asked once per request: no retry round, no second try on a row
    assert len(one.chat_requests) == len(two.chat_requests) == 2


async def test_500s_for_different_requests_rest_the_upstream() -> None:
    async with (
        FakeUpstream(Reply.error(500, "CUDA error")) as sick,
        FakeUpstream(Reply.json(completion("ok"))) as well,
    ):
        app = proxy_app(
            f"{sick.url}#model=m,name=fast,weight=1000", f"{well.url}#model=m,name=fast"
        )
        app[PROXY].table.pool._random.random = lambda: 0.5  # the sick row first
        async with AppServer(app) as px:
            for n in range(4):
                status, _, _ = await call(px.root, "/v1/chat/completions", bad_body(n))
                assert status == 200  # failed over to the well row
            sick_row = app[PROXY].table.upstreams[0]
            assert sick_row.rested_until > 0.0
    # rested once three different requests had a 500 there: the fourth skipped it
    assert len(sick.chat_requests) == 3


async def test_the_same_request_sent_again_does_not_rest_the_upstream() -> None:
    """An SDK retrying a bad request sends the same body: one request, not
    several, however often it comes."""
    async with FakeUpstream(Reply.json(completion("ok")), handler=bad_tool_message) as up:
        app = proxy_app(f"{up.url}#model=m,name=fast")
        async with AppServer(app) as px:
            for _ in range(4):
                status, _, _ = await call(px.root, "/v1/chat/completions", bad_body())
                assert status == 500
            assert app[PROXY].table.upstreams[0].rested_until == 0.0
    assert len(up.chat_requests) == 4


# -- 6. keys and addresses leak ------------------------------------------------------------------


async def test_an_echoed_key_is_redacted_on_a_200_too() -> None:
    listing = {"object": "list", "data": [], "note": f"key {UPSTREAM_KEY}"}
    async with (
        FakeUpstream(routes={"/v1/models": listing}) as up,
        AppServer(proxy_app(f"{up.url}#api_key={UPSTREAM_KEY}")) as px,
    ):
        status, _, data = await call(px.root, "/v1/models", method="GET")
    assert status == 200
    assert UPSTREAM_KEY[:8] not in data.decode() and b"[redacted]" in data


@pytest.mark.parametrize("stream", [False, True])
async def test_a_key_in_a_plain_text_error_is_redacted_before_the_cut(stream: bool) -> None:
    text = "x" * 146 + f" Incorrect API key provided: {UPSTREAM_KEY} (see docs)"
    assert text.index(UPSTREAM_KEY) == 175  # 25 of its 29 characters before a cut at 200
    page = Reply(status=401, body=text.encode(), content_type="text/plain")
    async with (
        FakeUpstream(page) as up,
        AppServer(proxy_app(f"{up.url}#api_key={UPSTREAM_KEY}")) as px,
    ):
        status, _, data = await call(px.root, "/v1/chat/completions", chat_body(stream=stream))
    assert status == 401
    message = error_of(data)["message"]
    assert "xxxxx" in message  # the upstream's words are kept
    for i in range(len(UPSTREAM_KEY) - 7):
        assert UPSTREAM_KEY[i : i + 8] not in data.decode()


async def test_a_key_echoed_across_two_reads_is_never_recorded(tmp_path: Path) -> None:
    cut = 14
    head = b'data: {"choices":[{"index":0,"delta":{"content":"Incorrect API key provided: '
    parts = [
        sse([chunk(role="assistant")], done=False) + head + UPSTREAM_KEY[:cut].encode(),
        UPSTREAM_KEY[cut:].encode() + b' "}}]}\n\n',
        text_stream(['<tool_call>{"name": "get_weather", "arguments": {"city": "X"}}</tool_call>']),
    ]
    reply = Reply.stream(parts, delay=0.05)
    tools = {"tools": SHAPES_TOOLS}
    async with FakeUpstream(reply) as up:
        app = proxy_app(f"{up.url}#api_key={UPSTREAM_KEY}", record=str(tmp_path), retries=0)
        async with AppServer(app) as px:
            status, _, data = await call(
                px.root, "/v1/chat/completions", chat_body(stream=True, **tools)
            )
            assert await asyncio.to_thread(app[RECORDER].flush, 5.0)
    assert status == 200 and UPSTREAM_KEY.encode() not in data
    [path] = sorted(tmp_path.glob("*.json"))
    text = path.read_text()
    doc = json.loads(text)
    reads = [r.get("text", "") for r in doc["attempts"][0]["reads"]]
    assert len(reads) >= 2  # the key came in two pieces
    assert UPSTREAM_KEY[:cut] not in text and UPSTREAM_KEY[cut:] not in text
    assert "[redacted]" in "".join(reads)


def tenant_app(*rows: str, **settings: Any) -> Any:
    return proxy_app(
        *rows,
        tenants=[TenantConfig("team", ("sk-team",), ("fast",))],
        api_keys=["sk-operator"],
        protect_status=True,
        retries=0,
        **settings,
    )


async def test_tenants_see_upstream_names_never_addresses() -> None:
    html = Reply(status=500, body=b"<html>oops</html>", content_type="text/html")
    dies = Reply.stream(sse([chunk(role="assistant"), chunk("part")], done=False), end="abort")
    async with FakeUpstream() as up:
        dead = refusing_url()
        app = tenant_app(f"{dead}#model=m,name=fast")
        async with AppServer(app) as px:
            for stream in (False, True):
                status, _, data = await call(
                    px.root, "/v1/chat/completions", chat_body("fast", stream), bearer("sk-team")
                )
                assert status == 502
                message = error_of(data)["message"]
                assert "127.0.0.1" not in message and dead.split(":")[-1] not in message
                assert "fast" in message
            # the operator's own key keeps seeing where it went
            status, _, data = await call(
                px.root, "/v1/chat/completions", chat_body("fast"), bearer("sk-operator")
            )
            assert status == 502 and dead in error_of(data)["message"]
        app = tenant_app(f"{up.url}#model=m,name=fast")
        async with AppServer(app) as px:
            for reply, stream in ((html, False), (html, True), (dies, True)):
                up.push(reply)
                status, _, data = await call(
                    px.root, "/v1/chat/completions", chat_body("fast", stream), bearer("sk-team")
                )
                text = data.decode()
                message = (
                    stream_error(data)["message"] if status == 200 else error_of(data)["message"]
                )
                assert "fast" in message, message
                assert "127.0.0.1" not in text and str(up.port) not in text, text


async def test_a_catch_all_row_is_named_by_its_place() -> None:
    async with AppServer(
        proxy_app(
            refusing_url(),
            tenants=[TenantConfig("team", ("sk-team",), ("*",))],
            api_keys=["sk-operator"],
            retries=0,
        )
    ) as px:
        status, _, data = await call(
            px.root, "/v1/chat/completions", chat_body("anything"), bearer("sk-team")
        )
    assert status == 502
    message = error_of(data)["message"]
    assert "upstream 1" in message and "127.0.0.1" not in message


# -- 8. promised shapes missing --------------------------------------------------------------------


async def test_the_pool_full_503_says_when_to_retry_and_is_a_server_error() -> None:
    hang = Reply.stream(sse([chunk(role="assistant"), chunk("x")], done=False), end="hang")
    async with (
        FakeUpstream(hang) as up,
        AppServer(proxy_app(up.url, pool_limit=1, pool_wait=0.2)) as px,
    ):
        first = asyncio.create_task(call(px.root, "/v1/chat/completions", chat_body(stream=True)))
        while not up.chat_requests:
            await asyncio.sleep(0.01)
        status, headers, data = await call(px.root, "/v1/chat/completions", chat_body())
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    assert status == 503
    assert headers.get("Retry-After") == "1"
    err = error_of(data)
    assert err["type"] == "server_error" and "busy" in err["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "body", "content_type", "type_", "said"),
    [
        (429, b"slow down, please", "text/plain", "requests", "slow down, please"),
        (503, b'{"detail": "model loading"}', "application/json", "server_error", "model loading"),
        (502, b'{"message": "bad gateway here"}', "application/json", "server_error", "here"),
    ],
)
async def test_a_429_or_5xx_not_in_openais_shape_keeps_its_retry_after_and_message(
    stream: bool, status: int, body: bytes, content_type: str, type_: str, said: str
) -> None:
    reply = Reply(status=status, body=body, content_type=content_type, headers={"Retry-After": "7"})
    async with FakeUpstream(reply) as up, AppServer(proxy_app(up.url, retries=0)) as px:
        got, headers, data = await call(px.root, "/v1/chat/completions", chat_body(stream=stream))
    assert got == status
    assert headers.get("Retry-After") == "7"
    err = error_of(data)
    assert said in err["message"] and err["type"] == type_
    if status == 429:
        assert err["code"] == "rate_limit_exceeded"


async def test_reasoning_effort_as_a_list_is_a_400() -> None:
    body = {"model": "m", "input": "hi", "reasoning": {"effort": ["high"]}}
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        status, _, data = await call(px.root, "/v1/responses", body)
    assert status == 400
    assert error_of(data)["type"] == "invalid_request_error"
    assert not up.chat_requests


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [256, 600, 1000])
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat_body()),
        ("/v1/completions", {"model": "m", "prompt": "hi"}),
        ("/v1/embeddings", {"model": "m", "input": "hi"}),
        ("/v1/responses", {"model": "m", "input": "hi"}),
        ("/v1/messages", {"model": "m", "max_tokens": 9, "messages": MESSAGES}),
    ],
)
async def test_a_deeply_nested_body_is_a_400_in_the_routes_shape(
    depth: int, path: str, body: dict[str, Any]
) -> None:
    """Deeper than orjson writes (255 levels), within what it reads (1024)."""
    deep = b"[" * depth + b'"deep"' + b"]" * depth
    raw = orjson.dumps(body)[:-1] + b',"metadata":{"x":' + deep + b"}}"
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url, f"{up.url}#kind=embedding")) as px,
    ):
        status, _, data = await call(px.root, path, raw=raw)
    assert status == 400, data
    obj = orjson.loads(data)
    if path == "/v1/messages":
        assert obj["type"] == "error" and obj["error"]["type"] == "invalid_request_error"
    else:
        assert obj["error"]["type"] == "invalid_request_error"
    assert not [r for r in up.requests if r.method == "POST" and r.body != {"input": "probe"}]


# -- 24.9 an HTTP 200 whose body is an error object ------------------------------------------------

UPSTREAM_ERROR = {"error": {"message": "model crashed", "type": "server_error", "code": None}}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_200_error_object_is_an_error_on_chat(stream: bool) -> None:
    async with (
        FakeUpstream(Reply.json(UPSTREAM_ERROR)) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        status, _, data = await call(px.root, "/v1/chat/completions", chat_body(stream=stream))
    assert status == 502
    assert error_of(data)["message"] == "model crashed"


def door_body(path: str, stream: bool) -> dict[str, Any]:
    if path == "/v1/messages":
        return {"model": "m", "max_tokens": 9, "messages": MESSAGES, "stream": stream}
    return {"model": "m", "input": "hi", "stream": stream}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
async def test_a_200_error_object_is_an_error_on_the_doors(path: str, stream: bool) -> None:
    async with (
        FakeUpstream(Reply.json(UPSTREAM_ERROR)) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        status, _, data = await call(px.root, path, door_body(path, stream))
    assert status == 502, data
    obj = orjson.loads(data)
    if path == "/v1/messages":
        assert obj["type"] == "error" and obj["error"]["message"] == "model crashed"
    else:
        assert obj["error"]["message"] == "model crashed"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
async def test_a_stream_whose_first_event_is_an_error_ends_in_an_error(path: str) -> None:
    event = b"data: " + orjson.dumps(UPSTREAM_ERROR) + b"\n\n"
    async with FakeUpstream(Reply.stream(event)) as up, AppServer(proxy_app(up.url)) as px:
        body = chat_body(stream=True) if path.endswith("completions") else door_body(path, True)
        status, _, data = await call(px.root, path, body)
    text = data.decode()
    assert "model crashed" in text, text
    if path == "/v1/messages":
        assert "event: error" in text and "end_turn" not in text
    elif path == "/v1/responses":
        assert "response.failed" in text and "response.completed" not in text
    else:
        assert status == 200 and stream_error(data)["message"] == "model crashed"


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/completions"])
async def test_a_200_error_object_is_an_error_on_embeddings_and_completions(path: str) -> None:
    body = {"model": "m", "input": "hi"} if path.endswith("embeddings") else {"prompt": "hi"}
    async with FakeUpstream(Reply.json(UPSTREAM_ERROR)) as up:
        rows = f"{up.url}#model=m,kind=embedding" if path.endswith("embeddings") else up.url
        async with AppServer(proxy_app(rows)) as px:
            status, _, data = await call(px.root, path, {"model": "m", **body})
    assert status == 502
    assert error_of(data)["message"] == "model crashed"
