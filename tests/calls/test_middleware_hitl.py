"""Calls mode with human review: start → interrupt → resume, and a replay of the whole run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from opentelemetry.trace import StatusCode

import spanpoint
import spanpoint.graph
from fakes import ConversationModel, count_effect, read_effects
from spanpoint import semconv

PLAN = [
    [{"name": "lookup_ticket", "args": {"ticket_id": 7}}],
    [{"name": "approve_ticket", "args": {"ticket_id": 7}}],
]
REQUEST = {"messages": [{"role": "user", "content": "Approve ticket 7"}]}


def make_runner(effects: Path) -> spanpoint.GraphRunner:
    """A fresh agent and LangGraph checkpointer, as a new process would have."""

    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, "lookup_ticket")
        return f"ticket {ticket_id}: refund requested"

    @tool
    def approve_ticket(ticket_id: int) -> str:
        """Approve a ticket (needs a human's review)."""
        count_effect(effects, "approve_ticket")
        return f"ticket {ticket_id} approved"

    agent = create_agent(
        ConversationModel(plan=PLAN, final="Ticket 7 approved."),
        [lookup_ticket, approve_ticket],
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"approve_ticket": True}),
            spanpoint.CheckpointMiddleware(),
        ],
        checkpointer=InMemorySaver(),
    )
    return spanpoint.GraphRunner(agent, name="support", strategy="calls")


def start_and_resume(runner: spanpoint.GraphRunner) -> tuple[Any, Any]:
    with spanpoint.run("hitl-7"):
        paused = runner.invoke(REQUEST, thread_id="t-7")
    assert paused.interrupted
    action = paused.interrupts[0].value["action_requests"][0]
    assert action["name"] == "approve_ticket" and action["args"] == {"ticket_id": 7}
    with spanpoint.run("hitl-7"):
        done = runner.invoke(
            spanpoint.graph.build_resume_request(paused, {"decisions": [{"type": "approve"}]})
        )
    assert done.status == "completed"
    return paused, done


def replay_flags(telemetry: Any) -> list[tuple[str, bool]]:
    return [
        (s.name, bool(s.attributes.get(semconv.REPLAYED)))
        for s in telemetry.spans()
        if s.name.startswith(("chat ", "execute_tool "))
    ]


def test_interrupt_and_resume_in_calls_mode_then_replay_the_whole_run(
    configured: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    effects = tmp_path / "effects.txt"
    _, done = start_and_resume(make_runner(effects))
    assert "nothing to checkpoint" not in caplog.text  # the runner found the middleware
    assert read_effects(effects) == {"lookup_ticket": 1, "approve_ticket": 1}
    assert replay_flags(configured) == [
        ("chat fake-chat", False),
        ("execute_tool lookup_ticket", False),
        ("chat fake-chat", False),
        ("execute_tool approve_ticket", False),
        ("chat fake-chat", False),
    ]
    configured.clear()

    _, again = start_and_resume(make_runner(effects))
    assert read_effects(effects) == {"lookup_ticket": 1, "approve_ticket": 1}
    assert [name for name, _ in replay_flags(configured)] == [
        "chat fake-chat (replayed)",
        "execute_tool lookup_ticket (replayed)",
        "chat fake-chat (replayed)",
        "execute_tool approve_ticket (replayed)",
        "chat fake-chat (replayed)",
    ]
    assert all(replayed for _, replayed in replay_flags(configured))
    assert again.output["messages"][-1] == done.output["messages"][-1]
    assert [m.content for m in again.output["messages"]] == [
        m.content for m in done.output["messages"]
    ]


def test_calls_nest_under_the_agent_span(configured: Any, tmp_path: Path) -> None:
    start_and_resume(make_runner(tmp_path / "effects.txt"))
    agents = [s for s in configured.spans() if s.name.startswith("invoke_agent")]
    assert len(agents) == 2
    by_id = {s.context.span_id: s for s in agents}
    for span in configured.spans("chat") + configured.spans("execute_tool"):
        assert span.parent is not None and span.parent.span_id in by_id
        assert span.context.trace_id == by_id[span.parent.span_id].context.trace_id


def make_interrupting_agent(effects: Path) -> Any:
    @tool
    def refund(ticket_id: int) -> str:
        """Refund a ticket after asking a human."""
        answer = interrupt({"refund": ticket_id})
        count_effect(effects, "refund")
        return f"refund {ticket_id}: {answer}"

    return create_agent(
        ConversationModel(plan=[[{"name": "refund", "args": {"ticket_id": 3}}]]),
        [refund],
        middleware=[spanpoint.CheckpointMiddleware()],
        checkpointer=InMemorySaver(),
    )


def test_a_tool_that_interrupts_commits_only_once_it_completes(
    configured: Any, tmp_path: Path
) -> None:
    effects, config = tmp_path / "effects.txt", {"configurable": {"thread_id": "t-3"}}
    agent = make_interrupting_agent(effects)
    with spanpoint.run("refund-3"):
        paused = agent.invoke(REQUEST, config)
    assert "__interrupt__" in paused
    assert [cp.kind for cp in configured.store.list_checkpoints("refund-3")] == ["model_call"]
    with spanpoint.run("refund-3"):
        done = agent.invoke(Command(resume="yes"), config)
    assert done["messages"][-2].content == "refund 3: yes"
    assert read_effects(effects) == {"refund": 1}

    # A replay on a fresh thread: the answer is part of the committed tool output.
    fresh = make_interrupting_agent(effects)
    with spanpoint.run("refund-3"):
        again = fresh.invoke(REQUEST, {"configurable": {"thread_id": "t-3b"}})
    assert "__interrupt__" not in again
    assert again["messages"][-2].content == "refund 3: yes"
    assert read_effects(effects) == {"refund": 1}


def test_outside_a_run_an_interrupting_tool_is_paused_not_failed(
    configured: Any, tmp_path: Path
) -> None:
    agent = make_interrupting_agent(tmp_path / "effects.txt")
    agent.invoke(REQUEST, {"configurable": {"thread_id": "t-4"}})
    (span,) = configured.spans("execute_tool refund")
    assert span.status.status_code is not StatusCode.ERROR
    assert [e.name for e in span.events] == [semconv.EVENT_AGENT_PAUSED]


def test_inside_a_run_an_interrupting_tool_is_paused_not_failed(
    configured: Any, tmp_path: Path
) -> None:
    agent = make_interrupting_agent(tmp_path / "effects.txt")
    with spanpoint.run("refund-5") as run:
        agent.invoke(REQUEST, {"configurable": {"thread_id": "t-5"}})
    (span,) = configured.spans("execute_tool refund")
    assert span.status.status_code is not StatusCode.ERROR
    assert [e.name for e in span.events] == [semconv.EVENT_AGENT_PAUSED]
    assert run.status == "completed"
    journal = configured.store.list_journal("refund-5")
    assert [(j.kind, j.status) for j in journal] == [("tool_call", "interrupted")]
