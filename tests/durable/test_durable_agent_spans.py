"""Agents recognised as agents, the middleware search, tool errors, stopped runs (issue 15,
Build 5, 6 and 7). Spans are read from an in-memory exporter on an SDK provider given to
``spanpoint.configure``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, TypedDict

import pytest
from durable_agents import deep_agent, deep_input, supervisor_app, swarm_app, team_input
from durable_fakes import ScriptModel, tool_call
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import spanpoint
from harness import Telemetry

THREAD = "t-agents"


def ancestors(otel: Telemetry, span: ReadableSpan) -> list[ReadableSpan]:
    chain = []
    parent = otel.parent(span)
    while parent is not None:
        chain.append(parent)
        parent = otel.parent(parent)
    return chain


def run_deep(otel: Telemetry, how: str) -> None:
    if how.startswith("runner"):
        mw = [spanpoint.CheckpointMiddleware()]
        agent = deep_agent(checkpointer=InMemorySaver(), middleware=mw)
        with spanpoint.run("ticket-spans"):
            spanpoint.GraphRunner(agent, name="support", strategy="calls").invoke(
                deep_input(), thread_id=THREAD
            )
    else:  # zero-code: the unchanged agent
        agent = deep_agent(checkpointer=InMemorySaver())
        agent.invoke(deep_input(), {"configurable": {"thread_id": THREAD}})


@pytest.fixture(params=["runner", "zero-code", "runner+zero-code"])
def deep_spans(request: pytest.FixtureRequest, otel: Telemetry, log: Any) -> Telemetry:
    """The spans of one Deep Agents run: under GraphRunner, zero-code, or both at once (one
    span per graph call all the same)."""
    if request.param.endswith("zero-code"):
        request.getfixturevalue("instrumented")
    run_deep(otel, request.param)
    return otel


def test_a_deep_agent_root_span_is_invoke_agent(deep_spans: Telemetry) -> None:
    graph_calls = [
        s for s in deep_spans.spans() if not (s.attributes or {}).get("spanpoint.run.root")
        and s.name.startswith(("invoke_agent", "invoke_workflow")) and "support" in s.name
    ]  # fmt: skip
    assert [s.name for s in graph_calls] == ["invoke_agent support"]
    assert graph_calls[0].attributes["gen_ai.operation.name"] == "invoke_agent"


def test_the_sub_agent_nests_under_its_task_call_and_carries_the_conversation(
    deep_spans: Telemetry,
) -> None:
    [task] = deep_spans.spans("execute_tool task")
    subs = deep_spans.spans("invoke_agent general-purpose")
    assert len(subs) == 1, f"no sub-agent span: {[s.name for s in deep_spans.spans()]}"
    [sub] = subs
    assert deep_spans.parent(sub) is task, "the sub-agent's span is not under its task"
    assert sub.attributes.get("gen_ai.conversation.id") == THREAD
    [root] = [s for s in deep_spans.spans("invoke_agent support")]
    assert root.attributes.get("gen_ai.conversation.id") == THREAD
    under_task = [s.name for s in deep_spans.spans() if task in ancestors(deep_spans, s)]
    subs_names = {s.name for s in subs}
    # The sub-agent's own calls: read_file and its two model calls, all inside the task call.
    assert sorted(n.split(" ")[0] for n in under_task if n not in subs_names) == [
        "chat", "chat", "execute_tool",
    ], under_task  # fmt: skip


#: The graph calls nested in each app's run, by span name (what zero-code shows too).
NESTED = {
    "deep": {"invoke_agent general-purpose": 1},
    "supervisor": {"invoke_workflow supervisor": 3, "invoke_agent billing": 1,
                   "invoke_agent travel": 1},
    "swarm": {"invoke_agent alice": 1, "invoke_agent bob": 1},
}  # fmt: skip


@pytest.mark.parametrize("how", ["calls", "graph_call", "async", "calls+zero-code"])
@pytest.mark.parametrize("app", ["deep", "supervisor", "swarm"])
def test_nested_agents_get_their_spans_under_graph_runner(
    request: pytest.FixtureRequest, otel: Telemetry, log: Any, app: str, how: str
) -> None:
    """Sub-agents, supervisor members and swarm agents each get one ``invoke_agent {name}``
    (``invoke_workflow``) span under GraphRunner, with or without the instrumentor: inside
    the runner's span, carrying the conversation, with their own model calls under them."""
    import asyncio

    if how.endswith("zero-code"):
        request.getfixturevalue("instrumented")
    mw = [spanpoint.CheckpointMiddleware()]
    graph, payload = {
        "deep": lambda: (deep_agent(checkpointer=InMemorySaver(), middleware=mw), deep_input()),
        "supervisor": lambda: (supervisor_app(checkpointer=InMemorySaver(), middleware=mw),
                               team_input()),
        "swarm": lambda: (swarm_app(checkpointer=InMemorySaver(), middleware=mw), team_input()),
    }[app]()  # fmt: skip
    runner = spanpoint.GraphRunner(graph, name="team", strategy=how.split("+")[0].replace(
        "async", "calls"))  # fmt: skip
    with spanpoint.run(f"ticket-nested-{app}"):
        if how == "async":
            asyncio.run(runner.ainvoke(payload, thread_id=THREAD))
        else:
            runner.invoke(payload, thread_id=THREAD)
    graph_calls = [
        s for s in otel.spans() if s.name.startswith(("invoke_agent", "invoke_workflow"))
        and not (s.attributes or {}).get("spanpoint.run.root")
    ]  # fmt: skip
    [top] = [s for s in graph_calls if s.name.endswith(" team")]
    nested = [s for s in graph_calls if s is not top]
    names: dict[str, int] = {}
    for span in nested:
        names[span.name] = names.get(span.name, 0) + 1
    assert names == NESTED[app], [s.name for s in otel.spans()]
    for span in nested:
        assert top in ancestors(otel, span), f"{span.name} is not inside the runner's span"
        assert span.attributes.get("gen_ai.conversation.id") == THREAD, span.name
    # Every model call of a member runs inside that member's span.
    member_spans = {s.context.span_id for s in nested if s.name.startswith("invoke_agent")}
    inside = [
        s for s in otel.spans("chat")
        if any(a.context.span_id in member_spans for a in ancestors(otel, s))
    ]  # fmt: skip
    assert len(inside) == {"deep": 2, "supervisor": 4, "swarm": 4}[app]


