"""The gateway: rows with a model, a public name and a kind; tenants;
embeddings and text completions; the routing table reloaded in place.

Every upstream here is a real aiohttp server on loopback (several at
once), and the proxy is the real app.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from streamfix.server.app import create_app
from streamfix.server.config import ConfigError, ServerConfig, TenantConfig, build_config
from streamfix.server.proxy import PROXY

from .support.streamutil import assemble, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app, refusing_url

MESSAGES = [{"role": "user", "content": "hi"}]


def chat_body(model: str, stream: bool = False, **kw: Any) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "stream": stream, **kw}


async def call(
    px: AppServer,
    path: str,
    payload: Any = None,
    key: str | None = None,
    method: str = "POST",
) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, px.root + path, json=payload, headers=headers) as r,
    ):
        return r.status, await r.read()


def error_of(data: bytes) -> dict[str, Any]:
    err: dict[str, Any] = orjson.loads(data)["error"]
    return err


def embedding_reply(dims: int, n: int = 1) -> Reply:
    data = [{"object": "embedding", "index": i, "embedding": [0.5] * dims} for i in range(n)]
    return Reply.json({"object": "list", "data": data, "model": "e", "usage": {}})


def served(up: FakeUpstream) -> list[str]:
    """The model each POST to ``up`` named."""
    return [r.body["model"] for r in up.requests if r.method == "POST"]


# -- rows with a model ---------------------------------------------------------------------------


async def test_a_model_picks_its_rows_and_the_server_gets_its_own_name() -> None:
    async with (
        FakeUpstream(Reply.json(completion_text("from A"))) as a,
        FakeUpstream(Reply.json(completion_text("from B"))) as b,
        AppServer(
            proxy_app(
                f"{a.url}#model=Qwen/Qwen3-8B,name=fast",
                f"{b.url}#model=meta/Llama-70B,name=strong",
            )
        ) as px,
    ):
        for _ in range(3):
            status, data = await call(px, "/v1/chat/completions", chat_body("fast"))
            assert status == 200
            assert orjson.loads(data)["choices"][0]["message"]["content"] == "from A"
        status, data = await call(px, "/v1/chat/completions", chat_body("strong"))
        assert orjson.loads(data)["choices"][0]["message"]["content"] == "from B"
    assert served(a) == ["Qwen/Qwen3-8B"] * 3
    assert served(b) == ["meta/Llama-70B"]


async def test_an_unknown_model_is_a_404_model_not_found() -> None:
    async with FakeUpstream() as a, AppServer(proxy_app(f"{a.url}#model=m1,name=fast")) as px:
        status, data = await call(px, "/v1/chat/completions", chat_body("gpt-9"))
        streamed, sdata = await call(px, "/v1/chat/completions", chat_body("gpt-9", True))
    assert status == streamed == 404
    err = error_of(data)
    assert err["code"] == "model_not_found" and err["type"] == "invalid_request_error"
    assert err["message"] == "The model 'gpt-9' does not exist or you do not have access to it."
    assert error_of(sdata) == err
    assert not a.requests or all(r.method == "GET" for r in a.requests)  # only probes


async def test_a_refused_model_is_counted_as_streamed_or_not_as_asked() -> None:
    # the scope is the web.Request's: the body's ``stream`` reaches the
    # refusal's count as a value
    async with FakeUpstream() as a, AppServer(proxy_app(f"{a.url}#model=m1,name=fast")) as px:
        await call(px, "/v1/chat/completions", chat_body("gpt-9"))
        await call(px, "/v1/chat/completions", chat_body("gpt-9", True))
        await call(px, "/v1/chat/completions", chat_body("gpt-9", True))
        async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
            text = await r.text()
    counted = {
        line.split("stream=")[1].split(",")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("streamfix_requests_total{") and 'status="404"' in line
    }
    assert counted == {'"false"': 1.0, '"true"': 2.0}


async def test_the_model_name_itself_reaches_its_rows_too() -> None:
    """A row's public name defaults to its model: a row given no name is
    asked for by the name its server knows."""
    async with (
        FakeUpstream(Reply.json(completion_text("ok"))) as a,
        AppServer(proxy_app(f"{a.url}#model=Qwen/Qwen3-8B")) as px,
    ):
        status, _ = await call(px, "/v1/chat/completions", chat_body("Qwen/Qwen3-8B"))
    assert status == 200 and served(a) == ["Qwen/Qwen3-8B"]


async def test_a_row_without_a_model_takes_every_other_name_as_today() -> None:
    async with (
        FakeUpstream(Reply.json(completion_text("named"))) as a,
        FakeUpstream(Reply.json(completion_text("any"))) as b,
        AppServer(proxy_app(f"{a.url}#model=m1,name=fast", b.url)) as px,
    ):
        _, fast = await call(px, "/v1/chat/completions", chat_body("fast"))
        _, other = await call(px, "/v1/chat/completions", chat_body("my-local-model"))
    assert orjson.loads(fast)["choices"][0]["message"]["content"] == "named"
    assert orjson.loads(other)["choices"][0]["message"]["content"] == "any"
    assert served(b) == ["my-local-model"]  # sent on as the client named it


async def test_failover_stays_within_a_models_rows() -> None:
    dead = refusing_url()
    async with (
        FakeUpstream(Reply.json(completion_text("fast-2"))) as live_fast,
        FakeUpstream(Reply.json(completion_text("never"))) as other_model,
        AppServer(
            proxy_app(
                f"{dead}#model=m1,name=fast,weight=1000",
                f"{live_fast.url}#model=m1,name=fast",
                f"{dead}#model=m2,name=strong",
                f"{other_model.url}#model=m3,name=cheap",
                retries=1,
            )
        ) as px,
    ):
        status, data = await call(px, "/v1/chat/completions", chat_body("fast"))
        assert status == 200
        assert orjson.loads(data)["choices"][0]["message"]["content"] == "fast-2"
        # every row of "strong" is down: a 502, and never another model's row
        status, data = await call(px, "/v1/chat/completions", chat_body("strong"))
        assert status == 502
    assert served(other_model) == []


async def test_weights_share_a_models_traffic() -> None:
    async with (
        FakeUpstream(Reply.json(completion_text("a"))) as a,
        FakeUpstream(Reply.json(completion_text("b"))) as b,
        AppServer(
            proxy_app(f"{a.url}#model=m,name=fast,weight=3", f"{b.url}#model=m,name=fast")
        ) as px,
    ):
        for _ in range(80):
            await call(px, "/v1/chat/completions", chat_body("fast"))
    # 3:1 by weight; bounds far from the mean (60 of 80) so the test is not flaky
    assert 45 <= len(served(a)) <= 75 and len(served(a)) + len(served(b)) == 80


async def test_streamed_doors_use_the_route_too() -> None:
    """The Messages door's model picks the rows like a chat request."""
    async with (
        FakeUpstream(Reply.stream(text_stream(["hi"]))) as a,
        AppServer(proxy_app(f"{a.url}#model=Qwen/Qwen3-8B,name=fast")) as px,
    ):
        body = {"model": "fast", "max_tokens": 16, "messages": MESSAGES, "stream": True}
        status, _ = await call(px, "/v1/messages", body)
        missing, data = await call(px, "/v1/messages", {**body, "model": "nope"})
    assert status == 200 and served(a) == ["Qwen/Qwen3-8B"]
    assert missing == 404 and orjson.loads(data)["type"] == "error"  # the door's own shape


