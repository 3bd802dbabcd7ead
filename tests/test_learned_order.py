"""Order does not matter: a reply is what a fresh proxy gives for it, but
for what the proxy learned from the *same* model on the same row.

Random sequences of requests from several models (reasoning and not,
tools and not, chat streamed and whole, ``/v1/messages``,
``/v1/responses``) go through one proxy to one scripted upstream (one
catch-all row, one URL) that answers per model and writes into each reply
how many messages and which ``max_tokens`` it received, so a budget that
leaks from one model to another shows in the reply. Each reply must equal
the reply a fresh proxy gives when it sees only that model's requests of
the sequence, in the same order.

The learned facts of the same model that may make its later replies
differ (and that the reference run therefore learns too):

- its window, from an overflow error the upstream sent (HTTP 400):
  ``small`` refuses a request whose ``max_tokens`` exceeds 2000;
- its token scale, from the prompt size such an error states;
- that it reasons, from reasoning its replies carried (a larger
  ``max_tokens`` allowance, the start of its replies held);
- that its prompt opens the reasoning, from a close it never opened
  (``lonely``'s first ``Plan.</think>Answer`` is content without a hold;
  later ones are split).

Nothing else: ``chatty`` writes an overflow error's words in its prose,
which must teach nothing to anyone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse
from .support.upstream_fake import AppServer, FakeUpstream, Received, Reply, proxy_app

OVERFLOW = (
    "This model's maximum context length is 2048 tokens. However, you requested {n} tokens "
    "(20 in the messages, {t} in the completion)."
)

#: Each model's answer (before the tag saying what the upstream received).
ANSWERS = {
    "qwen3-8b": "Let me see.</think>It is 4.",
    "gpt-oss-20b": (
        "<|channel|>analysis<|message|>Think it over.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>It is 5."
    ),
    "llama3.2:1b": (
        "Close it with `</think>` or `<|start|>assistant<|channel|>analysis<|message|>`."
    ),
    "small": "Fine.",
    "chatty": (
        "The server said context_length_exceeded: This model's maximum context length is 300 "
        "tokens."
    ),
    "lonely": "Plan.</think>Answer.",
}
MODELS = sorted(ANSWERS)


def _answer(rec: Received) -> Reply:
    body = rec.body
    model = body["model"]
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    if model == "small" and isinstance(limit, int) and limit > 2000:
        err = {
            "message": OVERFLOW.format(n=20 + limit, t=limit),
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
        return Reply.json({"error": err}, status=400)
    text = f"{ANSWERS[model]} [{len(body['messages'])} messages, max_tokens {limit}]"
    if not body.get("stream"):
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        completion = {"id": "c", "object": "chat.completion", "created": 1, "choices": [choice]}
        return Reply.json(completion)
    half = len(text) // 2
    chunks = [chunk(role="assistant", content=""), chunk(text[:half]), chunk(text[half:])]
    return Reply.stream(sse([*chunks, chunk(finish="stop")]))


DOORS = ("chat", "chat-whole", "messages", "responses")

REQUEST = st.tuples(
    st.sampled_from(MODELS),
    st.sampled_from(DOORS),
    st.booleans(),  # tools
    st.sampled_from([None, 5, 3000]),  # max_tokens
    st.sampled_from([1, 14]),  # messages
)


def _request(model: str, door: str, tools: bool, limit: int | None, n: int) -> tuple[str, Any]:
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 30}
        for i in range(n - 1)
    ] + [{"role": "user", "content": "What is it?"}]
    if door == "messages":
        body: dict[str, Any] = {"model": model, "messages": turns, "max_tokens": limit or 1024}
        if tools:
            body["tools"] = [
                {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
                for t in SHAPES_TOOLS
            ]
        return "/v1/messages", body
    if door == "responses":
        body = {"model": model, "input": turns}
        if limit is not None:
            body["max_output_tokens"] = limit
        if tools:
            body["tools"] = [{"type": "function", **t["function"]} for t in SHAPES_TOOLS]
        return "/v1/responses", body
    body = {"model": model, "messages": turns, "stream": door == "chat"}
    if limit is not None:
        body["max_tokens"] = limit
    if tools:
        body["tools"] = SHAPES_TOOLS
        if model == "chatty":
            body["tool_choice"] = "required"
    return "/v1/chat/completions", body


_VARYING = ("id", "created", "created_at", "call_id")


def _normal(obj: Any) -> Any:
    """A reply without the values that differ between two identical runs
    (ids and times the doors make up)."""
    if isinstance(obj, dict):
        return {k: _normal(v) for k, v in obj.items() if k not in _VARYING}
    if isinstance(obj, list):
        return [_normal(v) for v in obj]
    return obj


def _seen(status: int, data: bytes, door: str) -> Any:
    if door == "chat" and status == 200:
        a = assemble(data)
        return (status, a.content, a.reasoning, a.tool_calls, a.finish_reason, a.errors)
    try:
        return (status, _normal(orjson.loads(data)))
    except orjson.JSONDecodeError:
        return (status, data)


async def _run(upstream: str, requests: list[tuple[str, str, bool, int | None, int]]) -> list[Any]:
    """The replies one fresh proxy gives to ``requests``, in order."""
    out = []
    async with AppServer(proxy_app(upstream)) as px, aiohttp.ClientSession() as s:
        for req in requests:
            path, body = _request(*req)
            async with s.post(px.root + path, json=body) as r:
                out.append(_seen(r.status, await r.read(), req[1]))
    return out


async def _compare(requests: list[tuple[str, str, bool, int | None, int]]) -> None:
    async with FakeUpstream(handler=_answer) as up:
        mixed = await _run(up.url, requests)
        for model in {r[0] for r in requests}:
            alone = [i for i, r in enumerate(requests) if r[0] == model]
            ref = await _run(up.url, [requests[i] for i in alone])
            for i, expected in zip(alone, ref, strict=True):
                assert mixed[i] == expected, (requests[i], requests[: i + 1])


@settings(max_examples=25, deadline=None)
@given(st.lists(REQUEST, min_size=2, max_size=6))
def test_a_reply_depends_only_on_its_own_models_history(
    requests: list[tuple[str, str, bool, int | None, int]],
) -> None:
    asyncio.run(_compare(requests))


def test_the_facts_of_one_model_do_change_its_own_replies() -> None:
    """The exception the property allows, shown: ``small``'s overflow
    teaches its window, and its next request is clamped to fit."""
    requests = [("small", "chat", False, 3000, 1), ("small", "chat", False, 3000, 1)]

    async def run() -> list[Any]:
        async with FakeUpstream(handler=_answer) as up:
            return await _run(up.url, requests)

    first, second = asyncio.run(run())
    # asked again within the window it stated, then clamped from the start
    assert first[:2] == second[:2] == (200, "Fine. [1 messages, max_tokens 1972]")
