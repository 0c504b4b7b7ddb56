"""Approval gates as tool-call decisions: a real ``create_agent`` with LangChain's
``HumanInTheLoopMiddleware`` and a checkpointer, zero-code instrumented or run by
``GraphRunner``, on the real OpenTelemetry SDK.

The graph call's span that records the pause gets a ``gen_ai.tool.call.decision`` event per
gated tool call (``require_approval``), and the span of the call that resumes gets one per
decided call (``allow`` for approve and edit, ``deny`` for reject), with the tool's name and
the id of the model's tool call whenever it is known for certain.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from opentelemetry.sdk.trace import ReadableSpan

import spanpoint
from fakes import ConversationModel, count_effect, read_effects
from harness import Telemetry
from spanpoint import semconv

REQUEST = {"messages": [{"role": "user", "content": "Email Alice, then delete the report."}]}
EMAIL = {"name": "send_email", "args": {"to": "alice@example.com", "body": "Report attached"}}
DELETE = {"name": "delete_file", "args": {"path": "report.txt"}}
LOOKUP = {"name": "lookup", "args": {"topic": "report"}}  # not gated
# Turn 0 asks for all three tools; once their results are in, the model answers.
PLAN = [[EMAIL, DELETE, LOOKUP]]


def make_agent(effects: Path, plan: list[list[dict[str, Any]]] = PLAN, **hitl: Any) -> Any:
    """The agent; ``hitl`` configures its human-in-the-loop middleware (none when empty)."""

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        count_effect(effects, "send_email")
        return f"sent to {to}"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        count_effect(effects, "delete_file")
        return f"deleted {path}"

    @tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        count_effect(effects, "lookup")
        return f"{topic}: found"

    middleware = [HumanInTheLoopMiddleware(**hitl)] if hitl else []
    return create_agent(
        ConversationModel(plan=plan, final="Done."),
        [send_email, delete_file, lookup],
        middleware=middleware,
        checkpointer=InMemorySaver(),
        name="mailer",
    )


GATED = {"send_email": True, "delete_file": True}


def graph_spans(telemetry: Telemetry) -> list[ReadableSpan]:
    """The agent's graph-call spans, oldest first."""
    return telemetry.graph_spans("invoke_agent")


def decisions(span: ReadableSpan) -> list[tuple[str, str, str | None]]:
    """(outcome, tool name, tool-call id or None) of each decision event on ``span``."""
    return [
        (
            str(e.attributes[semconv.GEN_AI_TOOL_CALL_DECISION_OUTCOME]),
            str(e.attributes[semconv.GEN_AI_TOOL_NAME]),
            e.attributes.get(semconv.GEN_AI_TOOL_CALL_ID),
        )
        for e in span.events
        if e.name == semconv.EVENT_TOOL_CALL_DECISION
    ]


def all_decisions(telemetry: Telemetry) -> list[tuple[str, str, str | None]]:
    return [d for s in telemetry.spans() for d in decisions(s)]


def pending_ids(output: Any) -> dict[str, str]:
    """Tool name -> id of the model's pending tool calls (the last AI message)."""
    last = [m for m in output["messages"] if m.type == "ai"][-1]
    return {c["name"]: c["id"] for c in last.tool_calls}


def resumed_from(span: ReadableSpan) -> str:
    """The interrupt id ``span``'s ``gen_ai.agent.resumed`` event says it answered."""
    (event,) = [e for e in span.events if e.name == semconv.EVENT_AGENT_RESUMED]
    return str(event.attributes[semconv.GEN_AI_AGENT_RESUMED_FROM_ID])


def paused_span(telemetry: Telemetry) -> ReadableSpan:
    (span,) = [
        s
        for s in graph_spans(telemetry)
        if any(e.name == semconv.EVENT_AGENT_PAUSED for e in s.events)
    ]
    return span


# --- zero-code ---------------------------------------------------------------------------


def within(run: bool) -> Any:
    """Inside ``spanpoint.run`` (the call is a boundary of the run) or outside any run."""
    return spanpoint.run("approvals") if run else contextlib.nullcontext()


