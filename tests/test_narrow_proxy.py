"""``--narrow-tools auto`` through the proxy (``server/narrowing.py``,
``reask.py``): what the upstream is shown, what the client gets, the ask
again with every tool, the hidden tool's call, the settings per row and
tenant, the front doors, the embedding row, metrics and recordings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from streamfix import narrow
from streamfix.server.app import create_app
from streamfix.server.config import (
    ConfigError,
    ServerConfig,
    TenantConfig,
    build_config,
    parse_upstream,
)
from streamfix.server.proxy import PROXY
from streamfix.server.record import RECORDER
from streamfix.server.replay import replay_file

from .support.streamutil import assemble, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Received, Reply, proxy_app
from .test_narrow import TOOLS

WEATHER = "What's the weather like in Paris today?"


def turn(text: str = WEATHER, stream: bool = False, **kw: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "tools": TOOLS,
        "stream": stream,
        **kw,
    }


def calls_text(name: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'


def reply(rec: Received, text: str) -> Reply:
    if rec.body.get("stream"):
        return Reply.stream(text_stream([text[: len(text) // 2], text[len(text) // 2 :]]))
    msg = {"role": "assistant", "content": text}
    return Reply.json(
        {"id": "x", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
    )


def model_calling(want: str) -> Any:
    """A picky small model: calls ``want`` when it is among the tools it
    is shown, answers in prose otherwise."""

    def handle(rec: Received) -> Reply:
        shown = narrow.tool_names(rec.body.get("tools") or [])
        return reply(rec, calls_text(want) if want in shown else "I am not sure what to do.")

    return handle


async def post(px: AppServer, body: dict[str, Any], path: str = "/chat/completions") -> bytes:
    async with aiohttp.ClientSession() as s, s.post(px.url + path, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.read()


async def metrics(px: AppServer) -> str:
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        return await r.text()


def message(data: bytes, stream: bool) -> tuple[list[str], dict[str, Any] | None]:
    """The calls' names and the ``streamfix`` field of the choice."""
    if stream:
        seen = assemble(data)
        return [c["function"]["name"] for c in seen.tool_calls], seen.ext
    ch = orjson.loads(data)["choices"][0]
    return [c["function"]["name"] for c in ch["message"].get("tool_calls") or ()], ch.get(
        "streamfix"
    )


def shown(rec: Received) -> list[str]:
    return narrow.tool_names(rec.body.get("tools") or [])


@pytest.mark.parametrize("stream", [True, False])
async def test_the_model_is_shown_the_few_tools_the_turn_needs(stream: bool) -> None:
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        data = await post(px, turn(stream=stream))
        text = await metrics(px)
    names, ext = message(data, stream)
    assert names == ["get_weather"]
    (sent,) = up.chat_requests
    kept = shown(sent)
    assert kept[0] == "get_weather" and len(kept) == narrow.KEEP
    assert sent.body.get("tool_choice") == "auto"
    assert sent.body["messages"][0]["role"] == "system"
    assert "get_weather (Current weather for a city)" in sent.body["messages"][0]["content"]
    assert ext == {"narrowed": {"kept": kept, "of": len(TOOLS)}}
    assert 'streamfix_narrowed_total{outcome="kept"} 1.0' in text


async def test_off_by_default_and_when_switched_off() -> None:
    async with FakeUpstream(handler=model_calling("get_weather")) as up:
        for settings in ({}, {"narrow_tools": "off"}):
            async with AppServer(proxy_app(up.url, **settings)) as px:
                data = await post(px, turn())
            assert shown(up.chat_requests[-1]) == narrow.tool_names(TOOLS)
            assert "streamfix" not in orjson.loads(data)["choices"][0]


