"""Tool calls as boundaries: parallel calls, per-tool policy, Commands, errors, secrets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException, tool
from langgraph.types import Command
from opentelemetry.trace import SpanKind, StatusCode

import spanpoint
from fakes import ConversationModel, count_effect, read_effects
from harness import count_redactions
from spanpoint import semconv
from spanpoint.capture import CapturePolicy
from spanpoint.telemetry.jsonl import span_to_dict

REQUEST = {"messages": [{"role": "user", "content": "go"}]}


def make_agent(plan: list[list[dict[str, Any]]], tools: list[Any], **kw: Any) -> Any:
    return create_agent(
        ConversationModel(plan=plan),
        tools,
        middleware=[spanpoint.CheckpointMiddleware(**kw)],
    )


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.txt"


def numbered_tool(effects: Path) -> Any:
    """A tool whose every execution returns a different number (its execution count)."""

    @tool
    def draw_number(pool: str) -> str:
        """Draw the next number from a pool."""
        return f"{pool}#{count_effect(effects, 'draw_number')}"

    return draw_number


def test_parallel_identical_calls_replay_their_own_results(configured: Any, effects: Path) -> None:
    twice = [{"name": "draw_number", "args": {"pool": "a"}}] * 2
    agent = make_agent([twice], [numbered_tool(effects)])
    with spanpoint.run("parallel"):
        first = [m.content for m in tool_messages(agent.invoke(REQUEST))]
    with spanpoint.run("parallel"):
        second = [m.content for m in tool_messages(agent.invoke(REQUEST))]
    assert sorted(first) == ["a#1", "a#2"]
    assert second == first
    assert read_effects(effects)["draw_number"] == 2


def test_identical_call_ids_replay_in_order_by_occurrence(configured: Any, effects: Path) -> None:
    """Same name, arguments and call id: each call is its own ToolNode task (a Send with its
    index), so the task anchor tells the calls apart and each counts from ordinal 0."""
    same = [{"name": "draw_number", "args": {"pool": "b"}, "id": "call_same"}] * 2
    agent = make_agent([same], [numbered_tool(effects)])

    async def once() -> list[Any]:
        async with spanpoint.run("same-id"):
            return [m.content for m in tool_messages(await agent.ainvoke(REQUEST))]

    first = asyncio.run(once())
    second = asyncio.run(once())
    # The two bodies run concurrently (sync tools go to a thread pool), so which occurrence
    # drew first varies; what must hold is that each occurrence replays its own recording.
    assert sorted(first) == ["b#1", "b#2"] and second == first
    spans = configured.spans("execute_tool")
    assert [s.attributes[semconv.BOUNDARY_ORDINAL] for s in spans] == [0, 0, 0, 0]
    keys = [s.attributes[semconv.CHECKPOINT_KEY] for s in spans]
    assert len(set(keys[:2])) == 2 and set(keys[:2]) == set(keys[2:])


def test_always_execute_tool_runs_again_and_disabled_tool_is_never_a_boundary(
    configured: Any, effects: Path
) -> None:
    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        count_effect(effects, "send_email")
        return f"sent to {to}"

    @tool
    def get_time() -> str:
        """Read the clock."""
        count_effect(effects, "get_time")
        return "noon"

    plan = [[{"name": "send_email", "args": {"to": "ann"}}, {"name": "get_time", "args": {}}]]
    policy = spanpoint.CallCheckpointPolicy(
        tools={"send_email": "always_execute", "get_time": False}
    )
    agent = make_agent(plan, [send_email, get_time], policy=policy)
    for _ in range(2):
        with spanpoint.run("policy"):
            agent.invoke(REQUEST)

    assert read_effects(effects) == {"send_email": 2, "get_time": 2}
    names = {cp.name for cp in configured.store.list_checkpoints("policy")}
    assert names == {"fake-chat"}  # neither tool committed anything
    emails = configured.spans("execute_tool send_email")
    assert len(emails) == 2
    assert all(s.attributes[semconv.CALL_MODE] == "always_execute" for s in emails)
    assert all(semconv.CHECKPOINT_KEY not in s.attributes for s in emails)
    assert all(s.attributes[semconv.RUN_ID] == "policy" for s in emails)  # still correlated
    assert configured.spans("execute_tool get_time") == []
    assert replayed_flags(configured, "chat") == [False, False, True, True]


def replayed_flags(telemetry: Any, prefix: str) -> list[bool]:
    return [bool(s.attributes.get(semconv.REPLAYED)) for s in telemetry.spans(prefix)]


def test_tool_returning_a_command_replays_an_equal_command(configured: Any, effects: Path) -> None:
    @tool
    def escalate(reason: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Escalate the ticket."""
        count_effect(effects, "escalate")
        message = ToolMessage(f"escalated: {reason}", tool_call_id=tool_call_id)
        return Command(update={"messages": [message]})

    agent = make_agent([[{"name": "escalate", "args": {"reason": "angry"}}]], [escalate])
    with spanpoint.run("command"):
        first = agent.invoke(REQUEST)
    with spanpoint.run("command"):
        second = agent.invoke(REQUEST)
    assert read_effects(effects)["escalate"] == 1
    assert [m.content for m in tool_messages(second)] == ["escalated: angry"]
    assert tool_messages(second)[0].tool_call_id == tool_messages(first)[0].tool_call_id
    span = configured.spans("execute_tool escalate")[-1]
    assert span.attributes[semconv.REPLAYED] is True
    assert span.attributes[semconv.TOOL_RESULT_TYPE] == "command"


