"""``streamfix serve`` checks what it was given (issue 26): each row is
asked once at start and one line says what was found or what is wrong
(with its hint, which the first client error repeats); ``/healthz`` is not
``ok`` when no row can serve; bad settings, a port in use and an
unwritable ``--record`` directory are one line each and exit 2; upstream
errors are said in words."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from streamfix.server.caller.stream import ModelName
from streamfix.server.proxy import embedding_size
from streamfix.tools.cli import main

from .support.streamutil import text_stream, with_usage
from .support.upstream_fake import (
    AppServer,
    FakeUpstream,
    Reply,
    completion,
    proxy_app,
    refusing_url,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "me"}]}


async def _only_under_v1(request: web.Request) -> web.Response:
    """A server whose OpenAI API is under /v1 and whose other paths are an HTML 404."""
    if not request.path.startswith("/v1/"):
        page = "<html><head><title>404 Not Found</title></head><body>nope</body></html>"
        return web.Response(status=404, text=page, content_type="text/html")
    return web.json_response(MODELS)


async def test_a_url_without_v1_is_named_at_start_and_in_the_first_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _only_under_v1)
    async with AppServer(app) as up:
        caplog.set_level(logging.INFO, "streamfix.server")
        async with AppServer(proxy_app(up.root)) as px, aiohttp.ClientSession() as s:
            start = [r.getMessage() for r in caplog.records if "upstream " in r.getMessage()]
            async with s.post(px.url + "/chat/completions", json=CHAT) as r:
                status, err = r.status, await r.json()
            async with s.get(px.root + "/healthz") as r:
                health_status, health = r.status, await r.json()
    hint = f"no /v1? try {up.root}/v1"
    assert any(hint in line and "HTTP 404 on /models" in line for line in start), start
    # the client hears the hint, not the upstream's address (tenants never do)
    message = err["error"]["message"]
    assert status == 404
    assert "HTTP 404 on /chat/completions: an HTML page (404 Not Found)" in message
    assert "(no /v1? its URL probably lacks /v1: give --upstream …/v1)" in message
    assert "<" not in message
    assert health_status == 503 and health["status"] == "down"
    [row] = health["upstreams"]
    assert row["state"] == "not_openai" and hint in row["problem"]


async def test_a_good_row_is_named_with_what_it_serves(caplog: pytest.LogCaptureFixture) -> None:
    async with FakeUpstream(routes={"/v1/models": MODELS}) as up:
        caplog.set_level(logging.INFO, "streamfix.server")
        async with (
            AppServer(proxy_app(up.url)) as px,
            aiohttp.ClientSession() as s,
            s.get(px.root + "/healthz") as r,
        ):
            health_status, health = r.status, await r.json()
    lines = [r.getMessage() for r in caplog.records]
    assert f"upstream {up.url}: engine not recognised, window unknown, serves tiny" in lines
    assert health_status == 200 and health["status"] == "ok"
    assert health["upstreams"][0]["state"] == "ok" and health["upstreams"][0]["serves"] == ["tiny"]


async def test_a_closed_port_is_named_and_healthz_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = refusing_url()
    caplog.set_level(logging.INFO, "streamfix.server")
    async with AppServer(proxy_app(url, retries=0)) as px, aiohttp.ClientSession() as s:
        async with s.get(px.root + "/healthz") as r:
            health_status, health = r.status, await r.json()
        async with s.post(px.url + "/chat/completions", json=CHAT) as r:
            status, err = r.status, await r.json()
    assert any(
        "connection refused (nothing listens on 127.0.0.1:" in r.getMessage()
        for r in caplog.records
    )
    assert health_status == 503 and health["upstreams"][0]["state"] == "unreachable"
    assert status == 502
    assert "unreachable: connection refused" in err["error"]["message"]
    assert "ClientConnectorError" not in err["error"]["message"]


async def test_healthz_is_degraded_when_some_rows_cannot_serve() -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(["ok"])), routes={"/v1/models": MODELS}) as up,
        AppServer(proxy_app(up.url, refusing_url())) as px,
        aiohttp.ClientSession() as s,
        s.get(px.root + "/healthz") as r,
    ):
        assert r.status == 200
        health = await r.json()
    assert health["status"] == "degraded"
    assert [u["state"] for u in health["upstreams"]] == ["ok", "unreachable"]


async def test_a_row_down_at_start_that_answers_later_is_up() -> None:
    """The proxy does not give up a row its check found down: a 200 from it marks it up."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    async with AppServer(proxy_app(url, retries=0)) as px, aiohttp.ClientSession() as s:
        async with s.get(px.root + "/healthz") as r:
            assert r.status == 503
        up = FakeUpstream(Reply.stream(text_stream(["ok"])))
        await up.start(port)
        try:
            async with s.post(px.url + "/chat/completions", json={**CHAT, "stream": True}) as r:
                assert r.status == 200
                await r.read()
            async with s.get(px.root + "/healthz") as r:
                assert r.status == 200 and (await r.json())["status"] == "ok"
        finally:
            await up.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- settings -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--read-timeout", "-1"], "read_timeout must be more than 0 seconds"),
        (["--read-timeout", "0"], "read_timeout must be more than 0 seconds"),
        (["--connect-timeout", "0"], "connect_timeout must be more than 0 seconds"),
        (["--pool-wait", "-2"], "pool_wait must not be negative"),
    ],
)
def test_bad_timeouts_are_one_line_naming_serve(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--upstream", "http://127.0.0.1:1/v1", *flags])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    [line] = err.splitlines()  # the usage only with --help
    assert line.startswith("streamfix serve: error: ")  # serve's, not the top level's
    assert said in line and line.endswith("(see streamfix serve --help)")


def test_a_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--upstream", "http://127.0.0.1:1/v1", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"streamfix serve: port {port} on 127.0.0.1 is already in use (another streamfix?): "
        "stop it or give --port N"
    ]


