"""Whole tool results (issue 15 items 3 and 9): output and writes, ids re-bound by position.

Unit tests of ``spanpoint.calls.results`` (through LangGraph's serializer, as a checkpoint
row is) and end-to-end tests through ``CheckpointMiddleware``'s tool seam: Deep Agents'
``write_file`` (a bare ``ToolMessage`` plus a ``files`` write through the task's ``send``),
a swarm-shaped ``Command`` that carries the whole conversation, and results that cannot be
replayed exactly (warned, not committed, executed again).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send
from pydantic import BaseModel

from spanpoint import serde
from spanpoint.calls.results import (
    NotReplayable,
    capture_writes,
    encode_tool_result,
    input_messages_of,
    recording_writes,
    replay_tool_result,
)

SEND = "__pregel_send"  # LangGraph's private key, as a task's config holds it


def stored(value: Any) -> Any:
    """``value`` after a round trip through a checkpoint row."""
    return serde.loads(*serde.dumps(value))


def conversation(ids: tuple[str, str, str]) -> list[Any]:
    human, ai, call = ids
    return [
        HumanMessage("Invoice bob, then book his flight.", id=human),
        AIMessage("", id=ai, tool_calls=[{"name": "transfer_to_bob", "args": {}, "id": call}]),
    ]


def handoff(inputs: list[Any], call_id: str) -> Command[Any]:
    """What langgraph_swarm's handoff tool returns: the whole list plus its ToolMessage."""
    message = ToolMessage("Transferred to bob", name="transfer_to_bob", tool_call_id=call_id)
    return Command(
        goto="bob",
        graph=Command.PARENT,
        update={"messages": [*inputs, message], "active_agent": "bob"},
    )


# --- unit: encode and replay -------------------------------------------------------------


def test_a_replayed_handoff_holds_the_current_messages_and_appends_nothing_twice() -> None:
    first = conversation(("h1", "a1", "c1"))
    saved = stored(encode_tool_result(handoff(first, "c1"), [], first, tool_call_id="c1"))
    assert "h1" not in repr(saved) and "a1" not in repr(saved), "an input id was stored"

    now = conversation(("h2", "a2", "c2"))  # attempt 2: new uuids, a new provider call id
    out = replay_tool_result(saved, input_messages=now, tool_call_id="c2", config=None)
    assert isinstance(out, Command) and out.goto == "bob" and out.graph == Command.PARENT
    messages = out.update["messages"]
    assert messages[0] is now[0] and messages[1] is now[1]
    assert messages[2].tool_call_id == "c2" and messages[2].content == "Transferred to bob"
    assert out.update["active_agent"] == "bob"
    merged = add_messages(now, messages)
    assert [m.type for m in merged] == ["human", "ai", "tool"], "the replay duplicated input"


def test_without_re_binding_the_stored_command_would_duplicate_the_conversation() -> None:
    """The failure the re-binding prevents (issue 15 item 9), shown on LangGraph's reducer."""
    first = conversation(("h1", "a1", "c1"))
    stale = stored(handoff(first, "c1"))
    now = conversation(("h2", "a2", "c2"))
    assert len(add_messages(now, stale.update["messages"])) == 5


def test_send_args_and_removals_are_re_bound_by_position() -> None:
    first = conversation(("h1", "a1", "c1"))
    answer = ToolMessage("ok", tool_call_id="c1")
    out = Command(
        graph=Command.PARENT,
        goto=[Send("billing", {"messages": [*first, answer]})],
        update={"messages": [RemoveMessage(id="h1")]},
    )
    saved = stored(encode_tool_result(out, [], first))  # no call id: placed by the input
    now = conversation(("h2", "a2", "c2"))
    again = replay_tool_result(saved, input_messages=now, tool_call_id=None, config=None)
    [send] = again.goto
    assert send.node == "billing" and send.arg["messages"][:2] == now
    assert send.arg["messages"][2].tool_call_id == "c2"
    assert again.update["messages"][0].id == "h2"


