"""Explicit continuation: ``compile_guarded_graph`` and the ``GuardedGraph`` runner.

A stopped thread never continues by accident. ``GuardedGraph.invoke`` refuses a thread the
guard stopped; ``GuardedGraph.resume`` continues a *detector* stop (budget stops are final)
with a person's or the application's correction and a fresh grant of reflections, after
checking that nothing changed since the stop. Every rejection raises a specific
:class:`~spanpoint.errors.GuardResumeError` and changes nothing.

Within one process, two simultaneous continuations of a thread cannot both run: the second
is rejected with :class:`~spanpoint.errors.GuardConcurrentResumeError` while the first
holds the thread, and with the same error afterwards (its stop has been consumed). Across
processes, pass ``claim_store=`` (a shared spanpoint store) for the same guarantee.
"""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot
from opentelemetry.metrics import MeterProvider

from spanpoint.errors import (
    ConfigurationError,
    GuardConcurrentResumeError,
    GuardNotResumableError,
    GuardResumeArgumentError,
    GuardRunNotStoppedError,
    GuardStaleCheckpointError,
    GuardThreadStoppedError,
    GuardUnknownThreadError,
)
from spanpoint.guard.claims import ResumeClaims, no_claim
from spanpoint.guard.config import GuardConfig
from spanpoint.guard.engine import GuardEngine, state_updates
from spanpoint.guard.graph import guard_graph
from spanpoint.guard.reflection import correction_message, guard_kind
from spanpoint.guard.report import GuardReport
from spanpoint.guard.state import STATE_KEY
from spanpoint.guard.telemetry import GuardTelemetry
from spanpoint.stores.once import OnceStore


def compile_guarded_graph(
    graph: StateGraph | CompiledStateGraph,
    config: GuardConfig | None = None,
    *,
    checkpointer: Any,
    agent_node: str = "agent",
    tools_node: str = "tools",
    messages_key: str = "messages",
    meter_provider: MeterProvider | None = None,
    claim_store: OnceStore | None = None,
    **compile_kwargs: Any,
) -> GuardedGraph:
    """Guard ``graph`` (a builder or a compiled graph) and return its runner.

    ``checkpointer`` is required: a stopped run is resumed from its checkpoint, possibly in
    another process. A compiled graph that is already guarded (``create_agent`` with
    :class:`~spanpoint.guard.GuardMiddleware`, or :func:`~spanpoint.guard.guard_graph`) is used
    as is.
    """
    if checkpointer is None:
        raise ConfigurationError(
            "compile_guarded_graph needs a checkpointer (InMemorySaver, SqliteSaver, "
            "PostgresSaver): a stopped run is resumed from its checkpoint"
        )
    if isinstance(graph, CompiledStateGraph) and compile_kwargs:
        raise ConfigurationError(
            f"compile options ({', '.join(sorted(compile_kwargs))}) apply to a StateGraph "
            "builder; this graph is already compiled"
        )
    if isinstance(graph, CompiledStateGraph) and STATE_KEY in graph.channels:
        compiled = graph.copy(update={"checkpointer": checkpointer})
    else:
        guarded = guard_graph(
            graph,
            config,
            agent_node=agent_node,
            tools_node=tools_node,
            messages_key=messages_key,
            meter_provider=meter_provider,
        )
        if isinstance(guarded, CompiledStateGraph):  # keeps its interrupts, store, name
            compiled = guarded.copy(update={"checkpointer": checkpointer})
        else:
            compiled = guarded.compile(checkpointer=checkpointer, **compile_kwargs)
    return GuardedGraph(
        compiled,
        tools_node=tools_node,
        messages_key=messages_key,
        meter_provider=meter_provider,
        claim_store=claim_store,
    )


