"""``--narrow-tools``: the proxy's side of tool narrowing.

Whether a request is narrowed, and to what: switched on globally
(``--narrow-tools auto``), per row or per tenant (the tenant's word first,
then the row's, then the global one: ``config.py``), for a request that
offers tools with ``tool_choice`` absent, ``"auto"`` or ``"required"``
(a named tool is ``plan.narrow_to_tool``'s; ``"none"`` calls nothing).
The ranking and the decision are ``streamfix/narrow.py``'s, pure; the
only I/O here is the embedding path: with ``narrow_embedding`` set, the
tools' texts are embedded once per tool set (``narrow.VectorCache`` on
the proxy, bounded, which also keeps each tool set's BM25 index) and the
turn once per request, through the table's embedding row of that name
(``Exchange.open``: its weights, failover, retries and keys), not
recorded. When that row cannot answer, the lexical
ranker decides (logged).

Not narrowed is counted at once (``streamfix_narrowed_total{outcome=
few_tools|not_confident}``); a narrowed request is counted when its reply
is final (``reask.AskAgain.settle``).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import orjson

from .. import narrow
from ..errors import RequestError
from .exchange import Exchange
from .scope import Answered, Scope
from .upstream.pool import UpstreamFailure

log = logging.getLogger("streamfix.server")


def enabled(scope: Scope) -> bool:
    """Narrowing is on for this request's tenant and rows."""
    if scope.tenant is not None and scope.tenant.narrow_tools is not None:
        return scope.tenant.narrow_tools == "auto"
    for up in scope.rows:
        if up.cfg.narrow_tools is not None:
            return up.cfg.narrow_tools == "auto"
    return scope.proxy.cfg.narrow_tools == "auto"


def applies(body: dict[str, Any]) -> bool:
    """A request whose tool choice is the model's: tools offered, and
    ``tool_choice`` absent, ``"auto"`` or ``"required"``."""
    return bool(body.get("tools")) and body.get("tool_choice", "auto") in ("auto", "required")


async def decide(scope: Scope, body: dict[str, Any]) -> narrow.Decision | None:
    """What to show the model for ``body`` (None: narrowing is off or does
    not apply); a decision not to narrow is counted here."""
    if not enabled(scope) or not applies(body):
        return None
    tools = body["tools"]
    names = narrow.tool_names(tools)
    metrics = scope.proxy.metrics
    if len(names) <= narrow.THRESHOLD:
        metrics.narrowed.labels("few_tools").inc()
        return _traced(scope, narrow.Decision(len(names), outcome="few_tools"))
    messages = body.get("messages") or []
    turn = narrow.turn_text(messages)
    scores = None
    model = scope.proxy.cfg.narrow_embedding
    if model is not None and turn.strip():
        scores = await _embedded_scores(scope, model, tools, turn)
    if scores is None:
        names, scores = await _rank_lexical(scope, tools, turn, narrow.asked_text(messages))
    d = narrow.decide(names, scores, narrow.called_before(messages))
    d.after_result = narrow.follows_result(messages)
    if not d.narrowed:
        metrics.narrowed.labels(d.outcome).inc()
    return _traced(scope, d)


#: The one thread that ranks large tool sets: off the event loop, and one
#: at a time, so the loop competes for the interpreter with one thread
#: only (it gets it back within the switch interval, 5 ms) however many
#: large new sets arrive at once.
_RANKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamfix-narrow")


async def _rank_lexical(
    scope: Scope, tools: list[Any], turn: str, asked: str
) -> tuple[list[str], list[float]]:
    """``narrow.rank_lexical``; for more than ``narrow.INLINE_TOOLS`` tools
    the index is made (once per set: ``proxy.tool_sets``) and the turn
    scored on ``_RANKER``, so a request offering 500 new tools costs the
    loop a hash of its tools, not the ranking."""
    cache = scope.proxy.tool_sets
    if len(tools) <= narrow.INLINE_TOOLS:
        return narrow.rank_lexical(tools, turn, cache, asked)
    loop = asyncio.get_running_loop()
    key = narrow.LexicalIndex.key(tools)
    index = cache.get(key)
    if not isinstance(index, narrow.LexicalIndex):
        index = await loop.run_in_executor(_RANKER, narrow.LexicalIndex, tools)
        cache.put(key, index)  # on the loop: the cache is the loop's alone
    return await loop.run_in_executor(_RANKER, index.rank, turn, asked)


def _traced(scope: Scope, d: narrow.Decision) -> narrow.Decision:
    """``d`` noted on the request's span (``streamfix.narrowing``: the
    outcome; ``…_kept``/``…_of``: the tools shown of those offered)."""
    attrs: dict[str, Any] = {"streamfix.narrowing": d.outcome, "streamfix.narrowing_of": d.offered}
    if d.kept is not None:
        attrs["streamfix.narrowing_kept"] = len(d.kept)
    scope.annotate(attrs)
    return d


async def _embedded_scores(
    scope: Scope, model: str, tools: list[Any], turn: str
) -> list[float] | None:
    """The tools' cosines with the turn through the embedding row
    ``model``; None when it could not answer (the lexical ranker decides)."""
    proxy = scope.proxy
    texts = [narrow.tool_text(t["function"]) for t in tools if narrow.tool_names([t])]
    key = narrow.VectorCache.key(model, texts)
    cached = proxy.tool_sets.get(key)
    if not isinstance(cached, list):
        cached = None
    inputs = [turn[: narrow.MAX_TURN_CHARS]] + ([] if cached is not None else texts)
    try:
        rows = scope.table.route("embedding", model, None).rows
        ex = await Exchange.open(
            scope, "/embeddings", {"model": model, "input": inputs}, rows=rows, recorded=False
        )
        raw = await ex.whole()
        if not ex.ok:
            raise ValueError(f"HTTP {ex.resp.status}")
        vectors = _vectors(orjson.loads(raw), len(inputs))
    except (
        UpstreamFailure,
        Answered,
        RequestError,
        TimeoutError,
        aiohttp.ClientError,
        ValueError,
        TypeError,
    ) as exc:
        log.warning("narrow_embedding %s: %s; ranking by words", model, exc)
        return None
    if cached is None:
        cached = vectors[1:]
        proxy.tool_sets.put(key, cached)
    return narrow.cosine(cached, vectors[0])


def _vectors(obj: Any, n: int) -> list[list[float]]:
    """The ``n`` vectors of an OpenAI embeddings reply, by index."""
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list) or len(data) != n:
        raise ValueError("not an embeddings reply for every input")
    out: list[list[float]] = [[] for _ in range(n)]
    for i, item in enumerate(data):
        vec = item.get("embedding") if isinstance(item, dict) else None
        idx = item.get("index", i) if isinstance(item, dict) else i
        if not isinstance(vec, list) or not isinstance(idx, int) or not 0 <= idx < n:
            raise ValueError("an embedding that is not a list of numbers")
        out[idx] = [float(x) for x in vec]
    return out
