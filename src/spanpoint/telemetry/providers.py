"""The logger and meter providers spanpoint sends to when the application has none.

``spanpoint.configure`` chooses: the application's providers (given, or the global SDK ones)
come first; else one of these, as ``OTEL_LOGS_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` and the
OTLP variables ask (``spanpoint.telemetry.exporters``), else, with no endpoint, the JSON-lines
files next to the local trace file. OpenTelemetry plumbing: it knows nothing of settings or
runs; the resource comes from the caller's tracer provider.

"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry._logs import LoggerProvider
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk._logs import LoggerProvider as SdkLoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from spanpoint.telemetry import exporters
from spanpoint.telemetry.jsonl import JsonLinesLogExporter, JsonLinesMetricExporter


def resource_of(tracer_provider: Any) -> Resource:
    """The resource of ``tracer_provider`` (an SDK one), else the default resource."""
    resource = getattr(tracer_provider, "resource", None)
    return resource if isinstance(resource, Resource) else Resource.create()


def default_logger_provider(
    local_dir: Path, resource: Resource | None = None
) -> tuple[LoggerProvider, str]:
    """An SDK logger provider as ``OTEL_LOGS_EXPORTER`` and the OTLP variables ask (see
    ``spanpoint.telemetry.exporters``); with no endpoint, ``local_dir/logs.jsonl``."""
    resolved = exporters.resolve("logs")
    path = local_dir / "logs.jsonl"
    # Shut down with the tracer and meter providers, together and bounded.
    provider = SdkLoggerProvider(resource=resource or Resource.create(), shutdown_on_exit=False)
    for exporter in exporters.build(resolved, lambda: JsonLinesLogExporter(path), str(path)):
        provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    exporters.shutdown_at_exit(provider)
    return provider, resolved.describe(str(path))


def default_meter_provider(
    local_dir: Path, resource: Resource | None = None
) -> tuple[MeterProvider, str]:
    """An SDK meter provider chosen like :func:`default_logger_provider` (``metrics.jsonl``)."""
    resolved = exporters.resolve("metrics")
    path = local_dir / "metrics.jsonl"
    readers = [
        PeriodicExportingMetricReader(exporter)
        for exporter in exporters.build(resolved, lambda: JsonLinesMetricExporter(path), str(path))
    ]
    provider = SdkMeterProvider(
        metric_readers=readers, resource=resource or Resource.create(), shutdown_on_exit=False
    )
    exporters.shutdown_at_exit(provider)
    return provider, resolved.describe(str(path))
