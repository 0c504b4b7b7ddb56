"""Call identity: what changes a model or tool call's fingerprint, and what must not."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from fakes import ConversationModel
from spanpoint.calls import attributes as genai_spans
from spanpoint.calls import identity as call_identity
from spanpoint.calls.attributes import model_info
from spanpoint.calls.identity import model_call_fingerprint, tool_call_fingerprint


@tool
def lookup(n: int) -> str:
    """Look up an item."""
    return str(n)


def conversation() -> list[Any]:
    return [
        HumanMessage("find 1", id="h-1"),
        AIMessage("", id="a-1", tool_calls=[{"name": "lookup", "args": {"n": 1}, "id": "c-1"}]),
        ToolMessage("one", tool_call_id="c-1", id="t-1"),
    ]


def fingerprint(messages: list[Any] | None = None, **change: Any) -> str:
    model = change.pop("model", ConversationModel())
    arguments: dict[str, Any] = {
        "settings": {},
        "tool_choice": None,
        "response_format": None,
        "tools": [lookup],
        "system_message": SystemMessage("be brief"),
        "messages": conversation() if messages is None else messages,
    }
    arguments.update(change)
    return model_call_fingerprint(model, model_info(model)[2], **arguments)


def test_run_time_ids_do_not_change_a_model_call_fingerprint() -> None:
    renamed = conversation()
    renamed[0].id, renamed[1].id, renamed[2].id = "x", "y", "z"
    renamed[1].tool_calls[0]["id"] = "other-call-id"  # the model's ids change on every call
    renamed[2].tool_call_id = "other-call-id"  # and the result answers the new id
    assert fingerprint(renamed) == fingerprint()


def test_tool_call_ids_count_by_position_never_by_value() -> None:
    """Issue 15 item 8: ids minted outside a boundary (uuid4 hand-backs, provider ids) change
    on every attempt; which result answers which call is what identifies the conversation."""
    two = [
        HumanMessage("find 1 and 2"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "lookup", "args": {"n": 1}, "id": "a"},
                {"name": "lookup", "args": {"n": 2}, "id": "b"},
            ],
        ),
        ToolMessage("one", tool_call_id="a"),
        ToolMessage("two", tool_call_id="b"),
    ]
    base = fingerprint(two)
    renamed = [m.model_copy(deep=True) for m in two]
    renamed[1].tool_calls[0]["id"], renamed[1].tool_calls[1]["id"] = "x1", "x2"
    renamed[2].tool_call_id, renamed[3].tool_call_id = "x1", "x2"
    assert fingerprint(renamed) == base  # new values, same positions
    crossed = [m.model_copy(deep=True) for m in two]
    crossed[2].tool_call_id, crossed[3].tool_call_id = "b", "a"  # results answer the other call
    assert fingerprint(crossed) != base


def test_every_part_of_the_request_changes_a_model_call_fingerprint() -> None:
    base = fingerprint()
    edited = conversation()
    edited[2] = ToolMessage("two", tool_call_id="c-1")
    changes = [
        {"messages": edited},
        {"messages": conversation()[:2]},
        {"system_message": SystemMessage("be verbose")},
        {"system_message": None},
        {"settings": {"temperature": 0.2}},
        {"tool_choice": "lookup"},
        {"tools": []},
        {"model": ConversationModel(model_name="other-model")},
        {"response_format": {"type": "json_schema", "schema": {"title": "Answer"}}},
    ]
    fingerprints = [fingerprint(**change) for change in changes]
    assert base not in fingerprints
    assert len(set(fingerprints)) == len(changes)


def test_a_message_changed_in_place_is_hashed_again() -> None:
    messages = conversation()
    before = fingerprint(messages)
    # HumanInTheLoopMiddleware edits an AIMessage's tool calls by assigning a new list.
    messages[1].tool_calls = [{"name": "lookup", "args": {"n": 2}, "id": "c-1"}]
    assert fingerprint(messages) != before
    messages[0].content = "find 2"
    assert fingerprint(messages) != before


def test_tool_call_fingerprint_covers_name_arguments_and_definition_not_call_id() -> None:
    base = tool_call_fingerprint("lookup", {"n": 1, "q": "a"}, lookup)
    assert tool_call_fingerprint("lookup", {"q": "a", "n": 1}, lookup) == base  # key order

    @tool
    def changed(n: int, q: str) -> str:
        """Look up an item, differently."""
        return q

    others = {
        tool_call_fingerprint("search", {"n": 1, "q": "a"}, lookup),
        tool_call_fingerprint("lookup", {"n": 2, "q": "a"}, lookup),
        tool_call_fingerprint("lookup", {"n": 1, "q": "a"}, changed),  # another definition
        tool_call_fingerprint("lookup", {1: "mixed", "n": 1}, lookup),  # unsortable keys
    }
    assert base not in others and len(others) == 4


def test_the_digest_cache_does_not_keep_messages_alive() -> None:
    messages = conversation()
    fingerprint(messages)
    refs = [weakref.ref(m) for m in messages]
    assert all(id(m) in call_identity._MESSAGE_DIGESTS for m in messages)
    keys = [id(m) for m in messages]
    del messages
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert not any(
        key in call_identity._MESSAGE_DIGESTS and call_identity._MESSAGE_DIGESTS[key][0]() is None
        for key in keys
    )


def test_a_model_whose_fields_change_is_identified_again() -> None:
    model = ConversationModel()
    before = fingerprint(model=model)
    assert model_info(model)[1] == "fake-chat"
    model.model_name = "other-model"  # memoized per model object, but only while it holds
    assert model_info(model)[1] == "other-model"
    assert fingerprint(model=model) != before
    model.model_name = "fake-chat"
    assert fingerprint(model=model) == before


def test_the_model_memo_does_not_keep_models_alive() -> None:
    model = ConversationModel()
    fingerprint(model=model)
    ref = weakref.ref(model)
    key = id(model)
    del model
    gc.collect()
    assert ref() is None
    assert key not in genai_spans._MODEL_INFO._entries
    assert key not in call_identity._MODEL_IDENTITIES._entries


def scratch(messages: list[Any]) -> str:
    """The fingerprint with every message encoded again (no memo, no running state)."""
    model = ConversationModel()
    return call_identity.model_call_fingerprint_from_scratch(
        model,
        model_info(model)[2],
        settings={},
        tool_choice=None,
        response_format=None,
        tools=[lookup],
        system_message=SystemMessage("be brief"),
        messages=messages,
    )


def test_a_growing_conversation_hashes_like_a_fresh_one_and_sees_edits() -> None:
    messages = conversation()
    fingerprint(messages[:2])
    grown = fingerprint(messages)  # the first two messages' digests are memoized
    assert grown == scratch(messages)
    fingerprint(messages[:2])
    messages[0].content = "find 3"  # an earlier message edited in place
    edited = fingerprint(messages)
    assert edited != grown
    assert edited == scratch(messages)
