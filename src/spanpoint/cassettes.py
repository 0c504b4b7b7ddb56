"""Test cassettes: record an agent's model and tool calls once, replay them anywhere.

>>> with spanpoint.cassette("tests/cassettes/refund.json"):     # doctest: +SKIP
...     result = agent.invoke({"messages": [("user", "Refund ticket 42")]})

A cassette is a durable run whose checkpoint store is a file. Inside ``cassette(...)`` every
model call and tool call that is a boundary (``CheckpointMiddleware`` today; the seams of
issue 15 as they land) is looked up in the cassette by its checkpoint key, and replayed from
it: no model is called, no tool runs. The key is the one spanpoint always computes (content
fingerprint and position: the boundary path and the ordinal of equal calls) under a fixed
run id, so it never depends on a run id, a process or the wall clock. A tool whose policy is
``always_execute`` is no boundary and runs as it always does.

Modes (as in vcrpy and pytest-recording):

- ``once`` (default): record when the file is absent; otherwise replay, and a call that is
  not in the cassette raises :class:`~spanpoint.errors.CassetteMissError`;
- ``none``: replay only (a missing file is an error too);
- ``new_episodes``: replay what is recorded, execute and record what is new;
- ``all``: execute every call and record the cassette again.

A miss names the call, the nearest recorded call of the same kind and name, and what
changed: which message (by position and role), which tool definition, which model setting.
It is detected where the call would reach the model or the tool (LangChain's
``on_chat_model_start`` / ``on_tool_start``, inside the call's boundary), so nothing is sent.

The file is one JSON document, keys sorted, two-space indent, one entry per call in call
order (reasons in docs/design-notes.md): a reviewer reads the messages, tool arguments and
answers; a re-recording diffs only where calls changed. Outputs are LangGraph's own
serialized form, spelled out as JSON, read back through spanpoint's allow list
(:func:`spanpoint.serde.loads`). Everything written goes through the capture policy's
redaction: request descriptions are redacted views, and every text of an output is
redacted too, so a credential never reaches a file that is committed to git. An output that
redaction had to change cannot replay exactly: the calls after it see the redacted text and
miss loudly, never silently (keep real credentials out of what a model answers).
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from uuid import UUID

import ormsgpack
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.tracers.context import register_configure_hook

from spanpoint import semconv
from spanpoint.calls.inputs import message_views
from spanpoint.capture import REDACTED, CapturePolicy, is_secret_key, redact_text, truncate
from spanpoint.config import settings
from spanpoint.errors import CassetteMissError, ConfigurationError
from spanpoint.run import current_frame, current_run, run
from spanpoint.stores.base import Checkpoint, Claim
from spanpoint.stores.memory import MemoryStore

CassetteMode = Literal["once", "none", "new_episodes", "all"]
MODES: tuple[str, ...] = get_args(CassetteMode)

#: What a cassette holds. A graph call or a step is never recorded: its identity is its input,
#: not the code it runs, so replaying it would hide a changed prompt or tool; it executes, and
#: the model and tool calls inside it replay.
CALL_KINDS = frozenset({semconv.KIND_MODEL_CALL, semconv.KIND_TOOL_CALL})

#: The run id of every cassette: keys depend on the calls alone, not on a file's name.
CASSETTE_RUN_ID = "spanpoint.cassette"
FORMAT_VERSION = 1
_TEXT_LIMIT = 400  # characters of a message shown in a miss


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
            return base64.b64decode(value["$bytes"])
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
        return base64.b64decode(value["$bytes"])
    return _pack(_from_json(value))


def _redact_tree(value: Any) -> Any:
    """Every text redacted, every value under a secret key masked (JSON tree of an output)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [_redact_tree(v) for v in value]
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_key(k) else _redact_tree(v))
            for k, v in value.items()
        }
    return value


# --- what a call asked for (for a miss's message) --------------------------------------------


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


# --- the cassette ---------------------------------------------------------------------------


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
    loaded: dict[str, _Entry] = field(default_factory=dict)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_ACTIVE: ContextVar[_Handler | None] = ContextVar("spanpoint_cassette", default=None)