def test_an_unwritable_record_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    port = _free_port()
    code = main(
        [
            "serve",
            "--upstream",
            "http://127.0.0.1:1/v1",
            "--port",
            str(port),
            "--record",
            str(blocker / "recordings"),
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"streamfix serve: --record {blocker}")
    assert "cannot write there" in lines[0]


# -- embeddings ---------------------------------------------------------------


def test_embedding_size_reads_both_shapes() -> None:
    openai = {"object": "list", "data": [{"embedding": [0.1, 0.2, 0.3, 0.4]}]}
    per_token = {"data": [{"embedding": [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]}]}  # llama.cpp
    native = [{"index": 0, "embedding": [[0.1, 0.2, 0.3, 0.4, 0.5]]}]  # llama.cpp /embedding
    assert embedding_size(openai) == 4
    assert embedding_size(per_token) == 3
    assert embedding_size(native) == 5
    assert embedding_size({"data": []}) is None and embedding_size({"data": [{}]}) is None
    assert embedding_size({"data": [{"embedding": "base64..."}]}) is None


async def _per_token_embeddings(request: web.Request) -> web.Response:
    if request.path.endswith("/models"):
        return web.json_response(MODELS)
    return web.json_response({"data": [{"embedding": [[0.5] * 7, [0.25] * 7]}]})


async def test_an_embedding_row_served_by_llama_cpp_lists_its_vector_size() -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _per_token_embeddings)
    async with AppServer(app) as up:
        url = f"{up.url}#model=e,name=embed,kind=embedding"
        async with (
            AppServer(proxy_app(url, refusing_url() + "#model=c,name=chat")) as px,
            aiohttp.ClientSession() as s,
            s.get(px.url + "/models") as r,
        ):
            cards = {c["id"]: c for c in (await r.json())["data"]}
    assert cards["embed"]["streamfix"]["dimensions"] == 7