class GuardedGraph:
    """A guarded compiled graph with explicit, checked continuation of stopped threads.

    Works for graphs from :func:`compile_guarded_graph` and for ``create_agent`` agents
    built with :class:`~spanpoint.guard.GuardMiddleware` (``GuardedGraph(agent)``). With
    ``claim_store`` (a spanpoint store shared by the processes, e.g. the same SQLite file
    or PostgreSQL database), exactly one of several processes resuming a stop wins.
    """

    def __init__(
        self,
        graph: CompiledStateGraph,
        *,
        tools_node: str = "tools",
        messages_key: str = "messages",
        meter_provider: MeterProvider | None = None,
        claim_store: OnceStore | None = None,
    ) -> None:
        if STATE_KEY not in graph.channels:
            raise ConfigurationError(
                "GuardedGraph needs a guarded graph: build it with GuardMiddleware, "
                "guard_graph() or compile_guarded_graph()"
            )
        if graph.checkpointer in (None, False):
            raise ConfigurationError(
                "GuardedGraph needs a graph compiled with a checkpointer; resume reads the "
                "stopped thread's checkpoint"
            )
        if tools_node not in graph.nodes:
            raise ConfigurationError(
                f"GuardedGraph: tools_node={tools_node!r} is not a node of this graph"
            )
        self.graph = graph
        self.tools_node = tools_node
        self.messages_key = messages_key
        # Only the resume event is emitted here; the config does not matter for it.
        self._engine = GuardEngine(GuardConfig(), GuardTelemetry(meter_provider))
        self._busy: set[str] = set()
        self._busy_lock = threading.Lock()
        self._claim = ResumeClaims(claim_store).hold if claim_store is not None else no_claim

    def __repr__(self) -> str:
        return f"GuardedGraph({self.graph.name!r}, tools_node={self.tools_node!r})"

    # --- plain runs ---------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """``graph.invoke`` on a thread the guard has not stopped."""
        thread = _thread_id(config)
        with self._holding(thread):
            self._refuse_stopped(self.graph.get_state(_latest(thread)), thread)
            return self.graph.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """``graph.ainvoke`` on a thread the guard has not stopped."""
        thread = _thread_id(config)
        with self._holding(thread):
            self._refuse_stopped(await self.graph.aget_state(_latest(thread)), thread)
            return await self.graph.ainvoke(input, config, **kwargs)

    def stream(self, input: Any, config: RunnableConfig, **kwargs: Any) -> Iterator[Any]:
        """``graph.stream`` on a thread the guard has not stopped."""
        thread = _thread_id(config)
        with self._holding(thread):
            self._refuse_stopped(self.graph.get_state(_latest(thread)), thread)
            yield from self.graph.stream(input, config, **kwargs)

    async def astream(self, input: Any, config: RunnableConfig, **kwargs: Any) -> AsyncIterator:
        """``graph.astream`` on a thread the guard has not stopped."""
        thread = _thread_id(config)
        with self._holding(thread):
            self._refuse_stopped(await self.graph.aget_state(_latest(thread)), thread)
            async for chunk in self.graph.astream(input, config, **kwargs):
                yield chunk

    # --- continuation -------------------------------------------------------------------

    def resume(
        self,
        config: RunnableConfig,
        *,
        correction: str,
        additional_reflections: int = 1,
        author: str = "operator",
    ) -> Any:
        """Continue a detector-stopped thread: deliver ``correction``, then run on.

        ``config`` names the thread; with a ``checkpoint_id`` (e.g. from
        :meth:`get_report`) the resume is refused if the thread moved on since. The
        correction is added after the skipped tool results and before the next model call,
        as a user message attributed to ``author``; counters stay cumulative and the episode
        gets ``additional_reflections`` more reflections.
        """
        thread = _thread_id(config)
        _check_resume_args(correction, additional_reflections, author)
        with self._holding(thread):
            snapshot = self.graph.get_state(_latest(thread))
            update = self._resume_update(
                snapshot, config, correction, additional_reflections, author
            )
            with self._claim(thread, _checkpoint_id(snapshot)) as commit:
                self.graph.update_state(snapshot.config, update, as_node=self.tools_node)
                commit()
            return self.graph.invoke(None, _latest(thread, config))

    async def aresume(
        self,
        config: RunnableConfig,
        *,
        correction: str,
        additional_reflections: int = 1,
        author: str = "operator",
    ) -> Any:
        """Async form of :meth:`resume`."""
        thread = _thread_id(config)
        _check_resume_args(correction, additional_reflections, author)
        with self._holding(thread):
            snapshot = await self.graph.aget_state(_latest(thread))
            update = self._resume_update(
                snapshot, config, correction, additional_reflections, author
            )
            with self._claim(thread, _checkpoint_id(snapshot)) as commit:
                await self.graph.aupdate_state(snapshot.config, update, as_node=self.tools_node)
                commit()
            return await self.graph.ainvoke(None, _latest(thread, config))

    def get_report(self, thread_id: str) -> GuardReport:
        """The guard's report for the thread's latest run (with its checkpoint id)."""
        return _report(self.graph.get_state(_latest(thread_id)), thread_id)

    async def aget_report(self, thread_id: str) -> GuardReport:
        """Async form of :meth:`get_report`."""
        return _report(await self.graph.aget_state(_latest(thread_id)), thread_id)

    # --- internals ----------------------------------------------------------------------

    @contextmanager
    def _holding(self, thread: str) -> Iterator[None]:
        with self._busy_lock:
            if thread in self._busy:
                raise GuardConcurrentResumeError(
                    f"thread {thread!r} is already being run or resumed by this runner; "
                    "wait for it to finish"
                )
            self._busy.add(thread)
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy.discard(thread)

    def _refuse_stopped(self, snapshot: StateSnapshot, thread: str) -> None:
        guard = snapshot.values.get(STATE_KEY) if snapshot.values else None
        stop = guard.get("termination") if guard else None
        if stop is None:
            return
        how = (
            "resume it with resume(config, correction=...)"
            if stop["resumable"]
            else "a budget stop is final: start a new thread"
        )
        raise GuardThreadStoppedError(
            f"thread {thread!r} was stopped by the guard ({stop['reason']}); a plain invoke "
            f"would continue it silently. {how[0].upper()}{how[1:]}"
        )

    def _resume_update(
        self,
        snapshot: StateSnapshot,
        config: RunnableConfig,
        correction: str,
        grant: int,
        author: str,
    ) -> dict[str, Any]:
        _resumable_stop(snapshot, config, _thread_id(config), self.messages_key)
        guard = snapshot.values[STATE_KEY]
        resumed = self._engine.resume(guard, grant=grant, author=author)
        resumed["resumes"][-1]["from_checkpoint"] = _checkpoint_id(snapshot)
        message = correction_message(correction.strip(), author, len(resumed["resumes"]))
        return {self.messages_key: [message], **state_updates(resumed)}


