"""How ``GraphRunner`` runs one call: the boundary, the span, state inspection, the summary.

The hot path of a ``graph_call`` is deliberately short: one fingerprint, one store claim,
``graph.invoke``, one ``get_state`` only when the graph has a checkpointer, one commit. No
LangChain callback handler is attached.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from spanpoint import _json, semconv, serde, spans
from spanpoint.boundary import BoundarySpec, acall_boundary, call_boundary
from spanpoint.calls.attributes import graph_input_attributes, graph_output_attributes
from spanpoint.calls.injected import caller_config
from spanpoint.config import settings
from spanpoint.errors import UnfingerprintableInputError
from spanpoint.events import add_bounded_event
from spanpoint.graph import approvals, rerun
from spanpoint.graph.identity import graph_call_identity, keyed_frame_identity, reachable_store
from spanpoint.graph.inspect import GraphInfo, base_attributes, captured_attributes
from spanpoint.graph.invoke import (
    NodeCounts,
    ainvoke_counting,
    invoke_counting,
    is_pregel,
    journal_counters,
    journal_mark,
    node_counters,
    shapes_output,
)
from spanpoint.graph.nested import runner_call
from spanpoint.graph.results import (
    RunResult,
    alatest_state,
    build_result,
    decode_result,
    encode_result,
    latest_state,
    note_run_status,
    output_counters,
    result_attributes,
    resume_map,
)
from spanpoint.graph.resume import link_to_pause, note_pause_origin, pause_origin
from spanpoint.graph.summary import build_summary, emit_summary
from spanpoint.graph.types import CallOwner, RunRequest
from spanpoint.run import RunScope, current_run
from spanpoint.spans import resume_attributes

# serde.fingerprint's canonical JSON: sorted keys, compact, UTF-8.
_CANONICAL_JSON = _json.STABLE_ENCODER


def _plain_identity_template() -> tuple[str, str, str]:
    """The canonical JSON of a plain call's identity, cut around its input and thread id.

    The four other parts are the same for every plain call, so their text is built once,
    here, by serde.canonical itself (two str marks stand for the input and the thread id).
    """
    marks = ("\x00input\x00", "\x00thread\x00")
    identity = {
        "checkpoint_ns": None,
        "configurable": {},
        "context": None,
        "input": marks[0],
        "kwargs": {},
        "thread_id": marks[1],
    }
    text = _CANONICAL_JSON.encode(serde.canonical(identity))
    head, rest = text.split(_CANONICAL_JSON.encode(marks[0]))
    middle, tail = rest.split(_CANONICAL_JSON.encode(marks[1]))
    return head, middle, tail


_HEAD, _MIDDLE, _TAIL = _plain_identity_template()


def request_fingerprint(req: RunRequest, kwargs: Mapping[str, Any]) -> str | None:
    """``serde.fingerprint`` of a call's identity, for the common call that has only an input
    and a thread, no caller metadata or tags (None otherwise): the same digest, with only the
    input and the thread id encoded per call. Keys stay those of the general path
    (tests/graph/test_graph_runner.py checks that both agree)."""
    if (
        req.checkpoint_ns is not None
        or req.context is not None
        or req.configurable
        or kwargs
        or req.config.get("configurable")
        or (req.config and caller_config(req.config))
    ):
        return None
    try:
        view = serde.canonical(req.input)
    except UnfingerprintableInputError:
        return None  # the general path computes it again and the boundary reports it
    text = "".join(
        (_HEAD, _CANONICAL_JSON.encode(view), _MIDDLE, _CANONICAL_JSON.encode(req.thread_id), _TAIL)
    )
    return serde.text_digest(text)


#: How many threads' pending interrupt ids a runner keeps for resume events.
_PENDING_THREADS = 1024


class GraphCall:
    """The machinery behind one :class:`~spanpoint.graph.GraphRunner` (its ``runner``)."""

    def __init__(self, runner: CallOwner) -> None:
        self.runner = runner
        self.graph = runner.graph
        self.info: GraphInfo = runner.info
        self.span_name = f"{runner.info.span_name} {runner.name}"
        # Invariant per runner: built once, copied per call.
        self._base_attributes = base_attributes(runner.info, runner.name, runner.strategy)
        self._pregel = is_pregel(runner.graph)
        # thread id -> (the interrupt ids its last call returned, the link to that call's
        # span, the tool calls its approval gates hold), for the next resume's events and link.
        self._pending: dict[str, tuple[tuple[str, ...], Link | None, approvals.Gates]] = {}
        # A durable stream's span -> its run and key, until the stream's end notes where
        # the call ended (see :meth:`finish`); gone with the span when the stream fails.
        self._streams: weakref.WeakKeyDictionary[Any, tuple[RunScope, str]] = (
            weakref.WeakKeyDictionary()
        )

    # --- graph_call boundary -------------------------------------------------------------

    def invoke(self, req: RunRequest, kwargs: dict[str, Any]) -> RunResult:
        """One call; a boundary unless the strategy is ``calls``."""
        started = time.perf_counter()
        if self.runner.strategy == "calls":
            # The runner's scope (nested calls' spans, and the model and tool seams of
            # spanpoint.calls.seams: the runner never needs the zero-code instrumentor).
            with self._scope():
                return self._traced_only(req, kwargs, started)
        tally = _Tally()
        try:
            result = call_boundary(self._spec(req, kwargs), self._scoped, req, kwargs, tally)
        except Exception as exc:
            self.summarize(req, started, None, exc, node_counters(tally.nodes))
            raise
        return self._ended(req, started, result, node_counters(tally.nodes), tally.span)

    async def ainvoke(self, req: RunRequest, kwargs: dict[str, Any]) -> RunResult:
        """The async form of :meth:`invoke`."""
        started = time.perf_counter()
        if self.runner.strategy == "calls":
            with self._scope():
                return await self._atraced_only(req, kwargs, started)
        tally = _Tally()
        try:
            spec = self._spec(req, kwargs)
            result = await acall_boundary(spec, self._ascoped, req, kwargs, tally)
        except Exception as exc:
            self.summarize(req, started, None, exc, node_counters(tally.nodes))
            raise
        return self._ended(req, started, result, node_counters(tally.nodes), tally.span)

    @contextmanager
    def _scope(self) -> Iterator[None]:
        """The scope of a call that runs the graph: nested graph calls get their spans
        (spanpoint.graph.nested), model and tool calls are boundaries (the seams)."""
        with runner_call(self.graph, self.runner.strategy):
            yield

    def _scoped(self, req: RunRequest, kwargs: dict[str, Any], tally: _Tally) -> RunResult:
        """A graph_call boundary's body: the graph's execution in the runner's scope.

        The scope opens only here, when the boundary executes: a replay runs no graph, so
        it needs none (the scope is context variables; no class is patched per call).
        The seams under graph_call too: a resume is another graph call, so the calls a
        re-executed task completed replay through their task anchor, not this boundary.
        """
        with self._scope():
            return self._execute(req, kwargs, tally)

    async def _ascoped(self, req: RunRequest, kwargs: dict[str, Any], tally: _Tally) -> RunResult:
        """The async form of :meth:`_scoped`."""
        with self._scope():
            return await self._aexecute(req, kwargs, tally)

    def _spec(self, req: RunRequest, kwargs: dict[str, Any]) -> BoundarySpec:
        identity = fingerprint = None
        if current_run() is not None:  # only a durable call is keyed by its input
            if reachable_store(self.graph) is None:  # else: not cacheable (the identity says)
                fingerprint = request_fingerprint(req, kwargs)
            if fingerprint is None:
                identity = self._identity(req, kwargs)
        return BoundarySpec(
            kind=semconv.KIND_GRAPH_CALL,
            name=self.runner.name,
            span_name=self.span_name,
            identity=identity,
            fingerprint=fingerprint,
            attributes=self._attributes(req),
            view={"graph": self.runner.name, "thread_id": req.thread_id, "resume": req.is_resume},
            describe=self._describe,
            on_replay=lambda span, result: self._replay_events(span, req, result),
            encode=encode_result,
            decode=decode_result,
        )

    def _identity(
        self, req: RunRequest, kwargs: dict[str, Any], *, durable: bool = True
    ) -> dict[str, Any]:
        """What identifies a graph call's input (never stored: only its fingerprint), by the
        rule the zero-code patches key by (spanpoint.graph.identity)."""
        config = req.graph_config()
        configurable = config["configurable"]  # the config's and the request's
        return graph_call_identity(
            self.graph,
            req.input,
            thread_id=req.thread_id,
            checkpoint_ns=configurable.get("checkpoint_ns"),
            context=req.context,
            configurable=configurable,
            kwargs=kwargs,
            durable=durable,
            config=config,
        )

    def _describe(self, result: RunResult) -> dict[str, Any]:
        """The result's span attributes; its last reply as output when capture opts in."""
        attrs = result_attributes(result)
        policy = self.runner.policy
        if policy.content_on_spans:
            attrs.update(graph_output_attributes(result.output, policy))
            _show_on_run(None, attrs)
        return attrs

    def _attributes(self, req: RunRequest) -> dict[str, Any]:
        attrs = dict(self._base_attributes)
        attrs[semconv.GEN_AI_CONVERSATION_ID] = req.thread_id
        policy = self.runner.policy
        if policy.content_on_spans:
            attrs.update(graph_input_attributes(req.input, policy))
            _show_on_run(attrs, None)
        if policy.capture_config or policy.capture_state:
            configurable = None
            if req.configurable or req.config.get("configurable"):
                configurable = req.graph_config()["configurable"]
            captured_attributes(attrs, policy, configurable, req.context, req.input)
        return attrs

    def call_kwargs(self, req: RunRequest, kwargs: dict[str, Any]) -> dict[str, Any]:
        if req.context is None:
            return kwargs
        return {**kwargs, "context": req.context}

    def _execute(
        self, req: RunRequest, kwargs: dict[str, Any], tally: _Tally | None = None
    ) -> RunResult:
        span, config, kw, durable = self._begin(req, kwargs, tally)
        graph_input = req.input
        if durable is not None:  # a rerun continues the thread (graph/rerun.py)
            planner = rerun.Planner(self.graph, req.state_config(), *durable, kw)
            plan = planner.plan()
            if plan.action == "return":
                return self._returned(span, req, plan)
            graph_input = self._rerun_input(span, req, plan)
        counted = tally is not None and self._pregel and not shapes_output(kw)
        if counted:
            output = invoke_counting(self.graph, graph_input, config, kw, tally.nodes)
        else:
            output = self.graph.invoke(graph_input, config, **kw)
        snapshot = checkpoint = None
        if self.info.has_state:
            ended = counted and _ran_to_end(tally, kw)
            snapshot, checkpoint = latest_state(self.graph, req.state_config(), output, ended)
        if durable is not None:
            planner.end(_checkpoint_id(snapshot, checkpoint))
        return self.finish(span, req, output, snapshot, checkpoint)

    async def _aexecute(
        self, req: RunRequest, kwargs: dict[str, Any], tally: _Tally | None = None
    ) -> RunResult:
        span, config, kw, durable = self._begin(req, kwargs, tally)
        graph_input = req.input
        if durable is not None:  # a rerun continues the thread (graph/rerun.py)
            planner = rerun.Planner(self.graph, req.state_config(), *durable, kw)
            plan = await planner.aplan()
            if plan.action == "return":
                return self._returned(span, req, plan)
            graph_input = self._rerun_input(span, req, plan)
        counted = tally is not None and self._pregel and not shapes_output(kw)
        if counted:
            output = await ainvoke_counting(self.graph, graph_input, config, kw, tally.nodes)
        elif callable(getattr(self.graph, "ainvoke", None)):
            output = await self.graph.ainvoke(graph_input, config, **kw)
        else:
            output = await asyncio.to_thread(self.graph.invoke, graph_input, config, **kw)
        snapshot = checkpoint = None
        if self.info.has_state:
            ended = counted and _ran_to_end(tally, kw)
            snapshot, checkpoint = await alatest_state(
                self.graph, req.state_config(), output, ended
            )
        if durable is not None:
            await planner.aend(_checkpoint_id(snapshot, checkpoint))
        return self.finish(span, req, output, snapshot, checkpoint)

    def _begin(
        self, req: RunRequest, kwargs: dict[str, Any], tally: _Tally | None
    ) -> tuple[trace.Span, dict[str, Any], dict[str, Any], tuple[RunScope, str] | None]:
        """What the sync and async executions share before the graph runs: the current span
        (started), the config and call kwargs (``durability="sync"`` when durable), and
        :meth:`_durable`'s run and key."""
        span = trace.get_current_span()
        self._on_start(span, req)
        config, kw = req.graph_config(), self.call_kwargs(req, kwargs)
        if tally is not None:
            tally.span = span
        durable = self._durable(tally)
        if durable is not None:
            config, kw = self._stamped(durable, config, kw)
        return span, config, kw, durable

    # --- rerun with a durable checkpointer (graph/rerun.py) ----------------------------------

    def _durable(self, tally: _Tally | None) -> tuple[RunScope, str] | None:
        """The run and this call's key when the call is durable and has a thread to read:
        the boundary's own key under ``graph_call``, the one ``_traced_only`` computed under
        ``calls``; None otherwise (outside a run, no checkpointer, unreadable input)."""
        scope = current_run()
        if scope is None or not (self._pregel and self.info.has_state):
            return None
        key = tally.call_key if tally is not None else None
        if key is None:
            key = keyed_frame_identity(scope)
        return (scope, key) if key else None

    def _stamped(
        self, durable: tuple[RunScope, str], config: dict[str, Any], kw: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The config as given (LangGraph's checkpoints carry nothing of spanpoint: the
        rerun planner keeps its notes in spanpoint's store), and LangGraph's
        ``durability="sync"`` unless the caller chose one (a durable checkpointer only)."""
        if rerun.wants_sync_durability(self.graph, kw):
            kw = {**kw, "durability": "sync"}
        return config, kw

    def _returned(self, span: trace.Span, req: RunRequest, plan: rerun.Rerun) -> RunResult:
        """The result of a call that had ended in an earlier attempt: its thread's state."""
        span.set_attribute(semconv.GRAPH_RERUN, "returned")
        output = rerun.snapshot_output(self.graph, plan.snapshot)
        return self.finish(span, req, output, plan.snapshot)

    def _rerun_input(self, span: trace.Span, req: RunRequest, plan: rerun.Rerun) -> Any:
        """The graph input of a call a rerun plan did not return: None when it continues the
        thread (LangGraph's own resume), else the request's input."""
        if plan.action == "continue":
            span.set_attribute(semconv.GRAPH_RERUN, "continued")
            return None
        return req.input

    def stream_setup(
        self, span: trace.Span, req: RunRequest, kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], tuple[RunScope, str] | None]:
        """A stream's config and call kwargs, as :meth:`_begin` makes a call's, and its run
        and key when the stream is a durable graph call (None otherwise)."""
        config, kw = req.graph_config(), self.call_kwargs(req, kwargs)
        key = self._calls_key(req, kwargs)
        scope = current_run()
        durable = (scope, key) if scope is not None and key else None
        if durable is not None:
            config, kw = self._stamped(durable, config, kw)
            self._streams[span] = durable
        return config, kw, durable

    def _calls_key(self, req: RunRequest, kwargs: dict[str, Any]) -> str | None:
        """Under ``calls`` and for a stream (no boundary): the key a graph-call boundary would
        have, so that a rerun recognises the thread's progress; "" when the call cannot be
        keyed."""
        scope = current_run()
        if scope is None or not (self._pregel and self.info.has_state):
            return None
        # A stream under graph_call follows the boundary's rule: a graph that reaches a store
        # is not keyed, so a rerun never hands it the state an earlier attempt left.
        durable = self.runner.strategy == "graph_call"
        if not durable or reachable_store(self.graph) is None:
            fingerprint = request_fingerprint(req, kwargs)
            if fingerprint is not None:
                return rerun.enclosing_key(scope, self.runner.name, fingerprint)
        identity = self._identity(req, kwargs, durable=durable)
        return rerun.identity_key(scope, self.runner.name, identity)

    def _on_start(self, span: trace.Span, req: RunRequest, *, executing: bool = True) -> None:
        if req.is_resume and span.is_recording():
            ids, link = self._answered(req, executing)
            link_to_pause(span, link)
            attrs = resume_attributes(ids)
            attrs[semconv.GEN_AI_CONVERSATION_ID] = req.thread_id
            add_bounded_event(
                semconv.EVENT_AGENT_RESUMED, attrs, span=span, policy=self.runner.policy
            )
            resume = req.input.resume
            if approvals.carries_decisions(resume):
                gates = self._gates_answered(req, executing)
                approvals.decided(span, resume, gates, self.runner.policy)

    def _answered(self, req: RunRequest, executing: bool) -> tuple[list[str], Link | None]:
        """The interrupt ids a resume answers, and the link to the span that paused.

        The ids: the keys of ``Command(resume={id: value})``; for a plain value, the thread's
        pending interrupts. Both as this runner last saw them (the previous call on the
        thread, executed or replayed), else, when executing, as the thread's state says
        before the resume runs: spanpoint's store notes the span that paused at the paused
        checkpoint, so a resume in another process sharing the store links to it too."""
        mapped = resume_map(req.input.resume)
        keyed = None if mapped is None else [str(k) for k in mapped]
        seen = self._pending.get(req.thread_id)
        if seen is not None:
            return (list(seen[0]) if keyed is None else keyed), seen[1]
        if not (executing and self.info.has_state):
            return keyed or [], None
        try:
            snapshot = self.graph.get_state(req.state_config())
        except Exception:  # observability is best effort: the event lists none
            return keyed or [], None
        if keyed is None:
            keyed = [str(i.id) for i in getattr(snapshot, "interrupts", ()) or ()]
        return keyed, pause_origin(req.thread_id, snapshot)

    def _gates_answered(self, req: RunRequest, executing: bool) -> approvals.Gates:
        """The approval gates a resume answers: as this runner last saw the thread, else,
        when executing, as the thread's state says before the resume runs."""
        seen = self._pending.get(req.thread_id)
        if seen is not None:
            return seen[2]
        if not (executing and self.info.has_state):
            return {}
        try:
            snapshot = self.graph.get_state(req.state_config())
        except Exception:  # observability is best effort: no decision events
            return {}
        interrupts = getattr(snapshot, "interrupts", ()) or ()
        return approvals.gates_of(((i.id, i.value) for i in interrupts), snapshot.values)

    def _remember(self, req: RunRequest, result: RunResult) -> None:
        """Keep the thread's pending interrupt ids for the resume event of its next call,
        and tell the run when the guard stopped it (its status ``stopped``)."""
        scope = current_run()
        if scope is not None:
            note_run_status(scope, result.status)
        pending = self._pending
        pending.pop(req.thread_id, None)
        link = None
        if result.interrupted and result.trace_id and result.span_id:
            origin = f"00-{result.trace_id}-{result.span_id}-01"
            link = note_pause_origin(req.thread_id, result.latest_checkpoint_id, origin)
        gates = _gates(result) if result.interrupted else {}
        pending[req.thread_id] = (tuple(i.id for i in result.interrupts), link, gates)
        while len(pending) > _PENDING_THREADS:
            pending.pop(next(iter(pending)), None)

    def _replay_events(self, span: trace.Span, req: RunRequest, result: RunResult) -> None:
        # A replayed call tells the same lifecycle story as the execution it stands for.
        self._on_start(span, req, executing=False)
        self._lifecycle_events(span, result)

    def finish(
        self,
        span: trace.Span,
        req: RunRequest,
        output: Any,
        snapshot: Any,
        checkpoint_config: Any = None,
    ) -> RunResult:
        stream = self._streams.pop(span, None)
        ended = _checkpoint_id(snapshot, checkpoint_config)
        if stream is not None and ended is not None:  # a durable stream that ran to its end
            rerun.Planner(self.graph, req.state_config(), *stream, {}).end(ended)
        ctx = span.get_span_context()
        ids = (format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")) if ctx.is_valid else None
        result = build_result(
            output,
            req.thread_id,
            snapshot,
            warnings=self.info.warnings,
            span_ids=ids,
            checkpoint_config=checkpoint_config,
        )
        if span.is_recording():
            self._lifecycle_events(span, result)
        return result

    def _lifecycle_events(self, span: trace.Span, result: RunResult) -> None:
        policy = self.runner.policy
        if result.latest_checkpoint_id:
            add_bounded_event(
                semconv.EVENT_AGENT_CHECKPOINTED,
                {semconv.GEN_AI_AGENT_CHECKPOINT_ID: result.latest_checkpoint_id},
                span=span,
                policy=policy,
            )
        if result.interrupted:
            details: dict[str, Any] = {
                semconv.LANGGRAPH_NODE: [i.node or "" for i in result.interrupts],
                semconv.LANGGRAPH_CHECKPOINT_NS: [i.namespace for i in result.interrupts],
                semconv.LANGGRAPH_NEXT_NODES: list(result.next_nodes),
            }
            values = [i.value for i in result.interrupts]
            if policy.capture_state:
                details[semconv.GRAPH_INTERRUPT_VALUES] = values
            # A static breakpoint has no interrupt ids, but the call is paused all the same.
            ids = [i.id for i in result.interrupts]
            spans.paused_event(span, ids, values, policy=policy, details=details, shows_pause=True)
            approvals.requested(span, _gates(result), policy)

    # --- strategy "calls": traced, not a boundary ------------------------------------------

    def open_span(self, req: RunRequest, strategy: str | None = None) -> trace.Span:
        attrs = self._attributes(req)
        if strategy:
            attrs[semconv.STRATEGY] = strategy
        scope = current_run()
        if scope is not None:  # keeps the span recorded under any sampler (DurableSampler)
            attrs[semconv.RUN_ID] = scope.run_id
        return settings().tracer.start_span(self.span_name, attributes=attrs)

    def _traced_only(self, req: RunRequest, kwargs: dict[str, Any], started: float) -> RunResult:
        span, mark, tally = self._open_traced(req, kwargs)
        try:
            with spans.current(span):
                result = self._execute(req, kwargs, tally)
        except BaseException as exc:  # cancelled or interrupted too: end the span
            spans.fail_span(span, exc)
            self.summarize(req, started, None, exc, journal_counters(mark, tally.nodes))
            raise
        return self._traced_ended(req, started, span, mark, tally, result)

    async def _atraced_only(
        self, req: RunRequest, kwargs: dict[str, Any], started: float
    ) -> RunResult:
        span, mark, tally = self._open_traced(req, kwargs)
        try:
            with spans.current(span):
                result = await self._aexecute(req, kwargs, tally)
        except BaseException as exc:  # cancelled or interrupted too: end the span
            spans.fail_span(span, exc)
            self.summarize(req, started, None, exc, journal_counters(mark, tally.nodes))
            raise
        return self._traced_ended(req, started, span, mark, tally, result)

    def _open_traced(
        self, req: RunRequest, kwargs: dict[str, Any]
    ) -> tuple[trace.Span, int, _Tally]:
        """The span of a traced-only call, where its journal stands now, and its tally."""
        span, mark, tally = self.open_span(req), journal_mark(), _Tally()
        tally.call_key = self._calls_key(req, kwargs)
        return span, mark, tally

    def _traced_ended(
        self,
        req: RunRequest,
        started: float,
        span: trace.Span,
        mark: int,
        tally: _Tally,
        result: RunResult,
    ) -> RunResult:
        """End a traced-only call that returned: its span, what it remembers, its summary."""
        spans.end_ok(span, self._describe(result))
        return self._ended(req, started, result, journal_counters(mark, tally.nodes), span)

    def _ended(
        self,
        req: RunRequest,
        started: float,
        result: RunResult,
        counters: Mapping[str, int],
        span: trace.Span | None,
    ) -> RunResult:
        """A call that returned, under either strategy: remembered, and summarized with
        ``counters`` and correlated with ``span``."""
        self._remember(req, result)
        self.summarize(req, started, result, None, counters, span=span)
        return result

    # --- run summary -------------------------------------------------------------------------

    def summarize(
        self,
        req: RunRequest,
        started: float,
        result: RunResult | None,
        error: BaseException | None = None,
        counters: Mapping[str, int] | None = None,
        strategy: str | None = None,
        *,
        span: trace.Span | None = None,
    ) -> None:
        """Emit the call's summary, correlated with ``span`` (the span that produced
        ``result``: the executed call's, else the original one named by the result)."""
        if not self.info.calls_summary and self.runner.strategy == "calls":
            return  # CallCheckpointPolicy(summary=False) on the agent's middleware
        all_counters = output_counters(result)
        if counters:
            all_counters.update(counters)
        summary = build_summary(
            name=self.runner.name,
            strategy=strategy or self.runner.strategy,
            status="failed" if error is not None else result.status if result else "completed",
            thread_id=req.thread_id,
            duration_s=time.perf_counter() - started,
            result=result,
            error=error,
            counters=all_counters,
            warnings=() if result else self.info.warnings,
        )
        if span is None or result is None or result.replayed:
            span = _original_span(result)
        emit_summary(summary, span=span)


def _original_span(result: RunResult | None) -> trace.Span | None:
    """The span named by ``result``'s ids (a replayed result's original execution)."""
    if result is None or not result.trace_id or not result.span_id:
        return None
    return NonRecordingSpan(
        SpanContext(
            int(result.trace_id, 16),
            int(result.span_id, 16),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    )


#: The end of a stream (``next(chunks, END)``).
END: Any = object()


def _show_on_run(start: Mapping[str, Any] | None, end: Mapping[str, Any] | None) -> None:
    """The run's root shows its first graph call's input and its last one's output, so a
    trace list shows what the run was asked and what it answered."""
    scope = current_run()
    span = scope.span if scope is not None else None
    if span is None or not span.is_recording():
        return
    key = semconv.GEN_AI_INPUT_MESSAGES
    if start and key in start and key not in (getattr(span, "attributes", None) or {}):
        span.set_attribute(key, start[key])
    key = semconv.GEN_AI_OUTPUT_MESSAGES
    if end and key in end:
        span.set_attribute(key, end[key])


def close_quietly(chunks: Any) -> None:
    """Close a stream's iterator when it has ``close`` (an abandoned or failed stream)."""
    close = getattr(chunks, "close", None)
    if callable(close):
        close()


class _Tally:
    """What one call's execution leaves for its summary: nodes that ran, and its span; and,
    under ``calls``, the call's key for a rerun (None: the boundary's own key)."""

    __slots__ = ("call_key", "nodes", "span")

    def __init__(self) -> None:
        self.nodes = NodeCounts()
        self.span: trace.Span | None = None
        self.call_key: str | None = None


def _checkpoint_id(snapshot: Any, checkpoint_config: Any) -> str | None:
    """The id of the thread's latest checkpoint after a call, from whichever of the two
    ``latest_state`` read (None: read it again)."""
    config = (
        checkpoint_config if checkpoint_config is not None else getattr(snapshot, "config", None)
    )
    checkpoint_id = ((config or {}).get("configurable") or {}).get("checkpoint_id")
    return str(checkpoint_id) if checkpoint_id else None


def _ran_to_end(tally: _Tally | None, kwargs: Mapping[str, Any]) -> bool:
    """Whether a counted call surely completed: no interrupt or breakpoint in its stream,
    and no run control that may stop it early (see ``latest_state``)."""
    return tally is not None and not tally.nodes.paused and "control" not in kwargs


def _gates(result: RunResult) -> approvals.Gates:
    """The approval gates among ``result``'s interrupts. A subgraph's interrupt is not
    matched to the messages of the output, which are its parent's."""
    root = [(i.id, i.value) for i in result.interrupts if not i.namespace]
    nested = [(i.id, i.value) for i in result.interrupts if i.namespace]
    gates = approvals.gates_of(root, result.output)
    gates.update(approvals.gates_of(nested))
    return gates
