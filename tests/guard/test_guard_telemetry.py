"""Everything the guard sees and decides is OpenTelemetry: attributes, events, metrics."""

from __future__ import annotations

from guard_fakes import stuck_on_search
from guard_support import Tools, make_agent, thread

from harness import Telemetry
from spanpoint import semconv
from spanpoint.guard import GuardConfig


def test_span_events_attributes_and_metrics_of_a_stop(otel: Telemetry, tools: Tools) -> None:
    agent = make_agent(stuck_on_search, [tools.make("search")], GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        agent.invoke({"messages": [("user", "q")]}, thread("tel"))

    attrs = otel.span("test").attributes
    assert attrs[semconv.GUARD_STEP] == 4
    assert attrs[semconv.GUARD_TOKENS] == 480
    assert attrs[semconv.GUARD_TOKENS_ESTIMATED] is False
    assert attrs[semconv.GUARD_COST_USD] == 0.0
    assert attrs[semconv.GUARD_STATE] == "open"

    events = otel.guard_events("test")
    detection = events[0][1]
    assert detection == {
        semconv.GUARD_PATTERN: "tool_repeat",
        semconv.GUARD_CONFIDENCE: 1.0,
        semconv.GUARD_EVIDENCE: (
            "search called 3 times with identical arguments in the last 3 tool calls "
            "(1 in this step)"
        ),
        semconv.GUARD_TOOLS: ("search",),
        semconv.GUARD_STEP: 3,
        semconv.GUARD_MODE: "enforce",
    }
    reflection = events[1][1]
    assert reflection[semconv.GUARD_REFLECTIONS] == 1
    assert reflection[semconv.GUARD_REFLECTIONS_ALLOWED] == 1
    name, stop = events[-1]
    assert name == semconv.EVENT_GUARD_TERMINATED
    assert stop[semconv.GUARD_REASON] == "tool_repeat"
    assert stop[semconv.GUARD_STOP_KIND] == "detector"
    assert stop[semconv.GUARD_EVIDENCE].startswith("search called 4 times")

    assert otel.counts(semconv.METRIC_GUARD_DETECTIONS, semconv.GUARD_PATTERN) == {"tool_repeat": 2}
    assert otel.counts(semconv.METRIC_GUARD_REFLECTIONS, semconv.GUARD_PATTERN) == {
        "tool_repeat": 1
    }
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, semconv.GUARD_REASON) == {
        "tool_repeat": 1
    }
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, "kind") == {"detector": 1}


def test_a_stop_denies_the_tool_calls_it_keeps_from_running(otel: Telemetry, tools: Tools) -> None:
    # The tool-call decision event proposed upstream (semantic-conventions-genai #535).
    agent = make_agent(stuck_on_search, [tools.make("search")], GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        result = agent.invoke({"messages": [("user", "q")]}, thread("denied"))

    (stop,) = [e for e in otel.span("test").events if e.name == semconv.EVENT_GUARD_TERMINATED]
    decisions = [
        dict(e.attributes or {})
        for e in otel.span("test").events
        if e.name == semconv.EVENT_TOOL_CALL_DECISION
    ]
    skipped = [
        m.tool_call_id
        for m in result["messages"]
        if m.type == "tool"
        and m.additional_kwargs.get("spanpoint_guard", {}).get("kind") == "skipped"
    ]
    assert stop.attributes[semconv.GUARD_SKIPPED_TOOL_CALLS] == len(decisions) == 1
    assert decisions == [
        {
            semconv.GEN_AI_TOOL_CALL_DECISION_OUTCOME: semconv.DECISION_DENY,
            semconv.GEN_AI_TOOL_NAME: "search",
            semconv.GEN_AI_TOOL_CALL_ID: skipped[0],
        }
    ]
    assert [name for name, _ in tools.log] == ["search"] * 3  # the denied fourth never ran


def test_no_sdk_no_span_is_fine(tools: Tools) -> None:
    # Outside any recording span and with the global (no-op) meter, the guard still works.
    out = make_agent(stuck_on_search, [tools.make("search")], GuardConfig()).invoke(
        {"messages": [("user", "q")]}, thread("quiet")
    )
    assert out["guard_reason"] == "tool_repeat"
