"""The outside corpora through ``streamfix serve`` as a client meets it: a
real proxy on loopback in front of a scripted upstream on loopback, the
model's raw output sent as a backend without parsers sends it (a whole
``chat.completion``, or SSE cut per character and at random pieces of up to
4 and 12 characters), the client's request with the case's model name,
tools and thinking switch. Each case gets a fresh proxy (nothing learned
from an earlier case). Asking again gets the same output back: the
scripted model does not change its mind.

``python -m tests.support.through_proxy`` prints, per corpus (canitoolcall
under its own strict check; the engine suites under theirs), the cases
passed in all four ways and those passed whole; ``-v`` each failure.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import orjson
from canitoolcall.pytest_plugin import assert_conforms

from streamfix.server.app import create_app
from streamfix.server.config import ServerConfig, parse_upstream

from . import conformance
from .streamutil import assemble, chunk, sse
from .upstream_fake import AppServer, FakeUpstream, Received, Reply, completion

#: (content, reasoning, [(name, raw arguments)]) as the client assembled it.
Seen = tuple[str | None, str | None, list[tuple[str, str]]]

#: What the upstream lists (so the proxy does not warn that it is not a server).
MODELS = {"/v1/models": {"object": "list", "data": [{"id": "m", "object": "model"}]}}

SPLITS: dict[str, Callable[[str], list[str]] | None] = {
    "whole": None,
    "char": lambda t: list(t),
    "rand:1:4": lambda t: conformance.cuts(t, 1, 4),
    "rand:2:12": lambda t: conformance.cuts(t, 2, 12),
}


def _reply(text: str, finish: str, split: Callable[[str], list[str]] | None) -> Reply:
    if split is None:
        return Reply.json(completion(text, finish=finish))
    chunks = [chunk(role="assistant", content="")]
    chunks += [chunk(p) for p in split(text) if p]
    chunks.append(chunk(finish=finish))
    return Reply.stream(sse(chunks))


async def _ask(px: AppServer, request: dict[str, Any], stream: bool) -> Seen:
    body = {**request, "stream": stream}
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.root + "/v1/chat/completions", json=body) as r,
    ):
        raw = await r.read()
        if r.status != 200:
            raise AssertionError(f"HTTP {r.status}: {raw[:300]!r}")
    if stream:
        a = assemble(raw)
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in a.tool_calls]
        return a.content or None, a.reasoning or None, calls
    msg = orjson.loads(raw)["choices"][0]["message"]
    calls = [
        (c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls") or []
    ]
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    return msg.get("content") or None, reasoning or None, calls


async def through(request: dict[str, Any], text: str, finish: str) -> dict[str, Seen | str]:
    """What the client sees for each split (or the error, as a string)."""
    out: dict[str, Seen | str] = {}
    for label, split in SPLITS.items():
        reply = _reply(text, finish, split)

        def handler(_: Received, reply: Reply = reply) -> Reply:
            return reply

        async with FakeUpstream(handler=handler, routes=MODELS) as up:
            config = ServerConfig(
                upstreams=[parse_upstream(up.url)], probe_interval=0, backoff=0.01
            )
            async with AppServer(create_app(config)) as px:
                try:
                    out[label] = await _ask(px, request, stream=split is not None)
                except (AssertionError, aiohttp.ClientError, ValueError) as e:
                    out[label] = f"error: {e}"
    return out


def _canitoolcall(fx: Any, seen: Seen) -> str | None:
    content, reasoning, calls = seen
    try:
        assert_conforms(fx, conformance._result(content, reasoning, calls))
    except AssertionError as e:
        return str(e)
    return None


def _engine(case: dict[str, Any], seen: Seen) -> str | None:
    from tests import test_engine_suites as suites

    content, reasoning, calls = seen
    got = suites._judged(case, (content, reasoning, [(n, suites._arguments(a)) for n, a in calls]))
    want = suites._judged(case, suites.expected(case))
    return None if got == want else suites._describe(want, got)


async def _run_all(verbose: bool, only: Sequence[str]) -> None:
    from tests import test_engine_suites as suites

    corpora: list[tuple[str, list[tuple[str, dict[str, Any], str, str, Any]]]] = [
        (
            "canitoolcall",
            [
                (fx.id, conformance.request_for(fx), fx.raw_output, conformance.finish_of(fx), fx)
                for fx in conformance.fixtures()
            ],
        ),
        (
            "engine suites",
            [
                (c["id"], suites.request_for(c), c["text"], suites.finish_of(c), c)
                for c in suites.CASES
            ],
        ),
    ]
    for name, cases in corpora:
        if only and name not in only:
            continue
        every = whole = 0
        for cid, request, text, finish, case in cases:
            seen = await through(request, text, finish)
            fails = {}
            for label, s in seen.items():
                if isinstance(s, str):
                    fails[label] = s
                    continue
                why = _canitoolcall(case, s) if name == "canitoolcall" else _engine(case, s)
                if why:
                    fails[label] = why
            every += not fails
            whole += "whole" not in fails
            if fails and verbose:
                print(f"--- {cid}")
                for label, why in fails.items():
                    print(f"  {label}: {why[:400]}")
        print(f"{name}: {every} / {len(cases)} in all four ways, {whole} whole")


def main(argv: Sequence[str]) -> int:
    only = [a for a in argv if not a.startswith("-")]
    asyncio.run(_run_all("-v" in argv, only))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
