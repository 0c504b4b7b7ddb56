"""Forks (issue 16 item 2): a recorded run again, with one call's output overridden.

The agent is a real ``create_agent`` graph; the model answers from the conversation it is
given (``fakes.ConversationModel``) and the tools count their side effects in a file, so the
tests see exactly which calls executed again in the fork and which were reused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from fakes import ConversationModel, count_effect, read_effects
from spanpoint import serde
from spanpoint.capture import CapturePolicy

# Turn 0 looks ticket 7 up, turn 1 ticket 8 (the 2nd tool call, where the fork cuts), turn 2
# notifies ticket 7's owner; then the model answers.
PLAN = [
    [{"name": "lookup_ticket", "args": {"ticket_id": 7}}],
    [{"name": "lookup_ticket", "args": {"ticket_id": 8}}],
    [{"name": "notify", "args": {"ticket_id": 7, "token": "sk-abcdefghijklmnopqrstuvwx"}}],
]
REQUEST = {"messages": [{"role": "user", "content": "What about tickets 7 and 8?"}]}


def make_runner(effects: Path) -> spanpoint.GraphRunner:
    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, f"lookup_ticket:{ticket_id}")
        return f"ticket {ticket_id}: printer out of toner"

    @tool
    def notify(ticket_id: int, token: str) -> str:
        """Tell the ticket's owner."""
        count_effect(effects, f"notify:{ticket_id}")
        return f"notified the owner of ticket {ticket_id}"

    agent = create_agent(
        ConversationModel(plan=PLAN, final="Both tickets are handled."),
        [lookup_ticket, notify],
        system_prompt="You are a support agent.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    return spanpoint.GraphRunner(agent, name="support", strategy="calls")


def record(runner: spanpoint.GraphRunner, run_id: str) -> Any:
    with spanpoint.run(run_id):
        return runner.invoke(REQUEST, thread_id=f"thread-{run_id}")


# --- what a checkpoint keeps of its input ----------------------------------------------------


def test_a_checkpoint_keeps_what_entered_its_key_and_a_redacted_input_view(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    record(make_runner(tmp_path / "effects"), "orig")
    checkpoints = configured_sqlite.store.list_checkpoints("orig")
    assert [c.kind for c in checkpoints] == ["model_call", "tool_call"] * 3 + ["model_call"]
    for cp in checkpoints:
        # The key is what serde computes from the stored identity, ordinal and fingerprint:
        # so a fork can compute it again for another run id.
        assert cp.fingerprint and cp.identity and cp.identity.endswith("/" + cp.name)
        assert serde.checkpoint_key("orig", cp.identity, cp.ordinal, cp.fingerprint) == cp.key
        assert cp.input_view is not None
    first_model, first_tool = checkpoints[0], checkpoints[1]
    view = first_model.input_view
    assert [m["role"] for m in view["messages"]] == ["system", "human"]
    assert all(len(m["digest"]) == 64 for m in view["messages"])
    # No content capture by default (invariant 7): lengths and digests, no text.
    assert [m["text"] for m in view["messages"]] == [None, None]
    assert [t["name"] for t in view["tools"]] == ["lookup_ticket", "notify"]
    assert first_tool.input_view == {"args": {"ticket_id": 7}}
    notify_view = checkpoints[5].input_view
    assert notify_view["args"]["ticket_id"] == 7
    assert "sk-abcdefghijklmnopqrstuvwx" not in str(notify_view)
    # The last model call saw every message; the tool results differ by digest.
    last = checkpoints[-1].input_view["messages"]
    assert [m["role"] for m in last] == ["system", "human"] + ["ai", "tool"] * 3
    assert last[3]["digest"] != last[5]["digest"]


def test_message_text_is_kept_when_content_capture_is_on(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    spanpoint.configure(
        tracer_provider=configured_sqlite.provider,
        store=configured_sqlite.store,
        capture=CapturePolicy(content="SPAN_ONLY"),
    )
    record(make_runner(tmp_path / "effects"), "orig")
    last = configured_sqlite.store.list_checkpoints("orig")[-1].input_view["messages"]
    assert last[0]["text"] == "You are a support agent."
    assert last[3]["text"] == "ticket 7: printer out of toner"
    assert read_effects(tmp_path / "effects")["lookup_ticket:7"] == 1
