"""JSON-lines exporters: the local trace, log and metric files when no endpoint is set.

One JSON object per line, appended to files created ``0600`` in a ``0700`` folder
(:mod:`spanpoint.telemetry.files`). OpenTelemetry plumbing: knows nothing of runs or settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from spanpoint.telemetry.files import PrivateAppender


class JsonLinesSpanExporter(SpanExporter):
    """Appends each span as one JSON object per line: the local trace output, no server needed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file = PrivateAppender(self.path)  # 0600 in a 0700 folder

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append ``spans`` to the file."""
        lines = [json.dumps(span_to_dict(s), separators=(",", ":")) for s in spans]
        if not self._file.append(lines):
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing held open between exports."""


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """A compact, JSON-safe view of a finished span."""
    ctx = span.context
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x") if ctx else None,
        "span_id": format(ctx.span_id, "016x") if ctx else None,
        "parent_span_id": format(span.parent.span_id, "016x") if span.parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": format(link.context.trace_id, "032x"),
                "span_id": format(link.context.span_id, "016x"),
            }
            for link in span.links
        ],
    }


class JsonLinesLogExporter(LogRecordExporter):
    """Appends each log record as one JSON object per line (the local output, no server)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file = PrivateAppender(self.path)  # 0600 in a 0700 folder

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        """Append ``batch`` to the file."""
        lines = []
        for item in batch:
            record = item.log_record
            ctx = record.span_id and record.trace_id
            lines.append(
                json.dumps(
                    {
                        "event_name": record.event_name,
                        "time_ns": record.timestamp or record.observed_timestamp,
                        "severity": record.severity_text,
                        "trace_id": format(record.trace_id, "032x") if ctx else None,
                        "span_id": format(record.span_id, "016x") if ctx else None,
                        "attributes": dict(record.attributes or {}),
                        "body": record.body,
                    },
                    separators=(",", ":"),
                    default=str,
                )
            )
        return _append(self._file, lines, LogRecordExportResult)

    def shutdown(self) -> None:
        """Nothing held open between exports."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Exports write synchronously."""
        return True


class JsonLinesMetricExporter(MetricExporter):
    """Appends each metrics collection as one JSON object per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._file = PrivateAppender(self.path)  # 0600 in a 0700 folder

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Append one collection to the file."""
        line = json.dumps(json.loads(metrics_data.to_json(indent=None)), separators=(",", ":"))
        return _append(self._file, [line], MetricExportResult)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Exports write synchronously."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing held open between exports."""


def _append(file: PrivateAppender, lines: list[str], result: Any) -> Any:
    return result.SUCCESS if file.append(lines) else result.FAILURE