def test_a_tool_error_marks_its_span_error_commits_nothing_and_runs_again(
    configured: Any, effects: Path
) -> None:
    """Issue 15 item 7: an error ToolMessage is a failed call returned as a value. Its span
    ends ERROR with error.type, so by invariant 1 nothing is committed, and the rerun calls
    the tool again (a transient failure gets its retry; docs/concepts.md, "Tool errors")."""

    @tool
    def flaky(ticket_id: int) -> str:
        """Fails once, then works."""
        if count_effect(effects, "flaky") == 1:
            raise ToolException("backend down")
        return "ok"

    flaky.handle_tool_error = True  # the model reads the error instead of the run failing
    agent = make_agent([[{"name": "flaky", "args": {"ticket_id": 1}}]], [flaky])
    with spanpoint.run("tool-error"):
        first = tool_messages(agent.invoke(REQUEST))
    with spanpoint.run("tool-error"):
        second = tool_messages(agent.invoke(REQUEST))
    assert first[0].status == "error"
    assert [(m.content, m.status) for m in second] == [("ok", "success")]
    assert read_effects(effects)["flaky"] == 2
    failed, succeeded = configured.spans("execute_tool flaky")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[semconv.ERROR_TYPE] == "tool_error"
    assert succeeded.status.status_code is StatusCode.OK
    assert succeeded.attributes[semconv.REPLAYED] is False


def test_execute_tool_span_shape(configured: Any) -> None:
    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        return "found"

    plan = [[{"name": "lookup_ticket", "args": {"ticket_id": 3}, "id": "call_1"}]]
    with spanpoint.run("tool-shape"):
        make_agent(plan, [lookup_ticket]).invoke(REQUEST)
    (span,) = configured.spans("execute_tool")
    assert span.name == "execute_tool lookup_ticket" and span.kind is SpanKind.INTERNAL
    assert span.attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert span.attributes[semconv.GEN_AI_TOOL_NAME] == "lookup_ticket"
    assert span.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert span.attributes[semconv.GEN_AI_TOOL_TYPE] == "function"
    assert span.attributes[semconv.BOUNDARY_KIND] == semconv.KIND_TOOL_CALL


SECRET_ARGS = {
    "ticket_id": 9,
    "api_key": "plain-secret-value-1",
    "note": "use sk-abcdefghijklmnopqrstuvwx now",
}


@pytest.mark.parametrize("content", ["NO_CONTENT", "SPAN_AND_EVENT"])
def test_secrets_in_tool_arguments_never_leave_the_process(configured: Any, content: str) -> None:
    spanpoint.configure(tracer_provider=configured.provider, capture=CapturePolicy(content=content))

    @tool
    def call_api(ticket_id: int, api_key: str, note: str) -> str:
        """Call the ticket API."""
        return "done"

    agent = make_agent([[{"name": "call_api", "args": SECRET_ARGS}]], [call_api])
    with spanpoint.run("secrets"):
        agent.invoke(REQUEST)
    with spanpoint.run("secrets"):
        agent.invoke(REQUEST)

    assert len(configured.spans("execute_tool call_api")) == 2
    exported = json.dumps([span_to_dict(s) for s in configured.spans()], default=str)
    views = json.dumps([cp.view for cp in configured.store.list_checkpoints("secrets")])
    for text in (exported, views):
        assert "plain-secret-value-1" not in text
        assert "sk-abcdefghijklmnopqrstuvwx" not in text
    (view,) = [
        cp.view for cp in configured.store.list_checkpoints("secrets") if cp.kind == "tool_call"
    ]
    assert view["args"]["api_key"] == "[REDACTED]" and view["args"]["ticket_id"] == 9
    if content == "SPAN_AND_EVENT":  # arguments are captured, redacted
        args = configured.spans("execute_tool")[0].attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]
        assert json.loads(args)["ticket_id"] == 9


def test_a_tool_calls_arguments_are_redacted_once_for_its_view_and_input_view(
    configured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoint's view and its input view show the same redacted arguments: one walk.
    args = {"ticket_id": 9, "api_key": "plain-secret-value-2"}
    walked = count_redactions(monkeypatch, args)

    @tool
    def call_api(ticket_id: int, api_key: str) -> str:
        """Call the ticket API."""
        return "done"

    agent = make_agent([[{"name": "call_api", "args": args}]], [call_api])
    with spanpoint.run("redact-once"):
        agent.invoke(REQUEST)
    (cp,) = [c for c in configured.store.list_checkpoints("redact-once") if c.kind == "tool_call"]
    assert cp.view["args"] == {"ticket_id": 9, "api_key": "[REDACTED]"}
    assert cp.input_view == {"args": cp.view["args"]}
    # Once by the tool call's boundary; the next model call's input view shows the AI message
    # that asked for the call, whose arguments it redacts as part of that message.
    assert len(walked) == 2, walked
