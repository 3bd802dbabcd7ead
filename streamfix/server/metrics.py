"""Prometheus metrics of one proxy app.

Each app has its own ``CollectorRegistry`` (two apps in one process, as in
the tests and the demo, do not share or clash). With ``--workers N`` the
parent sets ``PROMETHEUS_MULTIPROC_DIR`` (``MULTIPROC_ENV``) before it starts
the workers: each worker's counters go to files there (prometheus_client's
multiprocess mode), and one scrape of any worker shows the sum over all of
them. The chunk histogram is the one exception: it is the answering
worker's own.

Repairs are counted from ``Report.counts`` after each reply, under the
chain's own keys (``calls.<format>``, ``loop_cut``, ``stripped.<kind>``,
``dropped_call.<why>``, ``repaired_arguments``, ``unrecognised_markup``…),
so a new transformer's counter shows up without touching this module.

The chunk histogram is kept per model label (``ChunkHistograms``) for the
operator page's p50/p99 per model (``server/ui``), and exposed as the one
unlabelled ``streamfix_chunk_seconds`` histogram it always was; each
model's also keeps its slowest reads with their request ids
(``SlowReads``), so the page's p99 leads to the requests it came from.
"""

from __future__ import annotations

import heapq
import logging
import os
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from . import requestid

log = logging.getLogger("streamfix.server")

#: Time streamfix spends in ``SSESession.feed`` per upstream read: the
#: chain costs microseconds, so the buckets start at 5 µs.
CHUNK_BUCKETS = (
    5e-6,
    1e-5,
    2.5e-5,
    5e-5,
    1e-4,
    2.5e-4,
    5e-4,
    1e-3,
    2.5e-3,
    5e-3,
    1e-2,
    5e-2,
    0.25,
)

#: Where the workers of ``--workers N`` write their counters (set by the
#: parent, read by prometheus_client as it is imported).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Slowest reads kept per model (the operator page's p99 names them).
MAX_SLOW = 20

__all__ = [
    "CONTENT_TYPE_LATEST",
    "ChunkHistogram",
    "ChunkHistograms",
    "Metrics",
    "SlowRead",
    "SlowReads",
]


@dataclass(frozen=True, slots=True, order=True)
class SlowRead:
    """One read that took streamfix long: how long, when (wall clock),
    the request it was in (``requestid``; None outside a request)."""

    seconds: float
    at: float
    request_id: str | None


class SlowReads:
    """The ``MAX_SLOW`` slowest reads of one model, the slowest read of a
    request once (a slow stream does not push every other request out).
    The hot path is one comparison (``floor``) until a read is among them."""

    __slots__ = ("floor", "heap", "size")

    def __init__(self, size: int = MAX_SLOW) -> None:
        self.size = size
        self.heap: list[SlowRead] = []
        #: The fastest kept once full: a read no slower is not kept.
        self.floor = 0.0

    def offer(self, seconds: float) -> None:
        rid = requestid.current()
        heap = self.heap
        for i, kept in enumerate(heap):
            if rid is not None and kept.request_id == rid:
                if seconds > kept.seconds:
                    heap[i] = SlowRead(seconds, time.time(), rid)
                    heapq.heapify(heap)
                break
        else:
            read = SlowRead(seconds, time.time(), rid)
            if len(heap) < self.size:
                heapq.heappush(heap, read)
            else:
                heapq.heapreplace(heap, read)
        if len(heap) >= self.size:
            self.floor = heap[0].seconds

    def slowest(self) -> list[SlowRead]:
        """The reads kept, slowest first."""
        return sorted(self.heap, reverse=True)


class ChunkHistogram(Collector):
    """A histogram observed once per upstream read, on the hot path.

    ``prometheus_client.Histogram.observe`` takes a lock and walks the
    buckets (about 1 µs, as much as the chain itself on a plain chunk);
    this one is one ``bisect`` and two additions, in the event loop's
    single thread, and is turned into the same exposition at scrape time.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: tuple[float, ...],
        slow: SlowReads | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.total = 0.0
        #: The slowest reads with their request ids (the per-model ones).
        self.slow = slow

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        slow = self.slow
        if slow is not None and value > slow.floor:
            slow.offer(value)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile estimated from the buckets as Prometheus's
        ``histogram_quantile`` does (linear within the bucket; the last
        finite bound for the +Inf one); None before any observation."""
        total = sum(self.counts)
        if not total:
            return None
        rank = q * total
        running = 0
        for i, n in enumerate(self.counts):
            if running + n >= rank and n:
                if i == len(self.bounds):
                    return self.bounds[-1]
                low = self.bounds[i - 1] if i else 0.0
                return low + (self.bounds[i] - low) * (rank - running) / n
            running += n
        return self.bounds[-1]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        return self._family(self.counts, self.total)

    def _family(self, counts: list[int], total: float) -> Iterator[HistogramMetricFamily]:
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, counts, strict=False):
            running += n
            cumulative.append((repr(bound), running))
        running += counts[-1]
        cumulative.append(("+Inf", running))
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=cumulative, sum_value=total
        )


