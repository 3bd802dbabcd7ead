"""What the proxy learns belongs to the row and the model that showed it,
and only the upstream teaches a window.

One upstream URL commonly serves many models (Ollama, LM Studio, vLLM,
another gateway): a catch-all row sends each client's model name on. Each
test here runs the proxy against a scripted loopback upstream and checks
that one model's replies (its reasoning, its overflow errors, its prose)
change nothing of another model's reply or budget, that what a request
says (thinking off) outranks what was learned, and that the prompt
estimate keeps a Chinese conversation that fits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from streamfix.server.config import TenantConfig, UpstreamConfig
from streamfix.server.upstream import pool
from streamfix.server.upstream.budget import BudgetPolicy, fit_prompt
from streamfix.server.upstream.pool import Upstream

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Received, Reply, proxy_app

QWEN = "qwen3-8b"  # a reasoning model's name
LLAMA = "llama3.2:1b"  # a model that does not reason
HI = [{"role": "user", "content": "hi"}]

#: An answer that explains reasoning markup in inline code.
EXPLAINS = (
    "Close the section with `</think>` and open Harmony's with "
    "`<|start|>assistant<|channel|>analysis<|message|>` in your template."
)


def per_model(replies: dict[str, Callable[[Received], Reply]]) -> Callable[[Received], Reply]:
    """An upstream handler answering each request by the model it names."""
    return lambda rec: replies[rec.body["model"]](rec)


def fixed(data: bytes) -> Callable[[Received], Reply]:
    return lambda rec: Reply.stream(data)


async def post(
    px: AppServer, body: dict[str, Any], key: str | None = None, path: str = "/chat/completions"
) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.url + path, json=body, headers=headers) as r,
    ):
        return r.status, await r.read()


def chat(model: str, **kw: Any) -> dict[str, Any]:
    return {"model": model, "messages": HI, "stream": True, "tools": SHAPES_TOOLS, **kw}


# -- reasoning seen is the model's -------------------------------------------------------------


async def test_one_models_reasoning_does_not_split_anothers_answer() -> None:
    replies = {
        QWEN: fixed(text_stream(["Let me see.</think>", "It is 4."])),
        LLAMA: fixed(text_stream([EXPLAINS])),
    }
    async with FakeUpstream(handler=per_model(replies)) as up, AppServer(proxy_app(up.url)) as px:
        _, a = await post(px, chat(QWEN))
        _, b = await post(px, chat(LLAMA))
    assert (assemble(a).content, assemble(a).reasoning) == ("It is 4.", "Let me see.")
    assert (assemble(b).content, assemble(b).reasoning) == (EXPLAINS, "")


async def test_one_models_reasoning_does_not_raise_anothers_max_tokens() -> None:
    reasoning = sse([chunk(role="assistant"), chunk(reasoning="hmm"), chunk("ok"), chunk("")])
    replies = {"gpt-oss-20b": fixed(reasoning), LLAMA: fixed(text_stream(["ok"]))}
    async with (
        FakeUpstream(handler=per_model(replies)) as up,
        AppServer(proxy_app(f"{up.url}#window=32768")) as px,
    ):
        await post(px, chat("gpt-oss-20b", max_tokens=5))
        await post(px, chat(LLAMA, max_tokens=5))
        await post(px, chat("gpt-oss-20b", max_tokens=5))
    sent = [(r.body["model"], r.body["max_tokens"]) for r in up.chat_requests]
    # the reasoning allowance for the model that reasons, and it alone
    assert sent == [("gpt-oss-20b", 5), (LLAMA, 5), ("gpt-oss-20b", 5 + 2048)]


async def test_no_think_keeps_markup_in_inline_code() -> None:
    """Qwen3's soft switch ``/no_think`` switches thinking off: no hold,
    and the close written in inline code is the answer's text."""
    messages = [{"role": "user", "content": "How do I end a thought? /no_think"}]
    async with (
        FakeUpstream(Reply.stream(text_stream([EXPLAINS]))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        _, data = await post(px, {**chat(QWEN), "messages": messages})
    assert (assemble(data).content, assemble(data).reasoning) == (EXPLAINS, "")


async def test_the_held_start_keeps_markup_in_inline_code() -> None:
    """Without ``/no_think`` the start of a Qwen3 reply is held; the close
    in inline code is still text, and so is Harmony's open."""
    async with (
        FakeUpstream(Reply.stream(text_stream([EXPLAINS[:30], EXPLAINS[30:]]))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        _, data = await post(px, chat(QWEN))
        _, gpt = await post(px, chat("gpt-oss-20b"))
    for got in (data, gpt):
        assert (assemble(got).content, assemble(got).reasoning) == (EXPLAINS, "")


CUT = "The order A-1 shipped on Monday and should arrive by"


async def test_thinking_off_outranks_reasoning_learned() -> None:
    """The row saw this very model reason; a request that switches
    thinking off gets no hold: its unmarked reply cut by max_tokens is its
    answer, and its max_tokens get no reasoning allowance."""
    async with FakeUpstream() as up, AppServer(proxy_app(f"{up.url}#window=32768")) as px:
        up.push(
            Reply.stream(text_stream(["Plan.</think>", "Done."])),
            Reply.stream(text_stream([CUT], finish="length")),
        )
        await post(px, chat(QWEN, max_tokens=100))
        off = {"chat_template_kwargs": {"enable_thinking": False}}
        _, data = await post(px, chat(QWEN, max_tokens=100, **off))
    a = assemble(data)
    assert (a.content, a.reasoning, a.finish_reason) == (CUT, "", "length")
    assert up.chat_requests[1].body["max_tokens"] == 100


async def test_an_unmarked_reply_cut_by_the_limit_is_the_answer() -> None:
    """``/no_think`` on a fresh proxy: thinking is off for this Qwen3
    request, so its unmarked reply cut by the limit is its answer."""
    messages = [{"role": "user", "content": "When does A-1 arrive? /no_think"}]
    async with (
        FakeUpstream(Reply.stream(text_stream([CUT], finish="length"))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        _, data = await post(px, {**chat(QWEN), "messages": messages})
    assert (assemble(data).content, assemble(data).reasoning) == (CUT, "")


async def test_a_reply_cut_inside_a_call_keeps_the_text_before_it() -> None:
    """The row learned reasoning from another model (a Gemma reply is not
    held then), and a model seen closing reasoning its prompt opened still
    keeps the sentence before a call the limit cut."""
    gemma = 'Let me look that up. <|tool_call>call:lookup_order{order_id:<|"|>A-'
    hermes = 'Let me look that up. <tool_call>{"name": "lookup_order", "argum'
    replies = {
        QWEN: fixed(text_stream(["Plan.</think>", "Done."])),
        "gemma-4-e4b": fixed(text_stream([gemma], finish="length")),
        "r1-distill": fixed(text_stream([hermes], finish="length")),
    }
    async with FakeUpstream(handler=per_model(replies)) as up, AppServer(proxy_app(up.url)) as px:
        await post(px, chat(QWEN))
        _, g = await post(px, chat("gemma-4-e4b"))
        up.handler = per_model({**replies, "r1-distill": replies[QWEN]})
        await post(px, chat("r1-distill"))  # seen closing reasoning it never opened
        up.handler = per_model(replies)
        _, r = await post(px, chat("r1-distill"))
    for data in (g, r):
        a = assemble(data)
        kept = (a.content.rstrip(), a.reasoning, len(a.tool_calls))
        assert kept == ("Let me look that up.", "", 0)


# -- only the upstream teaches the window ------------------------------------------------------

PROSE = (
    "Sure. If the server answers context_length_exceeded with \"This model's maximum "
    'context length is 300 tokens", shorten the prompt.'
)
FOURTEEN = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "word " * 40}
    for i in range(14)
]


async def test_two_tenants_on_one_row_cannot_change_each_others_budget() -> None:
    """Nothing a model says sets a window: team-a's model writes an
    overflow error's words in its prose (held under ``required``), and
    team-b's request to the same row and model goes out untouched."""
    tenants = [
        TenantConfig("team-a", ("sk-team-a",), ("*",)),
        TenantConfig("team-b", ("sk-team-b",), ("*",)),
    ]
    async with (
        FakeUpstream(Reply.stream(text_stream([PROSE]))) as up,
        AppServer(proxy_app(up.url, tenants=tenants)) as px,
    ):
        status, data = await post(px, chat(LLAMA, tool_choice="required"), "sk-team-a")
        later = {"model": LLAMA, "messages": FOURTEEN, "max_tokens": 2000, "stream": True}
        await post(px, later, "sk-team-b")
    assert status == 200 and "context_length_exceeded" in assemble(data).content
    last = up.chat_requests[-1].body
    assert (len(last["messages"]), last["max_tokens"]) == (14, 2000)


def overflow_400(window: int, prompt: int) -> Reply:
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + 20} tokens ({prompt} in the messages, 20 in the completion)."
    )
    err = {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}
    return Reply.json({"error": err}, status=400)


def conversation(n: int, text: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(n)]


async def test_one_models_overflow_does_not_trim_another_models_request() -> None:
    small, big = "llama3.2:1b", "qwen2.5:14b-128k"
    messages = conversation(21, "A line of the conversation so far. " * 12)
    seen: list[str] = []

    def handler(rec: Received) -> Reply:
        seen.append(rec.body["model"])
        if rec.body["model"] == small and len(seen) == 1:
            return overflow_400(2048, 2400)
        return Reply.stream(text_stream(["ok"]))

    async with FakeUpstream(handler=handler) as up, AppServer(proxy_app(up.url)) as px:
        await post(px, {"model": small, "messages": messages, "stream": True})
        await post(px, {"model": big, "messages": messages, "stream": True})
        await post(px, {"model": small, "messages": messages, "stream": True})
    sent = [(r.body["model"], len(r.body["messages"])) for r in up.chat_requests]
    assert sent[2] == (big, 21)
    assert sent[1][0] == sent[3][0] == small and sent[1][1] < 21 and sent[3][1] < 21


async def test_an_overflow_error_event_in_a_stream_still_teaches() -> None:
    """llama.cpp reports an overflow as an error event in a 200 stream: an
    upstream's error, learned as before."""
    err = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    event = sse([chunk(role="assistant")], done=False) + b"data: " + orjson.dumps(err) + b"\n\n"
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        up.push(Reply.stream(event), Reply.stream(text_stream(["ok"])))
        _, data = await post(px, chat(LLAMA, max_tokens=4096))
    assert assemble(data).content == "ok"
    assert [r.body["max_tokens"] < 2048 for r in up.chat_requests] == [False, True]


# -- the estimate ------------------------------------------------------------------------------

#: 21 messages, 6,509 Chinese characters: within 8,192 tokens at about one
#: token a character, as the Qwen, Llama 3 and GLM tokenizers count them.
CJK_LINE = "我们明天早上九点在会议室讨论新产品的发布计划，请大家提前准备好资料。"


def cjk_conversation() -> list[dict[str, str]]:
    total, per = 6509, 6509 // 21
    msgs = conversation(21, CJK_LINE * (per // len(CJK_LINE) + 1))
    msgs = [{**m, "content": m["content"][:per]} for m in msgs]
    msgs[-1]["content"] = (CJK_LINE * 20)[: total - per * 20]
    assert sum(len(m["content"]) for m in msgs) == total
    return msgs


def test_a_chinese_conversation_that_fits_is_not_trimmed() -> None:
    body = {"model": "qwen2.5:7b", "messages": cjk_conversation()}
    out, info = fit_prompt(body, 8192, BudgetPolicy(), known_over=False)
    assert info is None and out is body


async def test_a_chinese_conversation_that_fits_goes_out_whole() -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(["好"]))) as up,
        AppServer(proxy_app(f"{up.url}#window=8192")) as px,
    ):
        body = {"model": "qwen2.5:7b", "messages": cjk_conversation(), "stream": True}
        await post(px, body)
    assert len(up.chat_requests[0].body["messages"]) == 21


# -- the row's memory --------------------------------------------------------------------------


def test_a_catch_all_row_remembers_a_bounded_number_of_models() -> None:
    up = Upstream(UpstreamConfig("http://h:1/v1"))
    most = pool.MAX_LEARNED_MODELS
    for i in range(most + 10):
        up.learn_window(f"m{i}", 1000 + i)
    assert len(up.learned) == most
    assert up.window_for("m0") is None  # the least recently used went first
    last = most + 9
    assert up.window_for(f"m{last}") == 1000 + last


def test_a_reload_carries_learned_facts_over_and_a_configured_window_wins() -> None:
    old = Upstream(UpstreamConfig("http://h:1/v1"))
    old.learn_window("a", 2048)
    old.mark_reasoning("b", prompt_opens=True)
    same = Upstream(UpstreamConfig("http://h:1/v1"), previous=old)
    assert (same.window_for("a"), same.window_for("b")) == (2048, None)
    assert same.reasons("b") and same.prompt_opens("b") and not same.reasons("a")
    configured = Upstream(UpstreamConfig("http://h:1/v1", window=8192), previous=old)
    assert configured.window_for("a") == 8192 and configured.reasons("b")


# -- the server counts before a trim ---------------------------------------------------------------

LATIN = conversation(20, "The meeting moved to Thursday; bring the quarterly numbers. " * 14)


def counting_upstream(engine: str, count: int | None) -> FakeUpstream:
    """A vLLM or llama.cpp server with a 4,096-token window whose own
    tokenizer counts the prompt as ``count`` tokens (None: it cannot)."""
    card = {"id": "m", "object": "model", "owned_by": engine, "max_model_len": 4096}
    routes: dict[str, Any] = {"/v1/models": {"object": "list", "data": [card]}}
    if engine == "llamacpp":
        routes["/props"] = {"default_generation_settings": {"n_ctx": 4096}}

    def handler(rec: Received) -> Reply:
        if rec.path == "/tokenize" and count is not None:
            return Reply.json({"count": count} if engine == "vllm" else {"tokens": [7] * count})
        if rec.path == "/apply-template" and count is not None:
            return Reply.json({"prompt": "the conversation, templated"})
        if rec.path.endswith("/chat/completions"):
            return Reply.stream(text_stream(["ok"]))
        return Reply.error(404, "not found")

    return FakeUpstream(routes=routes, handler=handler)


async def sent_messages(engine: str, count: int | None) -> int:
    async with counting_upstream(engine, count) as up, AppServer(proxy_app(up.url)) as px:
        await post(px, {"model": "m", "messages": LATIN, "stream": True})
    return len(up.chat_requests[0].body["messages"])


async def test_a_server_that_counts_decides_the_trim() -> None:
    """The estimate says 20 turns of English (16,800 characters) overflow a
    4,096 window; vLLM and llama.cpp count 3,000: nothing is trimmed."""
    assert await sent_messages("vllm", 3000) == 20
    assert await sent_messages("llamacpp", 3000) == 20
    # the server's count says it does not fit: trimmed as before
    assert await sent_messages("vllm", 5000) < 20


async def test_without_a_count_the_estimate_decides() -> None:
    assert await sent_messages("vllm", None) < 20
    assert await sent_messages("llamacpp", None) < 20