async def test_a_model_of_the_wrong_kind_says_so() -> None:
    async with (
        FakeUpstream() as up,
        AppServer(
            proxy_app(
                f"{up.url}#model=m1,name=fast", f"{up.url}#model=e5,name=embed,kind=embedding"
            )
        ) as px,
        aiohttp.ClientSession() as s,
    ):
        async with s.post(px.url + "/chat/completions", json={**CHAT, "model": "embed"}) as r:
            chat_status, chat_err = r.status, (await r.json())["error"]
        async with s.post(px.url + "/embeddings", json={"model": "fast", "input": "x"}) as r:
            emb_status, emb_err = r.status, (await r.json())["error"]
    assert chat_status == emb_status == 404
    assert chat_err["message"] == (
        "The model 'embed' is an embedding model, not a chat model: use POST /v1/embeddings."
    )
    assert emb_err["message"] == (
        "The model 'fast' is a chat model, not an embedding model: use POST /v1/chat/completions."
    )
    assert chat_err["code"] == "model_not_found" and chat_err["param"] == "model"


# -- the client's name for the model -------------------------------------------------------------


def _named_stream(model: str, texts: list[str], space: bool = False) -> bytes:
    sep = b": " if space else b":"
    out = b""
    for t in texts:
        out += (
            b'data: {"id":"c","object":"chat.completion.chunk","model"'
            + sep
            + orjson.dumps(model)
            + b',"choices":[{"index":0,"delta":{"content":'
            + orjson.dumps(t)
            + b'},"finish_reason":null}]}\n\n'
        )
    return out + b"data: [DONE]\n\n"


