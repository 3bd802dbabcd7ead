"""The server's own count of a prompt's tokens, asked only when a trim is
at stake.

The estimate (``budget.estimate_prompt_tokens``) errs high on purpose; a
prompt it says cannot fit may fit after all, and dropping turns of a
conversation that fits loses what the user said. Where the engine can
count, the proxy asks it before trimming, and only then (the estimate
says the prompt does not fit), bounded by ``COUNT_TIMEOUT``; any failure
falls back to the estimate.

Engines that count (recognised by ``engines.probe_upstream``):

- vLLM: ``POST /tokenize`` at the server root, ``{"model", "messages"}``
  (the chat template applied) → ``{"count": N, ...}``;
- llama.cpp's ``llama-server``: ``POST /apply-template`` ``{"messages"}``
  → ``{"prompt"}`` (its chat template), then ``POST /tokenize``
  ``{"content"}`` → ``{"tokens": [...]}``; both at the root, not under
  ``/v1``.

SGLang, Ollama, LM Studio and llama-cpp-python have no such endpoint on
their OpenAI servers (or none the probe recognises): the estimate, scaled
by what an overflow error taught, decides there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import aiohttp
import orjson

from .engines import json_reply, roots

#: Engines whose server counts a prompt's tokens.
COUNTING: Final = frozenset({"vllm", "llamacpp"})

#: Seconds allowed for the whole count (one or two requests): it delays
#: the request it decides for, and the estimate is there to fall back on.
COUNT_TIMEOUT: Final = 1.0


async def _post(
    session: aiohttp.ClientSession, url: str, payload: Any, headers: Mapping[str, str]
) -> Any:
    async with session.post(url, json=payload, headers=headers) as resp:
        return await json_reply(resp)


async def count_prompt(
    session: aiohttp.ClientSession,
    engine: str | None,
    base_url: str,
    body: dict[str, Any],
    headers: Mapping[str, str],
) -> int | None:
    """The prompt's tokens as the server counts them, or None (not an
    engine that counts, no answer in time, an answer not understood)."""
    if engine not in COUNTING or not isinstance(body.get("messages"), list):
        return None
    root = roots(base_url)[1]
    try:
        async with asyncio.timeout(COUNT_TIMEOUT):
            count = await _count(session, engine, root, body, headers)
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError, ValueError):
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        return None
    return count


async def _count(
    session: aiohttp.ClientSession,
    engine: str,
    root: str,
    body: dict[str, Any],
    headers: Mapping[str, str],
) -> Any:
    if engine == "vllm":
        payload: dict[str, Any] = {"model": body.get("model"), "messages": body["messages"]}
        if body.get("tools"):
            payload["tools"] = body["tools"]
        got = await _post(session, root + "/tokenize", payload, headers)
        return got.get("count") if isinstance(got, dict) else None
    template = {"messages": body["messages"]}
    applied = await _post(session, root + "/apply-template", template, headers)
    prompt = applied.get("prompt") if isinstance(applied, dict) else None
    if not isinstance(prompt, str):
        return None
    got = await _post(session, root + "/tokenize", {"content": prompt}, headers)
    tokens = got.get("tokens") if isinstance(got, dict) else None
    return len(tokens) if isinstance(tokens, list) else None
