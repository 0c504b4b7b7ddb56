"""A cassette session: its store, the callbacks that see each call, and the offline rule.

The store answers the boundaries' claims from the cassette. A LangChain callback (through a
configure hook) sees each model and tool call right before it would reach the model or the
tool: it records what the call asked for, and in a replay-only session a call that reaches
it is a miss. Every path on which a boundary executes in place of replaying warns first;
replaying only, the session turns that warning into a miss, before anything runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.tracers.context import register_configure_hook

from spanpoint import semconv
from spanpoint.cassettes.files import CALL_KINDS, CASSETTE_RUN_ID, Entry
from spanpoint.cassettes.requests import (
    Request,
    State,
    describe_messages,
    matched_view,
    miss_message,
    no_boundary_message,
    refused_message,
)
from spanpoint.errors import CassetteMissError
from spanpoint.run import RunScope, current_frame, current_run
from spanpoint.stores.base import Claim
from spanpoint.stores.memory import MemoryStore

#: What boundary.py warns right before a body executes in place of a replay.
_EXECUTING = re.compile(r"\bexecuting\b")
#: A cassette entry keeps no trace ids, so its replay has no link to an original span.
_NO_LINK = "malformed trace id '' or span id ''"

ACTIVE: ContextVar[Handler | None] = ContextVar("spanpoint_cassette", default=None)
#: A model call seen by the callback *before* its boundary opened (the model seam on
#: ``_generate_with_cache`` opens it after ``on_chat_model_start``): (parent frame identity,
#: request), taken by the next claim in this context, dropped when the call ends.
_PENDING: ContextVar[tuple[str, Request] | None] = ContextVar(
    "spanpoint_cassette_pending", default=None
)


_SESSIONS = itertools.count(1)
#: The kind of the checkpoint the last committed claim in this context found: what a failed
#: replay right after it (boundary.py warns) was a replay of.
_CLAIMED: ContextVar[str | None] = ContextVar("spanpoint_cassette_claimed", default=None)
#: How a model or tool call's span name starts (``chat gpt-4o``, ``execute_tool lookup``),
#: quoted as the "not cacheable" warnings quote it.
_CALL_SPANS = (f"'{semconv.OP_CHAT} ", f"'{semconv.OP_EXECUTE_TOOL} ")


class CassetteStore(MemoryStore):
    """The cassette's checkpoints in memory; a claim that misses a call the callback saw
    before its boundary opened is that call's miss (or its recording)."""

    def __init__(self, state: State) -> None:
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
            _CLAIMED.set(found.checkpoint.kind if found.checkpoint is not None else None)
            self._played(key, pending[1] if pending else None)
            return found
        _CLAIMED.set(None)
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
            raise CassetteMissError(miss_message(state, request))
        with state.lock:
            state.requests[key] = {"kind": request.kind, "detail": request.detail}
        return found

    def _played(self, key: str, request: Request | None) -> None:
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


def _match(state: State, request: Request) -> Entry | None:
    """The recorded call that ``match_on`` finds equal to ``request``: the first one not
    played yet, else the first one (a repeat, which ``allow_playback_repeats`` decides)."""
    if state.match_on is None or request.kind != semconv.KIND_MODEL_CALL:
        return None
    wanted = matched_view(request.kind, request.name, request.detail, state.match_on)
    repeat = None
    for key, entry in state.loaded.items():
        recorded, cp = entry.request, entry.checkpoint
        if recorded is None or cp.kind != request.kind:
            continue
        if _parent(cp.path) != _parent(request.path):
            continue
        view = matched_view(cp.kind, cp.name, recorded.get("detail") or {}, state.match_on)
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


class Handler(BaseCallbackHandler):
    """Sees each model and tool call right before it would reach the model or the tool."""

    raise_error = True  # a miss must stop the call, not be logged
    run_inline = True  # in the call's own context: its boundary frame is the current one

    def __init__(self, state: State) -> None:
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
            request = Request("model_call", "", str(name or ""), detail)
            if self.state.replay_only and _streamed():
                request.path = _child_path(frame.identity, request.name)
                raise CassetteMissError(no_boundary_message(self.state, request))
            # Its boundary is not open yet (a seam opens it inside): the next claim in this
            # context is this call's. A call that never gets a boundary drops it at its end.
            _PENDING.set((frame.identity, request))
            return
        self._seen(Request("model_call", found[1], found[1].rsplit("/", 1)[-1], detail), found[0])

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
        self._seen(Request("tool_call", found[1], name, detail), found[0])

    def _seen(self, request: Request, key: str) -> None:
        state = self.state
        if state.replay_only:
            if key in state.loaded:  # recorded, yet executing: its entry was refused
                raise CassetteMissError(refused_message(state, request.kind, request.path, key))
            raise CassetteMissError(miss_message(state, request))
        if key in state.loaded:
            return  # new_episodes re-executing a refused entry: recorded again below
        with state.lock:
            state.requests[key] = {"kind": request.kind, "detail": request.detail}


def guard_warnings(scope: RunScope, state: State) -> None:
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
        if state.replay_only and _EXECUTING.search(message) and _about_a_call(message):
            raise CassetteMissError(
                f"a call would reach its model or tool although cassette "
                f"{str(state.path)!r} replays only (mode {state.mode!r}): {message}. "
                "A refused or corrupt entry, or one written by another spanpoint or "
                "LangChain version, is never executed in its place: record the cassette "
                "again (mode='rewrite') if the change is intended."
            )

    scope.warn = guarded  # type: ignore[method-assign]


def _about_a_call(message: str) -> bool:
    """Whether a warning that a boundary will execute is about a model or tool call (a step
    or a graph call in a cassette executes anyway: it is never recorded)."""
    if message.startswith(_CALL_SPANS):  # the seams' and the middleware's own warnings
        return True
    # The boundary's replay failed: the claim just before it in this context says of what.
    return message.startswith("checkpoint of ") and _CLAIMED.get() in CALL_KINDS


register_configure_hook(ACTIVE, inheritable=True)
