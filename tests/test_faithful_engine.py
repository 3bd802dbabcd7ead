"""What the model said reaches the client: nothing lost, nothing invented.

Three ways the engine used to lose or change what the upstream sent:
parallel calls that share ``"index": 0`` joined into one broken call; big
integers in a call's arguments (an internal error, or a float); and JSON
the SDKs accept (``-Infinity`` logprobs, lone surrogate escapes) read as a
broken stream.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfix

from .support.streamutil import assemble, chunk, run_sse, split_at, sse, stream_of, tc, tool
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

WEATHER = tool("get_weather", {"city": {"type": "string"}})
TWO = {"tools": [WEATHER, tool("get_time", {"tz": {"type": "string"}})]}


def pairs(calls: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    return [
        (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in calls
    ]


async def post(url: str, payload: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url + "/chat/completions", json=payload) as r:
        return r.status, await r.read()


# -- 5. parallel calls that share "index": 0 ----------------------------------

#: Two parallel calls, both at index 0, told apart only by their ids (as
#: some servers stream them): id and name in each call's first piece.
SHARED_INDEX = stream_of(
    [tc(0, "call_a", "get_weather", "")],
    [tc(0, args='{"city": ')],
    [tc(0, args='"Paris"}')],
    [tc(0, "call_b", "get_time", "")],
    [tc(0, args='{"tz": "UTC"}')],
)
EXPECTED = [("call_a", "get_weather", {"city": "Paris"}), ("call_b", "get_time", {"tz": "UTC"})]


def test_a_new_id_at_the_same_index_is_a_new_call() -> None:
    out = run_sse(SHARED_INDEX, TWO)
    a = assemble(out)
    assert pairs(a.tool_calls) == EXPECTED
    assert a.finish_reason == "tool_calls"
    # Numbered per choice in the order emitted.
    indexes = [
        tc["index"]
        for line in out.split(b"\n\n")
        if line.startswith(b"data: {")
        for ch in orjson.loads(line[6:])["choices"]
        for tc in (ch.get("delta") or {}).get("tool_calls") or []
    ]
    assert indexes == [0, 1]


def test_the_same_id_repeated_in_every_piece_is_one_call() -> None:
    """llama.cpp's style: id and name in every piece of the same call; at
    one shared index, two such calls are still two calls, each joined once."""
    a = assemble(
        run_sse(
            stream_of(
                [tc(0, "call_a", "get_weather", '{"city":')],
                [tc(0, "call_a", "get_weather", ' "Oslo"}')],
                [tc(0, "call_b", "get_weather", '{"city":')],
                [tc(0, "call_b", "get_weather", ' "Rome"}')],
            ),
            TWO,
        )
    )
    assert pairs(a.tool_calls) == [
        ("call_a", "get_weather", {"city": "Oslo"}),
        ("call_b", "get_weather", {"city": "Rome"}),
    ]


def test_a_new_id_starts_a_new_call_beside_calls_at_other_indexes() -> None:
    """Pieces without an id go on with the last call started at their index."""
    a = assemble(
        run_sse(
            stream_of(
                [tc(0, "a", "get_weather", '{"city": ')],
                [tc(1, "b", "get_time", '{"tz": "UTC"}')],
                [tc(0, args='"Rome"}')],
                [tc(0, "c", "get_weather", "{")],
                [tc(0, args='"city": "Lima"}')],
            ),
            TWO,
        )
    )
    assert pairs(a.tool_calls) == [
        ("a", "get_weather", {"city": "Rome"}),
        ("b", "get_time", {"tz": "UTC"}),
        ("c", "get_weather", {"city": "Lima"}),
    ]


_call = st.tuples(
    st.sampled_from(["Paris", "Oslo", "a b", 'q"x', "é"]),
    st.booleans(),  # id and name repeated in every piece (llama.cpp)
    st.lists(st.integers(1, 12), min_size=1, max_size=4),  # where its arguments are cut
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_call, min_size=1, max_size=4), st.lists(st.integers(0, 3000), max_size=20))
def test_shared_index_split_invariance(
    calls: list[tuple[str, bool, list[int]]], cuts: list[int]
) -> None:
    """Calls that all say index 0, each with its own id, come out as those
    calls in that order, whatever their pieces and the byte-level split."""
    frags: list[list[dict[str, Any]]] = []
    expected = []
    for n, (city, repeat, arg_cuts) in enumerate(calls):
        cid = f"call_{n}"
        text = orjson.dumps({"city": city}).decode()
        expected.append((cid, "get_weather", {"city": city}))
        for k, part in enumerate(split_at(text, arg_cuts)):
            first = k == 0
            frags.append(
                [
                    tc(
                        0,
                        cid if first or repeat else None,
                        "get_weather" if first or repeat else None,
                        part,
                    )
                ]
            )
    data = stream_of(*frags)
    whole = assemble(run_sse(data, TWO))
    assert pairs(whole.tool_calls) == expected
    assert whole.finish_reason == "tool_calls"
    split = assemble(run_sse(split_at(data, cuts), TWO))
    assert (split.tool_calls, split.finish_reason) == (whole.tool_calls, whole.finish_reason)


def shared_index_completion() -> dict[str, Any]:
    return completion(
        None,
        [
            {
                "index": 0,
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "index": 0,
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'},
            },
        ],
        finish="tool_calls",
    )


def test_shared_index_in_a_whole_reply() -> None:
    out = streamfix.fix_completion(shared_index_completion(), TWO)
    assert pairs(out["choices"][0]["message"]["tool_calls"]) == EXPECTED
    assert out["choices"][0]["finish_reason"] == "tool_calls"


async def test_shared_index_through_the_proxy() -> None:
    """Streamed and whole: both calls reach the client, and the upstream is
    asked once (no empty reply to ask again for)."""
    async with FakeUpstream(Reply.events(SHARED_INDEX)) as up, AppServer(proxy_app(up.url)) as px:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **TWO}
        status, data = await post(px.url, {**body, "stream": True})
        assert status == 200
        a = assemble(data)
        assert (pairs(a.tool_calls), a.finish_reason, a.done) == (EXPECTED, "tool_calls", True)
        assert len(up.chat_requests) == 1
        up.default = Reply.json(shared_index_completion())
        status, data = await post(px.url, {**body, "stream": False})
        assert status == 200
        choice = orjson.loads(data)["choices"][0]
        assert pairs(choice["message"]["tool_calls"]) == EXPECTED
        assert choice["finish_reason"] == "tool_calls"
        assert len(up.chat_requests) == 2


# -- 6. big integers ----------------------------------------------------------

#: Beyond 64 bits, and not a power of two: a float cannot hold it.
BIG = 2**70 + 1
NUMBERS = {
    "tools": [
        tool("put", {"n": {"type": "integer"}, "note": {"type": "string"}}),
        tool("any", {}),  # untyped: whatever the model wrote
    ]
}


def one_call(args: str, name: str = "put") -> bytes:
    return stream_of([tc(0, "call_1", name, args)])


def args_of(data: bytes) -> str:
    calls = assemble(data).tool_calls
    assert len(calls) == 1, data[-400:]
    arguments: str = calls[0]["function"]["arguments"]
    return arguments


def test_a_big_integer_that_needs_no_repair_passes_unchanged() -> None:
    text = f'{{"n": {BIG}, "note": "x"}}'
    assert args_of(run_sse(one_call(text), NUMBERS)) == text
    assert args_of(run_sse(one_call(text, "any"), NUMBERS)) == text


def test_a_big_integer_in_arguments_that_are_repaired_stays_exact() -> None:
    # Single quotes: repaired, so written again; the integer stays itself.
    out = run_sse(one_call(f"{{'n': {BIG}, 'note': 'x'}}"), NUMBERS)
    assert orjson.loads(args_of(out).replace(str(BIG), '"BIG"')) == {"n": "BIG", "note": "x"}
    assert str(BIG) in args_of(out)
    # A big integer written as a string, for an integer parameter.
    out = run_sse(one_call(f'{{"n": "{BIG}"}}'), NUMBERS)
    assert args_of(out) == f'{{"n":{BIG}}}'


def test_a_big_integer_in_a_call_written_as_text_stays_exact() -> None:
    for name, key in (("put", "n"), ("any", "z")):
        call = f'<tool_call>{{"name": "{name}", "arguments": {{"{key}": {BIG}}}}}</tool_call>'
        data = sse([chunk(role="assistant"), chunk(call), chunk(finish="stop")])
        out = run_sse(data, NUMBERS)
        assert args_of(out) == f'{{"{key}":{BIG}}}'
        assert assemble(out).finish_reason == "tool_calls"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 600), max_size=12))
def test_a_big_integer_in_a_call_written_as_text_split_anywhere(cuts: list[int]) -> None:
    call = f'<tool_call>{{"name": "any", "arguments": {{"z": {BIG}, "w": {-BIG}}}}}</tool_call>'
    pieces = split_at(call, [c % len(call) for c in cuts])
    data = sse([chunk(role="assistant")] + [chunk(p) for p in pieces] + [chunk(finish="stop")])
    assert args_of(run_sse(split_at(data, cuts), NUMBERS)) == f'{{"z":{BIG},"w":{-BIG}}}'


def test_coercion_never_goes_through_a_float() -> None:
    from streamfix.toolargs import convert_value

    integer, number = {"type": "integer"}, {"type": "number"}
    assert convert_value("5", integer) == 5
    assert convert_value(str(BIG), integer) == BIG
    assert convert_value(str(BIG), number) == BIG
    assert convert_value(f"-{BIG}", number) == -BIG
    assert convert_value(5.0, integer) == 5
    # 1e30 as an int would be 1000000000000000019884624838656: left a float.
    assert convert_value(1e30, integer) == 1e30
    assert isinstance(convert_value(1e30, integer), float)
    # Text for a number that no float holds stays text (not null, not inf).
    assert convert_value("1e999", number) == "1e999"


def big_completion(arguments: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "put", "arguments": arguments}}
    return completion(None, [call], finish="tool_calls")


def test_a_big_integer_in_a_whole_reply() -> None:
    for given_, expected in (
        (f'{{"n": {BIG}}}', f'{{"n": {BIG}}}'),  # no repair: unchanged
        (f'{{"n": "{BIG}"}}', f'{{"n":{BIG}}}'),  # converted by schema
        (f"{{'n': {BIG}}}", f'{{"n":{BIG}}}'),  # repaired
    ):
        out = streamfix.fix_completion(big_completion(given_), NUMBERS)
        assert out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == expected


async def test_a_big_integer_through_the_proxy() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **NUMBERS}
    first = Reply.stream(one_call(f'{{"n": "{BIG}"}}'))
    async with FakeUpstream(first) as up, AppServer(proxy_app(up.url)) as px:
        status, data = await post(px.url, {**body, "stream": True})
        assert status == 200
        assert args_of(data) == f'{{"n":{BIG}}}'
        up.default = Reply.json(big_completion(f"{{'n': {BIG}}}"))
        status, data = await post(px.url, {**body, "stream": False})
        assert status == 200, data
        call = orjson.loads(data)["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["arguments"] == f'{{"n":{BIG}}}'


# -- 7. JSON the SDKs accept --------------------------------------------------


def event(content: str, extra: str = "", finish: str = "null") -> bytes:
    """One chunk's event written by hand: ``content`` is JSON string text
    as it goes on the wire (escapes and all), ``extra`` more choice fields."""
    return (
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"'
        + content.encode()
        + b'"},'
        + extra.encode()
        + b'"finish_reason":'
        + finish.encode()
        + b"}]}\n\n"
    )


def logprob(value: str) -> str:
    return f'"logprobs":{{"content":[{{"token":"t","logprob":{value},"top_logprobs":[]}}]}},'


#: What the OpenAI SDK (Python's ``json``) reads without complaint, strict
#: decoders do not: non-finite logprobs and a lone surrogate escape.
LENIENT = (
    event("", finish="null")
    + event("Hel", logprob("-Infinity"))
    + event("lo", logprob("NaN"))
    + event("\\ud800!", logprob("Infinity"))
    + event(" end", logprob("-0.5"))
    + event("", finish='"stop"')
    + b"data: [DONE]\n\n"
)


def sdk_read(data: bytes) -> tuple[str, list[Any], str | None, bool]:
    """What the SDK assembles (content, logprobs, finish, [DONE]), read with
    Python's ``json`` as the SDK reads each event."""
    content, probs, finish, done = "", [], None, False
    for block in data.split(b"\n\n"):
        if not block.startswith(b"data: "):
            continue
        if block == b"data: [DONE]":
            done = True
            continue
        obj = json.loads(block[6:])
        assert "error" not in obj, obj
        for ch in obj["choices"]:
            content += ch["delta"].get("content") or ""
            lp = ch.get("logprobs")
            probs += [t["logprob"] for t in (lp or {}).get("content") or []]
            finish = ch.get("finish_reason") or finish
    return content, probs, finish, done


