"""The conversation is hashed incrementally (issue 18, run length), and never wrongly.

Each model call of an agent sees the previous call's messages, the same objects, plus new
ones; its fingerprint extends the previous call's running state by the new messages only. Each
test compares the fingerprint with :func:`model_call_fingerprint_from_scratch`, which encodes
every message again: appended, edited in place, removed, reordered and branched conversations
must give exactly the fingerprint computed from scratch.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel

from fakes import ConversationModel
from spanpoint.calls import identity
from spanpoint.calls.attributes import model_info


@tool
def lookup(n: int) -> str:
    """Look up an item."""
    return str(n)


MODEL = ConversationModel()


def arguments(messages: list[Any]) -> dict[str, Any]:
    return {
        "settings": {},
        "tool_choice": None,
        "response_format": None,
        "tools": [lookup],
        "system_message": SystemMessage("be brief"),
        "messages": messages,
    }


def fingerprint(messages: list[Any]) -> str:
    """The fingerprint as a model call computes it (a new list, as LangGraph passes one)."""
    return identity.model_call_fingerprint(MODEL, model_info(MODEL)[2], **arguments(list(messages)))


def scratch(messages: list[Any]) -> str:
    return identity.model_call_fingerprint_from_scratch(
        MODEL, model_info(MODEL)[2], **arguments(list(messages))
    )


def turn(n: int, call_id: str | None = None) -> list[BaseMessage]:
    """One agent turn: an AI message calling ``lookup`` and the tool's answer."""
    cid = call_id or f"call-{n}"
    return [
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"n": n}, "id": cid}]),
        ToolMessage(f"item {n}", tool_call_id=cid),
    ]


def agent(turns: int) -> list[BaseMessage]:
    """A conversation grown call by call, each call's fingerprint checked against scratch."""
    messages: list[BaseMessage] = [HumanMessage("find the items")]
    assert fingerprint(messages) == scratch(messages)
    for n in range(turns):
        messages.extend(turn(n))
        assert fingerprint(messages) == scratch(messages)
    return messages


def test_a_growing_conversation_hashes_only_its_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages = agent(30)
    walked: list[int] = []
    original = identity.message_digests

    def counting(found: Any, snapshots: Any = None) -> Any:
        walked.append(len(found))
        return original(found, snapshots)

    monkeypatch.setattr(identity, "message_digests", counting)
    for n in range(30, 40):
        messages.extend(turn(n))
        assert fingerprint(messages) == scratch(messages)
    # Each call walked the two new messages only (scratch() walks none: it has no memo).
    assert walked == [2] * 10, walked


def test_the_same_conversation_again_gives_the_same_fingerprint() -> None:
    messages = agent(3)
    assert fingerprint(messages) == fingerprint(messages) == scratch(messages)


@pytest.mark.parametrize(
    "edit",
    [
        # HumanInTheLoopMiddleware replaces an AIMessage's tool calls by assignment.
        lambda m: setattr(m[1], "tool_calls", [{"name": "lookup", "args": {"n": 9}, "id": "x"}]),
        lambda m: setattr(m[0], "content", "find other items"),
        lambda m: setattr(m[2], "tool_call_id", "call-1"),  # answers another call now
        lambda m: setattr(m[2], "status", "error"),
        lambda m: setattr(m[3], "name", "planner"),  # supervisor libraries rename messages
    ],
    ids=["tool_calls", "content", "tool_call_id", "status", "name"],
)
def test_a_message_edited_in_place_is_hashed_again(edit: Any) -> None:
    messages = agent(3)
    before = fingerprint(messages)
    edit(messages)
    after = fingerprint(messages)
    assert after == scratch(messages)
    assert after != before
    messages.extend(turn(3))  # and the conversation that grows from the edited one
    assert fingerprint(messages) == scratch(messages)


def test_an_edit_seen_by_a_later_call_of_a_longer_conversation() -> None:
    messages = agent(4)
    fingerprint(messages[:3])  # an earlier, shorter conversation is kept too
    messages[1].tool_calls = [{"name": "lookup", "args": {"n": 5}, "id": "call-0"}]
    assert fingerprint(messages[:3]) == scratch(messages[:3])
    assert fingerprint(messages) == scratch(messages)


