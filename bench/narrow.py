"""Tool narrowing: retrieval on outside data, and calls end to end.

**Retrieval** (``streamfix.narrow``). BFCL's ``live_multiple`` set (1,053
real user questions with the functions each was asked with and the one it
needs; the ``bfcl-eval`` package's data, installed with ``--no-deps``):
each question's own functions are pooled with distractors drawn (seeded)
from the other questions' to 20, 50 and 100 tools per turn. For each pool
size: how often narrowing declines (``not_confident``), the recall of the
needed function among the tools kept when it narrows, the recall over all
turns (a declined turn shows everything), and the tools shown on average.
The lexical ranker (BM25) runs in process; the embedding path runs end to
end through ``streamfix serve``'s app with ``narrow_embedding`` set and a
scripted embedding upstream (hashed bags of words: to show the path works,
not how good a real embedding model is).

**End to end.** A scripted model on loopback calls the right tool with a
probability that falls with the number of tools it is shown (``p(n) =
min(0.9, 1.6 / sqrt(n))``, below: 0.51 at 10 tools, 0.23 at 50, 0.16 at
100) and otherwise answers in prose; the turns are BFCL questions pooled
as above. Calls of the right tool per 100 turns with narrowing off and on
(``--narrow-tools auto``), at 10, 50 and 100 tools, the upstream requests
per turn, and the time the proxy adds per request (median, narrowing on
minus off, on the same turns).

    python -m bench.narrow [--turns 200] [--skip-e2e]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import math
import random
import re
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from streamfix import narrow
from streamfix.server.app import create_app
from streamfix.server.config import ServerConfig, parse_upstream

from .named_tool import completion, serve

#: The ``bfcl-eval`` release whose data is read (``.ci/run`` installs it).
BFCL_VERSION = "2026.3.23"
SET = "live_multiple"
POOLS = (20, 50, 100)


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    gold: frozenset[str]


def bfcl_dir() -> Path | None:
    """The ``bfcl_eval`` package's data folder, if it is installed."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data"
    return path if (path / f"BFCL_v4_{SET}.json").is_file() else None


def load(data: Path) -> list[Question]:
    """The questions of ``live_multiple`` with their gold function names."""
    gold: dict[str, frozenset[str]] = {}
    for line in (data / "possible_answer" / f"BFCL_v4_{SET}.json").read_text().splitlines():
        if line.strip():
            obj = orjson.loads(line)
            gold[obj["id"]] = frozenset(k for call in obj["ground_truth"] for k in call)
    out = []
    for line in (data / f"BFCL_v4_{SET}.json").read_text().splitlines():
        if not line.strip():
            continue
        obj = orjson.loads(line)
        turn = obj["question"][-1]
        out.append(Question(obj["id"], turn, obj["function"], gold[obj["id"]]))
    return out


def pooled(questions: list[Question], size: int, seed: int = 0) -> Iterator[tuple[Question, list]]:
    """Each question with its own functions and distractors from the other
    questions' (names not its own), ``size`` tools in all, shuffled."""
    rng = random.Random(seed)
    every: dict[str, dict[str, Any]] = {}
    for q in questions:
        for fn in q.functions:
            every.setdefault(fn["name"], fn)
    names = sorted(every)
    for q in questions:
        own = {fn["name"] for fn in q.functions}
        fns = list(q.functions)
        need = max(0, size - len(fns))
        fns += [every[n] for n in rng.sample([n for n in names if n not in own], need)]
        rng.shuffle(fns)
        yield q, [{"type": "function", "function": fn} for fn in fns]


@dataclass(slots=True)
class Retrieval:
    turns: int = 0
    declined: int = 0
    narrowed_hits: int = 0
    shown: int = 0
    most_shown: int = 0

    @property
    def narrowed(self) -> int:
        return self.turns - self.declined

    @property
    def recall_narrowed(self) -> float:
        return self.narrowed_hits / self.narrowed if self.narrowed else 1.0

    @property
    def recall_all(self) -> float:
        return (self.narrowed_hits + self.declined) / self.turns

    @property
    def mean_shown(self) -> float:
        return self.shown / self.narrowed if self.narrowed else 0.0


