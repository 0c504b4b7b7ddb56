"""An input view carries its JSON text, joined from per-message parts memoized once per run;
the store writes that text. It must be the very text the store would have encoded, for
every shape a view takes, or a checkpoint's input view (diffs, forks) would silently differ."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from spanpoint._json import Encoded, encoded_text, json_text
from spanpoint.calls.inputs import VIEW_MESSAGES, model_input_view
from spanpoint.capture import CapturePolicy
from spanpoint.stores import SqliteStore
from spanpoint.stores.base import Checkpoint


def conversation(turns: int) -> list[Any]:
    messages: list[Any] = [HumanMessage("Résumé ticket T-1 — 東京 \u2603")]
    for n in range(turns):
        messages.append(
            AIMessage(
                "",
                tool_calls=[
                    {"name": "lookup", "args": {"ticket": f"T-{n}", "api_key": "sk-secret"},
                     "id": f"call-{n}"},
                ],
            )
        )  # fmt: skip
        messages.append(ToolMessage(f"ticket T-{n}: open", tool_call_id=f"call-{n}"))
    return messages


POLICIES = {
    "default": CapturePolicy(),
    "content": CapturePolicy(content="SPAN_ONLY"),
}


@pytest.mark.parametrize("policy", list(POLICIES), ids=list(POLICIES))
@pytest.mark.parametrize("turns", [0, 3, VIEW_MESSAGES], ids=["one", "short", "cut"])
@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
def test_the_text_is_what_the_store_would_encode(policy: str, turns: int, system: bool) -> None:
    view = model_input_view(
        conversation(turns),
        POLICIES[policy],
        system_message=SystemMessage("You resolve tickets.") if system else None,
        tools=[{"name": "lookup", "description": "find a ticket", "parameters": {}}],
        settings={"temperature": 0.2, "api_key": "sk-secret"},
    )
    assert type(view) is Encoded
    assert encoded_text(view) == json_text(dict(view))
    assert json.loads(encoded_text(view)) == view
    assert ("omitted" in view) is (2 * turns + 1 > VIEW_MESSAGES)
    assert "sk-secret" not in encoded_text(view)


def test_a_growing_conversation_gives_each_call_its_own_text() -> None:
    messages = conversation(2)
    first = model_input_view(messages, CapturePolicy())
    messages.append(AIMessage("done"))
    second = model_input_view(messages, CapturePolicy())
    assert encoded_text(first) == json_text(dict(first))
    assert encoded_text(second) == json_text(dict(second))
    assert len(second["messages"]) == len(first["messages"]) + 1


def test_an_edited_message_is_encoded_again() -> None:
    messages = conversation(1)
    before = encoded_text(model_input_view(messages, CapturePolicy(content="SPAN_ONLY")))
    messages[0].content = "another ticket"
    after = model_input_view(messages, CapturePolicy(content="SPAN_ONLY"))
    assert encoded_text(after) == json_text(dict(after)) != before
    assert "another ticket" in encoded_text(after)


def test_a_copy_without_its_text_is_encoded_from_its_values() -> None:
    view = model_input_view(conversation(1), CapturePolicy())
    copied = dataclasses.asdict(Checkpoint("k", "r", "p", "n", "model_call", 0, "", b"", "0" * 32,
                                           "0" * 16, input_view=view))["input_view"]  # fmt: skip
    assert type(copied) is Encoded and not hasattr(copied, "text")
    assert encoded_text(copied) == json_text(dict(view))


def test_a_setting_json_cannot_hold_is_described_in_the_text_too() -> None:
    class Opaque:
        pass

    view = model_input_view(conversation(1), CapturePolicy(), settings={"client": Opaque()})
    assert encoded_text(view) == json_text(dict(view))
    assert json.loads(encoded_text(view))["settings"] == {"client": "<Opaque>"}


def test_the_store_keeps_the_view_it_was_given(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    view = model_input_view(
        conversation(VIEW_MESSAGES), CapturePolicy(), system_message=SystemMessage("sys")
    )
    cp = Checkpoint("k" * 64, "run", "p", "n", "model_call", 0, "t", b"out", "0" * 32, "0" * 16,
                    input_view=view)  # fmt: skip
    store.claim(cp.key, "me", 30, fresh=True)
    assert store.put(cp, owner="me")
    (kept,) = store.list_checkpoints("run")
    assert kept.input_view == view


@pytest.mark.parametrize("turns", [0, 3, VIEW_MESSAGES], ids=["one", "short", "cut"])
@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
def test_the_view_shows_the_digests_its_key_covered(turns: int, system: bool) -> None:
    # A model call's key reads each message's bytes once; its input view (made when the call
    # ends) takes the digests from those bytes. Unchanged, that is the view made from
    # scratch; a message changed in place in between shows the content the key covered.
    from fakes import ConversationModel
    from spanpoint.calls import identity

    messages = conversation(turns)
    system_message = SystemMessage("You resolve tickets.") if system else None
    snapshots: list[bytes] = []
    identity.model_call_fingerprint(
        ConversationModel(),
        {},
        settings={},
        tool_choice=None,
        response_format=None,
        tools=[],
        system_message=system_message,
        messages=messages,
        snapshots=snapshots,
    )
    assert len(snapshots) == len(messages)
    covered = [identity.message_digest_from_scratch(m).hex() for m in messages]
    policy = CapturePolicy()
    view = model_input_view(messages, policy, system_message=system_message, snapshots=snapshots)
    assert view == model_input_view(messages, policy, system_message=system_message)
    messages[-1].content = messages[-1].content + " (edited)"  # an assignment the hook sees
    changed = messages[-1 if turns else 0]
    if isinstance(changed, AIMessage):
        changed.tool_calls[0]["args"]["ticket"] = "T-999"  # in place: no hook sees it
    later = model_input_view(messages, policy, system_message=system_message, snapshots=snapshots)
    shown = [m["digest"] for m in later["messages"][1 if system else 0 :]]
    assert shown == covered[-len(shown) :]
    assert encoded_text(later) == json_text(dict(later))