class ChunkHistograms(ChunkHistogram):
    """``ChunkHistogram`` kept per model label (the route's, ``Scope.model``)
    for the operator page's p50/p99 per model, exposed to Prometheus as the
    one unlabelled histogram it always was (summed at scrape time). The hot
    path is unchanged: a stream takes its model's histogram once
    (``of``) and observes into it as before."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        super().__init__(name, documentation, buckets)
        #: By model label (bounded as the labels are: ``upstream/table.py``).
        self.models: dict[str, ChunkHistogram] = {}

    def of(self, model: str) -> ChunkHistogram:
        h = self.models.get(model)
        if h is None:
            h = self.models[model] = ChunkHistogram(
                self.name, self.documentation, self.bounds, SlowReads()
            )
        return h

    def collect(self) -> Iterator[HistogramMetricFamily]:
        counts = list(self.counts)
        total = self.total
        for h in self.models.values():
            counts = [a + b for a, b in zip(counts, h.counts, strict=True)]
            total += h.total
        return self._family(counts, total)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "streamfix_requests",
            "Requests answered, by endpoint, streaming, HTTP status, tenant ('-': none) and "
            "model (the public name; '*' for a catch-all row, '-' before one was chosen).",
            ["endpoint", "stream", "status", "tenant", "model"],
            registry=r,
        )
        self.repairs = Counter(
            "streamfix_repairs",
            "Repairs by kind, as the chain counts them (calls.<format>, loop_cut, …).",
            ["kind"],
            registry=r,
        )
        self.unrecognised = Counter(
            "streamfix_unrecognised_markup",
            "Replies with markup that looked like a call but matched no known format.",
            registry=r,
        )
        self.missed_calls = Counter(
            "streamfix_possible_missed_calls",
            "Replies from which nothing was lifted that name an offered tool followed by "
            "its arguments (a call shape streamfix may not know; recorded as 'missed').",
            registry=r,
        )
        self.reasks = Counter(
            "streamfix_reasks",
            "Requests asked again upstream, by reason.",
            ["reason"],
            registry=r,
        )
        self.named_tool = Counter(
            "streamfix_named_tool",
            "Requests whose tool_choice named one tool, sent with only that tool and "
            "tool_choice auto (--required soft), by outcome: called (first reply), "
            "called_after_reask, no_call.",
            ["outcome"],
            registry=r,
        )
        self.narrowed = Counter(
            "streamfix_narrowed",
            "Requests --narrow-tools looked at (tool_choice auto or required), by outcome: "
            "kept (a tool shown was called), hidden (a tool offered but not shown was "
            "called), asked_again (no call: asked again with every tool), no_call "
            "(narrowed, no call, not asked again), not_confident, few_tools (not narrowed).",
            ["outcome"],
            registry=r,
        )
        self.reloads = Counter(
            "streamfix_reloads",
            "Configuration reloads (SIGHUP), by outcome: ok, refused (the old table stays).",
            ["outcome"],
            registry=r,
        )
        self.prompt_trims = Counter(
            "streamfix_prompt_trims",
            "Prompts that could not fit the context window, trimmed (oldest turns first).",
            registry=r,
        )
        self.clamps = Counter(
            "streamfix_clamps",
            "Requests whose max_tokens was clamped to fit the context window.",
            registry=r,
        )
        self.upstream_errors = Counter(
            "streamfix_upstream_errors",
            "Upstream failures, by upstream and kind (connect, timeout, status_5xx, status_429, "
            "died_midstream, empty_stream, protocol).",
            ["upstream", "kind"],
            registry=r,
        )
        self.recordings = Counter(
            "streamfix_recordings",
            "Recordings written (--record), by reason; one with two reasons counts under both.",
            ["reason"],
            registry=r,
        )
        self.recordings_dropped = Counter(
            "streamfix_recordings_dropped",
            "Recordings not written: queue_full, too_large, write_error (sampled-out ones are "
            "not counted).",
            ["why"],
            registry=r,
        )
        self.dropped_parts = Counter(
            "streamfix_dropped_parts",
            "Input parts a door left out (an image for a model that takes none, a PDF), "
            "by door and part; the model is told in their place (docs/doors.md).",
            ["door", "part"],
            registry=r,
        )
        self.limited = Counter(
            "streamfix_limited",
            "Requests refused by a tenant's limit, by tenant and limit (requests, tokens, "
            "concurrency; state: the shared state was unreachable and limits fail closed).",
            ["tenant", "limit"],
            registry=r,
        )
        self.state_errors = Counter(
            "streamfix_state_errors",
            "Round trips to the shared state (--state) that failed.",
            registry=r,
        )
        self.chunk_seconds = ChunkHistograms(
            "streamfix_chunk_seconds",
            "Time streamfix itself spends repairing one upstream read (seconds).",
            CHUNK_BUCKETS,
        )
        r.register(self.chunk_seconds)

    def count_report(self, counts: Mapping[str, int]) -> None:
        for kind, n in counts.items():
            if n:
                self.repairs.labels(kind).inc(n)
                if kind == "unrecognised_markup":
                    self.unrecognised.inc(n)
                elif kind == "possible_missed_call":
                    self.missed_calls.inc(n)

    def count_trim(self, upstream: str, info: Mapping[str, Any]) -> None:
        """A prompt was trimmed to fit ``upstream``'s window: counted and
        logged (``info``: the budget's note, ``budget.fit_prompt``)."""
        self.prompt_trims.inc()
        log.info("prompt trimmed for %s: %s", upstream, info)

    def count_dropped_parts(self, door: str, counts: Mapping[str, int]) -> None:
        for part, n in counts.items():
            if n:
                self.dropped_parts.labels(door, part).inc(n)

    def render(self) -> bytes:
        path = os.environ.get(MULTIPROC_ENV)
        if not path:
            return generate_latest(self.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        every = CollectorRegistry()
        MultiProcessCollector(every, path)  # type: ignore[no-untyped-call]
        own = CollectorRegistry()
        own.register(self.chunk_seconds)
        return generate_latest(every) + generate_latest(own)
