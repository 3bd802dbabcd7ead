"""OpenTelemetry GenAI metrics, beside the Prometheus ones (the ``otel`` extra).

The gateways that speak the GenAI semantic conventions (Envoy's and Kong's
AI gateways) emit four histograms; streamfix emits them under the same
names, so one dashboard reads them all:

- ``gen_ai.client.token.usage`` (``{token}``): the reply's usage as the
  upstream reported it, one record per kind, ``gen_ai.token.type``
  ``input`` or ``output`` (none when it sent no usage);
- ``gen_ai.server.request.duration`` (``s``): from the request's arrival
  to the end of its reply, with ``error.type`` when it failed;
- ``gen_ai.server.time_to_first_token`` (``s``): a streamed reply, from
  the arrival to the first read of the stream that became the reply (so
  failover, retries and re-asks count: the client waited for them);
- ``gen_ai.server.time_per_output_token`` (``s``): a streamed reply,
  the time after that first read over the output tokens after the first.

Each carries ``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model`` (as the client named it) and
``gen_ai.response.model`` (as the row serves it). The buckets are the
conventions' advice.

*When.* With traces (``tracing.wanted``: ``--traces`` or the ``OTEL_*``
variables), unless ``OTEL_METRICS_EXPORTER`` is ``none``. A meter
provider someone else set up globally (``opentelemetry-instrument``) is
used as it is; otherwise one of our own exports through
``OTEL_METRICS_EXPORTER`` (``otlp``, the default: OTLP over
HTTP/protobuf to ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/metrics``, or
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``; ``console``) every
``OTEL_METRIC_EXPORT_INTERVAL`` milliseconds (default 60,000), and once
more when the app stops. Recorded once per request at its end
(``RequestTrace.end``), whether its span was sampled or not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .. import __version__

log = logging.getLogger("streamfix.server")

#: The conventions' advised bucket boundaries.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


def meters_for(env: Mapping[str, str], resource: Any) -> GenAIMeters | None:
    """The proxy's GenAI meters (None: ``OTEL_METRICS_EXPORTER=none``),
    on the global SDK provider if there is one, else on one of our own
    with ``resource`` (the traces')."""
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )

    names = env.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() or "otlp"
    if names == "none":
        return None
    given = metrics.get_meter_provider()
    if isinstance(given, MeterProvider):  # set up by someone else: theirs
        return GenAIMeters(given, own=False)
    readers = []
    for name in (n.strip() for n in names.split(",")):
        exporter: MetricExporter | None = None
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            exporter = OTLPMetricExporter()
        elif name == "console":
            exporter = ConsoleMetricExporter()
        elif name and name != "none":
            log.warning("OTEL_METRICS_EXPORTER %r is not known here: ignored", name)
        if exporter is not None:
            readers.append(PeriodicExportingMetricReader(exporter))
    if not readers:
        return None
    return GenAIMeters(MeterProvider(resource=resource, metric_readers=readers), own=True)


class GenAIMeters:
    """The four GenAI histograms (``RequestTrace.end`` records them)."""

    def __init__(self, provider: Any, own: bool = False) -> None:
        self.provider = provider
        #: The provider is ours to flush and shut down with the app.
        self.own = own
        meter = provider.get_meter("streamfix", __version__)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Tokens used by a request (the upstream's usage), by gen_ai.token.type",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.server.request.duration",
            "s",
            "From a request's arrival to the end of its reply",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.first_token = meter.create_histogram(
            "gen_ai.server.time_to_first_token",
            "s",
            "From a streamed request's arrival to the first read of its reply",
            explicit_bucket_boundaries_advisory=TTFT_BUCKETS,
        )
        self.per_token = meter.create_histogram(
            "gen_ai.server.time_per_output_token",
            "s",
            "Time per output token after the first, of a streamed reply",
            explicit_bucket_boundaries_advisory=TPOT_BUCKETS,
        )

    def record(
        self,
        attrs: dict[str, Any],
        seconds: float,
        error: str | None,
        usage: Mapping[str, Any] | None,
        first: float | None,
    ) -> None:
        """One request: its attributes, duration, error (None: it went
        well), the upstream's usage and, streamed, its first read's time
        from the arrival (None: not streamed, or nothing came)."""
        if error is not None:
            self.duration.record(seconds, {**attrs, "error.type": error})
            return
        self.duration.record(seconds, attrs)
        usage = usage or {}
        output = None
        for key, kind in (("prompt_tokens", "input"), ("completion_tokens", "output")):
            n = usage.get(key)
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                self.tokens.record(n, {**attrs, "gen_ai.token.type": kind})
                if kind == "output":
                    output = n
        if first is None:
            return
        self.first_token.record(first, attrs)
        if output is not None and output > 1 and seconds > first:
            self.per_token.record((seconds - first) / (output - 1), attrs)

    def shutdown(self) -> None:
        """Export what is left and stop (blocking: run it off the loop)."""
        if self.own:
            self.provider.shutdown()