@pytest.mark.parametrize("in_run", [False, True], ids=["traced", "in_run"])
@pytest.mark.parametrize("route", ["zero_code", "zero_code_calls"], indirect=True)
def test_zero_code_pause_requires_approval_and_resume_allows_and_denies(
    route: str, in_run: bool, configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    agent = make_agent(effects, interrupt_on=GATED)
    config = {"configurable": {"thread_id": "t-1"}}

    with within(in_run):
        paused = agent.invoke(REQUEST, config)
    assert paused["__interrupt__"]
    ids = pending_ids(paused)
    pause = paused_span(configured)
    # One per gated call, with the id of the model's call; the ungated lookup has none.
    assert decisions(pause) == [
        ("require_approval", "send_email", ids["send_email"]),
        ("require_approval", "delete_file", ids["delete_file"]),
    ]
    assert read_effects(effects) == {}
    configured.clear()

    resume = {"decisions": [{"type": "approve"}, {"type": "reject", "message": "keep it"}]}
    with within(in_run):
        done = agent.invoke(Command(resume=resume), config)
    assert done["messages"][-1].content == "Done."
    assert read_effects(effects) == {"send_email": 1, "lookup": 1}
    (resumed,) = graph_spans(configured)
    assert decisions(resumed) == [
        ("allow", "send_email", ids["send_email"]),
        ("deny", "delete_file", ids["delete_file"]),
    ]
    assert all_decisions(configured) == decisions(resumed)  # on the graph span only
    # HITL's answer is a dict, yet not keyed by interrupt id: it answers the one pending.
    assert resumed_from(resumed) == paused["__interrupt__"][0].id


def test_zero_code_per_call_interrupts_carry_their_call_ids(
    configured: Telemetry, tmp_path: Path
) -> None:
    from spanpoint.instrumentation import SpanpointInstrumentor

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    try:
        effects = tmp_path / "effects.txt"
        agent = make_agent(effects, interrupt_on=GATED, interrupt_mode="per_call")
        config = {"configurable": {"thread_id": "t-2"}}
        paused = agent.invoke(REQUEST, config)
        interrupts = {i.value["name"]: i for i in paused["__interrupt__"]}
        assert set(interrupts) == {"send_email", "delete_file"}
        ids = pending_ids(paused)
        assert sorted(decisions(paused_span(configured))) == [
            ("require_approval", "delete_file", ids["delete_file"]),
            ("require_approval", "send_email", ids["send_email"]),
        ]
        configured.clear()

        answers = {
            interrupts["send_email"].id: {"type": "reject"},
            interrupts["delete_file"].id: {"type": "approve"},
        }
        agent.invoke(Command(resume=answers), config)
        assert read_effects(effects) == {"delete_file": 1, "lookup": 1}
        assert sorted(all_decisions(configured)) == [
            ("allow", "delete_file", ids["delete_file"]),
            ("deny", "send_email", ids["send_email"]),
        ]
    finally:
        instrumentor.uninstrument()


# --- GraphRunner -------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["graph_call", "calls"])
def test_graph_runner_pause_and_resume_with_edit(
    strategy: str, configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    runner = spanpoint.GraphRunner(
        make_agent(effects, interrupt_on=GATED), name="mailer", strategy=strategy
    )
    with spanpoint.run("approvals-1"):
        paused = runner.invoke(REQUEST, thread_id="t-3")
    assert paused.interrupted
    ids = pending_ids(paused.output)
    assert decisions(paused_span(configured)) == [
        ("require_approval", "send_email", ids["send_email"]),
        ("require_approval", "delete_file", ids["delete_file"]),
    ]
    configured.clear()

    edited = {"name": "send_email", "args": {"to": "bob@example.com", "body": "Report"}}
    answer = {"decisions": [{"type": "edit", "edited_action": edited}, {"type": "approve"}]}
    with spanpoint.run("approvals-1"):
        done = runner.invoke(paused.resume_request(answer))
    assert done.status == "completed"
    assert read_effects(effects) == {"send_email": 1, "delete_file": 1, "lookup": 1}
    # An edit allows the call; the proposal defines no attribute for edited arguments.
    assert all_decisions(configured) == [
        ("allow", "send_email", ids["send_email"]),
        ("allow", "delete_file", ids["delete_file"]),
    ]
    (resumed,) = graph_spans(configured)
    assert decisions(resumed) == all_decisions(configured)
    assert resumed_from(resumed) == paused.interrupts[0].id


def test_a_runner_that_did_not_see_the_pause_reads_the_gates_from_the_thread(
    configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    agent = make_agent(effects, interrupt_on=GATED)
    paused = spanpoint.GraphRunner(agent, name="mailer").invoke(REQUEST, thread_id="t-4")
    ids = pending_ids(paused.output)
    configured.clear()

    fresh = spanpoint.GraphRunner(agent, name="mailer")  # as another process would have
    answer = {"decisions": [{"type": "reject"}, {"type": "reject"}]}
    fresh.invoke(paused.resume_request(answer))
    assert read_effects(effects) == {"lookup": 1}
    assert all_decisions(configured) == [
        ("deny", "send_email", ids["send_email"]),
        ("deny", "delete_file", ids["delete_file"]),
    ]


# --- what is not a gate, and what is not certain -------------------------------------------


@pytest.mark.parametrize("route", ["zero_code", "runner"], indirect=True)
def test_an_agent_without_approval_gates_records_no_decisions(
    route: str, configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    agent = make_agent(effects)
    if route == "runner":
        done = spanpoint.GraphRunner(agent, name="mailer").invoke(REQUEST, thread_id="t-5")
        assert done.status == "completed"
    else:
        agent.invoke(REQUEST, {"configurable": {"thread_id": "t-5"}})
    assert read_effects(effects) == {"send_email": 1, "delete_file": 1, "lookup": 1}
    assert graph_spans(configured)
    assert all_decisions(configured) == []


@pytest.mark.parametrize("route", ["zero_code", "runner"], indirect=True)
def test_an_interrupt_that_is_no_gate_records_no_decisions(
    route: str, configured: Telemetry, tmp_path: Path
) -> None:
    @tool
    def ask(question: str) -> str:
        """Ask the user."""
        return str(interrupt({"question": question}))

    agent = create_agent(
        ConversationModel(plan=[[{"name": "ask", "args": {"question": "which file?"}}]]),
        [ask],
        checkpointer=InMemorySaver(),
        name="mailer",
    )
    if route == "runner":
        runner = spanpoint.GraphRunner(agent, name="mailer")
        paused = runner.invoke(REQUEST, thread_id="t-6")
        runner.invoke(paused.resume_request({"type": "approve"}))  # an answer shaped like one
    else:
        config = {"configurable": {"thread_id": "t-6"}}
        agent.invoke(REQUEST, config)
        agent.invoke(Command(resume={"type": "approve"}), config)
    assert any(
        e.name == semconv.EVENT_AGENT_PAUSED for s in graph_spans(configured) for e in s.events
    )
    assert all_decisions(configured) == []


@pytest.mark.parametrize("route", ["zero_code"], indirect=True)
def test_two_identical_gated_calls_get_no_guessed_id(
    route: str, configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    agent = make_agent(effects, plan=[[DELETE, DELETE]], interrupt_on=GATED)
    config = {"configurable": {"thread_id": "t-7"}}
    agent.invoke(REQUEST, config)
    # Two calls have this name and these arguments: which request is which is not certain.
    assert decisions(paused_span(configured)) == [
        ("require_approval", "delete_file", None),
        ("require_approval", "delete_file", None),
    ]
    configured.clear()
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}, {"type": "reject"}]}), config)
    assert read_effects(effects) == {"delete_file": 1}
    assert all_decisions(configured) == [
        ("allow", "delete_file", None),
        ("deny", "delete_file", None),
    ]


