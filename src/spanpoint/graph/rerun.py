"""Rerun with a durable checkpointer: continue the thread, never submit the input again.

Inside ``spanpoint.run``, every graph call on a thread with a checkpointer puts the run id and
the call's deterministic key into LangGraph's config metadata (:func:`stamp`); LangGraph
copies it into the metadata of every checkpoint the call writes. When a later attempt of the
run reaches a graph call that has no committed output (the ``calls`` strategy commits none;
under ``graph_call`` the commit may have been lost to a crash), :meth:`Planner.plan` reads
the thread once and decides (issue 15 item 4, docs/concepts.md "Rerun with a durable checkpointer"):

- no checkpoint of this call on the thread: **start** as asked (another run's thread, an
  earlier call of this run, a checkpointer that kept nothing);
- this call's checkpoint is the thread's latest and it has pending tasks: **continue** with
  ``invoke(None)``, as LangGraph's own crash resume does; completed tasks do not run again;
- this call ended (no pending task, an interrupt, a static breakpoint before or after a
  node, or a later call wrote after it): **return** the state of its last checkpoint;
  nothing executes.

Used by ``GraphRunner`` (both strategies) and the zero-code ``Pregel.invoke`` patch.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spanpoint import semconv, serde
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


def stamp(config: Mapping[str, Any], run_id: str, key: str) -> dict[str, Any]:
    """``config`` with the run id and the call key in its metadata (a new dict)."""
    metadata = dict(config.get("metadata") or {})
    metadata[semconv.CHECKPOINT_META_RUN_ID] = run_id
    metadata[semconv.CHECKPOINT_META_CALL_KEY] = key
    return {**config, "metadata": metadata}


def enclosing_key(scope: RunScope, name: str, fingerprint: str) -> str:
    """The deterministic key of a graph call that is not a boundary (``calls`` strategy):
    the same rule as a boundary's (run, path, ordinal, input fingerprint), in the innermost
    frame, counted apart from the boundaries' ordinals."""
    frame = current_frame() or scope.root
    path = f"{frame.path}/{name}" if frame.path else name
    ordinal = frame.next_ordinal(f"rerun:{name}", fingerprint)
    return serde.checkpoint_key(scope.run_id, path, ordinal, fingerprint)


def identity_key(scope: RunScope, name: str, identity: Any) -> str:
    """:func:`enclosing_key` of a call identified by ``identity``; "" when it has no
    readable state (the call is then not recognised on a rerun: it starts as asked)."""
    try:
        fingerprint = serde.fingerprint(identity)
    except UnfingerprintableInputError:
        return ""
    return enclosing_key(scope, name, fingerprint)


def _ours(snapshot: Any, run_id: str, key: str) -> bool:
    metadata = getattr(snapshot, "metadata", None) or {}
    return (
        metadata.get(semconv.CHECKPOINT_META_CALL_KEY) == key
        and metadata.get(semconv.CHECKPOINT_META_RUN_ID) == run_id
    )


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


def _filter(key: str) -> dict[str, str]:
    """The metadata filter of this call's checkpoints (newest first, one is enough)."""
    return {semconv.CHECKPOINT_META_CALL_KEY: key}


def _warn(scope: RunScope, exc: BaseException) -> Rerun:
    scope.warn(f"could not read the thread's checkpoints for a rerun, starting as asked: {exc}")
    return START


# The reads a rerun plan needs, as requests its sync and async drivers answer (the sans-I/O
# shape of boundary._Call.wait): "latest" -> the thread's state; "history" -> the newest
# checkpoint of this call, or None; a config -> the state at that checkpoint (the parent of
# the one the plan would continue, for its interrupt_after breakpoints).
_Read = Literal["latest", "history"] | Mapping[str, Any]


