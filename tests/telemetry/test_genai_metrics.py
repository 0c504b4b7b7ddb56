"""gen_ai.client.operation.duration, .token.usage and .cost, recorded once per operation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.tools import tool
from opentelemetry.sdk.metrics.export import HistogramDataPoint

import spanpoint
from fakes import ConversationModel
from harness import metric_points
from signals import Signals, install_signals
from spanpoint import semconv
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry


@tool
def lookup(ticket: str) -> str:
    """Look up a ticket."""
    return f"ticket {ticket}: open"


@pytest.fixture
def signals(configured: Telemetry) -> Iterator[Signals]:
    installed = install_signals()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    yield installed
    instrumentor.uninstrument()
    installed.meter_provider.shutdown()


def points(signals: Signals, name: str) -> list[HistogramDataPoint]:
    return metric_points(signals.metrics, name)


def by_operation(pts: list[HistogramDataPoint]) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for p in pts:
        op = p.attributes[semconv.GEN_AI_OPERATION_NAME]
        counts[op] = counts.get(op, 0) + p.count
    return counts


def agent() -> Any:
    from langchain.agents import create_agent

    model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": "42"}}]])
    return create_agent(model, [lookup], name="support")


def test_each_operation_is_recorded_once_with_standard_attributes(
    configured: Telemetry, signals: Signals
) -> None:
    agent().invoke({"messages": [("user", "ticket 42?")]})
    durations = points(signals, "gen_ai.client.operation.duration")
    assert by_operation(durations) == {"invoke_agent": 1, "chat": 2, "execute_tool": 1}
    [chat] = [p for p in durations if p.attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"]
    assert chat.attributes[semconv.GEN_AI_PROVIDER_NAME] == "fake"
    assert chat.attributes[semconv.GEN_AI_REQUEST_MODEL] == "fake-chat"
    assert chat.attributes[semconv.GEN_AI_RESPONSE_MODEL] == "fake-chat"
    assert chat.sum > 0

    tokens = points(signals, "gen_ai.client.token.usage")
    by_type = {p.attributes[semconv.GEN_AI_TOKEN_TYPE]: p for p in tokens}
    assert set(by_type) == {"input", "output"}
    spans = configured.spans("chat")
    assert by_type["input"].sum == sum(s.attributes["gen_ai.usage.input_tokens"] for s in spans)
    assert by_type["output"].sum == sum(s.attributes["gen_ai.usage.output_tokens"] for s in spans)
    assert by_type["input"].count == 2  # per model call; the agent's total is not added again


def test_replayed_operations_are_not_client_calls(configured: Telemetry, signals: Signals) -> None:
    graph = agent()
    for _ in range(2):
        with spanpoint.run("ticket-9"):
            graph.invoke({"messages": [("user", "ticket 42?")]})
    assert any(s.attributes.get(semconv.REPLAYED) for s in configured.spans())
    durations = points(signals, "gen_ai.client.operation.duration")
    assert by_operation(durations) == {"invoke_agent": 1, "chat": 2, "execute_tool": 1}


def test_each_executed_priced_call_records_its_cost_once(
    configured: Telemetry, signals: Signals
) -> None:
    """gen_ai.client.operation.cost: one point per executed chat span, its priced amount;
    a replayed call paid nothing and is not recorded."""
    from langchain.agents import create_agent

    model = ConversationModel(
        plan=[[{"name": "lookup", "args": {"ticket": "42"}}]], model_name="gpt-4o"
    )
    graph = create_agent(
        model, [lookup], name="support", middleware=[spanpoint.CheckpointMiddleware()]
    )
    for _ in range(2):  # executed, then replayed
        with spanpoint.run("ticket-cost"):
            graph.invoke({"messages": [("user", "ticket 42?")]})
    assert any(s.attributes.get(semconv.REPLAYED) for s in configured.spans())
    paid = [s for s in configured.spans("chat") if not s.attributes[semconv.REPLAYED]]
    assert len(paid) == 2
    (point,) = points(signals, semconv.METRIC_GEN_AI_OPERATION_COST)
    assert point.count == 2
    assert point.sum == pytest.approx(
        sum(s.attributes[semconv.GEN_AI_USAGE_COST_AMOUNT] for s in paid)
    )
    assert point.attributes[semconv.GEN_AI_REQUEST_MODEL] == "gpt-4o"


def test_a_failed_operation_carries_error_type(configured: Telemetry, signals: Signals) -> None:
    @tool
    def broken(ticket: str) -> str:
        """Always fails."""
        raise TimeoutError("backend timed out")

    call = {"name": "broken", "args": {"ticket": "1"}, "id": "c1", "type": "tool_call"}
    with pytest.raises(TimeoutError):
        broken.invoke(call)  # a tool called directly, as a hand-built node would
    [point] = points(signals, "gen_ai.client.operation.duration")
    assert point.attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert point.attributes[semconv.ERROR_TYPE] == "TimeoutError"


def test_boundaries_are_counted_by_kind_and_outcome(signals: Signals) -> None:
    fail = {"now": True}

    @spanpoint.step(name="load")
    def load() -> str:
        return "ticket"

    @spanpoint.step(name="publish")
    def publish(doc: str) -> str:
        if fail["now"]:
            raise TimeoutError("down")
        return doc

    with pytest.raises(TimeoutError), spanpoint.run("count-me"):
        publish(load())
    fail["now"] = False
    with spanpoint.run("count-me"):
        publish(load())
    load()  # outside a run: a plain span, not a boundary of a durable run
    # Counted once per run, when the run ends.

    counted = {
        (p.attributes[semconv.BOUNDARY_KIND], p.attributes[semconv.OUTCOME]): p.value
        for p in signals.points(semconv.METRIC_BOUNDARIES)
    }
    assert counted == {("step", "executed"): 2, ("step", "failed"): 1, ("step", "replayed"): 1}


def test_an_exemplar_points_at_the_operation_span(configured: Telemetry, signals: Signals) -> None:
    agent().invoke({"messages": [("user", "ticket 42?")]})
    chat_ids = {s.context.span_id for s in configured.spans("chat")}
    durations = points(signals, "gen_ai.client.operation.duration")
    [chat] = [p for p in durations if p.attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"]
    assert chat.exemplars, "the SDK's trace-based filter samples measurements of sampled spans"
    assert {e.span_id for e in chat.exemplars} <= chat_ids
