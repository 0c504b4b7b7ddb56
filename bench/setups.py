"""The benchmark setups: how each contender is installed around a workload.

Every setup runs in its own process (``bench/worker.py``) with the same OpenTelemetry SDK
wiring: a global ``TracerProvider`` with a ``SimpleSpanProcessor`` and an exporter that only
counts, a ``MeterProvider`` with an in-memory reader and a ``LoggerProvider`` whose exporter
only counts. Export cost is therefore the same (nearly nil) for everybody; what is measured is
the instrumentation itself.

``make(setup, workload, store_dir, telemetry)`` returns an :class:`Invoker` whose ``call(i)``
performs the ``i``-th invoke. ``spanpoint_graph_call`` and ``spanpoint_calls`` measure the
boundaries: one ``spanpoint.run`` stays open over each timed batch (opened and closed outside the
timings). ``spanpoint_graph_call_run`` and ``spanpoint_replay`` open a run per invoke, as a
ticket-per-run job does, so they include the run's own span and its two store writes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import workloads
from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

# name -> (description, workloads it applies to)
SETUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("uninstrumented", workloads.WORKLOADS),
    "none_again": (
        "uninstrumented again, in a process of its own: the spread between two identical "
        "processes, which no ratio can be read more finely than",
        workloads.WORKLOADS,
    ),
    "spanpoint_zero_code": (
        "spanpoint zero-code (SpanpointInstrumentor), spans only, outside a run",
        workloads.WORKLOADS,
    ),
    "spanpoint_graph_call": (
        "spanpoint GraphRunner graph_call boundary committed to SQLite (run open over the batch)",
        workloads.WORKLOADS,
    ),
    "spanpoint_graph_call_run": (
        "the same with a spanpoint.run per invoke (its span, start and end writes included)",
        workloads.WORKLOADS,
    ),
    "spanpoint_calls": (
        "spanpoint calls strategy: every model and tool call a boundary committed to SQLite "
        "(run open over the batch)",
        ("agent", "agent_async"),
    ),
    "spanpoint_calls_async": (
        'the same with durability="async": every commit written by the background committer '
        "(issue 18 item 5; the batch's run flushes at its end, untimed like every batch end)",
        ("agent", "agent_async"),
    ),
    "spanpoint_replay": (
        "spanpoint replay of a completed run (graph_call, SQLite store)",
        workloads.WORKLOADS,
    ),
    "floor_span": (
        "the floor of zero-code: one bare SDK span around each invoke, nothing else",
        ("linear",),
    ),
    "floor_graph_call_1w": (
        "issue 9's floor of a graph_call boundary, by hand: a bare span + one SQLite write (the "
        "commit of the output) around each invoke",
        workloads.WORKLOADS,
    ),
    "floor_calls_1w": (
        "issue 9's floor of the calls strategy, by hand: a bare AgentMiddleware whose every "
        "model and tool call is a bare span + one SQLite write (the commit of its output)",
        ("agent", "agent_async"),
    ),
    "floor_graph_call": (
        "the floor of a graph_call boundary, by hand: a bare span + the SQLite lease and "
        "commit of the output (the store's two writes) around each invoke",
        workloads.WORKLOADS,
    ),
    "floor_calls": (
        "the floor of the calls strategy, by hand: a bare AgentMiddleware whose every model "
        "and tool call is a bare span + the SQLite lease and commit of its output",
        ("agent", "agent_async"),
    ),
    "floor_calls_attrs": (
        "floor_calls whose spans carry the attributes and events spanpoint's spans carry (the "
        "GenAI conventions' and spanpoint's checkpoint attributes, copied from a spanpoint "
        "run of the same workload), plus the agent's invoke_agent span: the SDK's price of "
        "the spans the product promises, with none of spanpoint's code",
        ("agent", "agent_async"),
    ),
    "floor_calls_semconv": (
        "floor_calls_attrs plus the GenAI client histograms the conventions define "
        "(gen_ai.client.operation.duration for every span, gen_ai.client.token.usage input "
        "and output for chat) with their attributes: the SDK's price of the conventions",
        ("agent", "agent_async"),
    ),
    "floor_calls_rows": (
        "floor_calls_semconv whose commits write the rows spanpoint commits (run, path, kind, "
        "view, fingerprint, identity, input view, copied from a spanpoint run of the same "
        "workload, with the call's own output): the SDK's and the store's price of what the "
        "product promises, with none of spanpoint's code",
        ("agent", "agent_async"),
    ),
    "floor_calls_protocol": (
        "floor_calls_rows whose calls are keyed by hand from what they were given (the sha256 "
        "of a model call's messages, tool calls and system prompt, no ids; of a tool call's "
        "name and arguments): the calls strategy's protocol by hand, with none of "
        "spanpoint's code",
        ("agent", "agent_async"),
    ),
    "langgraph_sqlite_sync": (
        'no spanpoint: LangGraph\'s own SqliteSaver checkpointer with durability="sync" on a '
        "fresh thread per invoke (every super-step written before the next starts): the free "
        "durable baseline a user compares the calls strategy with",
        ("agent",),
    ),
    "openinference": ("openinference-instrumentation-langchain", workloads.WORKLOADS),
    "openllmetry": ("opentelemetry-instrumentation-langchain (OpenLLMetry)", workloads.WORKLOADS),
    "otel_genai": (
        "opentelemetry-instrumentation-genai-langchain (official, own venv)",
        workloads.WORKLOADS,
    ),
}


class CountingSpanExporter(SpanExporter):
    """Counts exported spans and keeps nothing (no memory growth, no I/O)."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Count ``spans``."""
        self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""