def test_minted_messages_keep_their_ids_and_a_tool_message_gets_the_current_call_id() -> None:
    first = conversation(("h1", "a1", "c1"))
    back = [
        AIMessage("back", id="m1", tool_calls=[{"name": "back", "args": {}, "id": "x1"}]),
        ToolMessage("back", tool_call_id="x1", id="m2"),
    ]
    saved = stored(encode_tool_result(Command(update={"messages": back}), [], first))
    again = replay_tool_result(saved, input_messages=conversation(("h2", "a2", "c2")),
                               tool_call_id="c2", config=None)  # fmt: skip
    assert [m.id for m in again.update["messages"]] == ["m1", "m2"]
    assert again.update["messages"][1].tool_call_id == "x1", "a minted pair was re-bound"

    plain = stored(encode_tool_result(ToolMessage("42", tool_call_id="c1", artifact={"n": 42}),
                                      [], None))  # fmt: skip
    out = replay_tool_result(plain, input_messages=None, tool_call_id="c9", config=None)
    assert out.tool_call_id == "c9" and out.artifact == {"n": 42} and out.content == "42"


def test_a_changed_input_is_not_replayed() -> None:
    first = conversation(("h1", "a1", "c1"))
    saved = stored(encode_tool_result(handoff(first, "c1"), [], first, tool_call_id="c1"))
    changed = [HumanMessage("Cancel everything.", id="h2"), first[1]]
    with pytest.raises(NotReplayable, match="input changed"):
        replay_tool_result(saved, input_messages=changed, tool_call_id="c2", config=None)
    with pytest.raises(NotReplayable, match="input has 1"):
        replay_tool_result(saved, input_messages=first[:1], tool_call_id="c2", config=None)
    with pytest.raises(NotReplayable, match="input is unknown"):
        replay_tool_result(saved, input_messages=None, tool_call_id="c2", config=None)
    with pytest.raises(NotReplayable, match="not a spanpoint tool result"):
        replay_tool_result("sent", input_messages=first, tool_call_id="c2", config=None)


def test_results_that_cannot_be_re_bound_are_refused_at_commit() -> None:
    with pytest.raises(NotReplayable, match="input messages are unknown"):
        encode_tool_result(handoff(conversation(("h1", "a1", "c1")), "c1"), [], None)

    class State(BaseModel):
        messages: list[Any]

    with pytest.raises(NotReplayable, match="State holding messages"):
        encode_tool_result(Command(update=State(messages=[HumanMessage("x")])), [], [])


def test_writes_are_recorded_forwarded_and_re_issued_through_the_current_task() -> None:
    sent: list[Any] = []
    config = {"configurable": {SEND: sent.extend, "thread_id": "t"}}
    for_tool, writes = capture_writes(config)
    assert config["configurable"][SEND] == sent.extend, "the caller's config was changed"
    for_tool["configurable"][SEND]([("files", {"/plan.md": {"content": "42"}})])
    assert sent == writes == [("files", {"/plan.md": {"content": "42"}})]

    saved = stored(encode_tool_result(ToolMessage("Updated /plan.md", tool_call_id="c1"),
                                      writes, []))  # fmt: skip
    now: list[Any] = []
    out = replay_tool_result(saved, input_messages=[], tool_call_id="c2",
                             config={"configurable": {SEND: now.extend}})  # fmt: skip
    assert now == [("files", {"/plan.md": {"content": "42"}})] and out.tool_call_id == "c2"
    with pytest.raises(NotReplayable, match="no LangGraph task"):
        replay_tool_result(saved, input_messages=[], tool_call_id="c2", config={})

    same, none = capture_writes({"configurable": {}})
    assert none == [] and same == {"configurable": {}}


def test_recording_writes_swaps_the_configurable_only_for_the_block() -> None:
    sent: list[Any] = []
    configurable = {SEND: sent.extend}
    config = {"configurable": configurable}
    with recording_writes(config) as writes:
        config["configurable"][SEND]([("todos", [1])])
    assert config["configurable"] is configurable and writes == [("todos", [1])] == sent


def test_input_messages_come_from_state_injected_state_or_the_runtime() -> None:
    messages = conversation(("h", "a", "c"))
    assert input_messages_of({"messages": messages}) is messages
    assert input_messages_of(messages) is messages

    class Runtime:
        def __init__(self) -> None:
            self.state = {"messages": messages}

    call = {"type": "tool_call", "args": {"runtime": Runtime(), "x": 1}, "name": "t", "id": "c"}
    assert input_messages_of(None, call) is messages
    assert input_messages_of(None, {"state": {"messages": messages}}) is messages
    assert input_messages_of(None, {"x": 1}) is None
