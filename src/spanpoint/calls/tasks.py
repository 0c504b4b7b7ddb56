"""Call identity anchored on LangGraph's own task identity.

LangGraph executes a task again after ``interrupt()`` (the resume), on a ``RetryPolicy`` retry
and on a crash resumed from its checkpointer; each time it runs the node from its first line.
Keyed under the graph call, the calls of that node would miss (a resume is another graph call)
and run again: the paid model call, the e-mail sent. So a boundary opened inside a LangGraph
task hangs under a *task frame* whose identity is what LangGraph keeps equal when it executes
the same task again:

- **anchor T** (the task runs on a thread with a checkpointer): the thread id and the full
  ``checkpoint_ns`` (``agent:<task id>|tools:<task id>``). LangGraph derives a task id from
  the checkpoint it was prepared from, its namespace, step, node and triggers: equal on a
  resume in this process or another, on a retry, and on a crash resume.
- **anchor R** (no checkpointer, or an in-process one such as ``InMemorySaver``, which a
  rerun in a new process, or with a new saver, does not find again): the enclosing spanpoint
  frame's identity (a graph-call boundary passes its parent's, since a resume is another
  graph call), the task's *position*, and which execution of that position this is under
  the enclosing frame in this attempt: the same full namespace (a retry, a resume of the
  same task) is the same execution; a new one (the next graph call with the same input) is
  the next. The position is LangGraph's own, level by level: the logical namespace (task
  ids removed, LangGraph's subgraph counter kept), and for the task and each task that
  called a subgraph above it, ``langgraph_step`` and ``langgraph_path`` (a ``Send``'s index,
  a ``Call``'s counter). LangGraph hands a subgraph's tasks only their own step and path, so
  a subgraph entered from a task is given its caller's position in its config
  (:data:`POSITION_PATCHES`, on in every runner call's context and held by the
  instrumentor); without
  it (neither in force) the levels above are told apart by execution number, which is the
  order of first sight (docs/design-notes.md, "Task identity").

A fork runs on a new thread, where the original thread's task ids are not found again: a
fork run (``RunScope.forked``) keys every task by anchor R, and a run on a thread keeps, for
each task frame, the anchor-R identity too (``Frame.portable``), which its calls' checkpoints
keep and a fork keys them by.

The call's own key is then the engine's usual ``(scope, parent identity, name, ordinal,
fingerprint)``: the ordinal counts the calls with the same name and content in *this
execution* of the task, because the task frame is made once per execution (keyed by
LangGraph's per-execution runtime object, held strongly so its id is never reused while the
frame lives; the frame leaves when LangGraph drops the task).

The durable scope: the active ``spanpoint.run``; outside a run, when the durable scope is
``thread`` (``SPANPOINT_DURABLE=thread``), the thread of a task that has a checkpointer.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Literal

from langchain_core.runnables.config import var_child_runnable_config

from spanpoint import _compat
from spanpoint._patches import PatchSet
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError
from spanpoint.run import Frame, RunScope, current_run, on_run_closed, register_parent_provider

DurableScope = Literal["off", "run", "thread"]
DURABLE_SCOPES: tuple[DurableScope, ...] = ("off", "run", "thread")

# The scope the zero-code seams use (the instrumentor sets it from $SPANPOINT_DURABLE).
_SCOPE: list[DurableScope] = ["run"]

#: How many task executions keep their frame at most. An entry leaves when its task ends
#: (LangGraph drops the task's writer) or its run ends; the cap only bounds tasks that
#: outlive both, the oldest first (such a task would count its calls from 0 again).
_MAX_TASKS = 16384
_MAX_THREAD_SCOPES = 256


class _Task:
    __slots__ = ("frame", "runtime", "scope", "writer")

    def __init__(self, runtime: Any, scope: RunScope, frame: Frame) -> None:
        self.runtime = runtime  # strong: keeps id(runtime) unique while this entry lives
        self.scope = scope
        self.frame = frame
        self.writer: weakref.ref[Any] | None = None  # its callback drops this entry


_TASKS: OrderedDict[int, _Task] = OrderedDict()
# (run id, attempt, enclosing identity, logical anchor) -> each full namespace seen -> its
# execution number (0, 1, … in the order first seen). A dict, not a list: under a run's root
# every graph call of the run adds one namespace per step, and a list scanned per call made
# a run's k-th graph call O(k), the run O(k²).
_EXECUTIONS: OrderedDict[tuple[str, int, str, str], dict[str, int]] = OrderedDict()
_THREAD_SCOPES: OrderedDict[str, RunScope] = OrderedDict()
# id(run scope) -> the _TASKS tokens and _EXECUTIONS keys made under it, dropped when that run
# ends: without it a finished run's scope (its journal) and its LangGraph runtimes stayed
# alive until 16,384 later tasks pushed them out (~19,000 objects per 1,000-call run).
_OWNED: dict[int, tuple[list[int], list[tuple[str, int, str, str]]]] = {}
_LOCK = threading.Lock()


def _owned(scope: RunScope) -> tuple[list[int], list[tuple[str, int, str, str]]]:
    found = _OWNED.get(id(scope))
    if found is None:
        found = _OWNED[id(scope)] = ([], [])
    return found


#: Task executions that ended while the lock was held, dropped by the next holder.
_ENDED: list[tuple[int, Any]] = []


def _forget_task(token: int, runtime: Any) -> None:
    """Drop the frame of a task execution that ended (its writer was collected).

    A collection can run inside any allocation, also in this thread while it holds the lock
    and is changing ``_TASKS``: then the task is only noted, never waited for (no deadlock,
    no change in the middle of another), and the next holder of the lock drops it."""
    _ENDED.append((token, runtime))
    if _LOCK.acquire(blocking=False):
        try:
            _drop_ended()
        finally:
            _LOCK.release()


def _drop_ended() -> None:
    """Drop the frames of the ended tasks noted so far (the caller holds the lock)."""
    while _ENDED:
        token, runtime = _ENDED.pop()
        entry = _TASKS.get(token)
        if entry is not None and entry.runtime is runtime:
            del _TASKS[token]


def _forget_run(scope: RunScope) -> None:
    """Drop the task frames and execution numbers of a run that ended (``on_run_closed``)."""
    with _LOCK:
        found = _OWNED.pop(id(scope), None)
        if found is None:
            return
        tokens, keys = found
        for token in tokens:
            entry = _TASKS.get(token)
            if entry is not None and entry.scope is scope:
                del _TASKS[token]
        for key in keys:
            _EXECUTIONS.pop(key, None)


def set_durable_scope(scope: str) -> DurableScope:
    """Set the durable scope of calls outside a run (``off``, ``run`` or ``thread``)."""
    value = scope.strip().lower()
    if value not in DURABLE_SCOPES:
        raise ConfigurationError(
            f"durable scope {scope!r} is not one of off, run, thread: 'run' makes model and "
            "tool calls durable inside spanpoint.run, 'thread' also on a LangGraph thread with "
            "a checkpointer outside any run, 'off' traces them only"
        )
    _SCOPE[0] = value  # type: ignore[assignment]
    return _SCOPE[0]


def durable_scope() -> DurableScope:
    """The durable scope in force for calls outside a run."""
    return _SCOPE[0]


def task_config() -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(config, configurable) of the LangGraph task running in this context, or None."""
    config = var_child_runnable_config.get()
    if not config:
        return None
    conf = config.get("configurable")
    if not conf or conf.get(_compat.CONFIG_KEY_RUNTIME) is None:
        return None
    if not conf.get("checkpoint_ns") or _compat.CONFIG_KEY_TASK_ID not in conf:
        return None
    return config, conf  # type: ignore[return-value]


