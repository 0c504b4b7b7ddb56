"""What a cassette call asked for, and what a miss says about it.

A call's request (messages with role and redacted text, tool definitions, model settings,
tool arguments) is kept with its entry: a reviewer reads it, ``match_on`` compares parts of
it, and a miss names the nearest recorded call and what changed against it.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from langchain_core.messages import BaseMessage

from spanpoint import semconv
from spanpoint.calls.inputs import message_views
from spanpoint.capture import CapturePolicy, truncate
from spanpoint.cassettes.files import Entry

CassetteMode = Literal["once", "none", "new_episodes", "all", "rewrite"]
MODES: tuple[str, ...] = get_args(CassetteMode)

#: What ``match_on`` may compare of a model call (its tool calls always compare name and
#: arguments): the model's name, the system prompt, the other messages, the tool
#: definitions, the model settings.
MATCH_FIELDS: tuple[str, ...] = ("model", "system_prompt", "messages", "tools", "settings")
_TEXT_LIMIT = 400  # characters of a message shown in a miss


def describe_messages(
    messages: Sequence[BaseMessage], capture: CapturePolicy
) -> list[dict[str, Any]]:
    """Each message's role, digest, whole redacted text and tool calls (no run-time ids):
    the description a checkpoint's input view holds (``spanpoint.calls.inputs``), with the
    text always, since a cassette exists to show what its calls asked."""
    return message_views(messages, capture, text=True, limit=None)


@dataclass
class Request:
    """A recorded or attempted call: its kind, path, and what it asked for."""

    kind: str
    path: str
    name: str
    detail: dict[str, Any]


def matched_view(kind: str, name: str, detail: Mapping[str, Any], match_on: frozenset[str]) -> Any:
    """What ``match_on`` compares of a call: the chosen parts of its request."""
    if kind != semconv.KIND_MODEL_CALL:
        return (kind, name, json.dumps(detail, sort_keys=True, default=str))
    messages = detail.get("messages") or []
    view: dict[str, Any] = {}
    if "model" in match_on:
        view["model"] = name
    if "system_prompt" in match_on:
        view["system_prompt"] = [m for m in messages if m.get("role") == "system"]
    if "messages" in match_on:
        view["messages"] = [m for m in messages if m.get("role") != "system"]
    if "tools" in match_on:
        view["tools"] = detail.get("tools")
    if "settings" in match_on:
        view["settings"] = detail.get("settings")
    return (kind, json.dumps(view, sort_keys=True, default=str))


@dataclass
class State:
    """One cassette session: its file, mode and options, what it loaded, played and saw."""

    path: Path
    mode: CassetteMode
    replay_only: bool
    capture: CapturePolicy
    match_on: frozenset[str] | None = None
    allow_playback_repeats: bool = True
    loaded: dict[str, Entry] = field(default_factory=dict)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    played: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def position(self, key: str) -> int:
        """The entry's number in the file (1-based), as a miss message names it."""
        return list(self.loaded).index(key) + 1 if key in self.loaded else 0


# --- what a miss says ---------------------------------------------------------------------------


def refused_message(state: State, kind: str, path: str, key: str) -> str:
    what = "model call" if kind == semconv.KIND_MODEL_CALL else "tool call"
    return (
        f"{what} {path!r} is recorded in cassette {str(state.path)!r} (entry "
        f"#{state.position(key)}) but its entry could not be replayed (refused, corrupt, or "
        f"written by another version), and mode {state.mode!r} replays only: spanpoint would "
        "have to call it. Record the cassette again (mode='rewrite') if the change is intended."
    )


def no_boundary_message(state: State, request: Request) -> str:
    return (
        f"model call {request.path!r} has no boundary to replay (an explicit model.stream() "
        f"or astream() is never recorded) and cassette {str(state.path)!r} replays only "
        f"(mode {state.mode!r}): spanpoint would have to call the model. Call the model with "
        "invoke/ainvoke inside the cassette (LangGraph streams a graph's tokens from those too)."
    )


