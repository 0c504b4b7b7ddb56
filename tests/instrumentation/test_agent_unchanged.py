"""Zero-code changes no agent: ``create_agent`` builds the same graph with spanpoint as without.

Model and tool calls become durable through the seams (``spanpoint.calls.seams``), never
through a middleware injected into ``create_agent``: any middleware with ``wrap_tool_call``
makes LangChain build another agent (another drawing, other tool validation, other control
flow). Every shape below is built plain and then under the instrumentor in its most durable
configuration (``calls`` strategy, ``SPANPOINT_DURABLE=thread``), and compared: nodes, edges,
the Mermaid drawing, what a bad middleware is told, and what a run does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import langchain.agents
import pytest
from langchain.agents.middleware import AgentMiddleware, before_model, wrap_model_call
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

import spanpoint
from fakes import ConversationModel
from spanpoint.calls import tasks
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry


@tool
def lookup(ticket: str) -> str:
    """Look up a ticket."""
    return f"ticket {ticket}: open"


@tool
def escalate(ticket: str) -> str:
    """Escalate a ticket."""
    return f"ticket {ticket}: escalated"


class Verdict(BaseModel):
    """The structured answer."""

    status: str


@before_model
def noting(state: Any, runtime: Any) -> None:
    return None


@wrap_model_call
def passing_model(request: Any, handler: Callable[[Any], Any]) -> Any:
    return handler(request)


class PassingTools(AgentMiddleware):
    """A user's own tool-wrapping middleware: LangChain's semantics for it apply, unchanged."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)


TOOLS: dict[str, list[Any]] = {"none": [], "one": [lookup], "two": [lookup, escalate]}
MIDDLEWARE: dict[str, Callable[[], list[Any]]] = {
    "none": list,
    "before_model": lambda: [noting],
    "wrap_model_call": lambda: [passing_model],
    "wrap_tool_call": lambda: [PassingTools()],
}
FORMATS: dict[str, Any] = {"none": None, "structured": Verdict}
SHAPES = list(itertools.product(TOOLS, MIDDLEWARE, FORMATS, [False, True]))


def model_for(tools: str) -> ConversationModel:
    plan = [[{"name": t.name, "args": {"ticket": "42"}} for t in TOOLS[tools]]]
    return ConversationModel(plan=plan if TOOLS[tools] else [])


def create_agent(*args: Any, **kwargs: Any) -> Any:
    """``create_agent`` as the user's code finds it at call time (an instrumentor that
    patched it would be called)."""
    return langchain.agents.create_agent(*args, **kwargs)


def build(shape: tuple[str, str, str, bool]) -> Any:
    tools, middleware, response_format, saved = shape
    return create_agent(
        model_for(tools),
        TOOLS[tools],
        middleware=MIDDLEWARE[middleware](),
        response_format=FORMATS[response_format],
        checkpointer=InMemorySaver() if saved else None,
        name="support",
    )


def shape_of(agent: Any) -> dict[str, Any]:
    """What LangChain built: nodes, edges, the drawing, and how the graph is wired."""
    drawn = agent.get_graph()
    return {
        "nodes": sorted(agent.nodes),
        "edges": sorted((e.source, e.target, e.conditional, str(e.data)) for e in drawn.edges),
        "mermaid": drawn.draw_mermaid(),
        "channels": sorted(agent.channels),
        "triggers": {name: sorted(node.triggers) for name, node in agent.nodes.items()},
        "checkpointer": type(agent.checkpointer).__name__,
    }


@contextmanager
def durable_zero_code(configured: Telemetry, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The instrumentor at its most durable: calls are boundaries on any saved thread."""
    monkeypatch.setenv("SPANPOINT_DURABLE", "thread")
    before = tasks.durable_scope()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    try:
        yield
    finally:
        instrumentor.uninstrument()
        tasks.set_durable_scope(before)


@pytest.mark.parametrize("shape", SHAPES, ids=["-".join(map(str, s)) for s in SHAPES])
def test_create_agent_builds_the_same_graph_under_the_instrumentor(
    configured: Telemetry, monkeypatch: pytest.MonkeyPatch, shape: tuple[str, str, str, bool]
) -> None:
    plain = shape_of(build(shape))
    with durable_zero_code(configured, monkeypatch):
        assert shape_of(build(shape)) == plain


def conversation(messages: list[BaseMessage]) -> list[tuple[str, Any, list[str]]]:
    """A run's messages without LangChain's run-time ids."""
    return [
        (m.type, m.content, [c["name"] for c in getattr(m, "tool_calls", None) or []])
        for m in messages
    ]


def run_agent(agent: Any, thread: str) -> tuple[list[Any], Any, int]:
    config = {"configurable": {"thread_id": thread}}
    out = agent.invoke({"messages": [("user", "ticket 42?")]}, config)
    history = list(agent.get_state_history(config))
    return conversation(out["messages"]), out.get("structured_response"), len(history)


RUN_SHAPES = [s for s in SHAPES if s[3] and s[2] == "none"]


@pytest.mark.parametrize("shape", RUN_SHAPES, ids=["-".join(map(str, s)) for s in RUN_SHAPES])
def test_an_agent_runs_the_same_steps_with_its_calls_durable(
    configured: Telemetry, monkeypatch: pytest.MonkeyPatch, shape: tuple[str, str, str, bool]
) -> None:
    """Same messages and the same number of checkpoints (steps), with every model and tool
    call still a boundary, found by the seams alone."""
    plain = run_agent(build(shape), "plain")
    with durable_zero_code(configured, monkeypatch), spanpoint.run("same-steps"):
        durable = run_agent(build(shape), "durable")
    assert durable == plain
    kinds = sorted(r.kind for r in configured.store.list_checkpoints("same-steps"))
    tool_calls = len(TOOLS[shape[0]])
    model_calls = 2 if tool_calls else 1
    assert kinds == ["model_call"] * model_calls + ["tool_call"] * tool_calls


class AddsUnregisteredTool(AgentMiddleware):
    """A model middleware that offers the model a tool the agent was not given."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request.override(tools=[*request.tools, escalate]))


def outcome(agent_factory: Callable[[], Any]) -> tuple[str, str]:
    try:
        agent = agent_factory()
        agent.invoke({"messages": [("user", "ticket 42?")]})
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


def test_an_unregistered_tool_is_rejected_as_langchain_rejects_it(
    configured: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    def factory() -> Any:
        model = ConversationModel(plan=[[{"name": "escalate", "args": {"ticket": "42"}}]])
        return create_agent(model, [lookup], middleware=[AddsUnregisteredTool()])

    plain = outcome(factory)
    assert plain[0] != "ok", "precondition: LangChain rejects the unregistered tool"
    with durable_zero_code(configured, monkeypatch), spanpoint.run("unregistered"):
        assert outcome(factory) == plain
