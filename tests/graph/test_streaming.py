"""Streams are events, never boundaries: real chunks as they come, bounded span events."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint import semconv
from spanpoint.capture import CapturePolicy
from spanpoint.events import MAX_EVENTS_PER_SPAN, StreamRecorder, add_bounded_event
from spanpoint.graph import DurabilityPolicy, GraphRunner

QUIET = DurabilityPolicy(warn_in_process=False)


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def pipeline(executed: list[str], *, stop_for_approval: bool = False) -> Any:
    def node(name: str) -> Any:
        def run(state: State) -> dict[str, Any]:
            executed.append(name)
            get_stream_writer()({"progress": name})
            if stop_for_approval and name == "b":
                interrupt("ok?")
            return {"log": [name]}

        return run

    g = StateGraph(State)
    for name in ("a", "b", "c"):
        g.add_node(name, node(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=InMemorySaver())


def test_stream_yields_the_real_chunks_and_records_each_as_an_event(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(pipeline(executed), name="pipe", durability=QUIET)
    direct = list(pipeline([]).stream({"log": []}, {"configurable": {"thread_id": "x"}}))
    chunks = list(runner.stream({"log": []}, thread_id="t"))
    assert chunks == direct == [{"a": {"log": ["a"]}}, {"b": {"log": ["b"]}}, {"c": {"log": ["c"]}}]
    (span,) = configured.spans("invoke_workflow pipe")
    events = [e for e in span.events if e.name == semconv.EVENT_STREAM_CHUNK]
    assert [e.attributes[semconv.LANGGRAPH_NODE] for e in events] == [("a",), ("b",), ("c",)]
    assert [e.attributes[semconv.STREAM_INDEX] for e in events] == [0, 1, 2]
    assert span.attributes[semconv.STREAM_CHUNKS] == 3
    assert span.attributes[semconv.STRATEGY] == "stream"
    assert span.attributes[semconv.STATUS] == "completed"
    assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in span.attributes


def test_a_stream_inside_a_run_commits_nothing_and_replays_nothing(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(pipeline(executed), name="pipe", durability=QUIET)
    for attempt in range(2):
        with spanpoint.run("ST-1"):
            chunks = list(runner.stream({"log": []}, thread_id=f"t{attempt}", stream_mode="custom"))
        assert chunks == [{"progress": "a"}, {"progress": "b"}, {"progress": "c"}]
    assert executed == ["a", "b", "c"] * 2  # executed both times: never replayed
    assert configured.store.list_checkpoints("ST-1") == []
    spans = configured.spans("invoke_workflow pipe")
    assert all(semconv.BOUNDARY_KIND not in s.attributes for s in spans)


def test_chunk_shapes_multi_mode_subgraphs_and_interrupts(configured) -> None:
    runner = GraphRunner(pipeline([], stop_for_approval=True), name="pipe", durability=QUIET)
    chunks = list(runner.stream({"log": []}, thread_id="t", stream_mode=["updates", "custom"]))
    assert ("custom", {"progress": "a"}) in chunks
    (span,) = configured.spans("invoke_workflow pipe")
    modes = [e.attributes.get(semconv.LANGGRAPH_STREAM_MODE) for e in span.events]
    assert {"updates", "custom"} <= set(modes)
    assert span.attributes[semconv.STATUS] == "interrupted"
    assert span.attributes[semconv.LANGGRAPH_INTERRUPT_COUNT] == 1
    assert any(e.name == semconv.EVENT_AGENT_PAUSED for e in span.events)


def test_astream_behaves_like_stream(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(pipeline(executed), name="pipe", durability=QUIET)

    async def collect() -> list[Any]:
        async with spanpoint.run("ST-2"):
            return [c async for c in runner.astream({"log": []}, thread_id="t")]

    chunks = asyncio.run(collect())
    assert chunks == [{"a": {"log": ["a"]}}, {"b": {"log": ["b"]}}, {"c": {"log": ["c"]}}]
    (span,) = configured.spans("invoke_workflow pipe")
    assert span.attributes[semconv.STREAM_CHUNKS] == 3
    assert configured.store.list_checkpoints("ST-2") == []


def test_a_consumer_that_stops_early_ends_the_span(configured) -> None:
    runner = GraphRunner(pipeline([]), name="pipe", durability=QUIET)
    stream = runner.stream({"log": []}, thread_id="t")
    assert next(stream) == {"a": {"log": ["a"]}}
    stream.close()
    (span,) = configured.spans("invoke_workflow pipe")
    assert span.attributes[semconv.STREAM_CLOSED_EARLY] is True


def test_a_failing_stream_is_an_error_span(configured) -> None:
    def broken(state: State) -> dict[str, Any]:
        raise ValueError("bad chunk")

    g = StateGraph(State)
    g.add_node("x", broken)
    g.add_edge(START, "x")
    runner = GraphRunner(g.compile(), name="broken")
    try:
        list(runner.stream({"log": []}, thread_id="t"))
    except ValueError as exc:
        assert str(exc) == "bad chunk"
    else:
        raise AssertionError("the stream's exception must propagate")
    (span,) = configured.spans("invoke_workflow broken")
    assert span.status.status_code.name == "ERROR"


def test_events_are_bounded_per_span_and_redacted() -> None:
    span = TracerProvider().get_tracer("t").start_span("s")
    policy = CapturePolicy(max_bytes=64, max_items=3)
    for i in range(MAX_EVENTS_PER_SPAN + 10):
        add_bounded_event(
            "e",
            {"n": i, "big": "x" * 500, "list": [1, 2, 3, 4, 5], "cfg": {"api_key": "k"}},
            span=span,
            policy=policy,
        )
    span.end()
    assert len(span.events) == MAX_EVENTS_PER_SPAN
    assert span.attributes[semconv.EVENTS_DROPPED] == 10
    first = span.events[0].attributes
    assert len(first["big"].encode()) <= 64
    assert first["list"] == (1, 2, 3)
    assert first["cfg"] == '{"api_key":"[REDACTED]"}'


def test_stream_content_is_captured_only_when_the_policy_opts_in() -> None:
    tracer = TracerProvider().get_tracer("t")
    for policy, expect in ((CapturePolicy(), False), (CapturePolicy(capture_state=True), True)):
        span = tracer.start_span("s")
        recorder = StreamRecorder(span, stream_mode="values", policy=policy)
        recorder.record({"log": ["secret plan"], "token": "abc"})
        span.end()
        attrs = span.events[0].attributes
        assert (semconv.STREAM_CONTENT in attrs) is expect
        if expect:
            assert "secret plan" in attrs[semconv.STREAM_CONTENT]
            assert "abc" not in attrs[semconv.STREAM_CONTENT]


def test_v2_stream_parts_are_understood() -> None:
    span = TracerProvider().get_tracer("t").start_span("s")
    recorder = StreamRecorder(span, stream_mode=["updates"])
    recorder.record({"type": "updates", "ns": ("child:1",), "data": {"n": {"x": 1}}})
    span.end()
    attrs = span.events[0].attributes
    assert attrs[semconv.LANGGRAPH_STREAM_MODE] == "updates"
    assert attrs[semconv.LANGGRAPH_CHECKPOINT_NS] == "child:1"
    assert attrs[semconv.LANGGRAPH_NODE] == ("n",)