class CountingLogExporter(LogRecordExporter):
    """Counts exported log records and keeps nothing."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, batch: Any) -> LogRecordExportResult:
        """Count ``batch``."""
        self.count += len(batch)
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True

    def shutdown(self) -> None:
        """Nothing to release."""


class Telemetry:
    """The OTel SDK providers every setup shares, installed as the globals."""

    def __init__(self) -> None:
        self.spans = CountingSpanExporter()
        self.logs = CountingLogExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        trace.set_tracer_provider(self.tracer_provider)
        metrics.set_meter_provider(self.meter_provider)
        _logs.set_logger_provider(self.logger_provider)

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments an instrumentor's ``instrument()`` takes."""
        return {
            "tracer_provider": self.tracer_provider,
            "meter_provider": self.meter_provider,
            "logger_provider": self.logger_provider,
        }


class Invoker:
    """Performs the ``i``-th invoke of a workload under a setup.

    ``open_batch`` / ``close_batch`` run around each timed batch, outside the timings: the
    durable setups that measure the boundary open one ``spanpoint.run`` there.
    """

    def __init__(
        self,
        call: Callable[[int], Any],
        open_batch: Callable[[], None] | None = None,
        close_batch: Callable[[], None] | None = None,
    ) -> None:
        self.call = call
        self.open_batch = open_batch or (lambda: None)
        self.close_batch = close_batch or (lambda: None)


# --- building blocks ----------------------------------------------------------------------


def _graph_for(workload: str, middleware: Sequence[Any] = ()) -> Any:
    if workload == "linear":
        return workloads.build_linear()
    if workload == "agent":
        return workloads.build_agent(middleware)
    from langgraph.checkpoint.memory import InMemorySaver

    return workloads.build_agent(middleware, checkpointer=InMemorySaver())


def _input(workload: str, i: int) -> Any:
    return workloads.linear_input(i) if workload == "linear" else workloads.agent_input(i)


