"""The guard inside spanpoint's own graph call: its events land on the call's span."""

from __future__ import annotations

from typing import Any

from guard_fakes import stuck_on_search
from guard_support import Tools, kinds, make_agent
from langgraph.checkpoint.memory import InMemorySaver

import spanpoint
from spanpoint import semconv
from spanpoint.guard import GuardConfig, GuardReport


def test_guard_events_on_the_graph_call_span(configured: Any, tools: Tools) -> None:
    from signals import install_signals

    signals = install_signals()
    agent = make_agent(
        stuck_on_search, [tools.make("search")], GuardConfig(), checkpointer=InMemorySaver()
    )
    runner = spanpoint.GraphRunner(agent, name="researcher")
    result = runner.invoke({"messages": [("user", "q")]}, thread_id="t1")

    # A guard stop is a clean end, not a failure, and not a completed task (issue 15 item 7).
    assert result.status == "stopped"
    assert kinds(result.output["messages"])[-2:] == ["skipped", "stop"]
    report = GuardReport.from_state(result.output, thread_id=result.thread_id)
    assert report is not None and report.termination["reason"] == "tool_repeat"

    calls = [s for s in configured.spans() if s.attributes.get(semconv.GEN_AI_AGENT_NAME)]
    names = [e.name for s in calls for e in s.events if e.name.startswith("spanpoint.guard")]
    assert names == [
        semconv.EVENT_GUARD_DETECTION,
        semconv.EVENT_GUARD_REFLECTION,
        semconv.EVENT_GUARD_DETECTION,
        semconv.EVENT_GUARD_TERMINATED,
    ]

    (summary,) = (r.log_record.body for r in signals.summaries())
    assert summary["guard"]["termination"]["reason"] == "tool_repeat"
    assert summary["guard"]["checkpoint_id"] == result.latest_checkpoint_id
    assert {**summary["guard"], "checkpoint_id": None} == report.to_dict()
