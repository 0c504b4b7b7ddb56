"""What a trace viewer shows without links or a click: replays, runs, interrupts.

Phoenix, and the trace lists of Jaeger and Tempo, show a span's name and status, and drop
span links. So a replayed span names its original as attributes (equal to its link) and says
"replayed" in its name; a run's root is a GenAI workflow span named after the run.
"""

from __future__ import annotations

import asyncio
import json
import operator
from typing import Annotated, Any, TypedDict

import langchain.agents
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.capture import CapturePolicy
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]
REQUEST = {"messages": [{"role": "user", "content": "Ticket 7 please"}]}


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def agent() -> Any:
    return create_agent(
        ConversationModel(plan=PLAN),
        [lookup_ticket],
        middleware=[spanpoint.CheckpointMiddleware()],
        name="support",
    )


def hex_ids(span: Any) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def check_replays_name_their_originals(telemetry: Telemetry) -> None:
    spans = telemetry.spans()
    executed = {hex_ids(s): s for s in spans if s.attributes.get(semconv.REPLAYED) is False}
    replayed = [s for s in spans if s.attributes.get(semconv.REPLAYED) is True]
    assert len(replayed) >= 2  # a graph call and a step, or model and tool calls
    for span in replayed:
        attrs = span.attributes
        [link] = span.links
        ids = (attrs[semconv.REPLAY_ORIGINAL_TRACE_ID], attrs[semconv.REPLAY_ORIGINAL_SPAN_ID])
        assert ids == hex_ids(link)  # the attributes say what the link says
        original = executed[ids]  # and lead to the span that executed
        assert span.name == original.name + " (replayed)"
        assert attrs[semconv.BOUNDARY_PATH] == original.attributes[semconv.BOUNDARY_PATH]
        op = semconv.GEN_AI_OPERATION_NAME  # unchanged: GenAI-aware viewers classify it
        assert attrs.get(op) == original.attributes.get(op)
    # An executed span has neither.
    for span in executed.values():
        assert semconv.REPLAY_ORIGINAL_SPAN_ID not in span.attributes
        assert not span.name.endswith("(replayed)")


def test_a_replayed_call_names_its_original(configured: Telemetry) -> None:
    for _ in range(2):
        with spanpoint.run("v-1"):
            agent().invoke(REQUEST)
    check_replays_name_their_originals(configured)


def test_a_replayed_call_names_its_original_async(configured: Telemetry) -> None:
    async def go() -> None:
        for _ in range(2):
            async with spanpoint.run("v-2"):
                await agent().ainvoke(REQUEST)

    asyncio.run(go())
    check_replays_name_their_originals(configured)


def test_a_replayed_graph_call_and_step_name_their_originals(configured: Telemetry) -> None:
    @spanpoint.step
    def load(ticket: int) -> dict[str, Any]:
        return {"ticket": ticket}

    runner = spanpoint.GraphRunner(
        create_agent(ConversationModel(plan=PLAN), [lookup_ticket]), name="support"
    )
    for _ in range(2):
        with spanpoint.run("v-3"):
            load(7)
            runner.invoke(REQUEST, thread_id="v-3")
    check_replays_name_their_originals(configured)


# --- interrupts: the pause on the span, the resume naming what it answers -----------------


class ApprovalState(TypedDict):
    log: Annotated[list[str], operator.add]