#: A model call seen by the callback *before* its boundary opened (the issue-15 model seam on
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
        """A committed call replays; a missing one whose request is pending is recorded, or,
        replaying only, raises :class:`CassetteMissError` before anything executes."""
        pending = _PENDING.get()
        if pending is not None:
            frame = current_frame()
            if frame is None or frame.identity != pending[0]:
                pending = None
            else:
                _PENDING.set(None)
        found = super().claim(key, owner, ttl_s, fresh=fresh)
        if pending is None or found.state == "committed" or key in self.state.loaded:
            return found
        request = pending[1]
        request.path = _child_path(pending[0], request.name)
        if self.state.replay_only:
            self.release(key, owner)
            raise CassetteMissError(_miss_message(self.state, request))
        with self.state.lock:
            self.state.requests[key] = {"kind": request.kind, "detail": request.detail}
        return found


def _child_path(parent_identity: str, name: str) -> str:
    frame = current_frame()
    parent = frame.path if frame is not None and frame.identity == parent_identity else ""
    return f"{parent}/{name}" if parent else name


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
            # Its boundary is not open yet (a seam opens it inside): the next claim in this
            # context is this call's. A call that never gets a boundary drops it at its end.
            request = _Request("model_call", "", str(name or ""), detail)
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
        if key in state.loaded:
            return  # a recorded boundary executing its body: never happens on replay
        if state.replay_only:
            raise CassetteMissError(_miss_message(state, request))
        with state.lock:
            state.requests[key] = {"kind": request.kind, "detail": request.detail}


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
    changes = _changes(request.kind, recorded["detail"], request.detail)
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
        score = _likeness(request.kind, recorded["detail"], request.detail)
        candidate = {"path": cp.path, **recorded}
        if best is None or score > best[0]:
            best = (score, index, candidate)
    return None if best is None else (best[1], best[2])


