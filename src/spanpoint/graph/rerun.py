"""Rerun with a durable checkpointer: continue the thread, never submit the input again.

Inside ``spanpoint.run``, every graph call on a thread with a checkpointer notes in
spanpoint's own store, before it runs, where the thread stood (its latest checkpoint, the
call's *base*) and that it is now the thread's current call; the call it follows on the
thread is closed there, at that same checkpoint (its *end*); a call that returns closes
itself at the thread's checkpoint after it. LangGraph's checkpoints carry
nothing of spanpoint: their metadata is exactly what LangGraph writes. When a later attempt
of the run reaches a graph call that has no committed output (the ``calls`` strategy
commits none; under ``graph_call`` the commit may have been lost to a crash),
:meth:`Planner.plan` reads the call's note and the thread once and decides (docs/concepts.md
"Rerun with a durable checkpointer"):

- no note of this call, or the thread still stands at its base: **start** as asked
  (another run's thread, an earlier call of this run, a checkpointer that kept nothing);
- the call was not closed and the thread moved past its base: the thread's latest
  checkpoint is this call's. With pending tasks it **continues** with ``invoke(None)``, as
  LangGraph's own crash resume does; completed tasks do not run again;
- this call was closed (it returned, or a later call began after it), or its latest
  checkpoint shows it ended (no pending task, an interrupt, a static breakpoint before or
  after a node): **return** the state of its last checkpoint; nothing executes.

Used by ``GraphRunner`` (both strategies) and the zero-code ``Pregel.invoke`` patch.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spanpoint import semconv, serde
from spanpoint.boundary import next_ordinal
from spanpoint.errors import UnfingerprintableInputError
from spanpoint.graph.inspect import has_uncheckpointed_subgraph
from spanpoint.run import RunScope, current_frame

Action = Literal["start", "continue", "return"]


@dataclass(frozen=True, slots=True)
class Rerun:
    """What a graph call does with the thread an earlier attempt left (see the module doc)."""

    action: Action
    snapshot: Any = None

    @property
    def attribute(self) -> str | None:
        """The ``spanpoint.graph.rerun`` value, None when the call starts as asked."""
        return {"continue": "continued", "return": "returned"}.get(self.action)


START = Rerun("start")


def enclosing_key(scope: RunScope, name: str, fingerprint: str) -> str:
    """The deterministic key of a graph call that is not a boundary (``calls`` strategy):
    the same rule as a boundary's (run, path, ordinal, input fingerprint), in the innermost
    frame, counted apart from the boundaries' ordinals."""
    frame = current_frame() or scope.root
    path = f"{frame.path}/{name}" if frame.path else name
    ordinal = next_ordinal(frame, f"rerun:{name}", fingerprint)
    return serde.checkpoint_key(scope.run_id, path, ordinal, fingerprint)


def identity_key(scope: RunScope, name: str, identity: Any) -> str:
    """:func:`enclosing_key` of a call identified by ``identity``; "" when it has no
    readable state (the call is then not recognised on a rerun: it starts as asked)."""
    try:
        fingerprint = serde.fingerprint(identity)
    except UnfingerprintableInputError:
        return ""
    return enclosing_key(scope, name, fingerprint)


def _has_checkpoint(snapshot: Any) -> bool:
    config = getattr(snapshot, "config", None) or {}
    return bool((config.get("configurable") or {}).get("checkpoint_id"))


def _breakpoints(graph: Any, kwargs: Mapping[str, Any]) -> Any:
    found = kwargs.get("interrupt_before")
    if found is None:
        found = getattr(graph, "interrupt_before_nodes", None)
    return found or ()


def _breakpoints_after(graph: Any, kwargs: Mapping[str, Any]) -> Any:
    found = kwargs.get("interrupt_after")
    if found is None:
        found = getattr(graph, "interrupt_after_nodes", None)
    return found or ()


def _stopped_after(parent: Any, stops: Any) -> bool:
    """Whether a node of the step that wrote the thread's checkpoint (the tasks of its
    parent checkpoint) is an ``interrupt_after`` breakpoint: LangGraph then paused there.

    LangGraph writes that checkpoint before it checks the breakpoint, and records nothing of
    the pause, so a crash between the two looks the same: it is read as the pause the user
    set (a rerun never runs past a breakpoint; the user's resume does)."""
    names = {str(getattr(task, "name", "")) for task in getattr(parent, "tasks", ()) or ()}
    names = {n for n in names if n and not n.startswith("__")}  # __start__: the input step
    return bool(names) and (stops == "*" or bool(names & set(stops)))


