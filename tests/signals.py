"""In-memory OpenTelemetry log and metric pipelines for tests of run summaries.

``install_signals()`` configures spanpoint with a fresh SDK ``LoggerProvider`` (in-memory log
exporter) and ``MeterProvider`` (in-memory reader), next to the ``configured`` tracer
(tests/harness.py's, whose metric reading it shares).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import spanpoint
from harness import metric_points


@dataclass
class Signals:
    """The log exporter and metric reader spanpoint's summaries go to."""

    logs: InMemoryLogRecordExporter
    metrics: InMemoryMetricReader
    logger_provider: LoggerProvider
    meter_provider: MeterProvider

    def summaries(self) -> list[Any]:
        """Exported ``spanpoint.run_summary`` log records (the SDK's readable records)."""
        return [
            r
            for r in self.logs.get_finished_logs()
            if r.log_record.event_name == "spanpoint.run_summary"
        ]

    def points(self, name: str) -> list[Any]:
        """The data points of metric ``name`` collected now."""
        return metric_points(self.metrics, name)


def install_signals() -> Signals:
    """Configure spanpoint's logger and meter providers with in-memory exporters."""
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    spanpoint.configure(logger_provider=logger_provider, meter_provider=meter_provider)
    return Signals(logs, reader, logger_provider, meter_provider)
