"""``streamfix probe`` against scripted loopback backends: one that gets
everything wrong that streamfix repairs, one that gets everything right,
and one that is not there."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from streamfix.server.probe import CASES, probe, structured_calls
from streamfix.tools.cli import main
from streamfix.tools.probe import render

from .support.streamutil import chunk, sse
from .support.upstream_fake import FakeUpstream, Received, Reply, completion, refusing_url

WINDOW = 4096
VLLM_MODELS = {
    "/v1/models": {
        "object": "list",
        "data": [{"id": "tiny", "object": "model", "owned_by": "vllm", "max_model_len": WINDOW}],
    }
}


def _last_user(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def _reply(
    body: dict[str, Any], content: str | None, calls: list[dict[str, Any]] | None = None
) -> Reply:
    """``content`` and structured ``calls`` as the request asked: streamed
    (calls in pieces, the name in every piece when ``repeat``) or whole."""
    calls = calls or []
    if not body.get("stream"):
        msg_calls = [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in enumerate(calls)
        ]
        return Reply.json(completion(content, msg_calls or None))
    chunks = [chunk(role="assistant", content="")]
    if content:
        chunks += [chunk(content[i : i + 7]) for i in range(0, len(content), 7)]
    for i, c in enumerate(calls):
        args = c["arguments"]
        for j in range(0, len(args), 5):
            frag = {"arguments": args[j : j + 5]}
            if c.get("repeat") or j == 0:
                frag["name"] = c["name"]
            chunks.append(chunk(tool_calls=[{"index": i, "id": f"c{i}", "function": frag}]))
    chunks.append(chunk(finish="tool_calls" if calls else "stop"))
    return Reply.stream(sse(chunks))


def bad_backend(rec: Received) -> Reply:
    """Every fault streamfix repairs: calls as text (two shapes), the name
    repeated in every delta, markup left in a plain reply, a loop,
    ``<think>`` in content, a 400 for max_tokens over the window."""
    body = rec.body
    text = _last_user(body)
    if body.get("max_tokens", 0) > WINDOW:
        msg = (
            f"This model's maximum context length is {WINDOW} tokens. However, you requested more."
        )
        return Reply.error(400, msg, "context_length_exceeded")
    if "Paris and in Tokyo" in text:
        return _reply(
            body,
            None,
            [
                {"name": "get_weather", "arguments": '{"city": "Paris"}', "repeat": True},
                {"name": "get_weather", "arguments": '{"city": "Tokyo"}', "repeat": True},
            ],
        )
    if "Paris" in text:
        return _reply(body, "<function=get_weather><parameter=city>Paris</parameter></function>")
    if "hello" in text:
        return _reply(body, "Hello there!<|im_end|>")
    if "facts" in text:
        return _reply(body, "Facts:\n" + "The sea is wide and deep.\n" * 40)
    if "17 times 3" in text:
        return _reply(body, "<think>17 times 3 is 51.</think>51")
    if "Ada Lovelace" in text:
        return _reply(body, '```json\n{"name": "Ada Lovelace", "age": 36,}\n```')
    return _reply(body, "Red, green and blue.")


def good_backend(rec: Received) -> Reply:
    """What a backend that needs no streamfix does."""
    body = rec.body
    text = _last_user(body)
    call = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    if body.get("max_tokens", 0) > WINDOW:
        return _reply(body, "OK")  # it clamps by itself
    if "Paris and in Tokyo" in text:
        return _reply(body, None, [call, {**call, "arguments": '{"city": "Tokyo"}'}])
    if "Paris" in text:
        return _reply(body, None, [call])
    if "Ada Lovelace" in text:
        return _reply(body, '{"name": "Ada Lovelace", "age": 36}')
    if "17 times 3" in text and body.get("stream"):
        chunks = [chunk(reasoning="17 times 3 is 51."), chunk("51"), chunk(finish="stop")]
        return Reply.stream(sse(chunks))
    return _reply(body, "Fine, thanks. " * 5)


def rows_by(result: Any) -> dict[tuple[str, bool], Any]:
    return {(r.case.key, r.stream): r for r in result.rows}


async def test_a_backend_that_needs_streamfix() -> None:
    async with FakeUpstream(handler=bad_backend, routes=VLLM_MODELS) as up:
        result = await probe(up.url)
    assert (result.engine, result.window, result.model) == ("vllm", WINDOW, "tiny")
    assert len(result.rows) == 2 * len(CASES)
    rows = rows_by(result)
    for stream in (True, False):
        call = rows[("call", stream)]
        assert call.did == ["call as text (qwen_xml)"] and call.fixed == ["1 call(s) lifted"]
        assert not call.left
        no_call = rows[("no_call", stream)]
        # stripped: not also "unrecognised" (one account per token)
        assert no_call.did == ["markup in content (special_token)"]
        assert no_call.fixed == ["markup stripped"]
        loop = rows[("long", stream)]
        assert loop.did[0].startswith("loop (period ") and loop.fixed == ["loop cut"]
        think = rows[("reasoning", stream)]
        assert "<think> in content" in think.did
        asked_json = rows[("json", stream)]
        assert asked_json.did == ["JSON not as asked (comma, fence)"]
        assert asked_json.fixed == ["JSON repaired"] and not asked_json.left
        over = rows[("over_window", stream)]
        assert over.did[0].startswith(
            "HTTP 400 on /chat/completions: This model's maximum context length is 4096"
        )
        [clamped] = over.fixed
        assert clamped.startswith("max_tokens clamped to ")
        assert 256 <= int(clamped.rsplit(" ", 1)[1]) < WINDOW - 64
        assert not rows[("plain", stream)].did and not rows[("plain", stream)].fixed
    two = rows[("two_calls", True)]
    assert "name repeated in every delta" in two.did and "deltas joined once" in two.fixed
    assert "arguments split over deltas" in two.did and not two.left
    assert rows[("two_calls", False)].did == ["2 structured call(s)"]
    assert result.needs_streamfix
    out = io.StringIO()
    render(result, out)
    text = out.getvalue()
    assert (
        "| tools, a call wanted | streamed | call as text (qwen_xml) | 1 call(s) lifted |" in text
    )
    assert "| tools, a call wanted | not streamed |" in text  # not "json": no JSON was asked
    assert "| json |" not in text
    assert "this backend needs it" in text


def marked_backend(rec: Received) -> Reply:
    """A call as text with ChatML's end token after it, and a plain reply
    with a token no step handles (``<|a b|>``: spaces, so not stripped)."""
    text = _last_user(rec.body)
    if "Paris" in text and "Tokyo" not in text:
        call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        return _reply(rec.body, call + "<|im_end|>")
    if "hello" in text:
        return _reply(rec.body, "Hello there! <|a b|>")
    return good_backend(rec)


async def test_a_stripped_token_is_not_unrecognised_and_a_sample_shows_as_sent() -> None:
    async with FakeUpstream(handler=marked_backend, routes=VLLM_MODELS) as up:
        result = await probe(up.url)
    rows = rows_by(result)
    for stream in (True, False):
        call = rows[("call", stream)]
        assert call.did == ["call as text (hermes)", "markup in content (special_token)"]
        assert call.fixed == ["1 call(s) lifted", "markup stripped"]
        assert rows[("no_call", stream)].did == ["unrecognised markup '<|a b|>'"]
    out = io.StringIO()
    render(result, out)
    text = out.getvalue()
    # the cell escapes ``|`` as Markdown does: the token reads as it was sent
    assert "| unrecognised markup '<\\|a b\\|>' |" in text
    assert "</a b/>" not in text and "im_end" not in text


async def test_a_backend_that_refuses_json_schema() -> None:
    """llama-cpp-python's server answers a ``json_schema`` format with a
    500 naming ``response_format``: the row says so, and asks as the
    proxy would (``json_object``, the schema stated to the model)."""
    sent: list[dict[str, Any]] = []

    def json_mode_only(rec: Received) -> Reply:
        sent.append(rec.body)
        if (rec.body.get("response_format") or {}).get("type") == "json_schema":
            err = {"error": {"message": "validation error: ('body', 'response_format', 'type')"}}
            return Reply.json(err, status=500)
        return good_backend(rec)

    async with FakeUpstream(handler=json_mode_only, routes=VLLM_MODELS) as up:
        result = await probe(up.url)
    for stream in (True, False):
        row = rows_by(result)[("json", stream)]
        assert row.status == 200
        assert row.did == ["refuses json_schema"] and row.fixed == ["sent as json_object"]
    asked = [b for b in sent if b.get("response_format")]
    assert [b["response_format"]["type"] for b in asked] == ["json_schema", "json_object"] * 2
    assert "JSON Schema" in asked[1]["messages"][0]["content"]


async def test_a_backend_that_needs_nothing() -> None:
    async with FakeUpstream(handler=good_backend, routes=VLLM_MODELS) as up:
        result = await probe(up.url, model="tiny")
    rows = rows_by(result)
    assert not result.needs_streamfix, [(r.case.key, r.did, r.fixed) for r in result.rows]
    assert rows[("reasoning", True)].did == ["reasoning in its own field"]
    assert rows[("two_calls", True)].did == ["2 structured call(s)", "arguments split over deltas"]
    assert all(not r.left for r in result.rows)
    out = io.StringIO()
    render(result, out)
    assert "does not need streamfix" in out.getvalue()


@pytest.mark.parametrize(("handler", "status"), [(bad_backend, 1), (good_backend, 0)])
async def test_exit_status_says_whether_the_backend_needs_streamfix(
    handler: Any, status: int, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeUpstream(handler=handler, routes=VLLM_MODELS) as up:
        code = await asyncio.to_thread(main, ["probe", "--upstream", up.url])
    assert code == status
    assert "| request | mode | the backend did | behind streamfix |" in capsys.readouterr().out


def test_a_backend_that_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--upstream", refusing_url()]) == 2
    assert "no reply: connection refused" in capsys.readouterr().out


def test_structured_calls_counts_pieces_and_repeated_names() -> None:
    frag = {"index": 0, "function": {"name": "f", "arguments": "{"}}
    events = [
        chunk(tool_calls=[frag]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": "}"}}]),
        chunk(tool_calls=[{"index": 1, "function": {"name": "g", "arguments": "{}"}}]),
    ]
    assert structured_calls(events) == (2, True, False)
    assert structured_calls([chunk(tool_calls=[frag]), chunk(tool_calls=[frag])]) == (1, True, True)
    assert structured_calls([chunk("text")]) == (0, False, False)


def test_cases_put_max_tokens_over_the_window() -> None:
    from streamfix.server.probe import cases

    over = {c.key: c for c in cases(2048)}["over_window"]
    assert over.body["max_tokens"] == 4096
    assert {c.key: c for c in cases(None)}["over_window"].body["max_tokens"] == 1_000_000


class Silence:
    """A user step for the probe: every reply's content is dropped."""

    ignores_reasoning = True

    def __init__(self, ctx: Any = None) -> None:
        pass

    def feed_text(self, text: str) -> bool:
        return not text

    def feed(self, d: Any) -> None:
        if d.content:
            d.content = ""

    def close(self, d: Any) -> None:
        self.feed(d)


async def test_probe_runs_the_chain_with_a_users_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """``streamfix probe --transform``: what the proxy would send with the
    step, so the step's effect shows in the table."""
    async with FakeUpstream(handler=good_backend, routes=VLLM_MODELS) as up:
        plain = await asyncio.to_thread(main, ["probe", "--upstream", up.url])
        assert "empty reply" not in capsys.readouterr().out
        code = await asyncio.to_thread(
            main, ["probe", "--upstream", up.url, "--transform", "tests.test_probe:Silence"]
        )
    assert plain == 0 and code == 0  # the backend itself needs no repair
    assert "| plain answer | streamed | fine | still: empty reply |" in capsys.readouterr().out


def test_probe_refuses_a_step_it_cannot_load(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "--upstream", refusing_url(), "--transform", "no_such_module:Step"])
    assert code == 2
    assert "no_such_module" in capsys.readouterr().err