def _likeness(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> int:
    if kind == "tool_call":
        return int(old.get("args") == new.get("args"))
    a, b = old.get("messages") or [], new.get("messages") or []
    same = sum(1 for x, y in zip(a, b, strict=False) if x == y)
    return same * 4 - abs(len(a) - len(b)) + (old.get("tools") == new.get("tools"))


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return repr(truncate(text, _TEXT_LIMIT))


def _changes(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    if kind == "tool_call":
        return [f"arguments {_short(old.get('args'))} -> {_short(new.get('args'))}"]
    out: list[str] = []
    a, b = old.get("messages") or [], new.get("messages") or []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == y:
            continue
        if x is None:
            out.append(f"message {i} ({y['role']}) is new: {_short(y['text'])}")
        elif y is None:
            out.append(f"message {i} ({x['role']}) is gone: {_short(x['text'])}")
        else:
            role = x["role"] if x["role"] == y["role"] else f"{x['role']} -> {y['role']}"
            label = "system prompt" if role == "system" else role
            if x.get("text") != y.get("text"):
                was, now = _short(x["text"]), _short(y["text"])
                out.append(f"message {i} ({label}) {was} -> {now}")
            else:
                old_calls, new_calls = x.get("tool_calls"), y.get("tool_calls")
                out.append(
                    f"message {i} ({role}) tool calls {_short(old_calls)} -> {_short(new_calls)}"
                )
        break  # the first divergent message: later ones follow from it
    old_tools = {_tool_name(t): t for t in old.get("tools") or []}
    new_tools = {_tool_name(t): t for t in new.get("tools") or []}
    for name in sorted(set(old_tools) | set(new_tools)):
        if name not in new_tools:
            out.append(f"tool definition {name!r} removed")
        elif name not in old_tools:
            out.append(f"tool definition {name!r} added")
        elif old_tools[name] != new_tools[name]:
            out.append(
                f"tool definition {name!r} {_short(old_tools[name])} -> {_short(new_tools[name])}"
            )
    old_set, new_set = old.get("settings") or {}, new.get("settings") or {}
    for key in sorted(set(old_set) | set(new_set)):
        if old_set.get(key) != new_set.get(key):
            was, now = _short(old_set.get(key)), _short(new_set.get(key))
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


class cassette:
    """Record the model and tool calls of the block once, replay them on every later run.

    Args:
        path: the cassette file (created on record; ``.json`` by convention).
        mode: ``"once"`` (default), ``"none"``, ``"new_episodes"`` or ``"all"`` (see the
            module docstring).
        capture: the redaction policy for the file (default: ``configure``'s).

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
    ) -> None:
        if mode not in MODES:
            raise ConfigurationError(
                f"cassette mode must be one of {', '.join(MODES)}, not {mode!r}"
            )
        if not isinstance(path, str | Path) or not str(path):
            raise ConfigurationError(f"cassette path must be a file path, not {path!r}")
        self.path = Path(path)
        self.mode: CassetteMode = mode
        self._capture = capture
        self._state: _State | None = None
        self._store: CassetteStore | None = None
        self._run: run | None = None
        self._token: Token[_Handler | None] | None = None
        self.recorded = 0
        self.replayed = 0

    def __repr__(self) -> str:
        return f"spanpoint.cassette({str(self.path)!r}, mode={self.mode!r})"

    @property
    def recording(self) -> bool:
        """Whether calls that are not in the cassette execute and are recorded."""
        return self._state is not None and not self._state.replay_only

    def __enter__(self) -> cassette:
        if current_run() is not None:
            raise ConfigurationError(
                f"{self!r} was opened inside run {current_run().run_id!r}; a cassette is a "  # type: ignore[union-attr]
                "run of its own: open the cassette outside spanpoint.run"
            )
        exists = self.path.exists()
        if self.mode == "none" and not exists:
            raise ConfigurationError(
                f"no cassette at {str(self.path)!r} and mode 'none' replays only; record it "
                "once with mode='once' (pytest: --spanpoint-record=once)"
            )
        replay_only = self.mode == "none" or (self.mode == "once" and exists)
        capture = self._capture or settings().capture
        state = _State(self.path, self.mode, replay_only, capture)
        store = CassetteStore(state)
        if exists and self.mode != "all":
            for entry in _read(self.path):
                if entry.checkpoint.kind not in CALL_KINDS:
                    continue
                state.loaded[entry.checkpoint.key] = entry
                store.put(entry.checkpoint)
        self._state, self._store = state, store
        self._token = _ACTIVE.set(_Handler(state))
        self._run = run(CASSETTE_RUN_ID, name=f"cassette {self.path.name}", store=store)
        try:
            self._run.__enter__()
        except BaseException:
            _ACTIVE.reset(self._token)
            raise
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
        state, store = self._state, self._store
        journal = store.list_journal(CASSETTE_RUN_ID)
        self.replayed = sum(1 for j in journal if j.status == "replayed")
        new = [
            cp
            for cp in store.list_checkpoints(CASSETTE_RUN_ID)
            if cp.key not in state.loaded and cp.kind in CALL_KINDS
        ]
        self.recorded = len(new)
        if not state.replay_only and (new or not self.path.exists()):
            entries = list(state.loaded.values()) + [
                _Entry(cp, state.requests.get(cp.key)) for cp in new
            ]
            _write(self.path, entries)
        return suppress

    async def __aenter__(self) -> cassette:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> bool:
        return self.__exit__(*exc_info)


def _write(path: Path, entries: Sequence[_Entry]) -> None:
    calls = []
    for entry in entries:
        cp = entry.checkpoint
        output = encode_output(cp.output_type, cp.output)
        redacted = _redact_tree(output)
        calls.append(
            {
                "key": cp.key,
                "kind": cp.kind,
                "name": cp.name,
                "path": cp.path,
                "ordinal": cp.ordinal,
                "request": entry.request,
                "view": _redact_tree(cp.view),
                "output_type": cp.output_type,
                "output": redacted,
                "output_redacted": entry.redacted or redacted != output,
                "trace_id": cp.trace_id,
                "span_id": cp.span_id,
            }
        )
    document = {"spanpoint_cassette": FORMAT_VERSION, "calls": calls}
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _read(path: Path) -> list[_Entry]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        version = document.get("spanpoint_cassette")
        calls = document["calls"]
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        raise ConfigurationError(
            f"{str(path)!r} is not a spanpoint cassette ({exc}); delete it and record again "
            "(mode='all')"
        ) from exc
    if version != FORMAT_VERSION:
        raise ConfigurationError(
            f"cassette {str(path)!r} has format {version!r}, this spanpoint reads "
            f"{FORMAT_VERSION}; record it again (mode='all')"
        )
    entries = []
    for call in calls:
        cp = Checkpoint(
            key=call["key"],
            run_id=CASSETTE_RUN_ID,
            path=call["path"],
            name=call["name"],
            kind=call["kind"],
            ordinal=int(call["ordinal"]),
            output_type=call["output_type"],
            output=decode_output(call["output_type"], call["output"]),
            trace_id=call.get("trace_id") or "",
            span_id=call.get("span_id") or "",
            view=call.get("view") or {},
        )
        entries.append(_Entry(cp, call.get("request"), bool(call.get("output_redacted"))))
    return entries
