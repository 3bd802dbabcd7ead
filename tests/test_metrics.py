"""The proxy's metrics module (streamfix/server/metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from streamfix.server.metrics import ChunkHistogram


def test_chunk_histogram_exposes_what_prometheus_client_would() -> None:
    buckets = (5e-6, 1e-5, 2.5e-5)
    values = [3e-6, 5e-6, 2e-5, 9.0]
    ours = ChunkHistogram("streamfix_chunk_seconds", "doc", buckets)
    ref_registry = CollectorRegistry()
    ref = Histogram("streamfix_chunk_seconds", "doc", buckets=buckets, registry=ref_registry)
    for v in values:
        ours.observe(v)
        ref.observe(v)
    registry = CollectorRegistry()
    registry.register(ours)

    def samples(text: bytes) -> list[str]:
        return [
            line
            for line in text.decode().splitlines()
            if line.startswith("streamfix_chunk_seconds_") and "_created" not in line
        ]

    assert samples(generate_latest(registry)) == samples(generate_latest(ref_registry))