def miss_message(state: State, request: Request) -> str:
    what = "model call" if request.kind == "model_call" else "tool call"
    head = (
        f"{what} {request.path!r} is not in cassette {str(state.path)!r} (mode {state.mode!r}): "
        "spanpoint would have to call it. "
    )
    fix = (
        "Record again with mode='new_episodes' or 'all' (pytest: --spanpoint-record=all) if "
        "the change is intended."
    )
    redacted = [i for i, e in enumerate(state.loaded.values(), start=1) if e.redacted]
    if redacted:
        fix += (
            f" Recorded call #{redacted[0]}'s output was redacted (it held a credential): the "
            "calls after it see the redacted text and cannot match. Keep credentials out of "
            "what a model answers (give them to tools through config or InjectedToolArg)."
        )
    nearest = _nearest(state, request)
    if nearest is None:
        return head + f"No {what} named {request.name!r} was recorded. " + fix
    index, recorded = nearest
    changes = request_changes(request.kind, recorded["detail"], request.detail)
    shown = (
        "; ".join(changes)
        if changes
        else "nothing in the call itself: it was recorded at another position of the "
        "session (a call is keyed by content and position, so replay the session's calls in "
        "the order they were recorded)"
    )
    nearest_text = f"Nearest recorded call: #{index} {recorded['path']!r}. "
    return head + nearest_text + f"What changed: {shown}. " + fix


def _nearest(state: State, request: Request) -> tuple[int, dict[str, Any]] | None:
    best: tuple[int, int, dict[str, Any]] | None = None
    for index, entry in enumerate(state.loaded.values(), start=1):
        cp, recorded = entry.checkpoint, entry.request
        if recorded is None or cp.kind != request.kind or cp.name != request.name:
            continue
        score = request_likeness(request.kind, recorded["detail"], request.detail)
        candidate = {"path": cp.path, **recorded}
        if best is None or score > best[0]:
            best = (score, index, candidate)
    return None if best is None else (best[1], best[2])


def request_likeness(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> int:
    """How alike two recorded requests of one kind are (higher: more alike)."""
    if kind == "tool_call":
        return int(old.get("args") == new.get("args"))
    a, b = old.get("messages") or [], new.get("messages") or []
    same = sum(1 for x, y in zip(a, b, strict=False) if x == y)
    return same * 4 - abs(len(a) - len(b)) + (old.get("tools") == new.get("tools"))


def short_value(value: Any) -> str:
    """``value`` as a short quoted text, for a message."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return repr(truncate(text, _TEXT_LIMIT))


def request_changes(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed from request ``old`` to ``new``: the first divergent message, each tool
    definition and model setting, or a tool call's arguments."""
    if kind == "tool_call":
        return [f"arguments {short_value(old.get('args'))} -> {short_value(new.get('args'))}"]
    out: list[str] = []
    a, b = old.get("messages") or [], new.get("messages") or []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == y:
            continue
        if x is None:
            out.append(f"message {i} ({y['role']}) is new: {short_value(y['text'])}")
        elif y is None:
            out.append(f"message {i} ({x['role']}) is gone: {short_value(x['text'])}")
        else:
            role = x["role"] if x["role"] == y["role"] else f"{x['role']} -> {y['role']}"
            label = "system prompt" if role == "system" else role
            if x.get("text") != y.get("text"):
                was, now = short_value(x["text"]), short_value(y["text"])
                out.append(f"message {i} ({label}) {was} -> {now}")
            else:
                old_calls, new_calls = x.get("tool_calls"), y.get("tool_calls")
                was, now = short_value(old_calls), short_value(new_calls)
                out.append(f"message {i} ({role}) tool calls {was} -> {now}")
        break  # the first divergent message: later ones follow from it
    old_tools = {_tool_name(t): t for t in old.get("tools") or []}
    new_tools = {_tool_name(t): t for t in new.get("tools") or []}
    for name in sorted(set(old_tools) | set(new_tools)):
        if name not in new_tools:
            out.append(f"tool definition {name!r} removed")
        elif name not in old_tools:
            out.append(f"tool definition {name!r} added")
        elif old_tools[name] != new_tools[name]:
            was, now = short_value(old_tools[name]), short_value(new_tools[name])
            out.append(f"tool definition {name!r} {was} -> {now}")
    old_set, new_set = old.get("settings") or {}, new.get("settings") or {}
    for key in sorted(set(old_set) | set(new_set)):
        if old_set.get(key) != new_set.get(key):
            was, now = short_value(old_set.get(key)), short_value(new_set.get(key))
            out.append(f"model setting {key!r} {was} -> {now}")
    return out


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        if isinstance(fn, Mapping) and fn.get("name"):
            return str(fn["name"])
        return str(tool.get("name") or tool.get("type") or json.dumps(tool, sort_keys=True))
    return str(tool)
