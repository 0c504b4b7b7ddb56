"""The guard's telemetry follows spanpoint's providers: its counters go to the meter provider
spanpoint's own metrics go to, and a detection with no recording span is a log record."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from guard_fakes import stuck_on_search
from guard_support import Tools, make_graph_builder
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

import spanpoint
from harness import Telemetry
from spanpoint import semconv
from spanpoint.config import reset_for_tests
from spanpoint.guard import GuardConfig, compile_guarded_graph


@pytest.fixture
def spanpoint_otel(otel: Telemetry) -> Iterator[tuple[Telemetry, InMemoryLogRecordExporter]]:
    """spanpoint configured with the fixture's providers and an in-memory log exporter."""
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    spanpoint.configure(
        tracer_provider=otel.provider,
        meter_provider=otel.meter_provider,
        logger_provider=logger_provider,
        store=spanpoint.MemoryStore(),
    )
    yield otel, logs
    logger_provider.shutdown()
    reset_for_tests()


def stop_a_loop(tools: Tools, thread: str) -> dict[str, Any]:
    """A guarded graph built with no meter_provider, run outside any span."""
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    runner = compile_guarded_graph(builder, GuardConfig(), checkpointer=InMemorySaver())
    out = runner.invoke(
        {"messages": [("user", "meaning of life?")]}, {"configurable": {"thread_id": thread}}
    )
    assert out["guard_terminated"] is True
    return out


def test_guard_counters_go_to_spanpoints_meter_provider(spanpoint_otel, tools: Tools) -> None:
    otel, _ = spanpoint_otel
    stop_a_loop(tools, "t-metrics")
    assert otel.counts(semconv.METRIC_GUARD_DETECTIONS, semconv.GUARD_PATTERN)["tool_repeat"] >= 1
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, semconv.GUARD_REASON) == {
        "tool_repeat": 1
    }


def test_a_detection_with_no_recording_span_is_a_log_record(spanpoint_otel, tools: Tools) -> None:
    _, logs = spanpoint_otel
    stop_a_loop(tools, "t-logs")
    records = [r.log_record for r in logs.get_finished_logs()]
    names = [r.event_name for r in records]
    assert semconv.EVENT_GUARD_DETECTION in names and semconv.EVENT_GUARD_TERMINATED in names
    (terminated,) = [r for r in records if r.event_name == semconv.EVENT_GUARD_TERMINATED]
    assert terminated.attributes[semconv.GUARD_REASON] == "tool_repeat"
    assert terminated.attributes[semconv.GUARD_RESUMABLE] is True