@pytest.mark.parametrize(
    ("body", "counted"),
    [
        ({**turn(), "tools": TOOLS[:8]}, "few_tools"),
        ({**turn(), "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, ""),
        ({**turn(), "tool_choice": "none"}, ""),
        (turn("hmm, well"), "not_confident"),
    ],
    ids=["few-tools", "named-tool", "none", "unsure"],
)
async def test_few_tools_a_named_tool_or_an_unsure_ranking_are_untouched(
    body: dict[str, Any], counted: str
) -> None:
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto", required="off")) as px,
    ):
        await post(px, body)
        text = await metrics(px)
    (sent,) = up.chat_requests
    assert sent.body["tools"] == body["tools"]  # all of them, as sent
    assert sent.body["messages"] == body["messages"]  # no instruction
    assert sent.body.get("tool_choice") == body.get("tool_choice")
    for outcome in ("kept", "hidden", "asked_again", "not_confident", "few_tools"):
        line = f'streamfix_narrowed_total{{outcome="{outcome}"}} 1.0'
        assert (line in text) == (outcome == counted), outcome


#: Turns whose needed tool ranks low: vague words, or a tool described
#: poorly (``tool_7`` is ``read_file`` renamed, with no description).
POOR = [
    fn if fn["function"]["name"] != "read_file" else
    {"type": "function", "function": {"name": "tool_7", "parameters": {"type": "object"}}}
    for fn in TOOLS
]  # fmt: skip
HARD = [
    (
        TOOLS,
        "Can you check what my order of shares in AAPL is worth? weather permitting",
        "calculate",
    ),
    (TOOLS, "Send the weather report for Paris by email", "get_news"),
    (POOR, "Show me what's inside notes.txt, the weather file for Paris", "tool_7"),
    (TOOLS, "Book flights, hotel and weather check for the Paris trip", "translate_text"),
]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("tools", "text", "want"), HARD, ids=[w for _, _, w in HARD])
async def test_a_needed_tool_that_ranks_low_is_called_after_asking_with_all(
    tools: list[dict[str, Any]], text: str, want: str, stream: bool
) -> None:
    async with (
        FakeUpstream(handler=model_calling(want)) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        data = await post(px, {**turn(text, stream=stream), "tools": tools})
        counts = await metrics(px)
    names, ext = message(data, stream)
    assert names == [want]
    first, second = up.chat_requests
    assert want not in shown(first) and len(shown(first)) <= narrow.KEEP  # narrowed, missed
    assert shown(second) == narrow.tool_names(tools)  # then every tool, as the client sent
    assert ext is None  # the reply the client got was not narrowed
    assert 'streamfix_narrowed_total{outcome="asked_again"} 1.0' in counts
    assert 'streamfix_reasks_total{reason="narrowed"} 1.0' in counts


@pytest.mark.parametrize("stream", [True, False])
async def test_a_call_to_a_tool_offered_but_not_shown_is_accepted(stream: bool) -> None:
    def handle(rec: Received) -> Reply:
        return reply(rec, calls_text("order_pizza"))  # not among the weather turn's tools

    async with (
        FakeUpstream(handler=handle) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        data = await post(px, turn(stream=stream))
        counts = await metrics(px)
    assert "order_pizza" not in shown(up.chat_requests[0])
    assert message(data, stream)[0] == ["order_pizza"]
    assert len(up.chat_requests) == 1
    assert 'streamfix_narrowed_total{outcome="hidden"} 1.0' in counts


async def test_required_is_narrowed_and_keeps_its_force_in_words() -> None:
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        data = await post(px, turn(tool_choice="required"))
    assert message(data, False)[0] == ["get_weather"]
    (sent,) = up.chat_requests
    assert sent.body["tool_choice"] == "auto" and len(shown(sent)) == narrow.KEEP
    assert sent.body["messages"][0]["content"].startswith("Answer this turn by calling one of")


async def test_tools_called_earlier_stay_offered() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "order_pizza", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "A pizza please"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ordered"},
        {"role": "user", "content": WEATHER},
    ]
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        await post(px, {**turn(), "messages": messages})
    kept = shown(up.chat_requests[0])
    assert "order_pizza" in kept and "get_weather" in kept and len(kept) == narrow.KEEP + 1


def after_weather_result() -> list[dict[str, Any]]:
    """A weather turn whose call has been answered: the model's next reply
    may well be the answer, in prose."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    return [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Paris: 21 C, sunny, light wind"},
    ]


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_in_prose_after_a_tool_result_is_not_asked_again(stream: bool) -> None:
    """After a tool's result an answer in prose is how the loop ends: the
    turn is still narrowed, but its prose is the reply (one request, not
    held), counted ``no_call``."""
    async with (
        FakeUpstream(handler=lambda rec: reply(rec, "It is sunny in Paris.")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        data = await post(px, {**turn(stream=stream), "messages": after_weather_result()})
        counts = await metrics(px)
    (sent,) = up.chat_requests
    assert len(shown(sent)) < len(TOOLS)  # narrowed
    content = (
        assemble(data).content if stream else orjson.loads(data)["choices"][0]["message"]["content"]
    )
    assert content == "It is sunny in Paris."
    assert 'streamfix_narrowed_total{outcome="no_call"} 1.0' in counts
    assert "streamfix_reasks_total" not in counts or 'reason="narrowed"' not in counts


async def test_required_after_a_tool_result_is_asked_again_with_every_tool() -> None:
    async with (
        FakeUpstream(handler=lambda rec: reply(rec, "It is sunny in Paris.")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        body = {**turn(tool_choice="required"), "messages": after_weather_result()}
        await post(px, body)
    first, second = up.chat_requests[:2]
    assert len(shown(first)) < len(TOOLS) and len(shown(second)) == len(TOOLS)


# -- where it is switched on ---------------------------------------------------


def test_toml_per_row_and_per_tenant(tmp_path: Path) -> None:
    path = tmp_path / "streamfix.toml"
    path.write_text(
        'narrow_tools = "off"\n'
        "[[upstream]]\n"
        'url = "http://127.0.0.1:9/v1"\nmodel = "small"\nnarrow_tools = "auto"\n'
        "[[upstream]]\n"
        'url = "http://127.0.0.1:9/v1"\nmodel = "emb"\nkind = "embedding"\n'
        "[[tenant]]\n"
        'name = "a"\napi_key = "sk-a"\nmodels = ["small"]\nnarrow_tools = "off"\n'
    )
    cfg = build_config({}, {}, str(path))
    assert cfg.narrow_tools == "off"
    assert cfg.upstreams[0].narrow_tools == "auto" and cfg.upstreams[1].narrow_tools is None
    assert cfg.tenants[0].narrow_tools == "off"
    assert build_config({"narrow_tools": "auto"}, {}, None).narrow_tools == "auto"
    assert build_config({}, {"STREAMFIX_NARROW_TOOLS": "auto"}, None).narrow_tools == "auto"
    with pytest.raises(ConfigError, match="narrow_tools"):
        build_config({"narrow_tools": "always"}, {}, None)
    path.write_text('[[upstream]]\nurl = "http://127.0.0.1:9/v1"\nnarrow_tools = "yes"\n')
    with pytest.raises(ConfigError, match="narrow_tools"):
        build_config({}, {}, str(path))
    with pytest.raises(ConfigError, match="narrow_embedding"):
        build_config({"narrow_embedding": "nope"}, {}, None)


async def test_the_tenant_outranks_the_row_which_outranks_the_global_setting() -> None:
    async with FakeUpstream(handler=model_calling("get_weather")) as up:
        cfg = ServerConfig(
            upstreams=[parse_upstream(f"{up.url}#model=small,narrow_tools=auto")],
            tenants=[
                TenantConfig("quiet", ("sk-quiet",), ("small",), narrow_tools="off"),
                TenantConfig("plain", ("sk-plain",), ("small",)),
            ],
            probe_interval=0,
        )
        async with AppServer(create_app(cfg)) as px, aiohttp.ClientSession() as s:
            for key in ("sk-plain", "sk-quiet"):
                headers = {"Authorization": f"Bearer {key}"}
                body = {**turn(), "model": "small"}
                async with s.post(px.url + "/chat/completions", json=body, headers=headers) as r:
                    assert r.status == 200
    plain, quiet = up.chat_requests
    assert len(shown(plain)) == narrow.KEEP  # the row says auto, the global off
    assert len(shown(quiet)) == len(TOOLS)  # the tenant says off


# -- the front doors -------------------------------------------------------------


def anthropic_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOLS
        if "." not in t["function"]["name"]
    ]


@pytest.mark.parametrize("door", ["messages", "responses"])
async def test_the_front_doors_are_narrowed_too(door: str) -> None:
    if door == "messages":
        body: dict[str, Any] = {
            "model": "m",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": WEATHER}],
            "tools": anthropic_tools(),
        }
    else:
        body = {
            "model": "m",
            "input": WEATHER,
            "tools": [{"type": "function", **t["function"]} for t in TOOLS],
        }
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        data = await post(px, body, "/" + door)
    (sent,) = up.chat_requests
    assert shown(sent)[0] == "get_weather" and len(shown(sent)) == narrow.KEEP
    obj = orjson.loads(data)
    if door == "messages":
        uses = [b for b in obj["content"] if b["type"] == "tool_use"]
        assert [b["name"] for b in uses] == ["get_weather"]
    else:
        calls = [i for i in obj["output"] if i["type"] == "function_call"]
        assert [c["name"] for c in calls] == ["get_weather"]
    assert b"narrowed" not in data  # nothing of it leaks into a door's reply


# -- the embedding row ---------------------------------------------------------


class Embedder(AppServer):
    """An embedding upstream: a hashed bag of words per input; each
    request's inputs are kept."""

    def __init__(self, status: int = 200) -> None:
        from bench.narrow import hashed_vector

        self.inputs: list[list[str]] = []

        async def embed(request: web.Request) -> web.Response:
            body = await request.json()
            if isinstance(body["input"], list):  # not the start-up probe's one word
                self.inputs.append(body["input"])
            if status != 200:
                return web.json_response({"error": {"message": "down"}}, status=status)
            data = [
                {"object": "embedding", "index": i, "embedding": hashed_vector(t)}
                for i, t in enumerate(body["input"] if isinstance(body["input"], list) else [""])
            ]
            return web.json_response({"object": "list", "data": data})

        app = web.Application()
        app.router.add_post("/v1/embeddings", embed)
        super().__init__(app)


async def test_the_embedding_row_ranks_and_the_tools_are_embedded_once() -> None:
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        Embedder() as emb,
    ):
        cfg = ServerConfig(
            upstreams=[parse_upstream(up.url), parse_upstream(f"{emb.url}#model=e,kind=embedding")],
            narrow_tools="auto",
            narrow_embedding="e",
            probe_interval=0,
        )
        app = create_app(cfg)
        async with AppServer(app) as px:
            first = await post(px, turn())
            await post(px, turn("Will it rain in Oslo tomorrow, what weather?"))
    assert message(first, False)[0] == ["get_weather"]
    assert [len(i) for i in emb.inputs] == [1 + len(TOOLS), 1]  # the tools once, then the turn
    assert emb.inputs[0][0] == WEATHER
    assert all("get_weather" in shown(r) and len(shown(r)) == narrow.KEEP for r in up.chat_requests)
    assert len(app[PROXY].tool_sets) == 1


