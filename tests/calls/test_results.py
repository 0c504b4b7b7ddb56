"""Whole tool results (issue 15 items 3 and 9): output and writes, ids re-bound by position.

Unit tests of ``spanpoint.calls.results`` (through LangGraph's serializer, as a checkpoint
row is) and end-to-end tests through ``CheckpointMiddleware``'s tool seam: Deep Agents'
``write_file`` (a bare ``ToolMessage`` plus a ``files`` write through the task's ``send``),
a swarm-shaped ``Command`` that carries the whole conversation, and results that cannot be
replayed exactly (warned, not committed, executed again).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph.message import add_messages
from langgraph.prebuilt import InjectedState
from langgraph.types import Command, Send
from pydantic import BaseModel

import spanpoint
from fakes import ConversationModel, count_effect, read_effects
from spanpoint import semconv, serde
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
        goto=[Send("billing", {"messages": [*first, answer]}, timeout=30.0)],
        update={"messages": [RemoveMessage(id="h1")]},
    )
    saved = stored(encode_tool_result(out, [], first))  # no call id: placed by the input
    now = conversation(("h2", "a2", "c2"))
    again = replay_tool_result(saved, input_messages=now, tool_call_id=None, config=None)
    [send] = again.goto
    assert send.node == "billing" and send.arg["messages"][:2] == now
    assert send.timeout == out.goto[0].timeout, "the Send lost its timeout"
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


def test_a_tool_message_minted_for_the_call_is_stored_without_indexing_the_conversation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The common tool result, a ToolMessage the ToolNode minted for this call (no id yet),
    # answers the call: nothing to place in the input, so a long conversation costs the
    # commit nothing (issue 18: the per-call cost must not grow with the run).
    from spanpoint.calls import results

    built: list[int] = []
    real = results._backwards
    monkeypatch.setattr(
        results, "_backwards", lambda items: built.append(len(items)) or real(items)
    )
    long = [m for i in range(500) for m in conversation((f"h{i}", f"a{i}", f"c{i}"))]
    saved = stored(encode_tool_result(ToolMessage("42", tool_call_id="c499"), [], long,
                                      tool_call_id="c499"))  # fmt: skip
    assert built == [], "the conversation was indexed for a minted ToolMessage"
    out = replay_tool_result(saved, input_messages=long, tool_call_id="c9", config=None)
    assert (out.content, out.tool_call_id) == ("42", "c9")
    # A returned message with an id is still placed in the input, so its id is re-bound.
    encode_tool_result(Command(update={"messages": [long[0]]}), [], long, tool_call_id="c499")
    assert built == [len(long)]


def test_input_messages_are_found_only_in_a_list_of_messages() -> None:
    messages = conversation(("h", "a", "c"))
    assert input_messages_of({"messages": messages}) is messages
    assert input_messages_of({"messages": [*messages, {"role": "user"}]}) is None
    assert input_messages_of({"messages": []}) == []


class Quote(BaseModel):
    amount: int


def test_a_pydantic_artifact_reads_back_as_itself() -> None:
    """A message is written field by field, so a model in one of its fields reads back as
    that model (LangGraph's own writer would flatten it to a dict)."""
    serde.set_allowed_types([Quote])
    try:
        message = ToolMessage("quoted", tool_call_id="c1", artifact=Quote(amount=42))
        again = serde.loads(*serde.dumps(message))
        assert type(again.artifact) is Quote and again == message
        for output in (message, Command(update={"messages": [message]})):
            saved = stored(encode_tool_result(output, [], [], tool_call_id="c1"))
            out = replay_tool_result(saved, input_messages=[], tool_call_id="c2", config=None)
            again = out if isinstance(out, ToolMessage) else out.update["messages"][0]
            assert again.artifact == Quote(amount=42) and again.tool_call_id == "c2"
    finally:
        serde.set_allowed_types([])


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

    def read(channel: str, fresh: bool = False) -> Any:
        return {"messages": []}[channel]  # a graph without the files channel: KeyError

    changed = {"configurable": {SEND: now.extend, "__pregel_read": read}}
    with pytest.raises(NotReplayable, match="'files', which this graph no longer has"):
        replay_tool_result(saved, input_messages=[], tool_call_id="c2", config=changed)
    assert len(now) == 1, "a refused replay wrote something"

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

    def read(channel: str, fresh: bool = False) -> Any:
        return {"messages": messages}[channel]

    task = {"configurable": {"__pregel_read": read}}  # a task's own read of its input
    assert input_messages_of(None, {"x": 1}, task) is messages
    no_messages = {"configurable": {"__pregel_read": lambda channel, fresh=False: {}[channel]}}
    assert input_messages_of(None, {"x": 1}, no_messages) is None


# --- end to end through CheckpointMiddleware ---------------------------------------------


def executed(telemetry: Any) -> list[str]:
    """The boundaries that executed (not replayed) since the last call; clears the exporter."""
    spans = telemetry.exporter.get_finished_spans()
    telemetry.exporter.clear()
    return [s.name for s in spans if (s.attributes or {}).get(semconv.REPLAYED) is False]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_deep_agents_files_survive_a_replay(configured: Any, use_async: bool) -> None:
    """write_file returns a bare ToolMessage; the file goes out through the task's send."""
    deepagents = pytest.importorskip("deepagents")
    plan = [[{"name": "write_file", "args": {"file_path": "/plan.md", "content": "Refund 42."}}]]

    def agent() -> Any:
        model = ConversationModel(plan=plan, final="Planned.")
        return deepagents.create_deep_agent(
            model=model, middleware=[spanpoint.CheckpointMiddleware()]
        )

    request = {"messages": [{"role": "user", "content": "Plan the refund."}]}

    def attempt() -> Any:
        if not use_async:
            with spanpoint.run("deep-files"):
                return agent().invoke(request)

        async def main() -> Any:
            async with spanpoint.run("deep-files"):
                return await agent().ainvoke(request)

        return asyncio.run(main())

    first = attempt()
    assert first["files"]["/plan.md"]["content"] == "Refund 42."
    assert "execute_tool write_file" in executed(configured)
    second = attempt()
    assert executed(configured) == [], "the rerun executed calls"
    assert second["files"] == first["files"], "the file written in attempt 1 was lost"
    assert [m.content for m in second["messages"]] == [m.content for m in first["messages"]]


def swarm_like_agent(effects: Path) -> Any:
    """An agent whose tool returns a Command carrying the whole conversation (swarm's shape)."""

    @tool
    def hand_over(
        state: Annotated[dict[str, Any], InjectedState],
        tool_call_id: Annotated[str, InjectedToolCallId],
    ) -> Command[Any]:
        """Hand the conversation over."""
        count_effect(effects, "hand_over")
        answer = ToolMessage("handed over", name="hand_over", tool_call_id=tool_call_id)
        return Command(update={"messages": [*state["messages"], answer]})

    model = ConversationModel(plan=[[{"name": "hand_over", "args": {}}]], final="Over to you.")
    return create_agent(model, [hand_over], middleware=[spanpoint.CheckpointMiddleware()])


def test_a_command_with_the_whole_conversation_replays_without_duplicates(
    configured: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    request = {"messages": [{"role": "user", "content": "Please hand me over."}]}
    runs = []
    for _ in range(3):
        with spanpoint.run("handover"):
            out = swarm_like_agent(effects).invoke(request)
        runs.append(([m.type for m in out["messages"]], executed(configured)))
    assert runs[0][0] == ["human", "ai", "tool", "ai"]
    assert [types for types, _ in runs] == [runs[0][0]] * 3, "a replay duplicated messages"
    assert [done for _, done in runs[1:]] == [[], []]
    assert read_effects(effects) == {"hand_over": 1}


def test_a_result_that_cannot_be_replayed_is_not_committed_and_executes_again(
    configured: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"

    class Handover(BaseModel):
        messages: list[Any]

    @tool
    def opaque(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Return messages inside a model spanpoint cannot walk."""
        count_effect(effects, "opaque")
        return Command(update=Handover(messages=[ToolMessage("x", tool_call_id=tool_call_id)]))

    def agent() -> Any:
        model = ConversationModel(plan=[[{"name": "opaque", "args": {}}]])
        return create_agent(model, [opaque], middleware=[spanpoint.CheckpointMiddleware()])

    request = {"messages": [{"role": "user", "content": "go"}]}
    for _ in range(2):
        with spanpoint.run("opaque") as scope:
            agent().invoke(request)
        assert any("opaque" in w and "not committed" in w for w in scope.warnings)
    assert read_effects(effects) == {"opaque": 2}
    assert "opaque" not in {cp.name for cp in configured.store.list_checkpoints("opaque")}


def test_a_replay_whose_input_changed_executes_again(configured: Any, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    for text in ("Please hand me over.", "Hand me over, now."):
        request = {"messages": [{"role": "user", "content": text}]}
        with spanpoint.run("changed") as scope:
            out = swarm_like_agent(effects).invoke(request)
        assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"]
        assert out["messages"][0].content == text
    assert read_effects(effects) == {"hand_over": 2}, "a Command of another input was replayed"
    # The injected state is part of the tool call's key: the second input is another call,
    # executed without trying (and refusing) the first one's recording.
    assert not any("cannot be replayed exactly" in w for w in scope.warnings)