def lexical(questions: list[Question], size: int, seed: int = 0) -> Retrieval:
    """The lexical ranker and the default decision on one pool size."""
    r = Retrieval()
    cache = narrow.VectorCache()
    for q, tools in pooled(questions, size, seed):
        names, scores = narrow.rank_lexical(tools, narrow.turn_text(q.messages), cache)
        d = narrow.decide(names, scores)
        r.turns += 1
        if d.kept is None:
            r.declined += 1
            continue
        r.shown += len(d.kept)
        r.most_shown = max(r.most_shown, len(d.kept))
        r.narrowed_hits += bool(q.gold & set(d.kept))
    return r


# -- the scripted upstreams ----------------------------------------------------

DIM = 256


def hashed_vector(text: str) -> list[float]:
    """A bag of words hashed into ``DIM`` counts (the scripted embedding)."""
    v = [0.0] * DIM
    for w in narrow.words(text):
        v[int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "big") % DIM] += 1.0
    return v


def embedding_model(count: list[int]) -> web.Application:
    async def embed(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        count[0] += 1
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_vector(t)}
            for i, t in enumerate(inputs)
        ]
        return web.json_response({"object": "list", "data": data, "model": body.get("model")})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embed)
    return app


def p_call(shown: int) -> float:
    """The scripted model's chance of calling the right tool among ``shown``."""
    return min(0.9, 1.6 / math.sqrt(max(1, shown)))


PROSE = "Sure, I can help with that. Could you tell me a bit more about what you need?"


def chat_model(seed: int, seen: list[int], gold: dict[str, str]) -> web.Application:
    """The scripted chat model: the right tool (``gold[turn text]``) if it
    was shown, with ``p_call(tools shown)``; prose otherwise."""
    rng = random.Random(seed)

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        tools = narrow.tool_names(body.get("tools") or [])
        seen.append(len(tools))
        user = next(m for m in reversed(body["messages"]) if m["role"] == "user")["content"]
        want = gold.get(user)
        msg: dict[str, Any] = {"role": "assistant", "content": PROSE}
        if want in tools and rng.random() < p_call(len(tools)):
            call = {"id": "call_1", "type": "function",
                    "function": {"name": want, "arguments": "{}"}}  # fmt: skip
            msg = {"role": "assistant", "content": None, "tool_calls": [call]}
        return web.json_response(completion(msg))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def _user_text(q: Question) -> str:
    return next(m["content"] for m in reversed(q.messages) if m["role"] == "user")