def _resumable_stop(
    snapshot: StateSnapshot, config: RunnableConfig, thread: str, messages_key: str
) -> None:
    if not snapshot.values and snapshot.created_at is None:
        raise GuardUnknownThreadError(f"thread {thread!r} has no checkpoint; nothing to resume")
    guard = snapshot.values.get(STATE_KEY) or {}
    stop = guard.get("termination")
    expected = (config.get("configurable") or {}).get("checkpoint_id")
    latest = _checkpoint_id(snapshot)
    if stop is None:
        if expected and any(r.get("from_checkpoint") == expected for r in guard.get("resumes", ())):
            raise GuardConcurrentResumeError(
                f"the stop of thread {thread!r} at checkpoint {expected} was already resumed"
            )
        status = guard.get("status", "not guarded")
        raise GuardRunNotStoppedError(
            f"thread {thread!r} was not stopped by the guard (run status: {status}); "
            "use invoke() to continue it"
        )
    if not stop["resumable"]:
        why = (
            f"hit the {stop['reason']} budget"
            if stop["kind"] == "budget"
            else f"was stopped ({stop['reason']}) with its {stop.get('budget_spent')} budget spent"
        )
        raise GuardNotResumableError(
            f"thread {thread!r} {why}; a budget stop is final. "
            "Start a new thread (with a larger budget if needed)"
        )
    messages = snapshot.values.get(messages_key) or []
    if (
        (expected and expected != latest)
        or snapshot.next
        or not messages
        or (guard_kind(messages[-1]) != "termination")
    ):
        raise GuardStaleCheckpointError(
            f"thread {thread!r} changed since the guard stopped it (latest checkpoint "
            f"{latest}); read get_report() again and resume from what it shows"
        )


def _check_resume_args(correction: object, grant: object, author: object) -> None:
    if not isinstance(correction, str) or not correction.strip():
        raise GuardResumeArgumentError(
            "resume needs a non-empty correction: tell the agent what to do differently"
        )
    if (
        isinstance(grant, bool)
        or not isinstance(grant, int | float)
        or not (math.isfinite(grant) and grant >= 1 and int(grant) == grant)
    ):
        raise GuardResumeArgumentError(
            f"additional_reflections must be a whole number >= 1, got {grant!r}"
        )
    if not isinstance(author, str) or not author.strip():
        raise GuardResumeArgumentError("author must name who wrote the correction")


def _thread_id(config: RunnableConfig | None) -> str:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None or thread == "":
        raise ConfigurationError(
            'a guarded graph needs a thread: pass config={"configurable": {"thread_id": ...}}'
        )
    return str(thread)


def _latest(thread: str, config: RunnableConfig | None = None) -> RunnableConfig:
    # Drop any checkpoint_id: runs and reads always start from the thread's latest state.
    base = dict(config or {})
    base["configurable"] = {
        k: v for k, v in (base.get("configurable") or {}).items() if k != "checkpoint_id"
    } | {"thread_id": thread}
    return base  # type: ignore[return-value]


def _checkpoint_id(snapshot: StateSnapshot) -> str | None:
    return (snapshot.config.get("configurable") or {}).get("checkpoint_id")


def _report(snapshot: StateSnapshot, thread: str) -> GuardReport:
    if not snapshot.values and snapshot.created_at is None:
        raise GuardUnknownThreadError(f"thread {thread!r} has no checkpoint")
    report = GuardReport.from_state(
        snapshot.values, thread_id=thread, checkpoint_id=_checkpoint_id(snapshot)
    )
    if report is None:
        raise GuardUnknownThreadError(f"thread {thread!r} has no guard state (never guarded)")
    return report
