"""How ``GraphRunner`` runs one call: the boundary, the span, state inspection, the summary.

The hot path of a ``graph_call`` is deliberately short: one fingerprint, one store claim,
``graph.invoke``, one ``get_state`` only when the graph has a checkpointer, one commit. No
LangChain callback handler is attached.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from spanpoint import semconv
from spanpoint.boundary import BoundarySpec, acall_boundary, call_boundary
from spanpoint.capture import CapturePolicy
from spanpoint.config import settings
from spanpoint.events import add_bounded_event
from spanpoint.graph_info import GraphInfo
from spanpoint.graph_invoke import ainvoke_counting, counts_nodes, invoke_counting
from spanpoint.graph_results import (
    RunResult,
    build_result,
    decode_result,
    encode_result,
    output_interrupts,
    output_messages,
    result_attributes,
)
from spanpoint.run import current_run
from spanpoint.summary import build_summary, emit_summary

if TYPE_CHECKING:
    from spanpoint.graph import GraphRunner, RunRequest


class GraphCall:
    """The machinery behind one :class:`~spanpoint.graph.GraphRunner`."""

    def __init__(self, runner: GraphRunner) -> None:
        self.runner = runner
        self.graph = runner.graph
        self.info: GraphInfo = runner.info
        self.span_name = f"{runner.info.span_name} {runner.name}"

    # --- graph_call boundary -------------------------------------------------------------

    def invoke(self, req: RunRequest, kwargs: dict[str, Any]) -> RunResult:
        """One call; a boundary unless the strategy is ``calls``."""
        started = time.perf_counter()
        if self.runner.strategy == "calls":
            return self._traced_only(req, kwargs, started)
        nodes: Counter[str] = Counter()
        try:
            result = call_boundary(self._spec(req, kwargs), self._execute, req, kwargs, nodes)
        except Exception as exc:
            self._summarize(req, started, None, exc, _node_counters(nodes))
            raise
        self._summarize(req, started, result, None, _node_counters(nodes))
        return result

    async def ainvoke(self, req: RunRequest, kwargs: dict[str, Any]) -> RunResult:
        """The async form of :meth:`invoke`."""
        started = time.perf_counter()
        if self.runner.strategy == "calls":
            return await self._atraced_only(req, kwargs, started)
        nodes: Counter[str] = Counter()
        try:
            spec = self._spec(req, kwargs)
            result = await acall_boundary(spec, self._aexecute, req, kwargs, nodes)
        except Exception as exc:
            self._summarize(req, started, None, exc, _node_counters(nodes))
            raise
        self._summarize(req, started, result, None, _node_counters(nodes))
        return result

    def _spec(self, req: RunRequest, kwargs: dict[str, Any]) -> BoundarySpec:
        identity = {
            "input": req.input,
            "thread_id": req.thread_id,
            "checkpoint_ns": req.checkpoint_ns,
            "context": req.context,
            "configurable": req.configurable,
            "kwargs": kwargs,
        }
        return BoundarySpec(
            kind=semconv.KIND_GRAPH_CALL,
            name=self.runner.name,
            span_name=self.span_name,
            identity=identity,
            attributes=self._attributes(req),
            view={"graph": self.runner.name, "thread_id": req.thread_id, "resume": req.is_resume},
            describe=result_attributes,
            on_replay=lambda span, result: self._replay_events(span, req, result),
            encode=encode_result,
            decode=decode_result,
        )

    def _attributes(self, req: RunRequest) -> dict[str, Any]:
        configurable = None
        if req.configurable or req.config.get("configurable"):
            configurable = req.graph_config()["configurable"]
        return graph_call_attributes(
            self.info,
            self.runner.name,
            self.runner.strategy,
            self.runner.policy,
            thread_id=req.thread_id,
            configurable=configurable,
            context=req.context,
            graph_input=req.input,
        )

    def _kwargs(self, req: RunRequest, kwargs: dict[str, Any]) -> dict[str, Any]:
        if req.context is None:
            return kwargs
        return {**kwargs, "context": req.context}

    def _execute(
        self, req: RunRequest, kwargs: dict[str, Any], nodes: Counter[str] | None = None
    ) -> RunResult:
        span = trace.get_current_span()
        self._on_start(span, req)
        config, kw = req.graph_config(), self._kwargs(req, kwargs)
        if nodes is not None and counts_nodes(self.graph, kw):
            output = invoke_counting(self.graph, req.input, config, kw, nodes)
        else:
            output = self.graph.invoke(req.input, config, **kw)
        snapshot = None
        if self.info.has_state:
            subgraphs = bool(output_interrupts(output))
            snapshot = self.graph.get_state(req.state_config(), subgraphs=subgraphs)
        return self._finish(span, req, output, snapshot)

    async def _aexecute(
        self, req: RunRequest, kwargs: dict[str, Any], nodes: Counter[str] | None = None
    ) -> RunResult:
        span = trace.get_current_span()
        self._on_start(span, req)
        config, kw = req.graph_config(), self._kwargs(req, kwargs)
        if nodes is not None and counts_nodes(self.graph, kw):
            output = await ainvoke_counting(self.graph, req.input, config, kw, nodes)
        elif callable(getattr(self.graph, "ainvoke", None)):
            output = await self.graph.ainvoke(req.input, config, **kw)
        else:
            output = await asyncio.to_thread(self.graph.invoke, req.input, config, **kw)
        snapshot = None
        if self.info.has_state:
            subgraphs = bool(output_interrupts(output))
            snapshot = await self.graph.aget_state(req.state_config(), subgraphs=subgraphs)
        return self._finish(span, req, output, snapshot)

    def _on_start(self, span: trace.Span, req: RunRequest) -> None:
        if req.is_resume and span.is_recording():
            resume = req.input.resume
            ids = list(resume) if isinstance(resume, Mapping) else []
            add_bounded_event(
                semconv.EVENT_AGENT_RESUMED,
                {
                    semconv.GEN_AI_CONVERSATION_ID: req.thread_id,
                    semconv.LANGGRAPH_INTERRUPT_IDS: ids,
                },
                span=span,
                policy=self.runner.policy,
            )

    def _replay_events(self, span: trace.Span, req: RunRequest, result: RunResult) -> None:
        # A replayed call tells the same lifecycle story as the execution it stands for.
        self._on_start(span, req)
        self._lifecycle_events(span, result)

    def _finish(self, span: trace.Span, req: RunRequest, output: Any, snapshot: Any) -> RunResult:
        ctx = span.get_span_context()
        ids = (format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")) if ctx.is_valid else None
        result = build_result(
            output, req.thread_id, snapshot, warnings=self.info.warnings, span_ids=ids
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
            attrs: dict[str, Any] = {
                semconv.LANGGRAPH_INTERRUPT_COUNT: len(result.interrupts),
                semconv.LANGGRAPH_INTERRUPT_IDS: [i.id for i in result.interrupts],
                semconv.LANGGRAPH_NODE: [i.node or "" for i in result.interrupts],
                semconv.LANGGRAPH_CHECKPOINT_NS: [i.namespace for i in result.interrupts],
                semconv.LANGGRAPH_NEXT_NODES: list(result.next_nodes),
            }
            if policy.capture_state:
                attrs[semconv.GRAPH_INTERRUPT_VALUES] = [i.value for i in result.interrupts]
            add_bounded_event(semconv.EVENT_AGENT_PAUSED, attrs, span=span, policy=policy)

    # --- strategy "calls": traced, not a boundary ------------------------------------------

    def _open_span(self, req: RunRequest, strategy: str | None = None) -> trace.Span:
        attrs = self._attributes(req)
        if strategy:
            attrs[semconv.STRATEGY] = strategy
        scope = current_run()
        if scope is not None:  # keeps the span recorded under any sampler (DurableSampler)
            attrs[semconv.RUN_ID] = scope.run_id
        return settings().tracer.start_span(self.span_name, attributes=attrs)

    def _traced_only(self, req: RunRequest, kwargs: dict[str, Any], started: float) -> RunResult:
        span, mark, nodes = self._open_span(req), _journal_mark(), Counter[str]()
        try:
            with _current(span):
                result = self._execute(req, kwargs, nodes)
        except BaseException as exc:  # cancelled or interrupted too: end the span
            _end_failed(span, exc)
            self._summarize(req, started, None, exc, _journal_counters(mark, nodes))
            raise
        _end_ok(span, result_attributes(result))
        self._summarize(req, started, result, None, _journal_counters(mark, nodes))
        return result

    async def _atraced_only(
        self, req: RunRequest, kwargs: dict[str, Any], started: float
    ) -> RunResult:
        span, mark, nodes = self._open_span(req), _journal_mark(), Counter[str]()
        try:
            with _current(span):
                result = await self._aexecute(req, kwargs, nodes)
        except BaseException as exc:  # cancelled or interrupted too: end the span
            _end_failed(span, exc)
            self._summarize(req, started, None, exc, _journal_counters(mark, nodes))
            raise
        _end_ok(span, result_attributes(result))
        self._summarize(req, started, result, None, _journal_counters(mark, nodes))
        return result

    # --- run summary -------------------------------------------------------------------------

    def _summarize(
        self,
        req: RunRequest,
        started: float,
        result: RunResult | None,
        error: BaseException | None = None,
        counters: Mapping[str, int] | None = None,
        strategy: str | None = None,
    ) -> None:
        if not self.info.calls_summary and self.runner.strategy == "calls":
            return  # CallCheckpointPolicy(summary=False) on the agent's middleware
        all_counters = dict(_output_counters(result))
        all_counters.update(counters or {})
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
        span = None
        if result is not None and result.trace_id and result.span_id:
            span = NonRecordingSpan(
                SpanContext(
                    int(result.trace_id, 16),
                    int(result.span_id, 16),
                    is_remote=False,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
            )
        emit_summary(summary, span=span)


def graph_call_attributes(
    info: GraphInfo,
    name: str,
    strategy: str,
    policy: CapturePolicy,
    *,
    thread_id: str | None,
    configurable: Mapping[str, Any] | None = None,
    context: Any = None,
    graph_input: Any = None,
) -> dict[str, Any]:
    """The attributes of a graph-call span, for ``GraphRunner`` and the zero-code patches."""
    attrs: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: info.span_name,
        semconv.GEN_AI_AGENT_NAME: name,
        semconv.STRATEGY: strategy,
    }
    if thread_id is not None:
        attrs[semconv.GEN_AI_CONVERSATION_ID] = thread_id
    if not info.is_agent:
        attrs[semconv.GEN_AI_WORKFLOW_NAME] = name
    if info.checkpointer_type:
        attrs[semconv.LANGGRAPH_CHECKPOINTER] = info.checkpointer_type
    if policy.capture_config:
        if configurable:
            attrs[semconv.GRAPH_CONFIG] = policy.to_json(configurable)
        if context is not None:
            attrs[semconv.GRAPH_CONTEXT] = policy.to_json(context)
    if policy.capture_state and graph_input is not None:
        attrs[semconv.GRAPH_INPUT] = policy.to_json(graph_input)
    return attrs


_END: Any = object()


def _current(span: trace.Span) -> Any:
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def _end_ok(span: trace.Span, attributes: Mapping[str, Any]) -> None:
    if span.is_recording():
        span.set_attributes(dict(attributes))
        span.set_status(Status(StatusCode.OK))
    span.end()


def _end_failed(span: trace.Span, exc: BaseException) -> None:
    if span.is_recording():
        span.record_exception(exc)
        span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
        span.set_attribute(semconv.STATUS, "failed")
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.end()


def _close_quietly(chunks: Any) -> None:
    close = getattr(chunks, "close", None)
    if callable(close):
        close()


def _journal_mark() -> int:
    scope = current_run()
    return len(scope.journal) if scope is not None else 0


def _journal_counters(mark: int, nodes: Counter[str]) -> dict[str, int]:
    """Nodes that ran, and boundaries (model and tool calls) replayed or failed inside the
    call, from the run's journal."""
    scope = current_run()
    if scope is None:
        return _node_counters(nodes)
    entries = scope.journal[mark:]
    return {
        **_node_counters(nodes),
        "boundaries_replayed": sum(1 for e in entries if e.status == "replayed"),
        "boundaries_failed": sum(1 for e in entries if e.status == "error"),
    }


def _node_counters(nodes: Counter[str]) -> dict[str, int]:
    """Node executions of this call (none for a replayed call)."""
    return {"nodes": sum(nodes.values()), **{f"node.{k}": v for k, v in nodes.items()}}


def _output_counters(result: RunResult | None) -> dict[str, int]:
    """Message counts of the thread after the call (model turns, tool results)."""
    if result is None:
        return {}
    messages = output_messages(result.output)
    counters = {"interrupts": len(result.interrupts)}
    if messages:
        types = [getattr(m, "type", "") for m in messages]
        counters.update(
            messages=len(types),
            ai_messages=types.count("ai"),
            tool_messages=types.count("tool"),
        )
    return counters
