"""Prometheus metrics of one proxy app.

Each app has its own ``CollectorRegistry`` (two apps in one process, as in
the tests and the demo, do not share or clash). With ``--workers N`` each
process counts for itself; scrape each worker, or sum in the query.

Repairs are counted from ``Report.counts`` after each reply, under the
chain's own keys (``calls.<format>``, ``loop_cut``, ``stripped.<kind>``,
``dropped_call.<why>``, ``repaired_arguments``, ``unrecognised_markup``…),
so a new transformer's counter shows up without touching this module.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "streamfix_requests",
            "Requests answered, by endpoint, streaming and HTTP status.",
            ["endpoint", "stream", "status"],
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
        self.reasks = Counter(
            "streamfix_reasks",
            "Requests asked again upstream, by reason.",
            ["reason"],
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
        self.chunk_seconds = Histogram(
            "streamfix_chunk_seconds",
            "Time streamfix itself spends repairing one upstream read (seconds).",
            buckets=CHUNK_BUCKETS,
            registry=r,
        )

    def count_report(self, counts: Mapping[str, int]) -> None:
        for kind, n in counts.items():
            if n:
                self.repairs.labels(kind).inc(n)
                if kind == "unrecognised_markup":
                    self.unrecognised.inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
