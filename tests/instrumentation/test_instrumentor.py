"""SpanpointInstrumentor: what each patched call records, boundaries in a run, uninstrument."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.pregel import Pregel
from langgraph.types import interrupt
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.instrumentation import SpanpointInstrumentor, strategy_from_env
from tests.conftest import Telemetry


class Counter(TypedDict):
    n: Annotated[int, operator.add]


def linear_graph(name: str = "linear", nodes: int = 3, effects: list[str] | None = None) -> Any:
    """``nodes`` nodes in a row, each adding 1 (and appending its name to ``effects``)."""
    builder = StateGraph(Counter)
    previous = START
    for i in range(nodes):

        def node(state: Counter, _i: int = i) -> dict[str, int]:
            if effects is not None:
                effects.append(f"n{_i}")
            return {"n": 1}

        builder.add_node(f"n{i}", node)
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    return builder.compile(name=name)


@tool
def lookup(ticket: str) -> str:
    """Look up a ticket."""
    return f"ticket {ticket}: open"


def plan_model() -> ConversationModel:
    return ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": "42"}}]])


@pytest.fixture
def instrumented(configured: Telemetry) -> Iterator[Telemetry]:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    yield configured
    instrumentor.uninstrument()


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    by_id = {s.context.span_id: s for s in spans}
    return by_id.get(span.parent.span_id) if span.parent else None


def test_invoke_is_one_workflow_span(instrumented: Telemetry) -> None:
    assert linear_graph().invoke({"n": 0}) == {"n": 3}
    [span] = instrumented.spans()
    assert span.name == "invoke_workflow linear"
    assert span.parent is None
    assert span.status.status_code is StatusCode.OK
    attrs = span.attributes
    assert attrs[semconv.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert attrs[semconv.GEN_AI_WORKFLOW_NAME] == "linear"
    assert attrs[semconv.BOUNDARY_KIND] == semconv.KIND_GRAPH_CALL
    assert semconv.CHECKPOINT_KEY not in attrs  # outside a run: a span, not a boundary


def test_thread_id_is_the_conversation_id(instrumented: Telemetry) -> None:
    graph = linear_graph()
    graph.checkpointer = InMemorySaver()
    graph.invoke({"n": 0}, {"configurable": {"thread_id": "t-7"}})
    [span] = instrumented.spans()
    assert span.attributes[semconv.GEN_AI_CONVERSATION_ID] == "t-7"


def test_calls_of_one_graph_keep_their_own_attributes(instrumented: Telemetry) -> None:
    # A call without config shares the graph's cached attributes: a call with a thread id
    # before it must not leave that thread id behind for the next one.
    graph = linear_graph()
    graph.invoke({"n": 0}, {"configurable": {"thread_id": "t-1"}})
    graph.invoke({"n": 0})
    graph.invoke({"n": 0}, {"configurable": {"thread_id": "t-2"}})
    spans = instrumented.spans()
    ids = [s.attributes.get(semconv.GEN_AI_CONVERSATION_ID) for s in spans]
    assert ids == ["t-1", None, "t-2"]
    assert [s.attributes[semconv.GEN_AI_WORKFLOW_NAME] for s in spans] == ["linear"] * 3


def test_graph_renamed_or_given_a_checkpointer_is_described_anew(
    instrumented: Telemetry,
) -> None:
    graph = linear_graph()
    graph.invoke({"n": 0})
    graph.name = "renamed"
    graph.invoke({"n": 0})
    graph.checkpointer = InMemorySaver()
    graph.invoke({"n": 0}, {"configurable": {"thread_id": "t-1"}})
    first, renamed, saved = instrumented.spans()
    assert first.name == "invoke_workflow linear"
    assert renamed.name == "invoke_workflow renamed"
    assert renamed.attributes[semconv.GEN_AI_WORKFLOW_NAME] == "renamed"
    assert renamed.attributes[semconv.BOUNDARY_NAME] == "renamed"
    assert semconv.LANGGRAPH_CHECKPOINTER not in renamed.attributes
    assert saved.attributes[semconv.LANGGRAPH_CHECKPOINTER] == "InMemorySaver"


def test_reconfiguring_sends_the_next_call_to_the_new_provider(
    instrumented: Telemetry,
) -> None:
    from tests.conftest import make_telemetry

    graph = linear_graph()
    graph.invoke({"n": 0})
    other = make_telemetry(instrumented.store)
    graph.invoke({"n": 0})
    assert len(instrumented.spans()) == 1
    assert [s.name for s in other.spans()] == ["invoke_workflow linear"]


def test_ainvoke_stream_astream_each_one_span(instrumented: Telemetry) -> None:
    graph = linear_graph()
    assert asyncio.run(graph.ainvoke({"n": 0})) == {"n": 3}
    chunks = list(graph.stream({"n": 0}, stream_mode="updates"))
    assert len(chunks) == 3

    async def consume() -> list[Any]:
        return [c async for c in graph.astream({"n": 0}, stream_mode="values")]

    assert len(asyncio.run(consume())) == 4
    spans = instrumented.spans()
    assert [s.name for s in spans] == ["invoke_workflow linear"] * 3
    stream_span = spans[1]
    assert stream_span.attributes[semconv.STRATEGY] == "stream"
    assert stream_span.attributes[semconv.LANGGRAPH_STREAM_MODE] == ("updates",)
    events = [e for e in stream_span.events if e.name == semconv.EVENT_STREAM_CHUNK]
    assert len(events) == 3
    assert all(s.parent is None for s in spans)


def test_stream_closed_early_ends_its_span(instrumented: Telemetry) -> None:
    chunks = linear_graph().stream({"n": 0}, stream_mode="updates")
    first = next(chunks)
    assert first == {"n0": {"n": 1}}
    chunks.close()
    [span] = instrumented.spans()
    assert span.status.status_code is StatusCode.OK
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid


def test_failure_is_an_error_span_and_the_exception_is_unchanged(instrumented: Telemetry) -> None:
    class Boom(RuntimeError):
        pass

    def fail(state: Counter) -> dict[str, int]:
        raise Boom("node failed")

    builder = StateGraph(Counter)
    builder.add_node("fail", fail)
    builder.add_edge(START, "fail")
    with pytest.raises(Boom, match="node failed"):
        builder.compile(name="failing").invoke({"n": 0})
    [span] = instrumented.spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[semconv.ERROR_TYPE].endswith("Boom")


def test_subgraphs_nest_under_their_parent_with_their_namespace(instrumented: Telemetry) -> None:
    child = linear_graph("child", nodes=1)

    def call_child(state: Counter) -> dict[str, int]:
        return {"n": child.invoke({"n": 0})["n"]}

    builder = StateGraph(Counter)
    builder.add_node("as_node", child)
    builder.add_node("caller", call_child)
    builder.add_edge(START, "as_node")
    builder.add_edge("as_node", "caller")
    assert builder.compile(name="parent").invoke({"n": 0}) == {"n": 2}
    spans = instrumented.spans()
    [root] = [s for s in spans if s.name == "invoke_workflow parent"]
    children = [s for s in spans if s.name == "invoke_workflow child"]
    assert len(children) == 2
    assert all(parent_of(c, spans) is root for c in children)
    namespaces = sorted(c.attributes[semconv.LANGGRAPH_CHECKPOINT_NS] for c in children)
    assert namespaces[0].startswith("as_node:") and namespaces[1].startswith("caller:")


def test_interrupt_is_a_paused_event_not_an_error(instrumented: Telemetry) -> None:
    def ask(state: Counter) -> dict[str, int]:
        answer = interrupt("approve?")
        return {"n": int(answer)}

    inner = StateGraph(Counter)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner_graph = inner.compile(name="approval")
    outer = StateGraph(Counter)
    outer.add_node("approval", inner_graph)
    outer.add_edge(START, "approval")
    graph = outer.compile(name="flow", checkpointer=InMemorySaver())
    out = graph.invoke({"n": 0}, {"configurable": {"thread_id": "t1"}})
    assert "__interrupt__" in out
    spans = instrumented.spans()
    assert all(s.status.status_code is not StatusCode.ERROR for s in spans)
    [root] = [s for s in spans if s.name == "invoke_workflow flow"]
    assert root.attributes[semconv.LANGGRAPH_INTERRUPT_COUNT] == 1
    assert any(e.name == semconv.EVENT_AGENT_PAUSED for e in root.events)
    [nested] = [s for s in spans if s.name == "invoke_workflow approval"]
    assert any(e.name == semconv.EVENT_AGENT_PAUSED for e in nested.events)


def test_command_to_the_parent_graph_is_control_flow_not_an_error(
    instrumented: Telemetry,
) -> None:
    from langgraph.types import Command

    def hand_off(state: Counter) -> Command:
        return Command(graph=Command.PARENT, goto="after", update={"n": 10})

    child = StateGraph(Counter)
    child.add_node("hand_off", hand_off)
    child.add_edge(START, "hand_off")
    parent = StateGraph(Counter)
    parent.add_node("child", child.compile(name="child"), destinations=("after",))
    parent.add_node("after", lambda state: {"n": 1})
    parent.add_edge(START, "child")
    assert parent.compile(name="parent").invoke({"n": 0}) == {"n": 11}
    spans = instrumented.spans()
    [nested] = [s for s in spans if s.name == "invoke_workflow child"]
    assert nested.status.status_code is not StatusCode.ERROR
    # A handoff is neither an error nor a pause (spans.fail): no paused event.
    assert not any(e.name == semconv.EVENT_AGENT_PAUSED for e in nested.events)
    assert all(s.status.status_code is not StatusCode.ERROR for s in spans)


# --- inside a durable run --------------------------------------------------------------------


def test_outermost_graph_call_in_a_run_is_a_boundary_and_replays(instrumented: Telemetry) -> None:
    effects: list[str] = []
    graph = linear_graph(effects=effects)
    with spanpoint.run("ticket-1"):
        assert graph.invoke({"n": 0}) == {"n": 3}
    assert effects == ["n0", "n1", "n2"]
    with spanpoint.run("ticket-1"):
        assert graph.invoke({"n": 0}) == {"n": 3}
    assert effects == ["n0", "n1", "n2"]  # replayed: no node ran again
    first, second = instrumented.graph_spans("invoke_workflow")
    assert first.attributes[semconv.REPLAYED] is False
    assert second.attributes[semconv.REPLAYED] is True
    assert second.links and second.links[0].context.span_id == first.context.span_id


def test_nested_graph_calls_in_a_run_are_spans_only(instrumented: Telemetry) -> None:
    child_effects: list[str] = []
    child = linear_graph("child", nodes=2, effects=child_effects)
    builder = StateGraph(Counter)
    builder.add_node("child", child)
    builder.add_edge(START, "child")
    graph = builder.compile(name="parent")
    with spanpoint.run("ticket-2"):
        graph.invoke({"n": 0})
    spans = instrumented.spans()
    [nested] = [s for s in spans if s.name == "invoke_workflow child"]
    [outer] = [s for s in spans if s.name == "invoke_workflow parent"]
    assert semconv.CHECKPOINT_KEY in outer.attributes
    assert semconv.CHECKPOINT_KEY not in nested.attributes
    records = instrumented.store.list_checkpoints("ticket-2")
    assert [r.name for r in records] == ["parent"]


def test_calls_strategy_leaves_graph_calls_undurable(configured: Telemetry) -> None:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    try:
        effects: list[str] = []
        graph = linear_graph(effects=effects)
        for _ in range(2):
            with spanpoint.run("ticket-3"):
                graph.invoke({"n": 0})
        assert len(effects) == 6  # executed twice: not a boundary
        assert all(semconv.CHECKPOINT_KEY not in s.attributes for s in configured.spans())
    finally:
        instrumentor.uninstrument()


def test_unknown_strategy_is_a_clear_error() -> None:
    with pytest.raises(spanpoint.ConfigurationError, match=r"graph_call.*calls"):
        strategy_from_env("per-node")


# --- agents, models and tools ----------------------------------------------------------------


@pytest.mark.parametrize("user_added", [False, True])
def test_calls_strategy_leaves_create_agent_as_the_user_built_it(
    configured: Telemetry, user_added: bool
) -> None:
    """No middleware is injected (it would change the agent LangChain builds): the seams make
    each call one boundary, and a user's own CheckpointMiddleware stays the only one."""
    from spanpoint.calls.middleware import CheckpointMiddleware
    from spanpoint.graph.inspect import has_checkpoint_middleware

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    try:
        from langchain.agents import create_agent

        middleware = [CheckpointMiddleware()] if user_added else []
        agent = create_agent(plan_model(), [lookup], name="support", middleware=middleware)
        assert has_checkpoint_middleware(agent) is user_added
        with spanpoint.run("as-built"):
            agent.invoke({"messages": [("user", "ticket 42?")]})
    finally:
        instrumentor.uninstrument()
    spans = configured.spans()
    [root] = [s for s in spans if s.name == "invoke_agent support"]
    chats = [s for s in spans if s.name == "chat fake-chat"]
    tools = [s for s in spans if s.name == "execute_tool lookup"]
    assert len(chats) == 2 and len(tools) == 1  # two model turns, one tool call, no doubles
    assert all(parent_of(s, spans) is root for s in chats + tools)
    kinds = sorted(r.kind for r in configured.store.list_checkpoints("as-built"))
    assert kinds == ["model_call", "model_call", "tool_call"]


