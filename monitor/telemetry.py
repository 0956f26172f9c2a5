"""The daemon's own OpenTelemetry spans (consume -> decode -> process), off unless configured."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from monitor import __version__
from monitor.config.process import TelemetryConfig

_propagator = TraceContextTextMapPropagator()


def build_tracer(config: TelemetryConfig) -> tuple[trace.Tracer | None, TracerProvider | None]:
    """A tracer exporting over OTLP/HTTP when an endpoint is set, else None (tracing off)."""
    if not config.otlp_endpoint:
        return None, None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": config.service_name, "service.version": __version__}
        )
    )
    endpoint = config.otlp_endpoint.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider.get_tracer("rag-monitor", __version__), provider


class Telemetry:
    """The daemon's own tracing as a component: the tracer (None when tracing is off), and at
    exit the spans still buffered flushed over HTTP, off the event loop."""

    def __init__(self, config: TelemetryConfig) -> None:
        self.tracer, self._provider = build_tracer(config)

    async def __aenter__(self) -> Telemetry:
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._provider is not None:
            await asyncio.to_thread(self._provider.shutdown)


def context_from_headers(headers: Sequence[tuple[str, bytes]] | None) -> Context | None:
    """Continue the producer's trace when the Kafka message carries a W3C `traceparent`."""
    if not headers:
        return None
    carrier = {}
    for key, value in headers:
        if key.lower() in ("traceparent", "tracestate") and value is not None:
            try:
                carrier[key.lower()] = value.decode("ascii")
            except UnicodeDecodeError:
                return None
    if "traceparent" not in carrier:
        return None
    return _propagator.extract(carrier)