def _classify(snapshot: Any, latest: bool, graph: Any, kwargs: Mapping[str, Any]) -> Rerun:
    """Continue only the thread's latest checkpoint of this call with tasks still to run
    (an ``interrupt_after`` breakpoint is checked apart: see :func:`_plan_steps`)."""
    if not latest or not snapshot.next:
        return Rerun("return", snapshot)
    if any(getattr(task, "interrupts", ()) for task in snapshot.tasks):
        return Rerun("return", snapshot)
    stops = _breakpoints(graph, kwargs)
    if stops == "*" or set(snapshot.next) & set(stops):
        return Rerun("return", snapshot)  # attempt 1 stopped at this breakpoint too
    return Rerun("continue", snapshot)


# --- the notes (spanpoint's store; LangGraph's checkpoints carry nothing) -------------------


def _call_note(run_id: str, key: str) -> str:
    """The note key of a run's graph call: its base and end on its thread."""
    return json.dumps(["graph-call", run_id, key])


def _thread_note(state_config: Mapping[str, Any]) -> str:
    """The note key of a thread: which graph call last began on it."""
    configurable = state_config.get("configurable") or {}
    return json.dumps(
        [
            "graph-thread",
            str(configurable.get("thread_id")),
            str(configurable.get("checkpoint_ns") or ""),
        ]
    )


def _read(store: Any, key: str) -> dict[str, Any] | None:
    text = store.get_note(key)
    if text is None:
        return None
    found = json.loads(text)
    return found if isinstance(found, dict) else None


def _begin(store: Any, state_config: Mapping[str, Any], call: str, base: str | None) -> None:
    """Note that ``call`` begins on the thread at checkpoint ``base``: the call that began
    there before it (of this run or another) ends at ``base``."""
    thread = _thread_note(state_config)
    current = _read(store, thread)
    if current is not None and current.get("call") != call:
        earlier = current.get("call")
        if isinstance(earlier, str):
            store.put_note(earlier, json.dumps({"base": current.get("base"), "end": base}))
    store.put_note(call, json.dumps({"base": base, "end": None}))
    store.put_note(thread, json.dumps({"call": call, "base": base}))


def _end(store: Any, state_config: Mapping[str, Any], call: str, end: str | None) -> None:
    """Note that ``call`` returned with the thread at checkpoint ``end``: it is closed there,
    and, when it is the thread's current call, the thread has none open (the next call
    closes nothing)."""
    note = _read(store, call) or {}
    store.put_note(call, json.dumps({"base": note.get("base"), "end": end}))
    thread = _thread_note(state_config)
    if (_read(store, thread) or {}).get("call") == call:
        store.put_note(thread, json.dumps({"call": None, "base": end}))


def _checkpoint_id(found: Any) -> str | None:
    config = getattr(found, "config", None) or {}
    checkpoint_id = (config.get("configurable") or {}).get("checkpoint_id")
    return str(checkpoint_id) if checkpoint_id else None


def _at(state_config: Mapping[str, Any], checkpoint_id: str) -> dict[str, Any]:
    configurable = dict(state_config.get("configurable") or {})
    configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _warn(scope: RunScope, exc: BaseException) -> Rerun:
    scope.warn(f"could not read the thread's checkpoints for a rerun, starting as asked: {exc}")
    return START


# The reads a rerun plan needs, as requests its sync and async drivers answer (the sans-I/O
# shape of boundary._Call.wait): "latest" -> the thread's state; "base" -> the thread's latest
# checkpoint id, or None; a config -> the state at that checkpoint (the end of a closed call,
# or the parent of the one the plan would continue, for its interrupt_after breakpoints).
_Read = Literal["latest", "base"] | Mapping[str, Any]


def _begin_steps(
    scope: RunScope, state_config: Mapping[str, Any], call: str
) -> Generator[_Read, Any, Rerun]:
    _begin(scope.store, state_config, call, (yield "base"))
    return START


def _end_steps(
    scope: RunScope, state_config: Mapping[str, Any], call: str, end: str | None
) -> Generator[_Read, Any, Rerun]:
    _end(scope.store, state_config, call, end if end else (yield "base"))
    return START


def _plan_steps(
    graph: Any, scope: RunScope, state_config: Mapping[str, Any], key: str,
    kwargs: Mapping[str, Any],
) -> Generator[_Read, Any, Rerun]:  # fmt: skip
    call = _call_note(scope.run_id, key)
    # A first attempt has no earlier progress to find: it only notes where it begins.
    note = _read(scope.store, call) if scope.attempt >= 2 else None
    if note is None:
        return (yield from _begin_steps(scope, state_config, call))
    end = note.get("end")
    if isinstance(end, str):  # closed: a later call began after it, at its last checkpoint
        found = yield _at(state_config, end)
        if _has_checkpoint(found) and getattr(found, "metadata", None) is not None:
            return Rerun("return", found)
        return (yield from _begin_steps(scope, state_config, call))  # the thread was deleted
    latest = yield "latest"
    if not _has_checkpoint(latest) or _checkpoint_id(latest) == note.get("base"):
        return (yield from _begin_steps(scope, state_config, call))  # it wrote nothing
    found = _classify(latest, True, graph, kwargs)
    stops = _breakpoints_after(graph, kwargs)
    parent_config = getattr(latest, "parent_config", None)
    # Paused after a node (LangGraph's static interrupt_after), not crashed: the pause
    # is returned as the pause it is (the rerun table in docs/concepts.md).
    if (
        found.action == "continue"
        and stops
        and parent_config
        and _stopped_after((yield parent_config), stops)
    ):
        return Rerun("return", latest)
    return found