def test_lenient_json_needing_no_repair_passes_byte_for_byte() -> None:
    assert run_sse(LENIENT, {}) == LENIENT
    content, probs, finish, done = sdk_read(run_sse(LENIENT, {}))
    assert (content, finish, done) == ("Hello\ud800! end", "stop", True)
    assert str(probs) == "[-inf, nan, inf, -0.5]"
    # With tools offered, text that needs no repair goes on as it came too.
    assert run_sse(LENIENT, TWO) == LENIENT


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, len(LENIENT)), max_size=20))
def test_lenient_json_split_anywhere(cuts: list[int]) -> None:
    assert run_sse(split_at(LENIENT, cuts), {}) == LENIENT
    assert run_sse(split_at(LENIENT, cuts), TWO) == LENIENT


def test_a_lenient_chunk_that_is_changed_is_written_back_faithfully() -> None:
    """The chain changes this chunk (a call written as text is lifted out of
    it): its vendor fields, a lone surrogate in its text, a ``-Infinity``
    logprob and an integer beyond 64 bits, are written back as they came."""
    call = '<tool_call>{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Oslo\\"}}'
    data = (
        event("")
        + event("Hi \\ud800 " + call, logprob("-Infinity") + f'"x_big":{BIG},')
        + event("</tool_call>")
        + event("", finish='"stop"')
        + b"data: [DONE]\n\n"
    )
    for parts in (
        [data],
        [data[:i] for i in (len(data),)] + [b""],
        split_at(data, range(0, 2000, 7)),
    ):
        out = run_sse(parts, TWO)
        events = [json.loads(b[6:]) for b in out.split(b"\n\n") if b.startswith(b"data: {")]
        text = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
        assert "".join(e["choices"][0]["delta"]["content"] for e in text).strip() == "Hi \ud800"
        changed = [e["choices"][0] for e in events if e["choices"] and "x_big" in e["choices"][0]]
        assert changed and all(ch["x_big"] == BIG for ch in changed)
        assert changed[0]["logprobs"]["content"][0]["logprob"] == float("-inf")
        assert b"-Infinity" in out and b"\\ud800" in out
        calls = [
            tc["function"]
            for e in events
            for ch in e["choices"]
            for tc in ch["delta"].get("tool_calls") or []
        ]
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
            ("get_weather", {"city": "Oslo"})
        ]


