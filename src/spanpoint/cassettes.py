"""Test cassettes: record an agent's model and tool calls once, replay them anywhere.

>>> with spanpoint.cassette("tests/cassettes/refund.json"):     # doctest: +SKIP
...     result = agent.invoke({"messages": [("user", "Refund ticket 42")]})

A cassette is a durable run whose checkpoint store is a file. Opening one installs the call
seams (``spanpoint.calls.seams``), so every chat-model and tool call of the block is a
boundary with no other set-up: a plain ``create_agent`` agent, a custom node that calls a
model, a sub-agent. Each call is looked up in the cassette by its checkpoint key and
replayed from it: no model is called, no tool runs. The key is the one spanpoint always
computes (content fingerprint and position) under a fixed run id, so it never depends on a
run id, a process or the wall clock. A tool whose policy is ``always_execute`` is no
boundary and runs as it always does.

Modes (as in vcrpy and pytest-recording):

- ``once`` (default): record when the file is absent; otherwise replay only;
- ``none``: replay only (a missing or empty file is an error too);
- ``new_episodes``: replay what is recorded, execute and record what is new;
- ``all``: execute every call; the file keeps the recorded calls this session did not make
  again and takes the new answers of those it did;
- ``rewrite``: execute every call; the file holds exactly this session's calls.

Replaying only means offline: a call that would reach a model or a tool raises
:class:`~spanpoint.errors.CassetteMissError` before it does, whether it is not in the
cassette, its recorded entry was refused (tampered, corrupt, written by another version),
or it has no boundary to replay (an explicit ``model.stream()``, an input that cannot be
fingerprinted). A miss names the call, the nearest recorded call and what changed.

The file is one JSON document: entries sorted by key, keys sorted, two-space indent, and
nothing that changes from one recording to the next (no trace or span ids, no LangChain
``lc_run--`` ids, no clock values), so recording the same calls with the same answers again
rewrites no line, parallel calls included. It is written to a temp file beside it (created
exclusively, never through a symlink) and renamed over it. Outputs are LangGraph's own
serialized form spelled out as JSON, read back through spanpoint's allow list
(:func:`spanpoint.serde.loads`). Everything written is redacted by the capture policy's key
rule and text patterns, so a credential never reaches a file committed to git; an output
that redaction had to change cannot replay exactly, and the calls after it miss loudly.
docs/cassettes.md has the options (``match_on``, ``before_record``, ``strict``,
``allow_playback_repeats``) and the pytest plugin.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import itertools
import json
import logging
import os
import re
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from uuid import UUID

import ormsgpack
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.tracers.context import register_configure_hook

from spanpoint import semconv
from spanpoint.calls import seams
from spanpoint.calls.inputs import message_views
from spanpoint.capture import REDACTED, CapturePolicy, is_secret_key, redact_text, truncate
from spanpoint.config import settings
from spanpoint.errors import CassetteMissError, ConfigurationError
from spanpoint.run import RunScope, current_frame, current_run, run
from spanpoint.stores.base import Checkpoint, Claim
from spanpoint.stores.memory import MemoryStore

logger = logging.getLogger("spanpoint")

CassetteMode = Literal["once", "none", "new_episodes", "all", "rewrite"]
MODES: tuple[str, ...] = get_args(CassetteMode)

#: What a cassette holds. A graph call or a step is never recorded: its identity is its input,
#: not the code it runs, so replaying it would hide a changed prompt or tool; it executes, and
#: the model and tool calls inside it replay.
CALL_KINDS = frozenset({semconv.KIND_MODEL_CALL, semconv.KIND_TOOL_CALL})

#: What ``match_on`` may compare of a model call (its tool calls always compare name and
#: arguments): the model's name, the system prompt, the other messages, the tool
#: definitions, the model settings.
MATCH_FIELDS: tuple[str, ...] = ("model", "system_prompt", "messages", "tools", "settings")

#: The run id of every cassette: keys depend on the calls alone, not on a file's name.
CASSETTE_RUN_ID = "spanpoint.cassette"
FORMAT_VERSION = 1
_TEXT_LIMIT = 400  # characters of a message shown in a miss
_KEY = re.compile(r"[0-9a-f]{64}")
#: LangChain's per-run message id (``lc_run--<uuid>``): a new one on every recording.
_RUN_ID_PREFIX = "lc_run-"
#: What boundary.py warns right before a body executes in place of a replay.
_EXECUTING = re.compile(r"\bexecuting\b")
#: A cassette entry keeps no trace ids, so its replay has no link to an original span.
_NO_LINK = "malformed trace id '' or span id ''"


class CassetteError(ConfigurationError):
    """A cassette file cannot be used: malformed, unsafe to write, or replayed incompletely.

    The message names the file, the entry (by position) and the problem, and what to do.
    """


# --- the file: LangGraph's msgpack spelled out as JSON ---------------------------------------


class _Ext:
    """A msgpack extension value (LangGraph encodes a message, a pydantic model, … so)."""

    __slots__ = ("code", "value")

    def __init__(self, code: int, value: Any) -> None:
        self.code, self.value = code, value


def _unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data, ext_hook=lambda code, inner: _Ext(code, _unpack(inner)))


def _pack(value: Any) -> bytes:
    return ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS)


def _to_json(value: Any) -> Any:
    """A msgpack-decoded value as JSON: extension types and bytes spelled out, maps whose keys
    are not all strings (or look like this encoding's markers) as pairs."""
    if isinstance(value, _Ext):
        return {"$ext": value.code, "$data": _to_json(value.value)}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _to_json(v) for k, v in value.items()}
        return {"$map": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if "$ext" in value:
            return ormsgpack.Ext(int(value["$ext"]), _pack(_from_json(value["$data"])))
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"], validate=True)
        if "$map" in value:
            return {_hashable(_from_json(k)): _from_json(v) for k, v in value["$map"]}
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def encode_output(output_type: str, data: bytes) -> Any:
    """A stored output as JSON (``msgpack`` spelled out; anything else as base64)."""
    if output_type == "msgpack":
        try:
            decoded = _unpack(data)
        except Exception:  # not msgpack after all: kept exactly, as bytes
            return {"$bytes": base64.b64encode(data).decode()}
        return _to_json(decoded)
    return {"$bytes": base64.b64encode(data).decode()}


def decode_output(output_type: str, value: Any) -> bytes:
    """The stored bytes of :func:`encode_output`'s JSON."""
    if isinstance(value, dict) and set(value) == {"$bytes"}:
        return base64.b64decode(value["$bytes"], validate=True)
    return _pack(_from_json(value))


def _redact_tree(value: Any, extra: frozenset[str], masked: bool = False) -> Any:
    """Every text redacted, every value under a secret key masked (JSON tree of an output):
    the capture policy's own key rule (:func:`~spanpoint.capture.is_secret_key`) and text
    patterns (:func:`~spanpoint.capture.redact_text`), without its size bounds (an output
    must stay whole to replay).

    Under a secret key a scalar is masked whatever its type, and a mapping or list keeps its
    shape: its texts are masked and its numbers kept. A count is never a credential, and a
    reply's usage (``token_usage``) must replay as numbers, or LangChain cannot add it up.
    """
    if isinstance(value, str):
        return REDACTED if masked else redact_text(value)
    if isinstance(value, list):
        return [_redact_tree(v, extra, masked) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and is_secret_key(k, extra):
                out[k] = _redact_tree(v, extra, True) if isinstance(v, dict | list) else REDACTED
            else:
                out[k] = _redact_tree(v, extra, masked)
        return out
    return value


def _scrub_run_ids(value: Any) -> Any:
    """The JSON tree without LangChain's per-run message ids: a message that had one
    replays with none (LangGraph gives it a fresh id, as it does any id-less message)."""
    if isinstance(value, list):
        return [_scrub_run_ids(v) for v in value]
    if isinstance(value, dict):
        return {
            k: None
            if k == "id" and isinstance(v, str) and v.startswith(_RUN_ID_PREFIX)
            else _scrub_run_ids(v)
            for k, v in value.items()
        }
    return value


# --- what a call asked for (for a miss's message and for match_on) ----------------------------


def describe_messages(
    messages: Sequence[BaseMessage], capture: CapturePolicy
) -> list[dict[str, Any]]:
    """Each message's role, digest, whole redacted text and tool calls (no run-time ids):
    the description a checkpoint's input view holds (``spanpoint.calls.inputs``), with the
    text always, since a cassette exists to show what its calls asked."""
    return message_views(messages, capture, text=True, limit=None)


@dataclass
class _Request:
    """A recorded or attempted call: its kind, path, and what it asked for."""

    kind: str
    path: str
    name: str
    detail: dict[str, Any]


def _matched_view(kind: str, name: str, detail: Mapping[str, Any], match_on: frozenset[str]) -> Any:
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


# --- the cassette's store ----------------------------------------------------------------------


@dataclass
class _Entry:
    checkpoint: Checkpoint
    request: dict[str, Any] | None
    redacted: bool = False


@dataclass
class _State:
    path: Path
    mode: CassetteMode
    replay_only: bool
    capture: CapturePolicy
    match_on: frozenset[str] | None = None
    allow_playback_repeats: bool = True
    loaded: dict[str, _Entry] = field(default_factory=dict)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    played: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def position(self, key: str) -> int:
        """The entry's number in the file (1-based), as a miss message names it."""
        return list(self.loaded).index(key) + 1 if key in self.loaded else 0


_ACTIVE: ContextVar[_Handler | None] = ContextVar("spanpoint_cassette", default=None)
#: A model call seen by the callback *before* its boundary opened (the model seam on
#: ``_generate_with_cache`` opens it after ``on_chat_model_start``): (parent frame identity,
#: request), taken by the next claim in this context, dropped when the call ends.
_PENDING: ContextVar[tuple[str, _Request] | None] = ContextVar(
    "spanpoint_cassette_pending", default=None
)


_SESSIONS = itertools.count(1)


class CassetteStore(MemoryStore):
    """The cassette's checkpoints in memory; a claim that misses a call the callback saw
    before its boundary opened is that call's miss (or its recording)."""

    def __init__(self, state: _State) -> None:
        super().__init__()
        self.state = state

    def start_run(self, run_id: str, name: str | None) -> int:
        """A new attempt number for every cassette session of this process.

        Keys never contain it, but what LangGraph task a call runs in is counted per (run,
        attempt) (``spanpoint.calls.tasks``): two sessions of one process must not share
        that count, or the second would key its calls as a later execution of the first's
        tasks and miss what a fresh process recorded.
        """
        super().start_run(run_id, name)
        return next(_SESSIONS)

    def claim(self, key: str, owner: str, ttl_s: float, *, fresh: bool = False) -> Claim:
        """A committed call replays; a missing one whose request is pending matches by
        ``match_on``, is recorded, or, replaying only, raises :class:`CassetteMissError`
        before anything executes."""
        state = self.state
        pending = _PENDING.get()
        if pending is not None:
            frame = current_frame()
            if frame is None or frame.identity != pending[0]:
                pending = None
            else:
                _PENDING.set(None)
        found = super().claim(key, owner, ttl_s, fresh=fresh)
        if found.state == "committed":
            self._played(key, pending[1] if pending else None)
            return found
        if pending is None or key in state.loaded:
            return found
        request = pending[1]
        request.path = _child_path(pending[0], request.name)
        matched = _match(state, request)
        if matched is not None:
            self.release(key, owner)
            self._played(matched.checkpoint.key, request)
            return Claim("committed", dataclasses.replace(matched.checkpoint, key=key))
        if state.replay_only:
            self.release(key, owner)
            raise CassetteMissError(_miss_message(state, request))
        with state.lock:
            state.requests[key] = {"kind": request.kind, "detail": request.detail}
        return found

    def _played(self, key: str, request: _Request | None) -> None:
        state = self.state
        with state.lock:
            repeated = state.played[key] > 0 and key in state.loaded
            state.played[key] += 1
        if repeated and not state.allow_playback_repeats:
            path = state.loaded[key].checkpoint.path
            raise CassetteMissError(
                f"recorded call #{state.position(key)} {path!r} of cassette "
                f"{str(state.path)!r} was already played once in this session and "
                "allow_playback_repeats is False; pass allow_playback_repeats=True when a "
                "call is meant to replay again (a resumed interrupt replays the calls before it)"
            )


def _match(state: _State, request: _Request) -> _Entry | None:
    """The recorded call that ``match_on`` finds equal to ``request``: the first one not
    played yet, else the first one (a repeat, which ``allow_playback_repeats`` decides)."""
    if state.match_on is None or request.kind != semconv.KIND_MODEL_CALL:
        return None
    wanted = _matched_view(request.kind, request.name, request.detail, state.match_on)
    repeat = None
    for key, entry in state.loaded.items():
        recorded, cp = entry.request, entry.checkpoint
        if recorded is None or cp.kind != request.kind:
            continue
        if _parent(cp.path) != _parent(request.path):
            continue
        view = _matched_view(cp.kind, cp.name, recorded.get("detail") or {}, state.match_on)
        if view != wanted:
            continue
        if state.played[key] == 0:
            return entry
        repeat = repeat or entry
    return repeat


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _child_path(parent_identity: str, name: str) -> str:
    frame = current_frame()
    parent = frame.path if frame is not None and frame.identity == parent_identity else ""
    return f"{parent}/{name}" if parent else name


# --- the callbacks: each call right before it reaches its model or tool -----------------------

#: The two ways a chat model is called with no boundary to replay it: ``stream`` and
#: ``astream`` go to the provider without passing the model seam.
_STREAM_CODES = frozenset({BaseChatModel.stream.__code__, BaseChatModel.astream.__code__})


def _streamed() -> bool:
    """Whether the model call being started is an explicit ``stream``/``astream``."""
    frame = sys._getframe(2)
    for _ in range(40):  # the callback manager's frames, then the model's
        if frame is None:
            return False
        if frame.f_code in _STREAM_CODES:
            return True
        frame = frame.f_back
    return False


class _Handler(BaseCallbackHandler):
    """Sees each model and tool call right before it would reach the model or the tool."""

    raise_error = True  # a miss must stop the call, not be logged
    run_inline = True  # in the call's own context: its boundary frame is the current one

    def __init__(self, state: _State) -> None:
        self.state = state

    def _executing_key(self, kind: str, name: str | None) -> tuple[str, str] | None:
        """(key, path) of the boundary this call executes in, when it is a cassette call."""
        scope, frame = current_run(), current_frame()
        if scope is None or scope.run_id != CASSETTE_RUN_ID or frame is None:
            return None
        if not frame.key or getattr(frame, "kind", kind) != kind:
            return None  # not inside its own boundary: always_execute, or not a boundary
        if name and frame.path.rsplit("/", 1)[-1] != name:
            return None
        return frame.key, frame.path

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record what a model call asked for; in replay, a call reaching here is a miss."""
        params = dict(kwargs.get("invocation_params") or {})
        meta = kwargs.get("metadata") or {}
        name = meta.get("ls_model_name")
        scope, frame = current_run(), current_frame()
        if scope is None or scope.run_id != CASSETTE_RUN_ID or frame is None:
            return
        capture = self.state.capture
        tools = params.pop("tools", None)
        detail = {
            "messages": describe_messages(messages[0] if messages else [], capture),
            "tools": capture.redact(tools) if tools is not None else [],
            "settings": capture.redact({k: v for k, v in params.items() if k != "_type"}),
        }
        found = self._executing_key("model_call", str(name) if name else None)
        if found is None:
            request = _Request("model_call", "", str(name or ""), detail)
            if self.state.replay_only and _streamed():
                request.path = _child_path(frame.identity, request.name)
                raise CassetteMissError(_no_boundary_message(self.state, request))
            # Its boundary is not open yet (a seam opens it inside): the next claim in this
            # context is this call's. A call that never gets a boundary drops it at its end.
            _PENDING.set((frame.identity, request))
            return
        self._seen(_Request("model_call", found[1], found[1].rsplit("/", 1)[-1], detail), found[0])

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """The model call ended: a request still pending had no boundary."""
        _PENDING.set(None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """The model call failed: a request still pending had no boundary."""
        _PENDING.set(None)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a tool call's arguments; in replay, a tool call reaching here is a miss."""
        name = str((serialized or {}).get("name") or kwargs.get("name") or "")
        found = self._executing_key("tool_call", name)
        if found is None:
            return
        args = inputs if inputs is not None else input_str
        detail = {"tool": name, "args": self.state.capture.redact(args)}
        self._seen(_Request("tool_call", found[1], name, detail), found[0])

    def _seen(self, request: _Request, key: str) -> None:
        state = self.state
        if state.replay_only:
            if key in state.loaded:  # recorded, yet executing: its entry was refused
                raise CassetteMissError(_refused_message(state, request.kind, request.path, key))
            raise CassetteMissError(_miss_message(state, request))
        if key in state.loaded:
            return  # new_episodes re-executing a refused entry: recorded again below
        with state.lock:
            state.requests[key] = {"kind": request.kind, "detail": request.detail}


def _guard_warnings(scope: RunScope, state: _State) -> None:
    """Make the cassette's run raise where a boundary warns that it will execute.

    Every path on which spanpoint executes a boundary's body in place of replaying it warns
    first, from the boundary, before the body runs: a refused, corrupt or unreadable
    checkpoint, an input that cannot be fingerprinted. Replaying only, each is a miss.
    """
    warn = scope.warn

    def guarded(message: str) -> None:
        if _NO_LINK in message:
            return  # a cassette keeps no trace ids: its replays link to no original span
        warn(message)
        if state.replay_only and _EXECUTING.search(message):
            raise CassetteMissError(
                f"a call would reach its model or tool although cassette "
                f"{str(state.path)!r} replays only (mode {state.mode!r}): {message}. "
                "A refused or corrupt entry, or one written by another spanpoint or "
                "LangChain version, is never executed in its place: record the cassette "
                "again (mode='rewrite') if the change is intended."
            )

    scope.warn = guarded  # type: ignore[method-assign]


def _refused_message(state: _State, kind: str, path: str, key: str) -> str:
    what = "model call" if kind == semconv.KIND_MODEL_CALL else "tool call"
    return (
        f"{what} {path!r} is recorded in cassette {str(state.path)!r} (entry "
        f"#{state.position(key)}) but its entry could not be replayed (refused, corrupt, or "
        f"written by another version), and mode {state.mode!r} replays only: spanpoint would "
        "have to call it. Record the cassette again (mode='rewrite') if the change is intended."
    )


def _no_boundary_message(state: _State, request: _Request) -> str:
    return (
        f"model call {request.path!r} has no boundary to replay (an explicit model.stream() "
        f"or astream() is never recorded) and cassette {str(state.path)!r} replays only "
        f"(mode {state.mode!r}): spanpoint would have to call the model. Call the model with "
        "invoke/ainvoke inside the cassette (LangGraph streams a graph's tokens from those too)."
    )


def _miss_message(state: _State, request: _Request) -> str:
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


def _nearest(state: _State, request: _Request) -> tuple[int, dict[str, Any]] | None:
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


register_configure_hook(_ACTIVE, inheritable=True)

BeforeRecord = Callable[[dict[str, Any]], "dict[str, Any] | None"]


class cassette:
    """Record the model and tool calls of the block once, replay them on every later run.

    Args:
        path: the cassette file (created on record; ``.json`` by convention).
        mode: ``"once"`` (default), ``"none"``, ``"new_episodes"``, ``"all"`` or
            ``"rewrite"`` (see the module docstring).
        capture: the redaction policy for the file (default: ``configure``'s).
        match_on: what a model call must share with a recorded one to replay it when its
            key differs, from :data:`MATCH_FIELDS` (``("messages", "tools")`` ignores the
            system prompt, the model name and its settings). Default: the key alone.
        before_record: called with each new entry (a JSON dict: ``kind``, ``path``,
            ``request``, ``output``…) before it is written; returns the entry to write, or
            None to leave the call out of the cassette.
        allow_playback_repeats: whether a recorded call may replay more than once in one
            session (a resumed interrupt replays the calls before it).
        strict: when the block ends without an error, raise :class:`CassetteError` if a
            recorded call was never played (see :attr:`unplayed`).

    Usable with ``with`` and ``async with``. The block is a durable run (``run_id``
    ``spanpoint.cassette``) whose store is the cassette: do not open ``spanpoint.run``
    inside it. :attr:`recorded` and :attr:`replayed` count the calls afterwards.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        mode: CassetteMode = "once",
        capture: CapturePolicy | None = None,
        match_on: Collection[str] | None = None,
        before_record: BeforeRecord | None = None,
        allow_playback_repeats: bool = True,
        strict: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ConfigurationError(
                f"cassette mode must be one of {', '.join(MODES)}, not {mode!r}"
            )
        if not isinstance(path, str | Path) or not str(path):
            raise ConfigurationError(f"cassette path must be a file path, not {path!r}")
        if match_on is not None:
            fields = [] if isinstance(match_on, str) else list(match_on)
            unknown = (
                [match_on] if isinstance(match_on, str) else sorted(set(fields) - set(MATCH_FIELDS))
            )
            if unknown:
                raise ConfigurationError(
                    f"match_on takes a collection of {', '.join(MATCH_FIELDS)}, not {unknown!r}"
                )
        if before_record is not None and not callable(before_record):
            raise ConfigurationError(f"before_record must be callable, not {before_record!r}")
        self.path = Path(path)
        self.mode: CassetteMode = mode
        self.match_on = frozenset(match_on) if match_on is not None else None
        self.before_record = before_record
        self.allow_playback_repeats = bool(allow_playback_repeats)
        self.strict = bool(strict)
        self._capture = capture
        self._state: _State | None = None
        self._store: CassetteStore | None = None
        self._run: run | None = None
        self._token: Token[_Handler | None] | None = None
        self._kept: list[_Entry] = []
        self.recorded = 0
        self.replayed = 0

    def __repr__(self) -> str:
        return f"spanpoint.cassette({str(self.path)!r}, mode={self.mode!r})"

    @property
    def recording(self) -> bool:
        """Whether calls that are not in the cassette execute and are recorded."""
        return self._state is not None and not self._state.replay_only

    @property
    def unplayed(self) -> list[str]:
        """``#n kind path`` of each recorded call this session did not replay (nor a call
        enclosing it), in file order."""
        state = self._state
        if state is None:
            return []
        # A call made inside a replayed call (a sub-agent inside its tool) replays with it.
        played = tuple(e.checkpoint.path + "/" for k, e in state.loaded.items() if state.played[k])
        return [
            f"#{i} {e.checkpoint.kind} {e.checkpoint.path!r}"
            for i, (key, e) in enumerate(state.loaded.items(), start=1)
            if state.played[key] == 0 and not e.checkpoint.path.startswith(played)
        ]

    @property
    def all_played(self) -> bool:
        """Whether every recorded call replayed at least once (vcrpy's ``all_played``)."""
        return not self.unplayed

    def __enter__(self) -> cassette:
        if current_run() is not None:
            raise ConfigurationError(
                f"{self!r} was opened inside run {current_run().run_id!r}; a cassette is a "  # type: ignore[union-attr]
                "run of its own: open the cassette outside spanpoint.run"
            )
        exists = self.path.exists()
        if self.mode == "none" and not exists:
            raise CassetteError(
                f"no cassette at {str(self.path)!r} and mode 'none' replays only; record it "
                "once with mode='once' (pytest: --spanpoint-record=once)"
            )
        replay_only = self.mode == "none" or (self.mode == "once" and exists)
        capture = self._capture or settings().capture
        state = _State(
            self.path,
            self.mode,
            replay_only,
            capture,
            match_on=self.match_on,
            allow_playback_repeats=self.allow_playback_repeats,
        )
        store = CassetteStore(state)
        entries = _read(self.path) if exists and self.mode != "rewrite" else []
        if self.mode == "all":
            self._kept = entries  # written again unless this session records them anew
        else:
            for entry in entries:
                state.loaded[entry.checkpoint.key] = entry
                store.put(entry.checkpoint)
        if replay_only and not state.loaded:
            raise CassetteError(
                f"cassette {str(self.path)!r} holds no calls and mode {self.mode!r} replays "
                "only: nothing could replay. Delete it and record again (mode='rewrite')"
            )
        self._state, self._store = state, store
        seams.install(self, trace_calls=False)
        self._token = _ACTIVE.set(_Handler(state))
        self._run = run(CASSETTE_RUN_ID, name=f"cassette {self.path.name}", store=store)
        try:
            self._run.__enter__()
        except BaseException:
            _ACTIVE.reset(self._token)
            seams.uninstall(self)
            raise
        assert self._run.scope is not None
        _guard_warnings(self._run.scope, state)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        # The block's exception is the run's: its exit decides, then the cassette is written.
        assert self._run is not None and self._state is not None and self._store is not None
        try:
            suppress = self._run.__exit__(*exc_info)
        finally:
            if self._token is not None:
                _ACTIVE.reset(self._token)
                self._token = None
            seams.uninstall(self)
        state, store = self._state, self._store
        journal = store.list_journal(CASSETTE_RUN_ID)
        self.replayed = sum(1 for j in journal if j.status == "replayed")
        new = [
            cp
            for cp in store.list_checkpoints(CASSETTE_RUN_ID)
            if cp.key not in state.loaded and cp.kind in CALL_KINDS
        ]
        self.recorded = len(new)
        failed = exc_info[0] is not None and not suppress
        if not state.replay_only:
            if not new and not state.loaded and not failed:
                message = (
                    f"cassette {str(self.path)!r} recorded no model or tool call: nothing in "
                    "the block called a chat model or a tool through LangChain (a call made "
                    "with the provider's own SDK is not seen)"
                )
                logger.warning("spanpoint: %s", message)
                warnings.warn(message, UserWarning, stacklevel=2)
            recorded = {cp.key for cp in new}
            entries = [e for e in self._kept if e.checkpoint.key not in recorded]
            entries += list(state.loaded.values())
            entries += [_Entry(cp, state.requests.get(cp.key)) for cp in new]
            if new or (self.mode in ("all", "rewrite") and entries):
                _write(self.path, entries, state.capture, self.before_record)
        elif self.strict and not failed and self.unplayed:
            unplayed = self.unplayed
            raise CassetteError(
                f"cassette {str(self.path)!r} (strict): {len(unplayed)} recorded call(s) were "
                f"never played: {', '.join(unplayed[:5])}. The code under test no longer makes "
                "them; record the cassette again (mode='rewrite') or drop strict=True"
            )
        return suppress

    async def __aenter__(self) -> cassette:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> bool:
        return self.__exit__(*exc_info)


# --- writing: stable text, one safe replace ----------------------------------------------------


def entry_json(entry: _Entry, capture: CapturePolicy) -> dict[str, Any]:
    """One entry as the file holds it: redacted, with no per-recording id."""
    cp = entry.checkpoint
    output = _scrub_run_ids(encode_output(cp.output_type, cp.output))
    redacted = _redact_tree(output, capture.redact_keys)
    return {
        "key": cp.key,
        "kind": cp.kind,
        "name": cp.name,
        "path": cp.path,
        "ordinal": cp.ordinal,
        "request": entry.request,
        "view": _redact_tree(cp.view, capture.redact_keys),
        "output_type": cp.output_type,
        "output": redacted,
        "output_redacted": entry.redacted or redacted != output,
    }


def _write(
    path: Path,
    entries: Sequence[_Entry],
    capture: CapturePolicy,
    before_record: BeforeRecord | None = None,
) -> None:
    calls = []
    for entry in entries:
        call = entry_json(entry, capture)
        if before_record is not None:
            changed = before_record(call)
            if changed is None:
                continue
            if not isinstance(changed, dict) or changed.get("key") != call["key"]:
                raise CassetteError(
                    f"before_record must return the entry (a dict with its key unchanged) or "
                    f"None, not {type(changed).__name__} for {call['path']!r}"
                )
            call = changed
        calls.append(call)
    # By key: parallel calls complete in any order, and land in the same place every time.
    calls.sort(key=lambda c: (c["key"], c["kind"], c["path"]))
    document = {"spanpoint_cassette": FORMAT_VERSION, "calls": calls}
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_text_safely(path, text)


def write_text_safely(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file beside it, renamed over it.

    The temp file is created exclusively and never through a symlink (``O_EXCL |
    O_NOFOLLOW``), and ``path`` itself must not be a symlink: a symlink planted in a
    repository (``refund.json.tmp -> ~/.bashrc``) is refused, never written through. A file
    whose text is already ``text`` is left alone. (A shared safe-file helper may take these
    few lines over.)
    """
    data = text.encode("utf-8")
    if path.is_symlink():
        raise CassetteError(
            f"cassette {str(path)!r} is a symlink (to {os.readlink(path)!r}); spanpoint never "
            "writes a cassette through a link: replace it with a regular file"
        )
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o644)
    except FileExistsError as exc:
        what = "a symlink" if tmp.is_symlink() else "a file"
        raise CassetteError(
            f"cannot write cassette {str(path)!r}: its temp path {str(tmp)!r} is already "
            f"{what} (planted, or left by an interrupted write); remove it and record again"
        ) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --- reading: one CassetteError naming the file, the entry and the problem ---------------------

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "key": str,
    "kind": str,
    "name": str,
    "path": str,
    "ordinal": int,
    "output_type": str,
}


def _bad(path: Path, where: str, problem: str) -> CassetteError:
    return CassetteError(
        f"cassette {str(path)!r} is malformed at {where}: {problem}; fix the file or delete it "
        "and record it again (mode='rewrite')"
    )


def _read(path: Path) -> list[_Entry]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CassetteError(
            f"{str(path)!r} is not a spanpoint cassette ({type(exc).__name__}: "
            f"{truncate(str(exc), 200)}); delete it and record again (mode='rewrite')"
        ) from None
    if not isinstance(document, dict) or "calls" not in document:
        raise CassetteError(
            f"{str(path)!r} is not a spanpoint cassette (no 'calls' list); delete it and record "
            "again (mode='rewrite')"
        )
    version = document.get("spanpoint_cassette")
    if version != FORMAT_VERSION:
        raise CassetteError(
            f"cassette {str(path)!r} has format {version!r}, this spanpoint reads "
            f"{FORMAT_VERSION}; record it again (mode='rewrite')"
        )
    calls = document["calls"]
    if not isinstance(calls, list):
        raise _bad(path, "'calls'", f"a list was expected, not {type(calls).__name__}")
    entries, seen = [], set()
    for index, call in enumerate(calls, start=1):
        entry = _read_entry(path, index, call)
        if entry.checkpoint.key in seen:
            raise _bad(path, f"entry #{index}", f"key {entry.checkpoint.key!r} appears twice")
        seen.add(entry.checkpoint.key)
        entries.append(entry)
    return entries


def _read_entry(path: Path, index: int, call: Any) -> _Entry:
    where = f"entry #{index}"
    if not isinstance(call, dict):
        raise _bad(path, where, f"an object was expected, not {type(call).__name__}")
    for name, kind in _FIELDS.items():
        value = call.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _bad(
                path, f"{where} field {name!r}", f"{_kind_name(kind)} expected, got {value!r:.80}"
            )
    if not _KEY.fullmatch(call["key"]):
        raise _bad(path, f"{where} field 'key'", "64 lowercase hex digits expected")
    if call["kind"] not in CALL_KINDS:
        raise _bad(path, f"{where} field 'kind'", f"one of {sorted(CALL_KINDS)} expected")
    where = f"{where} ({call['kind']} {call['path']!r})"
    for name in ("request", "view"):
        if call.get(name) is not None and not isinstance(call[name], dict):
            raise _bad(path, f"{where} field {name!r}", "an object or null expected")
    if "output" not in call:
        raise _bad(path, where, "field 'output' is missing")
    try:
        output = decode_output(call["output_type"], call["output"])
    except RecursionError:
        raise _bad(path, f"{where} field 'output'", "nested too deeply") from None
    except (ValueError, TypeError, KeyError, OverflowError, binascii.Error,
            ormsgpack.MsgpackEncodeError) as exc:  # fmt: skip
        problem = f"{type(exc).__name__}: {truncate(str(exc), 200)}"
        raise _bad(path, f"{where} field 'output'", problem) from None
    cp = Checkpoint(
        key=call["key"],
        run_id=CASSETTE_RUN_ID,
        path=call["path"],
        name=call["name"],
        kind=call["kind"],
        ordinal=call["ordinal"],
        output_type=call["output_type"],
        output=output,
        trace_id="",
        span_id="",
        view=call.get("view") or {},
    )
    return _Entry(cp, call.get("request"), bool(call.get("output_redacted")))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return {str: "a string", int: "an integer"}.get(kind, str(kind))  # type: ignore[call-overload]


def read_calls(path: str | Path) -> list[dict[str, Any]]:
    """The entries of the cassette at ``path`` as JSON dicts, in file order, once the file has
    been checked as replay checks it (:class:`CassetteError` otherwise)."""
    path = Path(path)
    _read(path)
    return list(json.loads(path.read_text(encoding="utf-8"))["calls"])