def _saver(graph: Any) -> Any:
    """The graph's own checkpointer; None when it has none to read (then no plan: start)."""
    from langgraph.checkpoint.base import BaseCheckpointSaver  # for import time: with the call

    saver = getattr(graph, "checkpointer", None)
    return saver if isinstance(saver, BaseCheckpointSaver) else None


@dataclass(frozen=True, slots=True)
class Planner:
    """A graph call's rerun plan, decided from one read of its thread (see the module doc):
    :meth:`plan` reads a sync checkpointer, :meth:`aplan` an async one."""

    graph: Any
    state_config: Mapping[str, Any]
    scope: RunScope
    key: str
    kwargs: Mapping[str, Any]

    def plan(self) -> Rerun:
        """What this graph call does on the thread, read once (see the module doc)."""
        return self._drive(self._plan_steps())

    async def aplan(self) -> Rerun:
        """The async form of :meth:`plan` (async checkpointers have no sync reads)."""
        return await self._adrive(self._plan_steps())

    def begin(self) -> None:
        """Note only where this call begins (a call whose output a rerun cannot rebuild
        starts as asked, but it still closes the call before it on the thread)."""
        self._drive(self._begin_steps())

    async def abegin(self) -> None:
        """The async form of :meth:`begin`."""
        await self._adrive(self._begin_steps())

    def end(self, checkpoint_id: str | None = None) -> None:
        """Note that this call returned, with the thread at ``checkpoint_id`` (read from the
        checkpointer when not given): a rerun returns its state there, whatever was written
        to the thread after it."""
        self._drive(self._end_steps(checkpoint_id))

    async def aend(self, checkpoint_id: str | None = None) -> None:
        """The async form of :meth:`end`."""
        await self._adrive(self._end_steps(checkpoint_id))

    def _end_steps(self, checkpoint_id: str | None) -> Generator[_Read, Any, Rerun]:
        if _saver(self.graph) is None:
            return START
        call = _call_note(self.scope.run_id, self.key)
        return (yield from _end_steps(self.scope, self.state_config, call, checkpoint_id))

    def _plan_steps(self) -> Generator[_Read, Any, Rerun]:
        if _saver(self.graph) is None:
            return START
        steps = _plan_steps(self.graph, self.scope, self.state_config, self.key, self.kwargs)
        return (yield from steps)

    def _begin_steps(self) -> Generator[_Read, Any, Rerun]:
        if _saver(self.graph) is None:
            return START
        call = _call_note(self.scope.run_id, self.key)
        return (yield from _begin_steps(self.scope, self.state_config, call))

    def _drive(self, steps: Generator[_Read, Any, Rerun]) -> Rerun:
        try:
            read = next(steps)
            while True:
                read = steps.send(self._read(read))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except Exception as exc:  # a failed read means execute: never a wrong return
            return _warn(self.scope, exc)

    async def _adrive(self, steps: Generator[_Read, Any, Rerun]) -> Rerun:
        try:
            read = next(steps)
            while True:
                read = steps.send(await self._aread(read))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except Exception as exc:
            return _warn(self.scope, exc)

    def _read(self, read: _Read) -> Any:
        if read == "latest":
            return self.graph.get_state(self.state_config)
        if read == "base":
            found = self.graph.checkpointer.get_tuple(self.state_config)
            return None if found is None else _checkpoint_id(found)
        return self.graph.get_state(read)

    async def _aread(self, read: _Read) -> Any:
        if read == "latest":
            return await self.graph.aget_state(self.state_config)
        if read == "base":
            found = await self.graph.checkpointer.aget_tuple(self.state_config)
            return None if found is None else _checkpoint_id(found)
        return await self.graph.aget_state(read)