async def test_an_embedding_row_that_fails_leaves_the_words_to_decide() -> None:
    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        Embedder(status=500) as emb,
    ):
        cfg = ServerConfig(
            upstreams=[parse_upstream(up.url), parse_upstream(f"{emb.url}#model=e,kind=embedding")],
            narrow_tools="auto",
            narrow_embedding="e",
            probe_interval=0,
            retries=0,
        )
        async with AppServer(create_app(cfg)) as px:
            data = await post(px, turn())
    assert emb.inputs and message(data, False)[0] == ["get_weather"]
    assert shown(up.chat_requests[0])[0] == "get_weather"


# -- recorded and replayed -----------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_recording_notes_what_was_kept_and_replays_the_same(
    tmp_path: Path, stream: bool
) -> None:
    async with (
        FakeUpstream(handler=model_calling("translate_text")) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto", record=str(tmp_path))) as px,
    ):
        await post(px, turn(HARD[3][1], stream=stream))
    px.app[RECORDER].flush()
    (path,) = sorted(tmp_path.glob("*.json"))
    doc = json.loads(path.read_text())
    first, second = doc["attempts"]
    assert first["narrowed"]["of"] == len(TOOLS) and len(first["narrowed"]["kept"]) == narrow.KEEP
    assert "narrowed" not in second
    outcome = replay_file(path)
    assert outcome.verdict == "same", outcome.notes
    assert any(n.startswith("attempt 1 narrowed to 5 of 20 tools:") for n in outcome.notes)