@pytest.mark.parametrize("how", ["stream", "astream", "stream+zero-code", "astream+zero-code"])
def test_a_streamed_runner_call_traces_its_sub_agent_once(
    request: pytest.FixtureRequest, otel: Telemetry, log: Any, how: str
) -> None:
    """``GraphRunner.stream`` / ``astream``: the sub-agent's span under its task call, and
    one span for the streamed call itself, with or without the instrumentor."""
    import asyncio

    if how.endswith("zero-code"):
        request.getfixturevalue("instrumented")
    agent = deep_agent(checkpointer=InMemorySaver(), middleware=[spanpoint.CheckpointMiddleware()])
    runner = spanpoint.GraphRunner(agent, name="support", strategy="calls")

    async def consume() -> list[Any]:
        return [c async for c in runner.astream(deep_input(), thread_id=THREAD)]

    with spanpoint.run("ticket-stream"):
        if how.startswith("astream"):
            chunks = asyncio.run(consume())
        else:
            chunks = list(runner.stream(deep_input(), thread_id=THREAD))
    assert chunks, "the stream yielded nothing"
    tops = [s for s in otel.spans("invoke_agent support")]
    assert len(tops) == 1, [s.name for s in otel.spans()]
    [task] = otel.spans("execute_tool task")
    [sub] = otel.spans("invoke_agent general-purpose")
    assert otel.parent(sub) is task
    assert sub.attributes.get("gen_ai.conversation.id") == THREAD


# --- the middleware search ---------------------------------------------------------------


def warnings_about_middleware(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "CheckpointMiddleware" in r.getMessage()]


@pytest.mark.parametrize("app", ["deep", "supervisor", "swarm"])
def test_no_false_missing_middleware_warning(
    otel: Telemetry, caplog: pytest.LogCaptureFixture, app: str
) -> None:
    mw = [spanpoint.CheckpointMiddleware()]
    graph = {
        "deep": lambda: deep_agent(checkpointer=InMemorySaver(), middleware=mw),
        "supervisor": lambda: supervisor_app(checkpointer=InMemorySaver(), middleware=mw),
        "swarm": lambda: swarm_app(checkpointer=InMemorySaver(), middleware=mw),
    }[app]()
    with caplog.at_level(logging.WARNING):
        spanpoint.GraphRunner(graph, name=app, strategy="calls")
    assert warnings_about_middleware(caplog) == []