def _plain_call(workload: str, graph: Any) -> Callable[[int], Any]:
    """``graph.invoke`` / ``ainvoke`` on a private event loop, a fresh thread per invoke."""
    if workload != "agent_async":
        return lambda i: graph.invoke(_input(workload, i))
    loop = asyncio.new_event_loop()
    threads = itertools.count()

    def call(i: int) -> Any:
        config = {"configurable": {"thread_id": f"t-{next(threads)}"}}
        return loop.run_until_complete(graph.ainvoke(_input(workload, i), config))

    return call


def _runner_call(
    workload: str, runner: Any, run_ids: Callable[[], str] | None, thread_ids: Callable[[], str]
) -> Callable[[int], Any]:
    """``runner.invoke`` / ``ainvoke``, inside ``spanpoint.run(run_ids())`` when given."""
    import contextlib

    import spanpoint

    def scope() -> Any:
        return spanpoint.run(run_ids()) if run_ids else contextlib.nullcontext()

    if workload != "agent_async":

        def call(i: int) -> Any:
            with scope():
                return runner.invoke(_input(workload, i), thread_id=thread_ids())

        return call
    loop = asyncio.new_event_loop()

    async def acall(i: int) -> Any:
        with scope():
            return await runner.ainvoke(_input(workload, i), thread_id=thread_ids())

    return lambda i: loop.run_until_complete(acall(i))


# --- the setups ---------------------------------------------------------------------------