def lenient_reply(content: str = "Hi \\ud800") -> bytes:
    return (
        b'{"id":"c1","object":"chat.completion","created":1,"model":"m","x_big":'
        + str(BIG).encode()
        + b',"choices":[{"index":0,"message":{"role":"assistant","content":"'
        + content.encode()
        + b'"},'
        + logprob("-Infinity").encode()
        + b'"finish_reason":"stop"}]}'
    )


async def test_lenient_json_in_a_whole_reply_through_the_proxy() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    reply = Reply(body=lenient_reply(), content_type="application/json")
    async with FakeUpstream(reply) as up, AppServer(proxy_app(up.url)) as px:
        for body in (base, {**base, **TWO}):
            status, data = await post(px.url, body)
            assert status == 200, data
            obj = json.loads(data)
            ch = obj["choices"][0]
            assert ch["message"]["content"] == "Hi \ud800"
            assert ch["logprobs"]["content"][0]["logprob"] == float("-inf")
            assert obj["x_big"] == BIG


def test_lenient_json_in_text_completions() -> None:
    from streamfix.text_session import CompletionSession

    def text_event(text: str, probs: str, finish: str = "null") -> bytes:
        return (
            b'data: {"id":"t1","object":"text_completion","choices":[{"index":0,"text":"'
            + text.encode()
            + b'","logprobs":{"token_logprobs":['
            + probs.encode()
            + b']},"finish_reason":'
            + finish.encode()
            + b"}]}\n\n"
        )

    data = (
        text_event("Hel", "-Infinity")
        + text_event("\\ud800", "NaN")
        + text_event("", "", '"stop"')
        + b"data: [DONE]\n\n"
    )
    for cut in range(len(data) + 1):
        session = CompletionSession({"prompt": "x"})
        out = session.feed(data[:cut]) + session.feed(data[cut:]) + session.close()
        assert out == data, cut


