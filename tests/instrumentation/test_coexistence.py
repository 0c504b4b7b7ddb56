"""spanpoint beside the other LangChain instrumentations: OpenInference's and OpenLLMetry's.

Both hook LangChain's callback system and open their own spans (chains, LLM runs, tools), on
the same tracer provider here. With either or both active: nothing crashes, results are
unchanged, spanpoint's spans are neither duplicated nor torn apart (each model and tool span
still has the agent's graph-call span as an ancestor, in one trace), and removing spanpoint
leaves the others working.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.tools import tool
from opentelemetry.sdk.trace import ReadableSpan

from fakes import ConversationModel
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry

openinference = pytest.importorskip("openinference.instrumentation.langchain")
openllmetry = pytest.importorskip("opentelemetry.instrumentation.langchain")


@tool
def lookup(ticket: str) -> str:
    """Look up a ticket."""
    return f"ticket {ticket}: open"


def make_agent() -> Any:
    from langchain.agents import create_agent

    model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": "42"}}]])
    return create_agent(model, [lookup], name="support")


def _patch_targets() -> list[Any]:
    """Every class and module one of the three instrumentations patches."""
    import langchain.agents
    import langchain.agents.factory
    from langchain.agents.middleware.types import AgentMiddleware
    from langchain_core.callbacks import BaseCallbackManager
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.tools.base import BaseTool
    from langgraph.pregel import Pregel
    from langgraph.types import Command

    return [
        Pregel,
        BaseCallbackManager,
        AgentMiddleware,
        Command,
        BaseChatModel,
        BaseTool,
        langchain.agents,
        langchain.agents.factory,
    ]


@pytest.fixture(autouse=True)
def pristine() -> Iterator[None]:
    """Put back whatever the instrumentations leave patched after ``uninstrument``.

    OpenLLMetry 0.62 unwraps ``Pregel.stream``/``astream`` by a module path that does not
    resolve, so its wrappers (bound to this test's, soon shut down, provider) would stay on
    LangGraph for every later test. spanpoint's own wrappers are checked by
    test_uninstrumenting_spanpoint_leaves_the_others_working, not restored silently: only
    attributes no longer holding their original value after uninstrument are put back.
    """
    targets = _patch_targets()
    saved = [(t, dict(vars(t))) for t in targets]
    yield
    for target, original in saved:
        for name, value in original.items():
            if vars(target).get(name) is not value:
                setattr(target, name, value)


def others(which: str) -> list[Any]:
    found = []
    if which in ("openinference", "both"):
        found.append(openinference.LangChainInstrumentor())
    if which in ("openllmetry", "both"):
        found.append(openllmetry.LangchainInstrumentor())
    return found


@pytest.fixture(params=["openinference", "openllmetry", "both"])
def side_by_side(request: pytest.FixtureRequest, configured: Telemetry) -> Iterator[Telemetry]:
    instrumentors = [SpanpointInstrumentor(), *others(request.param)]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=configured.provider)
    configured.which = request.param  # type: ignore[attr-defined]
    yield configured
    for instrumentor in reversed(instrumentors):
        instrumentor.uninstrument()


def spanpoint_spans(telemetry: Telemetry) -> list[ReadableSpan]:
    return [s for s in telemetry.spans() if s.instrumentation_scope.name == "spanpoint"]


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    by_id = {s.context.span_id: s for s in spans}
    chain, current = [], span
    while current.parent is not None and current.parent.span_id in by_id:
        current = by_id[current.parent.span_id]
        chain.append(current)
    return chain


def check_agent_trace(telemetry: Telemetry, *, under_our_graph_span: bool = True) -> None:
    """One trace, no orphans, no duplicate spanpoint spans; when ``under_our_graph_span``,
    every model and tool span has spanpoint's agent span as an ancestor."""
    everything = telemetry.spans()
    ours = spanpoint_spans(telemetry)
    [root] = [s for s in ours if s.name == "invoke_agent support"]
    chats = [s for s in ours if s.name == "chat fake-chat"]
    tools = [s for s in ours if s.name == "execute_tool lookup"]
    assert len(ours) == 4 and len(chats) == 2 and len(tools) == 1  # no duplicates
    assert len({s.context.trace_id for s in everything}) == 1
    assert len([s for s in everything if s.parent is None]) == 1  # no orphan roots
    known = {s.context.span_id for s in everything}
    assert all(s.parent.span_id in known for s in everything if s.parent is not None)
    if under_our_graph_span:
        for span in chats + tools:
            assert root in ancestors(span, everything)
    assert len(everything) > len(ours)  # the other instrumentation really recorded spans


def test_agent_with_other_instrumentations(side_by_side: Telemetry) -> None:
    agent = make_agent()
    side_by_side.clear()  # OpenLLMetry also traces create_agent itself, as a trace of its own
    result = agent.invoke({"messages": [("user", "ticket 42?")]})
    assert result["messages"][-1].content == "All done."
    check_agent_trace(side_by_side)


def test_async_agent_with_other_instrumentations(side_by_side: Telemetry) -> None:
    agent = make_agent()
    side_by_side.clear()
    result = asyncio.run(agent.ainvoke({"messages": [("user", "ticket 42?")]}))
    assert result["messages"][-1].content == "All done."
    check_agent_trace(side_by_side)


def test_streaming_agent_with_other_instrumentations(side_by_side: Telemetry) -> None:
    agent = make_agent()
    side_by_side.clear()
    chunks = list(agent.stream({"messages": [("user", "ticket 42?")]}, stream_mode="values"))
    assert chunks[-1]["messages"][-1].content == "All done."
    # OpenLLMetry wraps Pregel.stream too, outside ours here, and parents its callback spans
    # (graph, nodes) to its own graph span, not to the current span: spanpoint's model and
    # tool spans then sit under OpenLLMetry's node spans — same trace, no orphan.
    check_agent_trace(side_by_side, under_our_graph_span=side_by_side.which == "openinference")


def test_instrumenting_spanpoint_again_among_others_is_a_no_op(side_by_side: Telemetry) -> None:
    SpanpointInstrumentor().instrument(tracer_provider=side_by_side.provider)
    agent = make_agent()
    side_by_side.clear()
    agent.invoke({"messages": [("user", "ticket 42?")]})
    check_agent_trace(side_by_side)


def test_uninstrumenting_spanpoint_leaves_the_others_working(configured: Telemetry) -> None:
    ours, theirs = SpanpointInstrumentor(), openinference.LangChainInstrumentor()
    ours.instrument(tracer_provider=configured.provider)
    theirs.instrument(tracer_provider=configured.provider)
    try:
        ours.uninstrument()
        make_agent().invoke({"messages": [("user", "ticket 42?")]})
        assert spanpoint_spans(configured) == []
        assert configured.spans()  # OpenInference still traces
    finally:
        theirs.uninstrument()