def test_default_strategy_traces_agents_without_injecting(instrumented: Telemetry) -> None:
    from langchain.agents import create_agent

    from spanpoint.graph.inspect import has_checkpoint_middleware

    agent = create_agent(plan_model(), [lookup], name="support")
    assert not has_checkpoint_middleware(agent)
    agent.invoke({"messages": [("user", "ticket 42?")]})
    spans = instrumented.spans()
    [root] = [s for s in spans if s.name == "invoke_agent support"]
    chats = [s for s in spans if s.name == "chat fake-chat"]
    tools = [s for s in spans if s.name == "execute_tool lookup"]
    assert len(chats) == 2 and len(tools) == 1
    assert all(parent_of(s, spans) is root for s in chats + tools)
    assert root.attributes[semconv.GEN_AI_AGENT_NAME] == "support"


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # graph_call: the agent call is a boundary, and so is every model and tool call
        # (the seams, issue 15): a resume or a retried task replays them by task identity.
        ("graph_call", ["graph_call", "model_call", "model_call", "tool_call"]),
        # calls: every model and tool call a boundary (the seams), the graph call not.
        ("calls", ["model_call", "model_call", "tool_call"]),
    ],
)
def test_agent_boundaries_inside_a_run_follow_the_strategy(
    configured: Telemetry, strategy: str, expected: list[str]
) -> None:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy=strategy)
    try:
        from langchain.agents import create_agent

        agent = create_agent(plan_model(), [lookup], name="support")
        with spanpoint.run("ticket-4"):
            agent.invoke({"messages": [("user", "ticket 42?")]})
    finally:
        instrumentor.uninstrument()
    kinds = sorted(r.kind for r in configured.store.list_checkpoints("ticket-4"))
    assert kinds == expected
    assert len(configured.spans("execute_tool lookup")) == 1  # traced either way