def test_removed_and_reordered_messages() -> None:
    messages = agent(4)
    removed = messages[:3] + messages[5:]  # a turn taken out of the middle
    assert fingerprint(removed) == scratch(removed)
    swapped = [messages[0], messages[3], messages[4], messages[1], messages[2], *messages[5:]]
    assert fingerprint(swapped) == scratch(swapped)
    assert fingerprint(swapped) != fingerprint(messages)
    dropped_last = messages[:-1]
    assert fingerprint(dropped_last) == scratch(dropped_last)


def test_a_message_replaced_by_an_equal_copy() -> None:
    messages = agent(3)
    copied = [*messages[:2], messages[2].model_copy(), *messages[3:]]
    assert fingerprint(copied) == scratch(copied) == fingerprint(messages)
    changed = [*messages[:2], messages[2].model_copy(update={"content": "other"}), *messages[3:]]
    assert fingerprint(changed) == scratch(changed) != fingerprint(messages)


def test_branches_from_one_prefix_keep_their_own_tool_call_positions() -> None:
    """Two continuations of one conversation, hashed alternately (parallel sub-agents, a
    retry that took another path): tool-call ids get positions per branch."""
    base = agent(2)
    left, right, third = list(base), list(base), list(base)
    for n in range(3):
        left.extend(turn(10 + n, call_id=f"left-{n}"))
        right.extend(turn(20 + n, call_id="call-0" if n == 0 else f"right-{n}"))  # reuses an id
        third.append(ToolMessage("late answer", tool_call_id=f"left-{n}"))
        for branch in (left, right, third):
            assert fingerprint(branch) == scratch(branch)


def test_ids_count_by_position_in_the_incremental_state_too() -> None:
    first = agent(5)
    renamed: list[BaseMessage] = [first[0]]
    for n in range(5):
        renamed.extend(turn(n, call_id=f"other-{n}"))
        assert fingerprint(renamed) == scratch(renamed)
    assert fingerprint(renamed) == fingerprint(first)


class _OwnSetattr(HumanMessage):
    """A message class whose attribute assignment bypasses the edit hook."""

    def __setattr__(self, name: str, value: Any) -> None:
        BaseModel.__setattr__(self, name, value)


def test_a_message_class_that_bypasses_the_hook_is_never_trusted() -> None:
    messages: list[BaseMessage] = [_OwnSetattr("find the items"), *turn(0)]
    fingerprint(messages)
    messages[0].name = "someone"  # not noted: the conversation was never kept
    messages.extend(turn(1))
    assert fingerprint(messages) == scratch(messages)


def test_a_hook_replaced_by_another_library_is_installed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages = agent(2)
    fingerprint(messages)
    # Another library puts pydantic's own assignment back: edits go unnoticed meanwhile.
    monkeypatch.setattr(BaseMessage, "__setattr__", BaseModel.__setattr__)
    messages[2].status = "error"
    assert fingerprint(messages) == scratch(messages)
    messages[1].name = "renamed"  # noted again
    assert fingerprint(messages) == scratch(messages)


def test_kept_conversations_do_not_keep_messages_alive() -> None:
    messages = agent(5)
    refs = [weakref.ref(m) for m in messages]
    gc.collect()
    gc.disable()  # freed as soon as the conversation is: no cycle left for the collector
    try:
        del messages
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()


def test_the_hook_keeps_pydantic_assignment_semantics() -> None:
    message = AIMessage("hello")
    fingerprint([message])
    message.content = "changed"
    assert message.content == "changed"
    assert "content" in message.model_fields_set
    with pytest.raises(AttributeError):
        del message.no_such_field


def test_an_evicted_conversation_lets_its_prefix_go() -> None:
    """At most a bounded number of running states are kept; one evicted releases its prefix at
    once, even while its last message lives on (held by a caller)."""
    messages = agent(2)
    last = messages[-1]
    refs = [weakref.ref(m) for m in messages[:-1]]
    del messages
    others = [HumanMessage(f"other conversation {n}") for n in range(identity._MAX_CONVERSATIONS)]
    gc.collect()
    gc.disable()  # released by reference counting, not left to the cyclic collector
    try:
        for other in others:  # kept alive, so their running states stay and push the first out
            fingerprint([other])
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()
    assert last.content == "item 1"