def make(setup: str, workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    """The invoker of ``workload`` under ``setup``."""
    builder = _BUILDERS[setup]
    return builder(workload, store_dir, telemetry)


def _none(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    return Invoker(_plain_call(workload, _graph_for(workload)))


def _langgraph_sqlite_sync(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(store_dir / "langgraph.db", check_same_thread=False)
    graph = workloads.build_agent(checkpointer=SqliteSaver(conn))
    threads = itertools.count()

    def call(i: int) -> Any:
        config = {"configurable": {"thread_id": f"t-{next(threads)}"}}
        return graph.invoke(_input(workload, i), config, durability="sync")

    return Invoker(call)


def _configure(store_dir: Path, telemetry: Telemetry) -> None:
    import spanpoint

    spanpoint.configure(
        store=str(store_dir / "checkpoints.db"),
        tracer_provider=telemetry.tracer_provider,
        logger_provider=telemetry.logger_provider,
        meter_provider=telemetry.meter_provider,
    )


def _spanpoint_zero_code(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    from spanpoint.instrumentation import SpanpointInstrumentor

    _configure(store_dir, telemetry)
    SpanpointInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    return Invoker(_plain_call(workload, _graph_for(workload)))


def _fresh_ids(prefix: str) -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{prefix}-{next(counter)}"


def _spanpoint_durable(
    strategy: str, run_per_invoke: bool, durability: str = "sync"
) -> Callable[[str, Path, Telemetry], Invoker]:
    """GraphRunner in a run: one run per batch (the boundaries' cost) or per invoke."""

    def build(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
        import spanpoint
        from spanpoint.calls.middleware import CheckpointMiddleware
        from spanpoint.graph import GraphRunner

        _configure(store_dir, telemetry)
        middleware = [CheckpointMiddleware()] if strategy == "calls" else []
        graph = _graph_for(workload, middleware)
        runner = GraphRunner(graph, name=workload, strategy=strategy)  # type: ignore[arg-type]
        run_ids = _fresh_ids("run")
        if run_per_invoke:
            return Invoker(_runner_call(workload, runner, run_ids, _fresh_ids("t")))
        batch: list[Any] = []

        def open_batch() -> None:
            batch.append(spanpoint.run(run_ids(), durability=durability))  # type: ignore[arg-type]
            batch[-1].__enter__()

        def close_batch() -> None:
            batch.pop().__exit__(None, None, None)

        call = _runner_call(workload, runner, None, _fresh_ids("t"))
        return Invoker(call, open_batch, close_batch)

    return build


def _spanpoint_replay(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    """Each invoke replays the same completed run: its graph call comes from the store."""
    from spanpoint.graph import GraphRunner

    _configure(store_dir, telemetry)
    runner = GraphRunner(_graph_for(workload), name=workload, strategy="graph_call")
    call = _runner_call(workload, runner, lambda: "replayed-run", lambda: "replayed-thread")
    original = call(0)  # the completed run every later invoke replays
    if original.replayed:
        raise AssertionError("the original run was replayed: the store was not fresh")

    def replay(i: int) -> Any:
        result = call(0)
        if not result.replayed:
            raise AssertionError("a replay executed the graph again")
        return result

    return Invoker(replay)


def _openinference(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    return Invoker(_plain_call(workload, _graph_for(workload)))


def _openllmetry(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    LangchainInstrumentor().instrument(**telemetry.kwargs())
    return Invoker(_plain_call(workload, _graph_for(workload)))


def _otel_genai(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    from opentelemetry.instrumentation.genai.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(**telemetry.kwargs())
    return Invoker(_plain_call(workload, _graph_for(workload)))


# --- floors: what a setup cannot avoid, done by hand with no spanpoint code ---------------


class _Protocol:
    """A bare span plus one commit per boundary on a SQLite store, and the lease before the
    body when ``leases`` (single-flight, issue 7: the write issue 9's floor leaves out)."""

    def __init__(self, store_dir: Path, telemetry: Any, leases: bool) -> None:
        from spanpoint import serde
        from spanpoint.stores.base import Checkpoint
        from spanpoint.stores.sqlite import SqliteStore

        self.tracer = telemetry.tracer_provider.get_tracer("floor")
        self.store = SqliteStore(store_dir / "floor.db")
        self.serde = serde
        self.keys = itertools.count()
        self.template = Checkpoint("", "floor", "b", "b", "step", 0, "", b"", "0" * 32, "0" * 16)
        self.leases = leases

    def begin(self, name: str) -> tuple[Any, str]:
        key = f"{next(self.keys):064d}"
        span = self.tracer.start_span(name)
        if self.leases:
            self.store.claim(key, "floor-owner", 300.0, fresh=True)
        return span, key

    def commit(self, span: Any, key: str, output: Any) -> None:
        import dataclasses

        tag, data = self.serde.dumps(output)
        span.end()
        cp = dataclasses.replace(self.template, key=key, output_type=tag, output=data)
        self.store.put(cp, owner="floor-owner" if self.leases else None)


def _floor_span(workload: str, store_dir: Path, telemetry: Telemetry) -> Invoker:
    tracer = telemetry.tracer_provider.get_tracer("floor")
    graph = _graph_for(workload)

    def call(i: int) -> Any:
        with tracer.start_as_current_span("invoke_agent linear"):
            return graph.invoke(_input(workload, i))

    return Invoker(call)


def _floor_graph_call(
    workload: str, store_dir: Path, telemetry: Telemetry, leases: bool = True
) -> Invoker:
    protocol = _Protocol(store_dir, telemetry, leases)
    plain = _plain_call(workload, _graph_for(workload))

    def call(i: int) -> Any:
        span, key = protocol.begin(f"invoke_agent {workload}")
        output = plain(i)
        protocol.commit(span, key, output)
        return output

    return Invoker(call)


def floor_middleware(store_dir: Path, telemetry: Any, leases: bool = True) -> Any:
    """The floor of the calls strategy as a middleware: every model and tool call a bare span
    plus the SQLite lease (with ``leases``) and commit of its output, with no spanpoint code.
    ``telemetry`` needs a ``tracer_provider`` only (``bench/scale_run_length.py`` builds its
    own)."""
    from langchain.agents.middleware import AgentMiddleware

    protocol = _Protocol(store_dir, telemetry, leases)

    class FloorMiddleware(AgentMiddleware):  # type: ignore[type-arg]
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            span, key = protocol.begin("chat")
            response = handler(request)
            protocol.commit(span, key, response.result)
            return response

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            span, key = protocol.begin("chat")
            response = await handler(request)
            protocol.commit(span, key, response.result)
            return response

        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            span, key = protocol.begin("execute_tool")
            result = handler(request)
            protocol.commit(span, key, result)
            return result

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            span, key = protocol.begin("execute_tool")
            result = await handler(request)
            protocol.commit(span, key, result)
            return result

    floor = FloorMiddleware()
    # LangChain wraps each hook in a LangSmith traceable that calls inspect.signature() on a
    # bound method at every call; a plain function carrying its signature skips that. The
    # floor gets the trick too, so that it is the cheapest middleware there can be.
    from spanpoint._hooks import sign_hooks

    sign_hooks(floor)
    return floor


def _floor_calls(
    workload: str, store_dir: Path, telemetry: Telemetry, leases: bool = True
) -> Invoker:
    floor = floor_middleware(store_dir, telemetry, leases)
    return Invoker(_plain_call(workload, _graph_for(workload, [floor])))


def _spanpoint_spans(workload: str) -> dict[str, list[dict[str, Any]]]:
    """What one ``spanpoint_calls`` invoke of ``workload`` leaves, read in a separate process
    (spanpoint's patches never load here): ``spans``, its spans in end order (name,
    attributes and events), and ``rows``, the checkpoints it committed in commit order (every
    column but the output, which a floor serializes from its own call)."""
    import json
    import subprocess
    import sys

    script = f"""
import dataclasses, json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import setups
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanpoint.stores.sqlite import SqliteStore
telemetry = setups.Telemetry()
kept = InMemorySpanExporter()
telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(kept))
store_dir = Path(tempfile.mkdtemp())
invoker = setups.make("spanpoint_calls", {workload!r}, store_dir, telemetry)
invoker.open_batch()
invoker.call(0)
kept.clear()
since = time.time_ns()
invoker.call(1)
invoker.close_batch()
store = SqliteStore(store_dir / "checkpoints.db")
rows = sorted(
    (c for r in store.list_runs() for c in store.list_checkpoints(r.run_id)
     if c.started_at_ns >= since),
    key=lambda c: c.ended_at_ns,
)
print(json.dumps({{
    "spans": [
        {{"name": s.name, "attributes": dict(s.attributes or {{}}),
          "events": [[e.name, dict(e.attributes or {{}})] for e in s.events]}}
        for s in kept.get_finished_spans()
    ],
    "rows": [{{k: v for k, v in dataclasses.asdict(c).items() if k != "output"}} for c in rows],
}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _floor_calls_conventions(
    workload: str,
    store_dir: Path,
    telemetry: Telemetry,
    metrics_too: bool,
    rows: bool = False,
    identity: bool = False,
) -> Invoker:
    """``floor_calls`` paying the OTel SDK for what spanpoint's spans promise, nothing more.

    Every span starts with the attributes the matching spanpoint span carried (the k-th
    ``chat`` of an invoke gets the k-th captured ``chat`` span's), adds its events, and with
    ``metrics_too`` records the GenAI client histograms in the span's context, as
    ``spanpoint.telemetry.metrics`` does. With ``rows`` each commit writes the row spanpoint
    committed for the matching call (run, path, name, kind, view, fingerprint, identity and
    input view: what replay, forks and diffs read), with this call's own output and span
    ids: the store's price of the rows the product promises. With ``identity`` each call is
    also keyed by hand from what it was given, as any replay that never returns the output
    of a changed input must be (issue 17): a model call by the sha256 of its messages' type,
    content and tool calls (no ids) and its system prompt, hashed whole on every call; a
    tool call by the sha256 of its name and arguments; the key by the sha256 of that
    fingerprint, the invoke and the call's position in it. No spanpoint code runs here.
    """
    from langchain.agents.middleware import AgentMiddleware

    from spanpoint._hooks import sign_hooks

    captured = _spanpoint_spans(workload)
    by_kind: dict[str, list[dict[str, Any]]] = {"chat": [], "execute_tool": []}
    agent_span: dict[str, Any] = {"name": f"invoke_agent {workload}", "attributes": {}}
    row_kinds = {"chat": "model_call", "execute_tool": "tool_call"}
    kept_rows: dict[str, list[dict[str, Any]]] = {
        kind: [row for row in captured["rows"] if row["kind"] == row_kind]
        for kind, row_kind in row_kinds.items()
    }
    if rows and not all(kept_rows.values()):
        raise AssertionError(f"a spanpoint_calls invoke of {workload} committed no call rows")
    for span in captured["spans"]:
        kind = span["name"].split(" ", 1)[0]
        if kind in by_kind:
            by_kind[kind].append(span)
        elif kind == "invoke_agent":
            agent_span = span
    protocol = _Protocol(store_dir, telemetry, leases=True)
    tracer = protocol.tracer
    meter = telemetry.meter_provider.get_meter("floor")
    duration = meter.create_histogram(
        "gen_ai.client.operation.duration",
        unit="s",
        explicit_bucket_boundaries_advisory=(
            0.01,
            0.02,
            0.04,
            0.08,
            0.16,
            0.32,
            0.64,
            1.28,
            2.56,
            5.12,
            10.24,
            20.48,
        ),
    )
    tokens = meter.create_histogram(
        "gen_ai.client.token.usage",
        unit="{token}",
        explicit_bucket_boundaries_advisory=(
            1,
            4,
            16,
            64,
            256,
            1024,
            4096,
            16384,
            65536,
            262144,
            1048576,
            4194304,
        ),
    )
    metric_keys = (
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
    )
    seen = {"chat": 0, "execute_tool": 0}
    from spanpoint.stores.base import Checkpoint

    templates = {
        name: [Checkpoint(**row, output=b"") for row in kind_rows]
        for name, kind_rows in kept_rows.items()
    }
    committed = {"chat": 0, "execute_tool": 0}

    import hashlib
    import json

    invoke = [0]  # the run's part of a key: which invoke this is

    def fingerprint(request: Any) -> str:
        if hasattr(request, "messages"):  # a model call
            system = request.system_message
            given = [
                system.content if system is not None else None,
                [
                    [
                        m.type,
                        m.content,
                        [[c["name"], c["args"]] for c in getattr(m, "tool_calls", None) or ()],
                    ]
                    for m in request.messages
                ],
            ]
        else:
            given = [request.tool_call["name"], request.tool_call["args"]]
        text = json.dumps(given, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def begin(kind: str, request: Any) -> tuple[Any, str, dict[str, Any]]:
        spans = by_kind[kind] or [{"name": kind, "attributes": {}, "events": []}]
        position = seen[kind]
        model = spans[position % len(spans)]
        seen[kind] += 1
        if identity:
            given = fingerprint(request)
            key = hashlib.sha256(f"{invoke[0]}:{kind}:{position}:{given}".encode()).hexdigest()
        else:
            key = f"{next(protocol.keys):064d}"
        span = tracer.start_span(model["name"], attributes=model["attributes"])
        protocol.store.claim(key, "floor-owner", 300.0, fresh=True)
        return span, key, model

    def end(span: Any, model: dict[str, Any], started: float) -> None:
        for name, attributes in model.get("events", ()):
            span.add_event(name, attributes)
        if metrics_too:
            attrs = model["attributes"]
            metric_attrs = {k: attrs[k] for k in metric_keys if k in attrs}
            context = trace.set_span_in_context(span)
            duration.record(time.perf_counter() - started, metric_attrs, context)
            if not model["name"].startswith("chat"):
                return
            for token_type, usage in (
                ("input", "gen_ai.usage.input_tokens"),
                ("output", "gen_ai.usage.output_tokens"),
            ):
                if usage in attrs:
                    tokens.record(
                        attrs[usage], {**metric_attrs, "gen_ai.token.type": token_type}, context
                    )

    def commit(span: Any, key: str, model: dict[str, Any], started: float, output: Any) -> None:
        import dataclasses

        tag, data = protocol.serde.dumps(output)
        end(span, model, started)
        span.end()
        if rows:
            kind = model["name"].split(" ", 1)[0]
            kind_templates = templates[kind]
            template = kind_templates[committed[kind] % len(kind_templates)]
            committed[kind] += 1
            context = span.get_span_context()
            cp = dataclasses.replace(
                template,
                key=key,
                output_type=tag,
                output=data,
                trace_id=format(context.trace_id, "032x"),
                span_id=format(context.span_id, "016x"),
            )
        else:
            cp = dataclasses.replace(protocol.template, key=key, output_type=tag, output=data)
        protocol.store.put(cp, owner="floor-owner")

    class ConventionsMiddleware(AgentMiddleware):  # type: ignore[type-arg]
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            started = time.perf_counter()
            span, key, model = begin("chat", request)
            response = handler(request)
            commit(span, key, model, started, response.result)
            return response

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            started = time.perf_counter()
            span, key, model = begin("chat", request)
            response = await handler(request)
            commit(span, key, model, started, response.result)
            return response

        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            started = time.perf_counter()
            span, key, model = begin("execute_tool", request)
            result = handler(request)
            commit(span, key, model, started, result)
            return result

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            started = time.perf_counter()
            span, key, model = begin("execute_tool", request)
            result = await handler(request)
            commit(span, key, model, started, result)
            return result

    floor = ConventionsMiddleware()
    sign_hooks(floor)
    plain = _plain_call(workload, _graph_for(workload, [floor]))

    def call(i: int) -> Any:
        seen.update(chat=0, execute_tool=0)
        committed.update(chat=0, execute_tool=0)
        invoke[0] = i
        started = time.perf_counter()
        with tracer.start_as_current_span(
            agent_span["name"], attributes=agent_span["attributes"]
        ) as span:
            output = plain(i)
            end(span, agent_span, started)
        return output

    return Invoker(call)


_BUILDERS: dict[str, Callable[[str, Path, Telemetry], Invoker]] = {
    "none_again": _none,
    "floor_span": _floor_span,
    "floor_graph_call_1w": lambda w, d, t: _floor_graph_call(w, d, t, leases=False),
    "floor_calls_1w": lambda w, d, t: _floor_calls(w, d, t, leases=False),
    "floor_graph_call": _floor_graph_call,
    "floor_calls": _floor_calls,
    "floor_calls_attrs": lambda w, d, t: _floor_calls_conventions(w, d, t, metrics_too=False),
    "floor_calls_semconv": lambda w, d, t: _floor_calls_conventions(w, d, t, metrics_too=True),
    "floor_calls_rows": lambda w, d, t: _floor_calls_conventions(
        w, d, t, metrics_too=True, rows=True
    ),
    "floor_calls_protocol": lambda w, d, t: _floor_calls_conventions(
        w, d, t, metrics_too=True, rows=True, identity=True
    ),
    "none": _none,
    "spanpoint_zero_code": _spanpoint_zero_code,
    "spanpoint_graph_call": _spanpoint_durable("graph_call", run_per_invoke=False),
    "spanpoint_graph_call_run": _spanpoint_durable("graph_call", run_per_invoke=True),
    "spanpoint_calls": _spanpoint_durable("calls", run_per_invoke=False),
    "spanpoint_calls_async": _spanpoint_durable("calls", run_per_invoke=False, durability="async"),
    "spanpoint_replay": _spanpoint_replay,
    "langgraph_sqlite_sync": _langgraph_sqlite_sync,
    "openinference": _openinference,
    "openllmetry": _openllmetry,
    "otel_genai": _otel_genai,
}
