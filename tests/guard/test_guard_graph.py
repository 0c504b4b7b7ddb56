"""guard_graph on hand-built agent ⇄ tools graphs: sync, async, compiled or not."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import pytest
from guard_fakes import ScriptedModel, stuck_on_search
from guard_support import Otel, Tools, assert_history_valid, kinds, make_graph_builder, thread
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from pydantic import BaseModel

from spanpoint import semconv
from spanpoint.errors import ConfigurationError
from spanpoint.guard import GuardConfig, guard_graph

EXPECTED_TRIP = [
    "h",
    "ai(search)", "t",
    "ai(search)", "t",
    "ai(search)", "t",
    "reflection",
    "ai(search)", "skipped",
    "stop",
]  # fmt: skip

EXPECTED_EVENTS = [
    (semconv.EVENT_GUARD_DETECTION, "tool_repeat"),
    (semconv.EVENT_GUARD_REFLECTION, "tool_repeat"),
    (semconv.EVENT_GUARD_DETECTION, "tool_repeat"),
    (semconv.EVENT_GUARD_TERMINATED, "tool_repeat"),
]


def event_summary(otel: Otel) -> list[tuple[str, str]]:
    return [
        (name, attrs.get(semconv.GUARD_PATTERN) or attrs.get(semconv.GUARD_REASON))
        for name, attrs in otel.events()
    ]


def test_plain_messages_state_builder_gets_the_guard_keys(otel: Otel, tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    graph = guard_graph(builder, GuardConfig(), meter_provider=otel.meter_provider).compile()
    with otel.tracer_provider.get_tracer("t").start_as_current_span("test"):
        out = graph.invoke({"messages": [("user", "q")]})

    assert kinds(out["messages"]) == EXPECTED_TRIP
    assert (out["guard_terminated"], out["guard_reason"]) == (True, "tool_repeat")
    assert tools.count() == 3
    assert_history_valid(out["messages"])
    assert event_summary(otel) == EXPECTED_EVENTS
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, semconv.GUARD_REASON) == {
        "tool_repeat": 1
    }


async def test_async_agent_node_streamed_with_astream(otel: Otel, tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")], use_async=True)
    compiled = builder.compile(checkpointer=InMemorySaver())
    graph = guard_graph(compiled, GuardConfig(), meter_provider=otel.meter_provider)
    updates: list[str] = []
    with otel.tracer_provider.get_tracer("t").start_as_current_span("test"):
        async for chunk in graph.astream(
            {"messages": [("user", "q")]}, thread("async"), stream_mode="updates"
        ):
            updates.extend(chunk)
    state = (await graph.aget_state(thread("async"))).values

    assert kinds(state["messages"]) == EXPECTED_TRIP
    assert (state["guard_terminated"], state["guard_reason"]) == (True, "tool_repeat")
    assert updates == ["spanpoint_guard.start"] + ["agent", "tools"] * 3 + ["agent"]
    assert event_summary(otel) == EXPECTED_EVENTS
    stop = otel.events()[-1][1]
    assert stop[semconv.GUARD_STOP_KIND] == "detector" and stop[semconv.GUARD_RESUMABLE]
    assert stop[semconv.GUARD_SKIPPED_TOOL_CALLS] == 1
    # The check's view of the run is on the span too.
    assert otel.span().attributes[semconv.GUARD_STEP] == 4
    assert otel.span().attributes[semconv.GUARD_STATE] == "open"


def test_a_second_input_on_the_thread_is_a_new_run(tools: Tools) -> None:
    def answer_each(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
        return [{"name": "search", "args": {"query": f"t{turn}"}}] if turn % 2 == 0 else "ok"

    builder = make_graph_builder(answer_each, [tools.make("search")])
    graph = guard_graph(builder.compile(checkpointer=InMemorySaver()), GuardConfig())
    graph.invoke({"messages": [("user", "one")]}, thread("x"))
    out = graph.invoke({"messages": [("user", "two")]}, thread("x"))
    assert out["spanpoint_guard"]["run"] == 2
    assert out["spanpoint_guard"]["steps"] == 2  # counted for this run only


def test_agent_node_returning_a_command_is_routed_to_the_end_on_stop(tools: Tools) -> None:
    search = tools.make("search")
    model = ScriptedModel(script=stuck_on_search).bind_tools([search])

    def agent(state: MessagesState) -> Command[Literal["tools", "__end__"]]:
        reply = model.invoke(state["messages"])
        return Command(update={"messages": [reply]}, goto="tools" if reply.tool_calls else END)

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "agent")
    builder.add_edge("tools", "agent")
    out = guard_graph(builder, GuardConfig()).compile().invoke({"messages": [("user", "q")]})
    assert kinds(out["messages"]) == EXPECTED_TRIP
    assert tools.count() == 3


def test_bad_graphs_are_refused_with_the_fix(tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    with pytest.raises(ConfigurationError, match="agent_node='model' is not a node"):
        guard_graph(builder, agent_node="model")
    with pytest.raises(ConfigurationError, match="already guarded"):
        guard_graph(guard_graph(builder))

    class PydanticState(BaseModel):
        messages: list[AIMessage]

    other = StateGraph(PydanticState)
    other.add_node("agent", lambda s: {})
    other.add_node("tools", lambda s: {})
    other.add_edge(START, "agent")
    with pytest.raises(ConfigurationError, match="TypedDict state"):
        guard_graph(other)
    with pytest.raises(ConfigurationError, match="needs a StateGraph"):
        guard_graph(object())  # type: ignore[arg-type]


def test_reducer_channels_are_not_doubled(tools: Tools) -> None:
    class CountingState(MessagesState):
        visits: Annotated[int, operator.add]

    search = tools.make("search")
    model = ScriptedModel(script=stuck_on_search).bind_tools([search])

    def agent(state: CountingState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])], "visits": 1}

    builder = StateGraph(CountingState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    out = guard_graph(builder, GuardConfig()).compile().invoke({"messages": [("user", "q")]})
    assert out["visits"] == 4  # one per agent step, never re-added by the guard
    assert kinds(out["messages"]) == EXPECTED_TRIP
