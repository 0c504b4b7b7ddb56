"""One rule for LangGraph's control flow on every span path (spanpoint.spans.fail).

A ``GraphInterrupt`` is a pause: the ``gen_ai.agent.paused`` event, no ERROR. Any other
``GraphBubbleUp`` — a ``ParentCommand`` from ``Command(graph=PARENT)``, as swarm and supervisor
handoffs send — is neither an error nor a pause: no ERROR, no exception, no paused event. The
paths: a boundary, a span-only call (``replay=False``), the zero-code patches, and
``GraphRunner``'s traced-only calls (``strategy="calls"``) and streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt, ParentCommand
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Interrupt, interrupt
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import spanpoint
from spanpoint import semconv
from spanpoint.boundary import BoundarySpec, span_call
from spanpoint.graph import DurabilityPolicy, GraphRunner
from spanpoint.instrumentation import SpanpointInstrumentor

QUIET = DurabilityPolicy(warn_in_process=False)


class Counter(TypedDict):
    n: int


def handed_off(span: ReadableSpan) -> None:
    """Neither an error nor a pause."""
    assert span.status.status_code is StatusCode.UNSET, span.name
    names = [e.name for e in span.events]
    assert semconv.EVENT_AGENT_PAUSED not in names and "exception" not in names, names
    attrs = span.attributes or {}
    assert semconv.ERROR_TYPE not in attrs and semconv.GEN_AI_AGENT_PAUSE_ID not in attrs
    assert attrs.get(semconv.STATUS) not in ("failed", "interrupted")


def paused(span: ReadableSpan, interrupt_id: str | None = None) -> None:
    """A pause: the paused event, no ERROR."""
    assert span.status.status_code is not StatusCode.ERROR, span.name
    assert semconv.EVENT_AGENT_PAUSED in [e.name for e in span.events]
    assert span.attributes[semconv.STATUS] == "interrupted"
    if interrupt_id is not None:
        assert span.attributes[semconv.GEN_AI_AGENT_PAUSE_ID] == interrupt_id


def parent_command() -> ParentCommand:
    return ParentCommand(Command(graph=Command.PARENT, goto="after"))


def graph_interrupt() -> GraphInterrupt:
    return GraphInterrupt([Interrupt(value={"question": "ship it?"}, id="i-1")])


# --- a boundary and a span-only call -------------------------------------------------------


@pytest.mark.parametrize("replay", [True, False], ids=["boundary", "span_only"])
def test_a_parent_command_is_neither_an_error_nor_a_pause(configured, replay: bool) -> None:
    @spanpoint.step(name="hand_off", replay=replay)
    def hand_off() -> None:
        raise parent_command()

    with pytest.raises(ParentCommand), spanpoint.run("CF-1"):
        hand_off()
    (span,) = configured.spans("step hand_off")
    handed_off(span)


@pytest.mark.parametrize("replay", [True, False], ids=["boundary", "span_only"])
def test_a_graph_interrupt_is_a_pause(configured, replay: bool) -> None:
    @spanpoint.step(name="ask", replay=replay)
    def ask() -> None:
        raise graph_interrupt()

    with pytest.raises(GraphInterrupt), spanpoint.run("CF-2"):
        ask()
    (span,) = configured.spans("step ask")
    paused(span, "i-1")


def test_a_real_error_is_an_error_on_the_span_only_path(configured) -> None:
    @spanpoint.step(name="boom", replay=False)
    def boom() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError), spanpoint.run("CF-3"):
        boom()
    (span,) = configured.spans("step boom")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[semconv.ERROR_TYPE] == "RuntimeError"
    assert span.attributes[semconv.STATUS] == "failed"


@pytest.mark.parametrize("raised", ["handoff", "interrupt"])
def test_span_call_without_replay_follows_the_same_rule(configured, raised: str) -> None:
    """``boundary.span_call`` with ``replay=False`` (the patches' plain-span path)."""
    spec = BoundarySpec(kind=semconv.KIND_STEP, name="plain", span_name="plain", replay=False)

    def body() -> None:
        raise parent_command() if raised == "handoff" else graph_interrupt()

    with pytest.raises(ParentCommand if raised == "handoff" else GraphInterrupt):
        span_call(spec, body)
    (span,) = configured.spans("plain")
    handed_off(span) if raised == "handoff" else paused(span, "i-1")


# --- graphs: a child that hands off to its parent, a child that asks -----------------------


def child_graph(kind: str) -> Any:
    def hand_off(state: Counter) -> Command:
        return Command(graph=Command.PARENT, goto="after", update={"n": 10})

    def ask(state: Counter) -> dict[str, int]:
        return {"n": interrupt("ship it?")}

    child = StateGraph(Counter)
    child.add_node("work", hand_off if kind == "handoff" else ask)
    child.add_edge(START, "work")
    return child.compile(name="child")


def parent_graph(node: Any) -> Any:
    parent = StateGraph(Counter)
    parent.add_node("child", node, destinations=("after",))
    parent.add_node("after", lambda state: {"n": state["n"] + 1})
    parent.add_edge(START, "child")
    return parent.compile(name="parent", checkpointer=InMemorySaver())


@pytest.fixture
def instrumented(configured) -> Iterator[Any]:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    yield configured
    instrumentor.uninstrument()


def test_zero_code_a_nested_graph_that_hands_off_is_neither_an_error_nor_a_pause(
    instrumented,
) -> None:
    graph = parent_graph(child_graph("handoff"))
    assert graph.invoke({"n": 0}, {"configurable": {"thread_id": "t-zc"}}) == {"n": 11}
    [nested] = [s for s in instrumented.spans() if s.name == "invoke_workflow child"]
    handed_off(nested)


@pytest.mark.parametrize("how", ["calls", "stream"])
def test_graph_runner_a_graph_that_hands_off_is_neither_an_error_nor_a_pause(
    configured, how: str
) -> None:
    """The ``ParentCommand`` leaves the runner's call (for the node that called it, as in a
    swarm or supervisor handoff); the runner's span ends as neither an error nor a pause."""
    strategy = "calls" if how == "calls" else "graph_call"
    runner = GraphRunner(child_graph("handoff"), name="child", strategy=strategy, durability=QUIET)
    with pytest.raises(ParentCommand):
        if how == "stream":
            for _ in runner.stream({"n": 0}, thread_id="t-stream"):
                pass
        else:
            runner.invoke({"n": 0}, thread_id="t-calls")
    (span,) = configured.graph_spans("invoke_workflow child")
    handed_off(span)
