"""Graph-call spans (``invoke_agent``, ``invoke_workflow``) follow the GenAI conventions, from
``GraphRunner`` and from the zero-code instrumentor alike — and so do the ``chat`` and
``execute_tool`` spans the instrumentor makes for models and tools in hand-built graphs."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry.sdk.trace import ReadableSpan

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.graph import DurabilityPolicy, GraphRunner
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry

from .genai import missing_recommended, violations

QUIET = DurabilityPolicy(warn_in_process=False)
REQUEST = {"messages": [("user", "Ticket 7 please")]}


class Counter(TypedDict):
    n: Annotated[int, operator.add]


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def model() -> ConversationModel:
    return ConversationModel(plan=[[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]])


def workflow() -> Any:
    inner = StateGraph(Counter)
    inner.add_node("inc", lambda state: {"n": 1})
    inner.add_edge(START, "inc")
    outer = StateGraph(Counter)
    outer.add_node("inner", inner.compile(name="inner"))
    outer.add_edge(START, "inner")
    return outer.compile(name="counting", checkpointer=InMemorySaver())


def hand_built() -> Any:
    chat = model()

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [chat.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([lookup_ticket]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(name="hand_built")


@pytest.fixture
def instrumented(configured: Telemetry) -> Iterator[Telemetry]:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    yield configured
    instrumentor.uninstrument()


def genai(telemetry: Telemetry) -> list[ReadableSpan]:
    return [s for s in telemetry.spans() if semconv.GEN_AI_OPERATION_NAME in (s.attributes or {})]


def assert_conform(spans: list[ReadableSpan], operations: set[str]) -> None:
    assert {s.attributes[semconv.GEN_AI_OPERATION_NAME] for s in spans} == operations
    problems = [p for s in spans for p in violations(s)]
    assert problems == []


def test_graph_runner_spans_conform(configured: Telemetry) -> None:
    agent = create_agent(
        model(),
        [lookup_ticket],
        checkpointer=InMemorySaver(),
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    GraphRunner(agent, name="support", durability=QUIET).invoke(REQUEST, thread_id="t1")
    GraphRunner(workflow(), name="counting", durability=QUIET).invoke({"n": 0}, thread_id="t2")
    spans = genai(configured)
    assert_conform(spans, {"invoke_agent", "invoke_workflow", "chat", "execute_tool"})
    [agent_span] = [s for s in spans if s.name == "invoke_agent support"]
    assert missing_recommended(agent_span) == []  # name, thread, token usage


def test_zero_code_spans_conform(instrumented: Telemetry) -> None:
    agent = create_agent(model(), [lookup_ticket], name="support", checkpointer=InMemorySaver())
    agent.invoke(REQUEST, {"configurable": {"thread_id": "t1"}})
    graph = workflow()
    graph.invoke({"n": 0}, {"configurable": {"thread_id": "t2"}})
    list(graph.stream({"n": 0}, {"configurable": {"thread_id": "t3"}}))
    asyncio.run(hand_built().ainvoke(REQUEST))
    with spanpoint.run("ticket-7"):
        hand_built().invoke(REQUEST)
    spans = genai(instrumented)
    assert_conform(spans, {"invoke_agent", "invoke_workflow", "chat", "execute_tool"})
    [agent_span] = [s for s in spans if s.name == "invoke_agent support"]
    assert missing_recommended(agent_span) == []
    direct_chats = [
        s
        for s in spans
        if s.name.startswith("chat ") and s.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]
    ]
    assert direct_chats and all(missing_recommended(s) == [] for s in direct_chats)