def current_task_token() -> int | None:
    """The token of the task execution running in this context (None outside a task)."""
    found = task_config()
    return id(found[1][_compat.CONFIG_KEY_RUNTIME]) if found is not None else None


def durable_here() -> bool:
    """Whether a call made now would be a durable boundary (a run, or a thread-scoped task)."""
    if _SCOPE[0] == "off":
        return False
    if current_run() is not None:
        return True
    if _SCOPE[0] != "thread":
        return False
    found = task_config()
    return found is not None and _thread_of(found[1]) is not None


def _thread_of(conf: dict[str, Any]) -> str | None:
    thread = conf.get("thread_id")
    if thread is None or conf.get(_compat.CONFIG_KEY_CHECKPOINTER) is None:
        return None
    return str(thread)


def _h(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass")).hexdigest()


def _thread_scope(thread: str) -> RunScope:
    """The durable scope of one LangGraph thread (``SPANPOINT_DURABLE=thread``, no run)."""
    run_id = f"thread:{thread}"
    cfg = settings()
    with _LOCK:
        scope = _THREAD_SCOPES.get(run_id)
        # The configured store may change (configure() again): a scope keeps the one it had.
        if scope is not None and scope.store is cfg.store:
            _THREAD_SCOPES.move_to_end(run_id)
            return scope
        scope = RunScope(
            run_id=run_id,
            name=None,
            store=cfg.store,
            # Not a first attempt: a committed call is looked up before any lease is taken.
            attempt=2,
            strict=cfg.strict,
            lease_ttl_s=cfg.lease_ttl_s,
            lease_wait_timeout_s=cfg.lease_wait_timeout_s,
            # A thread never ends: its scope counts its calls and keeps none of them.
            keeps_records=False,
        )
        scope.root.identity = _h("thread", thread)
        _THREAD_SCOPES[run_id] = scope
        while len(_THREAD_SCOPES) > _MAX_THREAD_SCOPES:
            _THREAD_SCOPES.popitem(last=False)
        return scope


def _in_process(conf: dict[str, Any]) -> bool:
    """Whether the task's checkpointer keeps its checkpoints in this process only."""
    saver = conf.get(_compat.CONFIG_KEY_CHECKPOINTER)
    try:  # for import time: LangGraph's checkpoint package loads with the first task
        from langgraph.checkpoint.memory import InMemorySaver
    except ImportError:  # pragma: no cover - langgraph ships it
        return False
    return isinstance(saver, InMemorySaver)


def _logical(ns: str) -> str:
    """``agent:<id>|tools:<id>`` -> ``agent|tools`` (task ids are random without a saver)."""
    return "|".join(part.split(":", 1)[0] for part in ns.split("|"))


def task_parent(scope: RunScope | None, frame: Frame | None) -> tuple[RunScope, Frame] | None:
    """The parent-frame provider (``spanpoint.run.register_parent_provider``).

    Outside a LangGraph task: None (the engine's default). Inside one: the innermost frame
    when it was opened in this very task execution (nested boundaries stay nested), else the
    task execution's frame, made on first use.
    """
    found = task_config()
    if found is None:
        return None
    config, conf = found
    runtime = conf[_compat.CONFIG_KEY_RUNTIME]
    token = id(runtime)
    entry = _TASKS.get(token)
    if entry is not None and entry.runtime is runtime:
        if frame is not None and frame.task == token:
            return entry.scope, frame
        return entry.scope, entry.frame
    if frame is not None and frame.task == token and scope is not None:
        return scope, frame
    thread = _thread_of(conf)
    threaded = scope is None
    if scope is None:
        if _SCOPE[0] != "thread" or thread is None:
            return None
        scope = _thread_scope(thread)
        frame = scope.root
    enclosing = frame if frame is not None else scope.root
    ns = str(conf["checkpoint_ns"])
    portable: str | None = None
    if thread is not None and (threaded or (not scope.forked and not _in_process(conf))):
        # Anchor T: LangGraph's own identity, equal whichever graph call (in whichever
        # process) executes the task again.
        # No run id in a frame identity: it enters each key once (run.Frame), so that a
        # fork can key a run's calls for another run id.
        identity = _h("T", thread, ns)
        if not threaded:  # kept with its calls' checkpoints: what a fork keys them by
            portable = _by_position(scope, enclosing.portable, enclosing.portable_anchor, config)
    else:
        # Anchor R: no checkpointer, or one that a rerun does not find again (an in-process
        # saver starts empty in a new process, or a new saver object on a new thread), or a
        # fork, which runs on a new thread: the original's thread ids are not its own.
        identity = _by_position(scope, enclosing.identity, enclosing.anchor, config)
        if enclosing.portable != enclosing.identity:
            portable = _by_position(scope, enclosing.portable, enclosing.portable_anchor, config)
    # The path names boundaries for people; the task is in the key, not in the path.
    task_frame = Frame.at(
        enclosing.path, identity, enclosing.span_id, task=token, portable=portable
    )
    with _LOCK:
        entry = _TASKS.get(token)
        if entry is not None and entry.runtime is runtime:  # another thread got there first
            return entry.scope, entry.frame
        _drop_ended()
        _TASKS[token] = entry = _Task(runtime, scope, task_frame)
        _release_with_task(conf, token, entry)
        if not threaded:
            _owned(scope)[0].append(token)
        while len(_TASKS) > _MAX_TASKS:
            _TASKS.popitem(last=False)
    return scope, task_frame


def _by_position(
    scope: RunScope, enclosing: str, enclosing_anchor: str, config: dict[str, Any]
) -> str:
    """Anchor R: the identity of the task running with ``config`` by where it stands under
    the frame whose identity is ``enclosing`` (anchored on ``enclosing_anchor``)."""
    conf = config["configurable"]
    ns = str(conf["checkpoint_ns"])
    metadata = config.get("metadata") or {}
    anchor = "|".join((_logical(ns), *conf.get(POSITION_KEY, ()), _position(metadata)))
    return _h("R", enclosing_anchor, anchor, _execution(scope, enclosing, anchor, ns))


def _execution(scope: RunScope, enclosing: str, anchor: str, ns: str) -> int:
    """Which execution of a logical task this is under the frame whose identity is
    ``enclosing``: the same namespace (a retry within one graph call) is the same one; a
    new namespace is the next one."""
    key = (scope.run_id, scope.attempt, enclosing, anchor)
    with _LOCK:
        seen = _EXECUTIONS.get(key)
        if seen is None:
            seen = _EXECUTIONS[key] = {}
            _owned(scope)[1].append(key)
            while len(_EXECUTIONS) > _MAX_TASKS:
                _EXECUTIONS.popitem(last=False)
        found = seen.get(ns)
        if found is None:
            found = seen[ns] = len(seen)  # never removed: numbers stay those of first sight
        return found


def _release_with_task(conf: dict[str, Any], token: int, entry: _Task) -> None:
    """Drop the task's entry when LangGraph drops the task: its writer (one per task
    execution, referenced by the task only) is collected then. LangGraph's runtime objects
    take no weak reference; without a writer the entry waits for its run or the cap. The
    weak reference lives in the entry, so an entry dropped first takes its callback along."""
    writer = conf.get(_compat.CONFIG_KEY_SEND)
    if writer is not None:
        runtime = entry.runtime
        with suppress(TypeError):  # not weakly referenceable
            entry.writer = weakref.ref(writer, lambda _ref: _forget_task(token, runtime))


# --- the position of a subgraph's tasks ---------------------------------------------------

#: The configurable key that carries, into a subgraph, the positions of the tasks that
#: called it (outermost first). LangGraph copies configurable keys into every task of the
#: subgraph, and keys starting with ``__`` never reach a checkpoint's metadata.
POSITION_KEY = "__spanpoint_task_position"


def _position(metadata: Any) -> str:
    """One task's position in its graph: its step and LangGraph's task path."""
    return f"{metadata.get(_compat.METADATA_STEP)}:{metadata.get(_compat.METADATA_PATH)}"


def caller_position() -> tuple[str, ...] | None:
    """The positions a subgraph entered here inherits (None outside a LangGraph task)."""
    found = task_config()
    if found is None:
        return None
    config, conf = found
    own = f"{_logical(str(conf['checkpoint_ns']))}@{_position(config.get('metadata') or {})}"
    return (*conf.get(POSITION_KEY, ()), own)


def _with_position(config: Any) -> Any:
    """``config`` for a graph entered from inside a task, carrying the caller's position."""
    chain = caller_position()
    if chain is None:
        return config
    config = dict(config or {})
    config["configurable"] = {**(config.get("configurable") or {}), POSITION_KEY: chain}
    return config


def _positioned(original: Callable[..., Any]) -> Callable[..., Any]:
    def stream(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        # Bound through the descriptor: the original may be another library's wrapper.
        bound = original.__get__(self, type(self))
        if not POSITION_PATCHES.live:
            return bound(input, config, **kwargs)
        return bound(input, _with_position(config), **kwargs)

    stream.__wrapped__ = original  # type: ignore[attr-defined]
    return stream


def _position_targets() -> list[tuple[type, str, Callable[[Any], Any]]]:
    from langgraph.pregel import Pregel  # for import time: with the first holder

    return [(Pregel, "stream", _positioned), (Pregel, "astream", _positioned)]


#: ``Pregel.stream``/``astream`` (``invoke``/``ainvoke`` run through them) carrying the
#: calling task's position into a subgraph, in spanpoint's one patch registry: applied once,
#: on where held or enabled.
POSITION_PATCHES = PatchSet("calls.tasks.positions", _position_targets)


def record_positions(holder: object) -> None:
    """Have subgraphs entered from a task carry their caller's position while ``holder``
    holds it."""
    POSITION_PATCHES.hold(holder)


def stop_recording_positions(holder: object) -> None:
    """Release ``holder``; with no holder left the wrappers pass every call through, except
    where :data:`POSITION_PATCHES` is enabled (a runner call's context)."""
    POSITION_PATCHES.release(holder)


register_parent_provider(task_parent)
on_run_closed(_forget_run)