@pytest.mark.parametrize("space", [False, True])
async def test_replies_say_the_model_as_the_client_named_it(space: bool) -> None:
    server_name = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    whole = {**completion("hello"), "model": server_name}
    async with (
        FakeUpstream(Reply.stream(_named_stream(server_name, ["he", "llo"], space))) as up,
        AppServer(proxy_app(f"{up.url}#model=smol,name=fast", up.url)) as px,
        aiohttp.ClientSession() as s,
    ):
        streamed = {}
        for model in ("fast", "anything"):
            body = {**CHAT, "model": model, "stream": True}
            async with s.post(px.url + "/chat/completions", json=body) as r:
                streamed[model] = await r.read()
        up.push(Reply.json(whole))
        async with s.post(px.url + "/chat/completions", json={**CHAT, "model": "fast"}) as r:
            reply = await r.json()
    for model, raw in streamed.items():
        assert server_name.encode() not in raw
        chunks = [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
        assert chunks and all(c["model"] == model for c in chunks)
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "hello"
    assert reply["model"] == "fast"


async def test_a_stream_whose_model_is_the_clients_name_passes_byte_for_byte() -> None:
    raw = _named_stream("fast", ["he", "llo"])
    async with (
        FakeUpstream(Reply.stream(raw)) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
        s.post(px.url + "/chat/completions", json={**CHAT, "model": "fast", "stream": True}) as r,
    ):
        assert await r.read() == raw


def test_model_name_replaces_only_the_field() -> None:
    rename = ModelName("fast")
    text = orjson.dumps('"model":"srv" is text')  # escaped quotes inside a string
    data = b'{"model":"srv","choices":[{"delta":{"content":' + text + b"}}]}"
    assert rename(data) == data.replace(b'{"model":"srv"', b'{"model":"fast"')
    spaced = ModelName("fast")  # learned in the server's spacing: our rebuilt chunks are compact
    assert spaced(b'{"model": "srv"}') == b'{"model": "fast"}'
    assert spaced(b'{"model":"srv"}') == b'{"model":"fast"}'
    same = ModelName("srv")
    assert same(data) is data and same.same
    assert ModelName.of(None) is None and ModelName.of("") is None


# -- keep-alives ----------------------------------------------------------------------------------


async def test_keepalives_come_at_most_one_per_interval_while_a_call_is_held() -> None:
    """A call written as text is held by the chain chunk after chunk, after
    the reply began: the client gets one keep-alive per interval, not one
    comment per held chunk (fifteen in a row before)."""
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    pieces = ["Sure. ", *(call[i : i + 5] for i in range(0, len(call), 5))]
    slow = Reply.events(text_stream(pieces), delay=0.01)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    async with (
        FakeUpstream(slow) as up,
        AppServer(proxy_app(up.url, keepalive_interval=3600)) as px,
        aiohttp.ClientSession() as s,
    ):
        body = {**CHAT, "stream": True, "tools": tools}
        async with s.post(px.url + "/chat/completions", json=body) as r:
            raw = await r.read()
    assert len(pieces) > 15
    assert raw.count(b": keep-alive") == 0  # none due within the hour
    events = [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    calls = [tc for e in events for tc in e["choices"][0]["delta"].get("tool_calls") or ()]
    assert calls and calls[0]["function"]["name"] == "get_weather"


async def test_keepalive_interval_is_a_setting() -> None:
    from streamfix.tools.cli import build_parser, config_from_args

    args = build_parser().parse_args(["serve", "--upstream", "http://h/v1"])
    assert config_from_args(args, {}).keepalive_interval == 5.0
    args = build_parser().parse_args(
        ["serve", "--upstream", "http://h/v1", "--keepalive-interval", "1.5"]
    )
    assert config_from_args(args, {}).keepalive_interval == 1.5


# -- usage on the doors ---------------------------------------------------------------------------

MESSAGES_BODY = {
    "model": "m",
    "max_tokens": 64,
    "stream": True,
    "messages": [{"role": "user", "content": "Tell me about the sea, at some length please."}],
}


def _message_delta(raw: bytes) -> dict[str, Any]:
    for block in raw.split(b"\n\n"):
        if block.startswith(b"event: message_delta"):
            return dict(orjson.loads(block.split(b"data: ", 1)[1]))
    raise AssertionError(raw)


async def test_a_streamed_messages_reply_without_upstream_usage_is_estimated_and_marked() -> None:
    text = ["The sea ", "is wide ", "and deep."]  # 25 characters: 7 tokens at 4 a token
    async with (
        FakeUpstream(Reply.stream(text_stream(text))) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
        s.post(px.root + "/v1/messages", json=MESSAGES_BODY) as r,
    ):
        raw = await r.read()
    usage = _message_delta(raw)["usage"]
    assert usage["output_tokens"] == 7
    assert 10 <= usage["input_tokens"] <= 40  # the proxy's over-estimate of a short prompt
    assert usage["streamfix"] == {"estimated": True}


async def test_upstream_usage_is_reported_as_sent_and_not_marked() -> None:
    stream = with_usage(text_stream(["hi"]), {"prompt_tokens": 11, "completion_tokens": 1})
    async with (
        FakeUpstream(Reply.stream(stream)) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
        s.post(px.root + "/v1/messages", json=MESSAGES_BODY) as r,
    ):
        raw = await r.read()
    assert _message_delta(raw)["usage"] == {"input_tokens": 11, "output_tokens": 1}


async def test_a_responses_reply_without_upstream_usage_has_an_estimate() -> None:
    body = {"model": "m", "input": "Say hello.", "stream": False}
    async with (
        FakeUpstream(Reply.json(completion("Hello there!"))) as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
        s.post(px.root + "/v1/responses", json=body) as r,
    ):
        reply = await r.json()
    usage = reply["usage"]
    assert usage["output_tokens"] == 3 and usage["input_tokens"] > 0
    assert usage["streamfix"] == {"estimated": True}


# -- a stream that dies is logged ------------------------------------------------------------


async def test_a_stream_that_dies_midway_is_logged_with_the_request_and_the_upstream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dying = Reply.stream(text_stream(["one ", "two "], done=False), end="abort")
    caplog.set_level(logging.WARNING, "streamfix.server")
    async with (
        FakeUpstream(dying) as up,
        AppServer(proxy_app(up.url, retries=0)) as px,
        aiohttp.ClientSession() as s,
        s.post(px.url + "/chat/completions", json={**CHAT, "model": "tiny", "stream": True}) as r,
    ):
        raw = await r.read()
    assert b'"error"' in raw
    [line] = [r.getMessage() for r in caplog.records if "mid-stream" in r.getMessage()]
    assert line.startswith(f"upstream {up.url} failed mid-stream: ")
    assert "(request: chat /chat/completions, model tiny, upstream " in line
    assert "ClientPayloadError" not in line
