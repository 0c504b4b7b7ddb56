"""SpanpointInstrumentor().instrument(...) hands all three providers to spanpoint.configure."""

from __future__ import annotations

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint.instrumentation import SpanpointInstrumentor
from spanpoint.stores import MemoryStore


def test_instrument_hands_the_tracer_meter_and_logger_providers_to_configure() -> None:
    tracer_provider = TracerProvider()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    logger_provider = LoggerProvider()
    store = MemoryStore()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        logger_provider=logger_provider,
        store=store,
    )
    try:
        cfg = spanpoint.settings()
        assert cfg.tracer_provider is tracer_provider
        assert cfg.meter_provider is meter_provider
        assert cfg.logger_provider is logger_provider
        assert cfg.store is store
        assert (cfg.metric_destination, cfg.log_destination) == ("application", "application")
    finally:
        instrumentor.uninstrument()
        for provider in (tracer_provider, meter_provider, logger_provider):
            provider.shutdown()