async def embedded(questions: list[Question], size: int, seed: int = 0) -> Retrieval:
    """The embedding path end to end: each pooled turn through the proxy
    (``narrow_embedding``) to a scripted chat model that reports the tools
    it was shown; recall is read from what reached it."""
    shown: list[list[str]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        shown.append(narrow.tool_names(body.get("tools") or []))
        msg = {"role": "assistant", "content": "ok"}
        return web.json_response(completion(msg))

    chat_app = web.Application()
    chat_app.router.add_post("/v1/chat/completions", chat)
    count = [0]
    runners = []
    r = Retrieval()
    try:
        chat_runner, chat_url = await serve(chat_app)
        emb_runner, emb_url = await serve(embedding_model(count))
        runners += [chat_runner, emb_runner]
        cfg = ServerConfig(
            upstreams=[
                parse_upstream(chat_url),
                parse_upstream(f"{emb_url}#model=emb,kind=embedding"),
            ],
            narrow_tools="auto",
            narrow_embedding="emb",
            probe_interval=0,
            max_reasks=0,
        )
        px_runner, px_url = await serve(create_app(cfg))
        runners.append(px_runner)
        async with aiohttp.ClientSession() as s:
            for q, tools in pooled(questions, size, seed):
                body = {"model": "m", "messages": q.messages, "tools": tools}
                async with s.post(px_url + "/chat/completions", json=body) as resp:
                    await resp.read()
                kept = shown[-1]
                r.turns += 1
                if len(kept) == len(tools):
                    r.declined += 1
                    continue
                r.shown += len(kept)
                r.most_shown = max(r.most_shown, len(kept))
                r.narrowed_hits += bool(q.gold & set(kept))
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
    return r


async def end_to_end(
    questions: list[Question], size: int, on: bool, turns: int, seed: int = 0
) -> tuple[float, float, float]:
    """(calls of the right tool per 100 turns, upstream requests per turn,
    median seconds per request at the client)."""
    picked = [(q, t) for q, t in pooled(questions, size, seed) if len(q.gold) == 1]
    picked = random.Random(seed).sample(picked, min(turns, len(picked)))
    gold = {_user_text(q): next(iter(q.gold)) for q, _ in picked}
    seen: list[int] = []
    up_runner, up_url = await serve(chat_model(seed, seen, gold))
    cfg = ServerConfig(
        upstreams=[parse_upstream(up_url)],
        narrow_tools="auto" if on else "off",
        probe_interval=0,
    )
    px_runner, px_url = await serve(create_app(cfg))
    right, times = 0, []
    try:
        async with aiohttp.ClientSession() as s:
            for q, tools in picked:
                body = {"model": "m", "messages": q.messages, "tools": tools}
                t0 = time.perf_counter()
                async with s.post(px_url + "/chat/completions", json=body) as resp:
                    msg = (await resp.json())["choices"][0]["message"]
                times.append(time.perf_counter() - t0)
                names = [c["function"]["name"] for c in msg.get("tool_calls") or ()]
                right += gold[_user_text(q)] in names
    finally:
        await px_runner.cleanup()
        await up_runner.cleanup()
    return right * 100 / len(picked), len(seen) / len(picked), statistics.median(times)


def _split_name(name: str) -> str:
    return " ".join(re.split(r"[._\-]", name))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=200, help="turns per end-to-end cell")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-e2e", action="store_true")
    args = p.parse_args()
    data = bfcl_dir()
    if data is None:
        raise SystemExit(
            f"bfcl-eval is not installed: pip install --no-deps bfcl-eval=={BFCL_VERSION}"
        )
    questions = load(data)
    print(f"BFCL {SET}: {len(questions)} questions; keep at most {narrow.KEEP}, "
          f"ratio {narrow.RATIO}, narrow above {narrow.THRESHOLD} tools")  # fmt: skip
    head = f"{'ranker':<10}{'tools':>6}{'declined':>10}{'recall (narrowed)':>19}"
    print(head + f"{'recall (all)':>14}{'shown':>7}")
    rows: list[tuple[str, int, Retrieval]] = []
    for size in POOLS:
        rows.append(("lexical", size, lexical(questions, size, args.seed)))
    for size in POOLS:
        rows.append(("embedding", size, asyncio.run(embedded(questions, size, args.seed))))
    for name, size, r in rows:
        print(
            f"{name:<10}{size:>6}{r.declined / r.turns:>10.1%}{r.recall_narrowed:>19.3f}"
            f"{r.recall_all:>14.3f}{r.mean_shown:>7.1f}"
        )
    if args.skip_e2e:
        return
    print()
    print(f"end to end: scripted model, p(right call | n tools shown) = min(0.9, 1.6/sqrt(n)); "
          f"{args.turns} BFCL turns per cell")  # fmt: skip
    print(f"{'tools':>6}{'calls/100 off':>15}{'calls/100 on':>14}{'requests/turn on':>18}"
          f"{'added ms/request':>18}")  # fmt: skip
    for size in (10, 50, 100):
        off, _, t_off = asyncio.run(end_to_end(questions, size, False, args.turns, args.seed))
        on, per, t_on = asyncio.run(end_to_end(questions, size, True, args.turns, args.seed))
        print(f"{size:>6}{off:>15.0f}{on:>14.0f}{per:>18.2f}{(t_on - t_off) * 1000:>18.2f}")


if __name__ == "__main__":
    main()
