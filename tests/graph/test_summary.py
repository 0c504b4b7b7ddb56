"""Run summaries: one OTLP log record and metrics per graph call; best effort by default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from opentelemetry.sdk._logs import LogRecordProcessor

import spanpoint
from signals import Signals, install_signals
from spanpoint import semconv
from spanpoint.errors import SpanpointError
from spanpoint.graph import DurabilityPolicy, GraphRunner, build_resume_request

SUMMARY_FIELDS = {
    "name",
    "strategy",
    "status",
    "thread_id",
    "run_id",
    "attempt",
    "replayed",
    "duration_s",
    "checkpoint_id",
    "checkpoint_ns",
    "next_nodes",
    "interrupts",
    "counters",
    "usage",
    "warnings",
    "trace_id",
    "span_id",
    "cost",  # inside a run: executed and replayed model calls' tokens and cost (issue 16)
}


class State(TypedDict):
    answer: str


def ask_graph(fail: bool = False) -> Any:
    def ask(state: State) -> dict[str, str]:
        if fail:
            raise RuntimeError("model down")
        return {"answer": str(interrupt("approve?"))}

    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=InMemorySaver())


@pytest.fixture
def signals(configured) -> Iterator[Signals]:
    installed = install_signals()
    yield installed
    installed.logger_provider.shutdown()
    installed.meter_provider.shutdown()


QUIET = DurabilityPolicy(warn_in_process=False)


def test_each_graph_call_sends_one_summary_record_with_the_documented_fields(
    configured, signals: Signals
) -> None:
    runner = GraphRunner(ask_graph(), name="approver", durability=QUIET)
    with spanpoint.run("S-1"):
        first = runner.invoke({"answer": ""}, thread_id="th")
        second = runner.invoke(build_resume_request(first, "yes"))
    records = signals.summaries()
    assert len(records) == 2
    bodies = [r.log_record.body for r in records]
    assert all(set(b) == SUMMARY_FIELDS for b in bodies)
    interrupted, completed = bodies
    assert interrupted["status"] == "interrupted" and completed["status"] == "completed"
    assert interrupted["run_id"] == "S-1" and interrupted["attempt"] == 1
    assert interrupted["thread_id"] == "th" and interrupted["strategy"] == "graph_call"
    assert interrupted["checkpoint_id"] == first.latest_checkpoint_id
    assert interrupted["interrupts"] == [
        {"id": first.interrupts[0].id, "node": "ask", "namespace": ""}
    ]
    assert interrupted["next_nodes"] == ["ask"]
    assert interrupted["counters"]["interrupts"] == 1
    assert interrupted["counters"]["nodes"] == 0  # the node stopped at its interrupt
    assert completed["counters"]["nodes"] == 1 and completed["counters"]["node.ask"] == 1
    assert completed["checkpoint_id"] == second.latest_checkpoint_id
    assert completed["duration_s"] > 0 and completed["replayed"] is False
    record = records[0].log_record
    assert record.attributes[semconv.GEN_AI_AGENT_NAME] == "approver"
    assert record.attributes[semconv.RUN_ID] == "S-1"
    # Correlated with the graph call's span.
    assert (f"{record.trace_id:032x}", f"{record.span_id:016x}") == (first.trace_id, first.span_id)


def test_metrics_count_calls_by_status_replays_interrupts_and_durations(
    configured, signals: Signals
) -> None:
    runner = GraphRunner(ask_graph(), name="approver", durability=QUIET)
    for _ in range(2):
        with spanpoint.run("S-2"):
            first = runner.invoke({"answer": ""}, thread_id="th")
    assert first.replayed
    replayed = signals.summaries()[-1].log_record.body
    assert replayed["replayed"] is True and replayed["counters"]["nodes"] == 0
    calls = signals.points(semconv.METRIC_GRAPH_CALLS)
    assert sum(p.value for p in calls) == 2
    assert {p.attributes[semconv.STATUS] for p in calls} == {"interrupted"}
    assert sum(p.value for p in signals.points(semconv.METRIC_REPLAYS)) == 1
    assert sum(p.value for p in signals.points(semconv.METRIC_INTERRUPTS)) == 2
    (duration,) = signals.points(semconv.METRIC_GRAPH_CALL_DURATION)
    assert duration.count == 2


def test_a_failed_call_is_summarized_as_failed(configured, signals: Signals) -> None:
    runner = GraphRunner(ask_graph(fail=True), name="approver", durability=QUIET)
    with pytest.raises(RuntimeError, match="model down"):
        runner.invoke({"answer": ""}, thread_id="th")
    (record,) = signals.summaries()
    assert record.log_record.body["status"] == "failed"
    assert record.log_record.body["error"] == "RuntimeError"
    assert record.log_record.severity_text == "ERROR"


class Exploding(LogRecordProcessor):
    def on_emit(self, log_record: Any) -> None:
        raise OSError("collector unreachable")

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_a_failing_log_pipeline_never_changes_a_result_unless_strict(
    configured, signals: Signals
) -> None:
    signals.logger_provider.add_log_record_processor(Exploding())
    runner = GraphRunner(ask_graph(), name="approver", durability=QUIET)
    with spanpoint.run("S-3"):
        result = runner.invoke({"answer": ""}, thread_id="th")
    assert result.status == "interrupted"
    assert configured.store.list_checkpoints("S-3")  # committed despite the log failure

    spanpoint.configure(strict=True)
    with pytest.raises(SpanpointError, match="run summary"):
        runner.invoke({"answer": ""}, thread_id="other")


def test_default_outputs_are_local_files_without_an_endpoint(tmp_path, monkeypatch) -> None:
    from spanpoint.telemetry.providers import default_logger_provider, default_meter_provider

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    logger_provider, where = default_logger_provider(tmp_path)
    assert where == f"file {tmp_path / 'logs.jsonl'}"
    meter_provider, where = default_meter_provider(tmp_path)
    assert where == f"file {tmp_path / 'metrics.jsonl'}"
    logger_provider.get_logger("t").emit(event_name="spanpoint.run_summary", body={"a": 1})
    logger_provider.shutdown()
    meter_provider.get_meter("t").create_counter("c").add(1)
    meter_provider.shutdown()
    assert '"body":{"a":1}' in (tmp_path / "logs.jsonl").read_text()
    assert '"name":"c"' in (tmp_path / "metrics.jsonl").read_text()

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    provider, where = default_logger_provider(tmp_path)
    assert where == "OTLP http://127.0.0.1:4317"
    provider.shutdown()


def test_calls_strategy_writes_one_summary_per_run_with_call_counters(
    configured, signals: Signals
) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from fakes import ConversationModel

    agent = create_agent(
        ConversationModel(final="done"), [], middleware=[spanpoint.CheckpointMiddleware()]
    )
    runner = GraphRunner(agent, name="agent", strategy="calls")
    for _ in range(2):
        with spanpoint.run("S-4"):
            runner.invoke({"messages": [HumanMessage("hi")]}, thread_id="t")
    first, second = (r.log_record.body for r in signals.summaries())
    assert first["strategy"] == second["strategy"] == "calls"
    assert first["counters"]["boundaries_replayed"] == 0
    assert first["counters"]["node.model"] == 1
    # The graph ran again (calls mode has no outer boundary) but its model call replayed.
    assert second["counters"]["boundaries_replayed"] == 1
    assert second["counters"]["node.model"] == 1


def test_calls_strategy_summary_can_be_switched_off_by_the_call_policy(
    configured, signals: Signals
) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from fakes import ConversationModel

    quiet = spanpoint.CheckpointMiddleware(spanpoint.CallCheckpointPolicy(summary=False))
    agent = create_agent(ConversationModel(final="done"), [], middleware=[quiet])
    with spanpoint.run("S-5"):
        GraphRunner(agent, name="agent", strategy="calls").invoke(
            {"messages": [HumanMessage("hi")]}, thread_id="t"
        )
    assert signals.summaries() == []
    assert configured.spans("invoke_agent agent")  # still traced


def test_every_call_duration_is_in_the_next_collection_batched_or_not(
    configured, signals: Signals
) -> None:
    """Durations are recorded in batches (at collection, or when a batch is full): none is
    lost or counted twice across collections."""
    runner = GraphRunner(ask_graph(), name="approver", durability=QUIET)
    for n in range(70):  # more than one full batch, then a partial one
        runner.invoke({"answer": ""}, thread_id=f"th-{n}")
    (duration,) = signals.points(semconv.METRIC_GRAPH_CALL_DURATION)
    assert duration.count == 70 and duration.sum > 0
    runner.invoke({"answer": ""}, thread_id="th-last")
    (duration,) = signals.points(semconv.METRIC_GRAPH_CALL_DURATION)
    assert duration.count == 71
    assert sum(p.value for p in signals.points(semconv.METRIC_GRAPH_CALLS)) == 71