# --- the other spans that record a pause ----------------------------------------------------


@pytest.mark.parametrize("route", ["zero_code"], indirect=True)
def test_a_stream_that_pauses_requires_approval_without_guessing_ids(
    route: str, configured: Telemetry, tmp_path: Path
) -> None:
    agent = make_agent(tmp_path / "effects.txt", interrupt_on=GATED)
    chunks = list(agent.stream(REQUEST, {"configurable": {"thread_id": "t-8"}}))
    assert any("__interrupt__" in c for c in chunks)
    # A stream keeps no final state to match the batch against: names, no ids.
    assert decisions(paused_span(configured)) == [
        ("require_approval", "send_email", None),
        ("require_approval", "delete_file", None),
    ]


def test_a_sub_agent_that_pauses_under_a_runner_records_its_gates_on_its_span(
    configured: Telemetry, tmp_path: Path
) -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    agent = make_agent(tmp_path / "effects.txt", interrupt_on=GATED)
    seen: dict[str, Any] = {}

    def delegate(state: MessagesState) -> dict[str, Any]:
        # The sub-agent keeps its own thread and checkpointer: its pause is its output.
        seen["output"] = agent.invoke(REQUEST, {"configurable": {"thread_id": "sub"}})
        return {}

    parent = StateGraph(MessagesState).add_node("delegate", delegate)
    parent = parent.add_edge(START, "delegate").add_edge("delegate", END).compile()
    spanpoint.GraphRunner(parent, name="boss").invoke(REQUEST, thread_id="t-9")
    assert seen["output"]["__interrupt__"]
    ids = pending_ids(seen["output"])
    assert decisions(paused_span(configured)) == [
        ("require_approval", "send_email", ids["send_email"]),
        ("require_approval", "delete_file", ids["delete_file"]),
    ]
    assert len(all_decisions(configured)) == 2
