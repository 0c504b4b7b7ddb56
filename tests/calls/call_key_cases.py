"""Generated model calls for the key properties: a conversation as plain JSON, built into
LangChain messages with any run-time ids, and its key from the one spec builder.

A conversation is a list of message specs (dicts; see :func:`build`). ``salt`` names the
run-time ids the messages get (message ids, tool-call ids): two builds with different salts
differ only in what a provider never uses to answer. Runs in the test process and in a fresh
interpreter (``python call_key_cases.py`` reads specs as JSON lines on stdin and prints one
key per line), so keys can be compared across processes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from fakes import ConversationModel
from spanpoint.calls import spec as call_spec
from spanpoint.capture import CapturePolicy

MODEL = ConversationModel()
CAPTURE = CapturePolicy()


def call_ids(specs: list[dict[str, Any]], salt: str) -> list[str]:
    """The tool-call ids of every call in the conversation, in order."""
    count = sum(len(s.get("calls") or ()) for s in specs)
    return [f"call-{salt}-{n}" for n in range(count)]


def build(specs: list[dict[str, Any]], salt: str) -> list[BaseMessage]:
    """The messages ``specs`` describe, with run-time ids named by ``salt``.

    A spec: ``kind`` (human, system, chat, ai, tool), ``content`` (text or parts), optional
    ``name``; a chat message's ``role``; an AI message's ``calls`` (``[name, args]``) and
    ``kwargs`` (its ``additional_kwargs``; with ``raw``, the provider's raw tool calls are
    repeated there, ids included, as OpenAI's are); a tool message's ``answers`` (the
    position of the call it answers, modulo the number of calls before it) and ``status``.
    """
    ids = call_ids(specs, salt)
    seen = 0
    out: list[BaseMessage] = []
    for i, spec in enumerate(specs):
        common: dict[str, Any] = {"content": spec["content"], "id": f"lc_run--{salt}-{i}"}
        if spec.get("name") is not None:
            common["name"] = spec["name"]
        kind = spec["kind"]
        message: BaseMessage
        if kind == "human":
            message = HumanMessage(**common)
        elif kind == "system":
            message = SystemMessage(**common)
        elif kind == "chat":
            message = ChatMessage(role=spec["role"], **common)
        elif kind == "ai":
            calls = []
            for name, args in spec.get("calls") or ():
                calls.append({"name": name, "args": args, "id": ids[seen], "type": "tool_call"})
                seen += 1
            kwargs = dict(spec.get("kwargs") or {})
            if spec.get("raw") and calls:
                kwargs["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                    }
                    for c in calls
                ]
            message = AIMessage(tool_calls=calls, additional_kwargs=kwargs, **common)
        else:
            answered = ids[spec["answers"] % seen] if seen else f"orphan-{salt}-{i}"
            message = ToolMessage(
                tool_call_id=answered, status=spec.get("status", "success"), **common
            )
        out.append(message)
    return out


def key(
    messages: list[BaseMessage],
    stored_as: str,
    settings: dict[str, Any] | None = None,
    tools: list[Any] | None = None,
) -> str:
    """The key the spec builder gives a model call with ``messages``."""
    call = call_spec.ModelCall(
        model=MODEL,
        messages=messages,
        stored_as=stored_as,
        settings=settings or {},
        tools=tools or (),
    )
    fingerprint = call_spec.model_call_spec(call, CAPTURE, replay=True).fingerprint
    assert fingerprint is not None
    return fingerprint


def case_key(case: dict[str, Any]) -> str:
    """The key of one case: ``{"specs", "salt", "stored_as", "settings"}``."""
    return key(build(case["specs"], case["salt"]), case["stored_as"], case.get("settings"))


if __name__ == "__main__":
    for line in sys.stdin:
        if line.strip():
            print(case_key(json.loads(line)))
