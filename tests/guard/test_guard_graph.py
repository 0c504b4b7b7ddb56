"""guard_graph on hand-built agent ⇄ tools graphs: sync, async, compiled or not."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import pytest
from guard_fakes import stuck_on_search
from guard_support import Tools, assert_history_valid, kinds, make_graph_builder, thread
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel

from fakes import ScriptedModel
from harness import Telemetry
from spanpoint import semconv
from spanpoint.errors import ConfigurationError
from spanpoint.guard import GuardConfig, compile_guarded_graph, guard_graph

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


def event_summary(otel: Telemetry) -> list[tuple[str, str]]:
    return [
        (name, attrs.get(semconv.GUARD_PATTERN) or attrs.get(semconv.GUARD_REASON))
        for name, attrs in otel.guard_events("test")
    ]


def test_plain_messages_state_builder_gets_the_guard_keys(otel: Telemetry, tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    graph = guard_graph(builder, GuardConfig(), meter_provider=otel.meter_provider).compile()
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = graph.invoke({"messages": [("user", "q")]})

    assert kinds(out["messages"]) == EXPECTED_TRIP
    assert (out["guard_terminated"], out["guard_reason"]) == (True, "tool_repeat")
    assert tools.count() == 3
    assert_history_valid(out["messages"])
    assert event_summary(otel) == EXPECTED_EVENTS
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, semconv.GUARD_REASON) == {
        "tool_repeat": 1
    }


async def test_async_agent_node_streamed_with_astream(otel: Telemetry, tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")], use_async=True)
    compiled = builder.compile(checkpointer=InMemorySaver())
    graph = guard_graph(compiled, GuardConfig(), meter_provider=otel.meter_provider)
    updates: list[str] = []
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        async for chunk in graph.astream(
            {"messages": [("user", "q")]}, thread("async"), stream_mode="updates"
        ):
            updates.extend(chunk)
    state = (await graph.aget_state(thread("async"))).values

    assert kinds(state["messages"]) == EXPECTED_TRIP
    assert (state["guard_terminated"], state["guard_reason"]) == (True, "tool_repeat")
    # The run opens in the input step: the guard adds no super-step of its own.
    assert updates == ["agent", "tools"] * 3 + ["agent"]
    assert event_summary(otel) == EXPECTED_EVENTS
    stop = otel.guard_events("test")[-1][1]
    assert stop[semconv.GUARD_STOP_KIND] == "detector" and stop[semconv.GUARD_RESUMABLE]
    assert stop[semconv.GUARD_SKIPPED_TOOL_CALLS] == 1
    # The check's view of the run is on the span too.
    assert otel.span("test").attributes[semconv.GUARD_STEP] == 4
    assert otel.span("test").attributes[semconv.GUARD_STATE] == "open"


def test_a_second_input_on_the_thread_is_a_new_run(tools: Tools) -> None:
    def answer_each(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
        return [{"name": "search", "args": {"query": f"t{turn}"}}] if turn % 2 == 0 else "ok"

    builder = make_graph_builder(answer_each, [tools.make("search")])
    graph = guard_graph(builder.compile(checkpointer=InMemorySaver()), GuardConfig())
    graph.invoke({"messages": [("user", "one")]}, thread("x"))
    out = graph.invoke({"messages": [("user", "two")]}, thread("x"))
    assert out["spanpoint_guard"]["run"] == 2
    assert out["spanpoint_guard"]["steps"] == 2  # counted for this run only


def test_continuing_without_input_is_the_same_run(tools: Tools) -> None:
    def search_then_answer(turn: int, messages: Sequence[BaseMessage]) -> Any:
        return [{"name": "search", "args": {"query": f"t{turn}"}}] if turn < 2 else "ok"

    builder = make_graph_builder(search_then_answer, [tools.make("search")])
    graph = guard_graph(builder, GuardConfig()).compile(
        checkpointer=InMemorySaver(), interrupt_before=["tools"]
    )
    paused = graph.invoke({"messages": [("user", "one")]}, thread("x"))
    assert (paused["spanpoint_guard"]["run"], paused["spanpoint_guard"]["steps"]) == (1, 1)
    # No input: the graph goes on from its checkpoint and the run keeps its counters.
    graph.invoke(None, thread("x"))
    out = graph.invoke(None, thread("x"))
    assert out["messages"][-1].text == "ok"
    assert (out["spanpoint_guard"]["run"], out["spanpoint_guard"]["steps"]) == (1, 3)
    assert out["spanpoint_guard"]["tool_calls"] == 2 and tools.count() == 2


def test_new_input_after_a_stop_is_a_fresh_run_with_cleared_flags(tools: Tools) -> None:
    def loop_then_answer(turn: int, messages: Sequence[BaseMessage]) -> Any:
        if messages[-1].text == "thanks, now just answer":
            return "ok"
        return stuck_on_search(turn, messages)

    builder = make_graph_builder(loop_then_answer, [tools.make("search")])
    graph = guard_graph(builder, GuardConfig()).compile(checkpointer=InMemorySaver())
    stopped = graph.invoke({"messages": [("user", "q")]}, thread("x"))
    assert (stopped["guard_terminated"], stopped["guard_reason"]) == (True, "tool_repeat")
    out = graph.invoke({"messages": [("user", "thanks, now just answer")]}, thread("x"))
    assert (out["guard_terminated"], out["guard_reason"]) == (False, None)
    assert out["spanpoint_guard"]["run"] == 2
    assert out["spanpoint_guard"]["steps"] == 1
    assert out["spanpoint_guard"]["status"] == "completed"


def test_nodes_and_edges_read_what_they_read_before(tools: Tools) -> None:
    seen: dict[str, list[list[str]]] = {"route": [], "start": [], "agent": []}
    search = tools.make("search")
    model = ScriptedModel(script=stuck_on_search).bind_tools([search])

    def agent(state: MessagesState) -> dict[str, Any]:
        seen["agent"].append(sorted(state))
        return {"messages": [model.invoke(state["messages"])]}

    def start_route(state: MessagesState) -> str:
        seen["start"].append(sorted(state))
        return "agent"

    def route(state: MessagesState) -> str:
        seen["route"].append(sorted(state))
        return tools_condition(state)

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_conditional_edges(START, start_route, ["agent"])
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    out = guard_graph(builder, GuardConfig()).compile().invoke({"messages": [("user", "q")]})

    assert out["guard_reason"] == "tool_repeat"
    assert seen["start"] == [["messages"]]
    assert {tuple(keys) for keys in seen["route"]} == {("messages",)}
    # The agent node's own code sees its own schema too; the guard reads its state around it.
    assert {tuple(keys) for keys in seen["agent"]} == {("messages", "spanpoint_guard")}


def test_the_agent_node_gets_what_langgraph_injects(tools: Tools) -> None:
    search = tools.make("search")
    model = ScriptedModel(script=stuck_on_search).bind_tools([search])
    got: list[tuple[bool, bool]] = []

    def agent(state: MessagesState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        got.append((config["configurable"]["thread_id"] == "x", runtime.context == {"k": 1}))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState, context_schema=dict)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = guard_graph(builder, GuardConfig()).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"messages": [("user", "q")]}, thread("x"), context={"k": 1})
    assert out["guard_reason"] == "tool_repeat"
    assert got and set(got) == {(True, True)}


async def test_a_create_agent_agent_guarded_at_its_model_node(
    otel: Telemetry, tools: Tools
) -> None:
    search = tools.make("search")
    agent = create_agent(
        ScriptedModel(script=stuck_on_search), [search], checkpointer=InMemorySaver()
    )
    meters = otel.meter_provider
    graph = guard_graph(agent, GuardConfig(), agent_node="model", meter_provider=meters)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = await graph.ainvoke({"messages": [("user", "q")]}, thread("agent"))

    assert kinds(out["messages"]) == EXPECTED_TRIP
    assert (out["guard_terminated"], out["guard_reason"]) == (True, "tool_repeat")
    assert tools.count() == 3
    assert_history_valid(out["messages"])
    assert event_summary(otel) == EXPECTED_EVENTS

    runner = compile_guarded_graph(
        agent, GuardConfig(), checkpointer=InMemorySaver(), agent_node="model"
    )
    runner.invoke({"messages": [("user", "q")]}, thread("resumed"))
    done = runner.resume(thread("resumed"), correction="The answer is in the first result.")
    assert done["messages"][-1].text == "The answer is 42."
    assert (done["guard_terminated"], done["guard_reason"]) == (False, None)
    assert tools.count() == 6
    with pytest.raises(ConfigurationError, match="a create_agent agent's is 'model'"):
        guard_graph(agent)


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