def test_the_doors_read_lenient_json() -> None:
    from streamfix.wire.messages import MessagesDoor
    from streamfix.wire.responses import ResponsesDoor

    messages = MessagesDoor(
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    )
    responses = ResponsesDoor({"model": "m", "input": "x"})
    for door, kind in ((messages, "text_delta"), (responses, "response.output_text.delta")):
        out = door.encoder().feed(LENIENT)
        deltas = [
            json.loads(line[6:])
            for line in out.split(b"\n")
            if line.startswith(b"data: ") and kind.encode() in line
        ]
        texts = [d["delta"]["text"] if "text" in d.get("delta", {}) else d["delta"] for d in deltas]
        assert "".join(texts) == "Hello\ud800! end", out


async def test_lenient_json_in_a_whole_reply_through_the_middleware() -> None:
    """The server middleware repairs such a reply (here: a call written as
    text is lifted) instead of leaving it unrepaired, and keeps the rest."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from streamfix.middleware import streamfix_middleware

    call = (
        '<tool_call>{\\"name\\": \\"get_weather\\", '
        '\\"arguments\\": {\\"city\\": \\"Oslo\\"}}</tool_call>'
    )

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=lenient_reply(call), content_type="application/json")

    app = web.Application(middlewares=[streamfix_middleware()])
    app.router.add_post("/v1/chat/completions", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **TWO}
        async with (
            aiohttp.ClientSession() as session,
            session.post(server.make_url("/v1/chat/completions"), json=body) as resp,
        ):
            status, data = resp.status, await resp.read()
    finally:
        await server.close()
    assert status == 200
    obj = json.loads(data)
    ch = obj["choices"][0]
    assert [c["function"]["name"] for c in ch["message"]["tool_calls"]] == ["get_weather"]
    assert ch["logprobs"]["content"][0]["logprob"] == float("-inf")
    assert obj["x_big"] == BIG