def test_an_agent_without_the_middleware_needs_none(
    otel: Telemetry, log: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The control case, now that the seams make every call a boundary: no warning, and the
    agent's model call is still committed."""
    from langchain.agents import create_agent

    model = ScriptModel(decide=lambda m: ("x", AIMessage("hi")))
    agent = create_agent(model, [], checkpointer=InMemorySaver())
    with caplog.at_level(logging.WARNING):
        runner = spanpoint.GraphRunner(agent, name="bare", strategy="calls")
        with spanpoint.run("bare-1"):
            runner.invoke({"messages": [HumanMessage("hello")]}, thread_id="bare")
    assert warnings_about_middleware(caplog) == []
    assert [s.name.split(" ")[0] for s in otel.spans() if s.name.startswith("chat")] == ["chat"]


# --- tool errors -------------------------------------------------------------------------


@tool
def flaky_lookup(order: str) -> str:
    """Look an order up (the backend is down)."""
    raise ToolException(f"order service unavailable for {order}")


flaky_lookup.handle_tool_error = True  # LangChain turns the exception into an error ToolMessage


def flaky_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    if not any(m.type == "tool" for m in messages):
        return "call", AIMessage("", tool_calls=[tool_call("flaky_lookup", order="42")])
    return "final", AIMessage("The order service is down.")


class S(TypedDict, total=False):
    request: str
    sent: str


def flaky_graph(seam: str) -> Any:
    if seam == "agent":
        from langchain.agents import create_agent

        return create_agent(
            ScriptModel(role="flaky", decide=flaky_decide), [flaky_lookup],
            middleware=[spanpoint.CheckpointMiddleware()], name="flaky",
        )  # fmt: skip

    def node(state: S) -> dict[str, str]:
        message = flaky_lookup.invoke(tool_call("flaky_lookup", order="42"))
        return {"sent": str(message.status)}

    builder = StateGraph(S)
    builder.add_node("lookup", node)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", END)
    return builder.compile(name="flaky")


@pytest.mark.parametrize("seam", ["agent", "node"])
def test_an_error_tool_message_marks_its_span_error(otel: Telemetry, log: Any, seam: str) -> None:
    payload = {"messages": [HumanMessage("order 42?")]} if seam == "agent" else {"request": "r"}
    with spanpoint.run("ticket-error"):
        result = spanpoint.GraphRunner(flaky_graph(seam), name="flaky", strategy="calls").invoke(
            payload, thread_id="t-err"
        )
    assert result.status == "completed"
    spans = otel.spans("execute_tool flaky_lookup")
    assert len(spans) == 1, f"no execute_tool span for the call: {[s.name for s in otel.spans()]}"
    [span] = spans
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes.get("error.type"), "an error ToolMessage's span has no error.type"


# --- a guard-stopped run -----------------------------------------------------------------


def stuck_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    """Keeps searching for the same thing: the guard's tool-repeat detector fires."""
    return "search", AIMessage("", tool_calls=[tool_call("search", query="release date 4.2")])


@tool
def search(query: str) -> str:
    """Search the documentation."""
    return "No results."


def test_a_guard_stopped_run_has_status_stopped(otel: Telemetry, log: Any) -> None:
    from langchain.agents import create_agent

    guard = spanpoint.guard.GuardMiddleware(spanpoint.guard.GuardConfig(max_reflections=0))
    agent = create_agent(
        ScriptModel(role="stuck", decide=stuck_decide), [search], middleware=[guard],
        checkpointer=InMemorySaver(), name="stuck",
    )  # fmt: skip
    with spanpoint.run("ticket-stuck") as run:
        result = spanpoint.GraphRunner(agent, name="stuck").invoke(
            {"messages": [HumanMessage("When did 4.2 ship?")]}, thread_id="t-stuck"
        )
    assert result.output["guard_terminated"] is True, "precondition: the guard stopped it"
    assert result.status == "stopped"
    assert run.status == "stopped"
    [root] = otel.runs()
    assert root.attributes["spanpoint.run.status"] == "stopped"


# --- never two boundaries for one call ---------------------------------------------------


@pytest.mark.parametrize("strategy", ["calls", "graph_call"])
def test_one_boundary_per_call_where_seams_overlap(
    otel: Telemetry, log: Any, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    """Zero-code patches and an explicit CheckpointMiddleware on one agent: each model and tool
    call is one span, executed once; the rerun replays each once and executes nothing."""
    from durable_agents import refund_agent
    from durable_fakes import labels
    from durable_support import load_instrumentor

    monkeypatch.setenv("SPANPOINT_STRATEGY", strategy)
    instrumentor = load_instrumentor()
    instrumentor.instrument(tracer_provider=otel.provider, store=otel.store)
    try:
        question = {"messages": [HumanMessage("Where is my refund?")]}
        for _attempt in (1, 2):
            agent = refund_agent(middleware=[spanpoint.CheckpointMiddleware()])
            with spanpoint.run("ticket-one"):
                agent.invoke(question, {"configurable": {"thread_id": "t-one"}})
    finally:
        instrumentor.uninstrument()
    assert labels(log, "model") == {"refund:lookup:1": 1, "refund:notify:1": 1, "refund:final:1": 1}
    assert labels(log, "tool") == {"lookup_order": 1, "notify_customer": 1}
    chats = [s for s in otel.spans("chat")]
    tools = [s for s in otel.spans("execute_tool")]
    if strategy == "calls":  # attempt 2 replays each call: one span per call per attempt
        assert len(chats) == 6 and len(tools) == 4, [s.name for s in otel.spans()]
        replayed = [bool(s.attributes.get("spanpoint.replayed")) for s in chats + tools]
        assert replayed.count(True) == 5
    else:  # graph_call: attempt 2 replays the whole graph call, no call runs or is traced
        assert len(chats) == 3 and len(tools) == 2, [s.name for s in otel.spans()]