def snapshot_output(graph: Any, snapshot: Any) -> Any:
    """What ``graph.invoke`` returned when the thread stood at ``snapshot``: the values of
    the graph's output channels, and ``__interrupt__`` when it paused at an interrupt.

    A graph with one output channel (the functional API's ``@entrypoint``, a graph of a
    root channel) returned that channel's value itself, whatever its type: LangGraph's
    snapshot already holds that value, not a mapping of channels.
    """
    values = snapshot.values
    channels = getattr(graph, "output_channels", None)
    interrupts = [i for task in snapshot.tasks for i in getattr(task, "interrupts", ())]
    if isinstance(channels, str):
        if not interrupts:
            return values
        return (
            {**values, "__interrupt__": interrupts}
            if isinstance(values, dict)
            else {"__interrupt__": interrupts}
        )
    if isinstance(values, Mapping):
        if isinstance(channels, list | tuple):
            values = {k: values[k] for k in channels if k in values}
        else:
            values = dict(values)
        if interrupts:
            values["__interrupt__"] = interrupts
    return values


def wants_sync_durability(graph: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether a durable call should default to ``durability="sync"``: the graph has a
    checkpointer that survives the process and the caller chose no durability.

    With LangGraph's default ``async``, the last step's checkpoint may not have landed when
    the process dies: a rerun then repeats that step (never a wrong replay, but a repeated
    call). ``sync`` closes that window for one synchronous checkpoint write per step
    (docs/concepts.md gives the measured price).
    """
    if "durability" in kwargs or "checkpoint_during" in kwargs:
        return False
    saver = getattr(graph, "checkpointer", None)
    if saver is None or saver is True or saver is False:
        return False
    from langgraph.checkpoint.memory import InMemorySaver  # for import time: with the first call

    # A subgraph compiled with checkpointer=False cannot run under "sync" (LangGraph waits for
    # a save it never starts, docs/compatibility.md): such a graph keeps LangGraph's default.
    return not isinstance(saver, InMemorySaver) and not has_uncheckpointed_subgraph(graph)


# --- the zero-code Pregel.invoke patch ------------------------------------------------------


def split_invoke_args(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """``Pregel.invoke(input, config=None, **kw)``'s arguments as (input, config, kw)."""
    kw = dict(kwargs)
    graph_input = args[0] if args else kw.pop("input", None)
    config = args[1] if len(args) > 1 else kw.pop("config", None)
    return graph_input, dict(config or {}), kw


def _state_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        return None
    state: dict[str, Any] = {"thread_id": thread_id}
    if configurable.get("checkpoint_ns") is not None:
        state["checkpoint_ns"] = configurable["checkpoint_ns"]
    return {"configurable": state}


def _prepared(
    graph: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], scope: RunScope, key: str
) -> tuple[Any, dict[str, Any], dict[str, Any], Planner | None, bool]:
    """(input, config, kw, the call's planner or None without a thread, and whether a rerun
    may rebuild its output from a snapshot)."""
    graph_input, config, kw = split_invoke_args(args, kwargs)
    if wants_sync_durability(graph, kw):
        kw["durability"] = "sync"
    # An output shaped otherwise than the final values cannot be rebuilt from a snapshot:
    # such a call only notes where it begins (see Planner.begin) and starts as asked.
    from spanpoint.graph.invoke import shapes_output  # for import time: graph.invoke is heavy

    state_config = _state_config(config)
    planner = None if state_config is None else Planner(graph, state_config, scope, key, kw)
    return graph_input, config, kw, planner, not shapes_output(kw)


def _mark(rerun: Rerun) -> None:
    from opentelemetry import trace  # for import time: only a rerun pays it

    if rerun.attribute is not None:
        trace.get_current_span().set_attribute(semconv.GRAPH_RERUN, rerun.attribute)


def invoke_rerunning(
    wrapped: Any, graph: Any, args: Any, kwargs: Any, scope: RunScope, key: str
) -> Any:
    """``wrapped(*args, **kwargs)`` (``Pregel.invoke``) as a durable graph call inside a run:
    noted under the run and ``key``, and on a rerun continued or returned (see above)."""
    graph_input, config, kw, planner, plannable = _prepared(graph, args, kwargs, scope, key)
    if planner is not None and not plannable:
        planner.begin()
    elif planner is not None:
        found = planner.plan()
        _mark(found)
        if found.action == "return":
            return snapshot_output(graph, found.snapshot)
        if found.action == "continue":
            graph_input = None
    output = wrapped(graph_input, config, **kw)
    if planner is not None:
        planner.end()
    return output


async def ainvoke_rerunning(
    wrapped: Any, graph: Any, args: Any, kwargs: Any, scope: RunScope, key: str
) -> Any:
    """The async form of :func:`invoke_rerunning` (``Pregel.ainvoke``)."""
    graph_input, config, kw, planner, plannable = _prepared(graph, args, kwargs, scope, key)
    if planner is not None and not plannable:
        await planner.abegin()
    elif planner is not None:
        found = await planner.aplan()
        _mark(found)
        if found.action == "return":
            return snapshot_output(graph, found.snapshot)
        if found.action == "continue":
            graph_input = None
    output = await wrapped(graph_input, config, **kw)
    if planner is not None:
        await planner.aend()
    return output