def approval_graph(saver: Any) -> Any:
    def approve(state: ApprovalState) -> dict[str, Any]:
        answer = interrupt({"question": "ship it?"})
        return {"log": [f"approved={answer}"]}

    g = StateGraph(ApprovalState)
    g.add_node("approve", approve)
    g.add_edge(START, "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=saver)


def assert_paused(span: Any, interrupt_id: str) -> None:
    attrs = span.attributes
    assert attrs[semconv.GEN_AI_AGENT_PAUSE_ID] == interrupt_id
    assert attrs[semconv.GEN_AI_AGENT_PAUSE_REASON] == "human_input"
    assert attrs[semconv.STATUS] == "interrupted"
    (paused,) = [e for e in span.events if e.name == semconv.EVENT_AGENT_PAUSED]
    assert paused.attributes[semconv.GEN_AI_AGENT_PAUSE_ID] == interrupt_id


def resumed_ids(span: Any) -> tuple[str, ...]:
    (resumed,) = [e for e in span.events if e.name == semconv.EVENT_AGENT_RESUMED]
    return tuple(resumed.attributes[semconv.LANGGRAPH_INTERRUPT_IDS])


def test_an_interrupted_graph_call_says_so_and_its_resume_names_the_interrupt(
    configured: Telemetry,
) -> None:
    runner = spanpoint.GraphRunner(approval_graph(InMemorySaver()), name="review")
    for _ in range(2):  # executed, then the whole run replayed
        with spanpoint.run("v-int"):
            first = runner.invoke({"log": []}, thread_id="t-int")
            runner.invoke(first.resume_request("yes"))  # Command(resume="yes")
    (info,) = first.interrupts
    spans = configured.spans("invoke_workflow review")
    assert [s.attributes[semconv.REPLAYED] for s in spans] == [False, False, True, True]
    for paused, resumed in (spans[0:2], spans[2:4]):
        assert_paused(paused, info.id)
        assert semconv.GRAPH_INTERRUPT_VALUES not in paused.attributes  # content is opt-in
        assert resumed_ids(resumed) == (info.id,)
        (event,) = [e for e in resumed.events if e.name == semconv.EVENT_AGENT_RESUMED]
        assert event.attributes[semconv.GEN_AI_AGENT_RESUMED_FROM_TYPE] == "pause"
        assert event.attributes[semconv.GEN_AI_AGENT_RESUMED_FROM_ID] == info.id
        assert semconv.GEN_AI_AGENT_PAUSE_ID not in resumed.attributes


def test_a_resume_in_a_fresh_process_reads_the_pending_interrupt_from_the_thread(
    configured: Telemetry, tmp_path: Any
) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "lg.db"
    with spanpoint.run("v-fresh-1"):
        first = spanpoint.GraphRunner(
            approval_graph(SqliteSaver(sqlite3.connect(path, check_same_thread=False))),
            name="review",
        ).invoke({"log": []}, thread_id="t-fresh")
    # Another runner (as after a restart) answers with a plain value.
    runner = spanpoint.GraphRunner(
        approval_graph(SqliteSaver(sqlite3.connect(path, check_same_thread=False))),
        name="review",
    )
    with spanpoint.run("v-fresh-2"):
        runner.invoke(spanpoint.RunRequest.resume("yes", thread_id="t-fresh"))
    (info,) = first.interrupts
    assert resumed_ids(configured.spans("invoke_workflow review")[-1]) == (info.id,)


def test_the_interrupt_value_is_on_the_span_when_capture_is_on(configured: Telemetry) -> None:
    spanpoint.configure(
        tracer_provider=configured.provider, capture=CapturePolicy(content="SPAN_AND_EVENT")
    )
    runner = spanpoint.GraphRunner(
        approval_graph(InMemorySaver()),
        name="review",
        capture=CapturePolicy(content="SPAN_AND_EVENT"),
    )
    with spanpoint.run("v-int-value"):
        runner.invoke({"log": []}, thread_id="t-value")
    (span,) = configured.spans("invoke_workflow review")
    values = json.loads(span.attributes[semconv.GRAPH_INTERRUPT_VALUES])
    assert values == [{"question": "ship it?"}]


def test_zero_code_interrupted_graph_and_tool_spans_say_so(configured: Telemetry) -> None:
    @tool
    def approve_refund(amount: int) -> str:
        """Refund after a supervisor approves."""
        return f"refunded {amount}" if interrupt({"refund": amount}) else "declined"

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    try:
        graph = langchain.agents.create_agent(
            ConversationModel(plan=[[{"name": "approve_refund", "args": {"amount": 5}}]]),
            [approve_refund],
            checkpointer=InMemorySaver(),
            name="refunds",
        )
        config = {"configurable": {"thread_id": "t-zero"}}
        out = graph.invoke(REQUEST, config)
        (pending,) = out["__interrupt__"]
        graph.invoke(Command(resume=True), config)
    finally:
        instrumentor.uninstrument()
    agent_spans = configured.spans("invoke_agent refunds")
    assert_paused(agent_spans[0], pending.id)
    (tool_span, _) = configured.spans("execute_tool approve_refund")  # paused, then resumed
    assert tool_span.attributes[semconv.GEN_AI_AGENT_PAUSE_ID] == pending.id


def test_a_middleware_tool_boundary_paused_by_an_interrupt_says_so(
    configured: Telemetry,
) -> None:
    @tool
    def approve_refund(amount: int) -> str:
        """Refund after a supervisor approves."""
        return f"refunded {amount}" if interrupt({"refund": amount}) else "declined"

    graph = create_agent(
        ConversationModel(plan=[[{"name": "approve_refund", "args": {"amount": 5}}]]),
        [approve_refund],
        checkpointer=InMemorySaver(),
        middleware=[spanpoint.CheckpointMiddleware()],
        name="refunds",
    )
    with spanpoint.run("v-mw-int"):
        result = spanpoint.GraphRunner(graph, name="refunds", strategy="calls").invoke(
            REQUEST, thread_id="t-mw"
        )
    (info,) = result.interrupts
    (tool_span,) = configured.spans("execute_tool approve_refund")
    assert_paused(tool_span, info.id)