def _plan_steps(
    graph: Any, scope: RunScope, key: str, kwargs: Mapping[str, Any]
) -> Generator[_Read, Any, Rerun]:
    if scope.attempt < 2:  # a first attempt has no earlier progress to find
        return START
    latest = yield "latest"
    if _ours(latest, scope.run_id, key):
        found = _classify(latest, True, graph, kwargs)
        stops = _breakpoints_after(graph, kwargs)
        parent_config = getattr(latest, "parent_config", None)
        # Paused after a node (LangGraph's static interrupt_after), not crashed: the pause
        # is returned as the pause it is (issue 15 item 4, the rerun table).
        if (
            found.action == "continue"
            and stops
            and parent_config
            and _stopped_after((yield parent_config), stops)
        ):
            return Rerun("return", latest)
        return found
    if not _has_checkpoint(latest):
        return START
    found = yield "history"
    if found is None or not _ours(found, scope.run_id, key):
        return START
    return _classify(found, False, graph, kwargs)


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
        steps = _plan_steps(self.graph, self.scope, self.key, self.kwargs)
        try:
            read = next(steps)
            while True:
                read = steps.send(self._read(read))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except Exception as exc:  # a failed read means execute: never a wrong return
            return _warn(self.scope, exc)

    async def aplan(self) -> Rerun:
        """The async form of :meth:`plan` (async checkpointers have no sync reads)."""
        steps = _plan_steps(self.graph, self.scope, self.key, self.kwargs)
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
        if read == "history":
            found = self.graph.get_state_history(
                self.state_config, filter=_filter(self.key), limit=1
            )
            return next(iter(found), None)
        return self.graph.get_state(read)

    async def _aread(self, read: _Read) -> Any:
        if read == "latest":
            return await self.graph.aget_state(self.state_config)
        if read == "history":
            found = self.graph.aget_state_history(
                self.state_config, filter=_filter(self.key), limit=1
            )
            async for snapshot in found:
                return snapshot
            return None
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
) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    graph_input, config, kw = split_invoke_args(args, kwargs)
    config = stamp(config, scope.run_id, key)
    if wants_sync_durability(graph, kw):
        kw["durability"] = "sync"
    # An output shaped otherwise than the final values cannot be rebuilt from a snapshot:
    # such a call is stamped (its checkpoints are recognised) but starts as asked.
    from spanpoint.graph.invoke import shapes_output  # for import time: graph.invoke is heavy

    state_config = None if shapes_output(kw) else _state_config(config)
    return graph_input, config, kw, state_config


def _mark(rerun: Rerun) -> None:
    from opentelemetry import trace  # for import time: only a rerun pays it

    if rerun.attribute is not None:
        trace.get_current_span().set_attribute(semconv.GRAPH_RERUN, rerun.attribute)


def invoke_rerunning(
    wrapped: Any, graph: Any, args: Any, kwargs: Any, scope: RunScope, key: str
) -> Any:
    """``wrapped(*args, **kwargs)`` (``Pregel.invoke``) as a durable graph call inside a run:
    stamped with the run and ``key``, and on a rerun continued or returned (see above)."""
    graph_input, config, kw, state_config = _prepared(graph, args, kwargs, scope, key)
    if state_config is not None:
        found = Planner(graph, state_config, scope, key, kw).plan()
        _mark(found)
        if found.action == "return":
            return snapshot_output(graph, found.snapshot)
        if found.action == "continue":
            graph_input = None
    return wrapped(graph_input, config, **kw)


async def ainvoke_rerunning(
    wrapped: Any, graph: Any, args: Any, kwargs: Any, scope: RunScope, key: str
) -> Any:
    """The async form of :func:`invoke_rerunning` (``Pregel.ainvoke``)."""
    graph_input, config, kw, state_config = _prepared(graph, args, kwargs, scope, key)
    if state_config is not None:
        found = await Planner(graph, state_config, scope, key, kw).aplan()
        _mark(found)
        if found.action == "return":
            return snapshot_output(graph, found.snapshot)
        if found.action == "continue":
            graph_input = None
    return await wrapped(graph_input, config, **kw)