def hand_built(model: ConversationModel, *, is_async: bool) -> Any:
    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.bind_tools([lookup]).invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", acall_model if is_async else call_model)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(name="handmade")


@pytest.mark.parametrize("is_async", [False, True])
def test_hand_built_graph_models_and_tools_are_boundaries_inside_a_run(
    instrumented: Telemetry, is_async: bool
) -> None:
    graph = hand_built(plan_model(), is_async=is_async)
    with spanpoint.run("ticket-5"):
        if is_async:
            asyncio.run(graph.ainvoke({"messages": [("user", "hi")]}))
        else:
            graph.invoke({"messages": [("user", "hi")]})
    spans = instrumented.spans()
    [root] = [s for s in spans if s.name == "invoke_workflow handmade"]
    chats = [s for s in spans if s.name == "chat fake-chat"]
    [tool_span] = [s for s in spans if s.name == "execute_tool lookup"]
    assert len(chats) == 2
    assert all(parent_of(s, spans) is root for s in [*chats, tool_span])
    chat = chats[0].attributes
    assert chat[semconv.GEN_AI_PROVIDER_NAME] == "fake"
    assert chat[semconv.GEN_AI_REQUEST_MODEL] == "fake-chat"
    assert chat[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert tool_span.attributes[semconv.GEN_AI_TOOL_CALL_ID].startswith("call_")
    # Issue 15: direct model calls and the prebuilt ToolNode's tools are boundaries too,
    # one per call (two model turns, one tool call), inside the graph call's.
    kinds = sorted(r.kind for r in instrumented.store.list_checkpoints("ticket-5"))
    assert kinds == ["graph_call", "model_call", "model_call", "tool_call"]


def test_graph_runner_under_the_instrumentor_has_one_span(instrumented: Telemetry) -> None:
    from spanpoint.graph import GraphRunner

    effects: list[str] = []
    graph = linear_graph(effects=effects)
    graph.checkpointer = InMemorySaver()
    runner = GraphRunner(graph, name="triage")
    with spanpoint.run("ticket-6"):
        runner.invoke({"n": 0}, thread_id="t-6")
    [span] = instrumented.graph_spans("invoke_workflow")
    assert span.name == "invoke_workflow triage"
    assert [r.name for r in instrumented.store.list_checkpoints("ticket-6")] == ["triage"]


# --- instrument / uninstrument ---------------------------------------------------------------


def test_instrumenting_twice_is_a_no_op(instrumented: Telemetry) -> None:
    SpanpointInstrumentor().instrument(tracer_provider=instrumented.provider)
    wrapped = Pregel.invoke.__wrapped__
    assert not hasattr(wrapped, "__wrapped__")  # one wrapper, not two
    linear_graph().invoke({"n": 0})
    assert len(instrumented.spans()) == 1


def test_after_uninstrument_an_invoke_produces_zero_spans(configured: Telemetry) -> None:
    from langchain.agents import create_agent

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    linear_graph().invoke({"n": 0})
    assert len(configured.spans()) == 1
    instrumentor.uninstrument()
    configured.clear()
    assert not hasattr(Pregel.invoke, "__wrapped__")
    linear_graph().invoke({"n": 0})
    asyncio.run(linear_graph().ainvoke({"n": 0}))
    list(linear_graph().stream({"n": 0}))
    hand_built(plan_model(), is_async=False).invoke({"messages": [("user", "hi")]})
    create_agent(plan_model(), [lookup]).invoke({"messages": [("user", "hi")]})
    assert configured.spans() == []