def completion_text(content: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "server-name",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


# -- embeddings ----------------------------------------------------------------------------------


async def test_embeddings_go_to_embedding_rows_with_failover() -> None:
    dead = refusing_url()
    async with (
        FakeUpstream(embedding_reply(8)) as emb,
        FakeUpstream() as chat,
        AppServer(
            proxy_app(
                f"{chat.url}#model=m1,name=fast",
                f"{dead}#model=bge-small,name=embed,kind=embedding,weight=1000",
                f"{emb.url}#model=bge-small,name=embed,kind=embedding",
            )
        ) as px,
    ):
        status, data = await call(px, "/v1/embeddings", {"model": "embed", "input": ["a", "b"]})
        wrong_kind, _ = await call(px, "/v1/embeddings", {"model": "fast", "input": "a"})
        chat_to_embed, _ = await call(px, "/v1/chat/completions", chat_body("embed"))
        bad, bad_data = await call(px, "/v1/embeddings", {"model": "embed", "input": [1.5]})
    assert status == 200 and len(orjson.loads(data)["data"][0]["embedding"]) == 8
    posts = [r for r in emb.requests if r.method == "POST"]
    assert posts[-1].path == "/v1/embeddings" and posts[-1].body["model"] == "bge-small"
    assert wrong_kind == chat_to_embed == 404
    assert bad == 400 and error_of(bad_data)["param"] == "input"
    assert served(chat) == []


async def test_embedding_upstream_errors_are_relayed_in_openai_shape() -> None:
    async with (
        FakeUpstream(Reply.error(400, "input too long", "context_length_exceeded")) as emb,
        AppServer(proxy_app(f"{emb.url}#model=e,name=embed,kind=embedding")) as px,
    ):
        status, data = await call(px, "/v1/embeddings", {"model": "embed", "input": "x"})
    assert status == 400 and error_of(data)["message"] == "input too long"


async def test_models_lists_public_names_with_window_and_dimensions() -> None:
    vllm = {"/v1/models": {"data": [{"id": "m1", "max_model_len": 32768}]}}
    async with (
        FakeUpstream(routes=vllm) as chat,
        FakeUpstream(embedding_reply(384)) as emb,
        AppServer(
            proxy_app(
                f"{chat.url}#model=m1,name=fast",
                f"{emb.url}#model=bge-small,name=embed,kind=embedding",
            )
        ) as px,
    ):
        status, data = await call(px, "/v1/models", method="GET")
        one, one_data = await call(px, "/v1/models/embed", method="GET")
        none, _ = await call(px, "/v1/models/nope", method="GET")
    assert status == one == 200 and none == 404
    cards = {c["id"]: c for c in orjson.loads(data)["data"]}
    assert set(cards) == {"fast", "embed"}
    assert cards["fast"]["streamfix"] == {"kind": "chat", "context_window": 32768}
    assert cards["embed"]["streamfix"]["dimensions"] == 384
    assert orjson.loads(one_data) == cards["embed"]


# -- text completions ----------------------------------------------------------------------------


def text_event(text: str, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {"id": "c", "object": "text_completion", "model": "m1", "choices": [choice]}


def text_chunks(pieces: list[str]) -> bytes:
    return sse([*(text_event(p) for p in pieces), text_event("", "stop")])


async def test_completions_pass_through_byte_for_byte() -> None:
    raw = text_chunks(["Once upon a time, ", "a fox met a crow."])
    async with (
        FakeUpstream(Reply.stream(raw)) as up,
        AppServer(proxy_app(f"{up.url}#model=m1,name=fast")) as px,
    ):
        status, data = await call(
            px, "/v1/completions", {"model": "fast", "prompt": "Tell", "stream": True}
        )
    # byte for byte, but for the model said as the client named it (issue 26)
    assert status == 200 and data == raw.replace(b'"model":"m1"', b'"model":"fast"')
    assert [r.path for r in up.requests if r.method == "POST"] == ["/v1/completions"]
    assert served(up) == ["m1"]


async def test_a_looping_completion_is_cut_and_the_upstream_closed() -> None:
    loop = Reply.stream(sse([text_event("The answer is ")], done=False), delay=0.001)
    loop.repeat = sse([text_event("again and ")], done=False)
    async with FakeUpstream(loop) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await asyncio.wait_for(
            call(px, "/v1/completions", {"model": "m", "prompt": "x", "stream": True}), 10
        )
        await asyncio.wait_for(up.requests[-1].ended.wait(), 5)
    events = [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: {")]
    last = events[-1]["choices"][0]
    assert status == 200 and data.endswith(b"data: [DONE]\n\n")
    assert last["finish_reason"] == "length" and last["streamfix"]["cut"] == "repetition"
    text = "".join(e["choices"][0].get("text") or "" for e in events)
    assert len(text) < 1000
    assert up.requests[-1].disconnected


async def test_a_whole_completion_is_cut_the_same_way() -> None:
    body = {
        "id": "c",
        "object": "text_completion",
        "choices": [{"index": 0, "text": "ha " * 400, "finish_reason": "length"}],
    }
    async with FakeUpstream(Reply.json(body)) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await call(px, "/v1/completions", {"model": "m", "prompt": "x"})
    choice = orjson.loads(data)["choices"][0]
    assert status == 200 and len(choice["text"]) < 400 and choice["finish_reason"] == "length"


async def test_completions_without_a_prompt_are_a_400() -> None:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        status, data = await call(px, "/v1/completions", {"model": "m"})
    assert status == 400 and error_of(data)["param"] == "prompt"


# -- tenants -------------------------------------------------------------------------------------


def two_tenants(a: FakeUpstream, b: FakeUpstream, **settings: Any) -> Any:
    return proxy_app(
        f"{a.url}#model=Qwen/Qwen3-8B,name=fast",
        f"{b.url}#model=meta/Llama-70B,name=strong",
        tenants=[
            TenantConfig("team-a", ("sk-team-a",), ("fast",)),
            TenantConfig("team-b", ("sk-team-b",), ("strong",)),
        ],
        api_keys=["sk-operator"],
        **settings,
    )


async def test_a_tenant_reaches_lists_and_learns_only_its_own_models() -> None:
    async with (
        FakeUpstream(Reply.json(completion_text("a"))) as a,
        FakeUpstream(Reply.json(completion_text("b"))) as b,
        AppServer(two_tenants(a, b)) as px,
    ):
        ok, _ = await call(px, "/v1/chat/completions", chat_body("fast"), "sk-team-a")
        # another tenant's model, by its public name and by the server's name
        by_alias, alias_err = await call(
            px, "/v1/chat/completions", chat_body("strong"), "sk-team-a"
        )
        by_model, model_err = await call(
            px, "/v1/chat/completions", chat_body("meta/Llama-70B"), "sk-team-a"
        )
        unknown, unknown_err = await call(
            px, "/v1/chat/completions", chat_body("gpt-9"), "sk-team-a"
        )
        _, listed = await call(px, "/v1/models", key="sk-team-a", method="GET")
        card, _ = await call(px, "/v1/models/strong", key="sk-team-a", method="GET")
        operator, op_list = await call(px, "/v1/models", key="sk-operator", method="GET")
        door_body = {"model": "strong", "max_tokens": 8, "messages": MESSAGES}
        door, door_err = await call(px, "/v1/messages", door_body, "sk-team-a")
        counted, _ = await call(px, "/v1/messages/count_tokens", door_body, "sk-team-a")
        embed, _ = await call(px, "/v1/embeddings", {"model": "strong", "input": "x"}, "sk-team-a")
        nokey, _ = await call(px, "/v1/chat/completions", chat_body("fast"))
        _, metrics = await call(px, "/metrics", method="GET")
    assert ok == 200 and by_alias == by_model == unknown == card == 404
    # the same answer as for a model that does not exist, but for its name
    for err, name in ((alias_err, "strong"), (model_err, "meta/Llama-70B")):
        assert error_of(err) == {
            **error_of(unknown_err),
            "message": error_of(unknown_err)["message"].replace("gpt-9", name),
        }
        assert b"Llama" not in err.replace(b"meta/Llama-70B", b"") and b"team-b" not in err
    assert [c["id"] for c in orjson.loads(listed)["data"]] == ["fast"]
    assert operator == 200 and {c["id"] for c in orjson.loads(op_list)["data"]} == {
        "fast",
        "strong",
    }
    assert door == counted == embed == 404
    assert orjson.loads(door_err)["error"]["message"] == error_of(alias_err)["message"]
    assert nokey == 401
    assert served(b) == []
    text = metrics.decode()
    assert 'model="fast",status="200",stream="false",tenant="team-a"' in text
    assert 'model="-",status="404",stream="false",tenant="team-a"' in text


async def test_status_routes_need_an_operator_key_when_protected() -> None:
    async with FakeUpstream() as a, FakeUpstream() as b:
        async with AppServer(two_tenants(a, b)) as open_px:
            assert (await call(open_px, "/metrics", method="GET"))[0] == 200
            assert (await call(open_px, "/healthz", method="GET"))[0] == 200
        async with AppServer(two_tenants(a, b, protect_status=True)) as px:
            for path in ("/metrics", "/healthz"):
                assert (await call(px, path, method="GET"))[0] == 401
                assert (await call(px, path, key="sk-team-a", method="GET"))[0] == 403
                assert (await call(px, path, key="sk-operator", method="GET"))[0] == 200


def test_the_tenant_table_is_checked_when_loaded(tmp_path: Path) -> None:
    def load(text: str) -> ServerConfig:
        path = tmp_path / "c.toml"
        path.write_text(text)
        return build_config({}, {}, str(path))

    rows = """
[[upstream]]
url = "http://127.0.0.1:8000/v1"
model = "Qwen/Qwen3-8B"
name = "fast"
weight = 3
[[upstream]]
url = "http://127.0.0.1:8001/v1"
model = "bge"
kind = "embedding"
"""
    cfg = load(rows + '[[tenant]]\nname = "a"\napi_key = ["sk-a"]\nmodels = ["fast", "bge"]\n')
    assert cfg.upstreams[0].served == "fast" and cfg.upstreams[1].kind == "embedding"
    assert cfg.tenants == [TenantConfig("a", ("sk-a",), ("fast", "bge"))]
    bad = {
        "no upstream serves 'slow'": '[[tenant]]\nname="a"\napi_key="k1"\nmodels=["slow"]\n',
        "an api_key is used twice": '[[tenant]]\nname="a"\napi_key="k1"\nmodels=["fast"]\n'
        '[[tenant]]\nname="b"\napi_key="k1"\nmodels=["fast"]\n',
        "stands for two models": '[[upstream]]\nurl="http://h:1/v1"\nmodel="other"\nname="fast"\n',
        "kind must be one of": '[[upstream]]\nurl="http://h:1/v1"\nkind="image"\n',
        "needs the model the server knows": '[[upstream]]\nurl="http://h:1/v1"\nname="x"\n',
        "tenant: unknown option": '[[tenant]]\nname="a"\napi_key="k"\nmodels=["fast"]\nx=1\n',
    }
    for message, extra in bad.items():
        with pytest.raises(ConfigError, match=message):
            load(rows + extra)


# -- reloading -----------------------------------------------------------------------------------


def write_config(path: Path, *rows: str, extra: str = "") -> None:
    text = "".join(
        f'[[upstream]]\nurl = "{url}"\nmodel = "{model}"\nname = "{name}"\n'
        for url, model, name in (r.split("|") for r in rows)
    )
    path.write_text("probe_interval = 0\nbackoff = 0.01\npool_limit = 1024\n" + text + extra)


async def test_reload_swaps_the_table_for_new_requests_and_refuses_a_broken_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "streamfix.toml"
    async with (
        FakeUpstream(Reply.json(completion_text("old"))) as old,
        FakeUpstream(Reply.json(completion_text("new"))) as new,
    ):
        write_config(path, f"{old.url}|m|fast")
        source = lambda: build_config({}, {}, str(path))  # noqa: E731
        app = create_app(source(), source)
        async with AppServer(app) as px:
            proxy = app[PROXY]
            _, data = await call(px, "/v1/chat/completions", chat_body("fast"))
            assert b"old" in data
            write_config(path, f"{new.url}|m|fast", f"{new.url}|m2|strong")
            assert proxy.reload()
            _, data = await call(px, "/v1/chat/completions", chat_body("fast"))
            assert b"new" in data
            assert (await call(px, "/v1/chat/completions", chat_body("strong")))[0] == 200
            path.write_text("[[upstream]]\nurl = 'not a url'\n")
            assert not proxy.reload()
            assert "reload refused" in caplog.text
            _, data = await call(px, "/v1/chat/completions", chat_body("fast"))
            assert b"new" in data  # the old table stayed
            text = (await call(px, "/metrics", method="GET"))[1].decode()
    assert 'streamfix_reloads_total{outcome="ok"} 1.0' in text
    assert 'streamfix_reloads_total{outcome="refused"} 1.0' in text


async def test_a_stream_in_flight_finishes_on_the_table_it_started_with(tmp_path: Path) -> None:
    path = tmp_path / "streamfix.toml"
    slow = Reply.events(text_stream([f"part {i} " for i in range(10)]), delay=0.05)
    async with FakeUpstream(slow) as old, FakeUpstream() as new:
        write_config(path, f"{old.url}#api_key=sk-old-secret|m|fast")
        source = lambda: build_config({}, {}, str(path))  # noqa: E731
        app = create_app(source(), source)
        async with AppServer(app) as px:
            task = asyncio.create_task(
                call(px, "/v1/chat/completions", chat_body("fast", stream=True))
            )
            await asyncio.sleep(0.1)
            write_config(path, f"{new.url}|m|fast")
            assert app[PROXY].reload()
            status, data = await task
    got = assemble(data)
    assert status == 200 and got.done and got.content.startswith("part 0 part 1")
    assert served(new) == []


async def test_sighup_reloads_under_load_with_no_errors(tmp_path: Path) -> None:
    """500 streams in flight through ``streamfix serve``; a valid and a
    broken config each arrive by SIGHUP; every stream ends cleanly, and
    requests after the reload use the new table."""
    import signal
    import sys

    from streamfix.tools.local import free_port

    streams = 500
    path = tmp_path / "streamfix.toml"
    pieces = [
        f"{w} "
        for w in [
            "The",
            "proxy",
            "keeps",
            "each",
            "stream",
            "on",
            "the",
            "table",
            "it",
            "started",
            "with,",
            "while",
            "new",
            "requests",
            "follow",
            "the",
            "configuration",
            "that",
            "was",
            "loaded",
            "after",
            "it.",
        ]
    ]
    slow = Reply.events(text_stream(pieces), delay=0.1)  # about 2.5 s per stream
    async with (
        FakeUpstream(slow) as old,
        FakeUpstream(Reply.json(completion_text("new table"))) as new,
    ):
        write_config(path, f"{old.url}|m|fast")
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streamfix", "serve", "--config", str(path),
            "--port", str(port), "--log-level", "warning",
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as s:
                for _ in range(100):  # wait for the port
                    try:
                        async with s.get(base + "/healthz") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)

                async def one() -> tuple[int, bytes]:
                    body = chat_body("fast", stream=True)
                    async with s.post(base + "/v1/chat/completions", json=body) as r:
                        return r.status, await r.read()

                tasks = [asyncio.create_task(one()) for _ in range(streams)]
                while len(old.requests) < streams:  # all of them in flight
                    await asyncio.sleep(0.05)
                write_config(path, f"{new.url}|m|fast")
                proc.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.3)
                async with s.post(base + "/v1/chat/completions", json=chat_body("fast")) as r:
                    after = await r.read()
                path.write_text("[[upstream]]\nurl = 'broken'\n")
                proc.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.3)
                async with s.post(base + "/v1/chat/completions", json=chat_body("fast")) as r:
                    after_broken = await r.read()
                results = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert len(results) == streams
    for status, data in results:
        got = assemble(data)
        assert status == 200 and got.done and not got.errors
        assert got.content == "".join(pieces)
    assert b"new table" in after and b"new table" in after_broken
    assert b"reload refused" in err


def test_an_app_with_a_source_starts_outside_the_main_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Signal handlers exist only in the main thread: an app run in a
    thread (``streamfix.tools.local.AppThread``) starts all the same, says that
    SIGHUP will not reload there, and ``Proxy.reload`` still works."""
    from streamfix.tools.local import AppThread

    path = tmp_path / "streamfix.toml"
    write_config(path, "http://127.0.0.1:9/v1|m|fast")
    source = lambda: build_config({}, {}, str(path))  # noqa: E731
    app = create_app(source(), source)
    with AppThread(app) as thread:
        assert thread.base_url
        write_config(path, "http://127.0.0.1:9/v1|m|fast", "http://127.0.0.1:9/v1|m2|strong")
        assert app[PROXY].reload()
    assert "SIGHUP will not reload the configuration here" in caplog.text
    assert app[PROXY].table.named.keys() == {("chat", "fast"), ("chat", "strong")}