def test_a_growing_conversation_keeps_one_running_state() -> None:
    """The state a call extended is superseded: a conversation of 200 calls keeps one state,
    not one prefix per call (64 prefixes of 2,000 messages were 128,000 references for every
    full garbage collection to walk), and a branch from a superseded prefix is still right."""
    identity._CONVERSATIONS.clear()
    messages = agent(1)
    branch_point = list(messages)
    for n in range(1, 200):
        messages.extend(turn(n))
        fingerprint(messages)
    kept = list(identity._CONVERSATIONS.values())
    assert [state.length for state in kept] == [len(messages)]
    # A second branch from the superseded prefix hashes from the memo: the same as scratch.
    branch = [*branch_point, *turn(999)]
    assert fingerprint(branch) == scratch(branch)


# --- changes inside a field, with no assignment ----------------------------------------------

_LEAVES = st.one_of(
    st.integers(-3, 3),
    st.booleans(),
    st.floats(allow_nan=False, width=16),
    st.sampled_from(["", "x", "wire all money"]),
    st.none(),
)


def _containers(message: BaseMessage) -> list[Any]:
    """Every dict and list inside the fields a fingerprint reads, where any value may go: not
    the lists of content parts and tool calls themselves, whose items must stay dicts."""
    found: list[Any] = []

    def walk(value: Any, top: bool) -> None:
        if isinstance(value, dict | list):
            if not (top and isinstance(value, list)):
                found.append(value)
            for item in value.values() if isinstance(value, dict) else value:
                walk(item, False)

    fields = message.__dict__
    for name in ("content", "additional_kwargs", "tool_calls", "invalid_tool_calls"):
        walk(fields.get(name), True)
    return found


def _rich_conversation() -> list[BaseMessage]:
    return [
        HumanMessage([{"type": "text", "text": "find the items"}], additional_kwargs={}),
        AIMessage(
            "",
            tool_calls=[{"name": "lookup", "args": {"n": 1, "flags": [1, 2]}, "id": "c1"}],
            additional_kwargs={"reasoning": {"effort": "low"}},
        ),
        ToolMessage([{"type": "text", "text": "item 1"}], tool_call_id="c1"),
        AIMessage("done", additional_kwargs={}),
    ]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data())
def test_a_change_inside_a_field_is_never_missed(data: st.DataObject) -> None:
    """A container inside a hashed field changed in place (no assignment for the hook to
    see): every later fingerprint is the one computed from scratch, and so is every digest,
    whatever the change (a new key, a changed leaf, 1 for True or 1.0, an item appended)."""
    messages = _rich_conversation()
    assert fingerprint(messages) == scratch(messages)
    identity.message_digests(messages)  # memoized
    for _ in range(data.draw(st.integers(1, 3))):
        message = data.draw(st.sampled_from(messages))
        targets = _containers(message)
        parts = message.content if isinstance(message.content, list) else None
        if parts is not None and data.draw(st.booleans()):
            parts.append({"type": "text", "text": data.draw(st.sampled_from(["x", "more"]))})
            targets = []
        if not targets:
            assert fingerprint(messages) == scratch(messages)
            continue
        target = data.draw(st.sampled_from(targets))
        leaf = data.draw(_LEAVES)
        if isinstance(target, dict):
            key = data.draw(st.sampled_from([*target, "extra"]))
            target[key] = leaf
        elif target and data.draw(st.booleans()):
            target[data.draw(st.integers(0, len(target) - 1))] = leaf
        else:
            target.append(leaf)
        assert fingerprint(messages) == scratch(messages)
        assert identity.message_digests(messages) == [
            identity.message_digest_from_scratch(m) for m in messages
        ]
    messages.extend(turn(7))
    assert fingerprint(messages) == scratch(messages)


def test_a_field_marshal_cannot_write_is_hashed_at_every_call() -> None:
    class Text(str):
        pass

    messages = agent(2)
    messages[0].content = [{"type": "text", "text": Text("find the items")}]
    assert fingerprint(messages) == scratch(messages)
    messages[0].content[0]["text"] = Text("wire all money")  # in place, unseen by marshal
    assert fingerprint(messages) == scratch(messages)
    assert identity.message_digest(messages[0]) == identity.message_digest_from_scratch(messages[0])
