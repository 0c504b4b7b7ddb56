"""How ``spanpoint demo`` prints what happened: one trace tree per attempt, then the totals.

The trees are built from the very spans the demo exported (an in-memory exporter added next
to the configured one), so what is printed is what went to the trace backend.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from rich.tree import Tree

from spanpoint import semconv
from spanpoint._terminal import visible
from spanpoint.config import Settings
from spanpoint.demo.flow import FlowOutcome
from spanpoint.telemetry import exporters

_EFFECTS = (
    ("model_call", "model calls"),
    ("slack_post", "Slack posts"),
    ("ticket_loaded", "ticket loads"),
    ("report_attempt", "report attempts"),
    ("report_written", "reports written"),
    ("customer_notified", "customers notified"),
)


class DemoReport:
    """Collects the demo's spans and prints them."""

    def __init__(self, cfg: Settings, out: Callable[[Any], None]) -> None:
        self.cfg = cfg
        self.out = out
        self.exporter = InMemorySpanExporter()
        if isinstance(cfg.tracer_provider, TracerProvider):
            cfg.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def header(self, run_id: str) -> None:
        """The title: the flow, the run id, where checkpoints and traces go."""
        self.out("[bold]spanpoint demo[/] — support ticket 42, offline, no API keys")
        self.out(
            "flow: load ticket → triage agent (fake model, Slack tool behind an approval "
            "interrupt) → write report → notify customer"
        )
        self.out(
            f"run id: [bold]{visible(run_id)}[/]   store: {visible(self.cfg.store.description)}"
        )
        self.out("write report crashes on attempt 1; attempt 2 reruns the same run id.\n")

    def attempt(self, number: int, outcome: FlowOutcome, counts: Counter[str]) -> None:
        """Print the trace tree of one attempt and what it ended with."""
        spans = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        status = outcome.status or "not started"
        tree = Tree(f"[bold]attempt {number}[/] — run {status}")
        for root in _roots(spans):
            _add(tree, root, spans)
        self.out(tree)
        if outcome.error is not None:
            self.out(f"  [red]✗ {type(outcome.error).__name__}: {visible(outcome.error)}[/]")
        effects = ", ".join(f"{label} {counts[key]}" for key, label in _EFFECTS[:2])
        self.out(f"  side effects so far: {effects}\n")

    def finish(self, outcomes: Sequence[FlowOutcome], counts: Counter[str]) -> int:
        """Totals, the checks the demo promises, where the telemetry went. 0 when all hold."""
        self.out("[bold]side effects over both attempts[/]")
        for key, label in _EFFECTS:
            self.out(f"  {label:<20} {counts[key]}")
        first, second = outcomes[0].results, outcomes[-1].results
        checks = {
            "attempt 2 completed": outcomes[-1].status == "completed",
            "graph calls replayed, not executed": bool(second) and all(r.replayed for r in second),
            "replayed results equal the originals": first == second,
            "model called only on attempt 1 (2 calls)": counts["model_call"] == 2,
            "Slack posted exactly once": counts["slack_post"] == 1,
            "report written once, customer notified once": counts["report_written"] == 1
            and counts["customer_notified"] == 1,
        }
        for label, ok in checks.items():
            self.out(f"  {'[green]✓' if ok else '[red]✗'} {label}[/]")
        self._flush()
        self.out("")
        for line in self._exported():
            self.out(line)
        self.out(f"inspect the run: [bold]spanpoint show {visible(outcomes[-1].run_id)}[/]")
        return 0 if all(checks.values()) else 1

    def _flush(self) -> None:
        # Together and bounded by the export timeout: a closed, hanging or throttling
        # collector delays the demo by OTEL_EXPORTER_OTLP_TIMEOUT at most, not once per signal.
        budget = exporters.exit_budget_s()
        providers = (self.cfg.tracer_provider, self.cfg._logger_provider, self.cfg._meter_provider)
        if not all(exporters.flush(providers, budget)):
            self.out(
                f"[yellow]telemetry was still being exported after {budget:g} s "
                "(OTEL_EXPORTER_OTLP_TIMEOUT); the counts below may be short[/]"
            )

    def _exported(self) -> list[str]:
        """Per signal: what the exporters spanpoint built delivered, and why not when they
        failed. A destination that rejected everything is reported as a failure."""
        lines = []
        for label, signal, destination in (
            ("traces", "traces", self.cfg.trace_destination),
            ("run summaries (log records)", "logs", self.cfg.log_destination),
            ("metrics", "metrics", self.cfg.metric_destination),
        ):
            tallies = [] if destination.startswith("application") else exporters.tallies(signal)
            if not tallies:  # the application's own provider, or OTEL_<SIGNAL>_EXPORTER=none
                lines.append(f"{label}: {visible(destination or 'not emitted')}")
            for tally in tallies:
                text = visible(tally.summary())
                lines.append(f"{label}: [red]{text}[/]" if tally.failed else f"{label}: {text}")
                if tally.hint():
                    lines.append(f"  [yellow]{tally.hint()}[/]")
        return lines


def _roots(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    ids = {s.context.span_id for s in spans if s.context}
    roots = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
    return sorted(roots, key=lambda s: s.start_time or 0)


def _add(tree: Tree, span: ReadableSpan, spans: list[ReadableSpan]) -> None:
    branch = tree.add(_label(span))
    me = span.context.span_id if span.context else None
    children = [s for s in spans if s.parent is not None and s.parent.span_id == me]
    for child in sorted(children, key=lambda s: s.start_time or 0):
        _add(branch, child, spans)


def _label(span: ReadableSpan) -> str:
    attrs = span.attributes or {}
    took = max(0, (span.end_time or 0) - (span.start_time or 0)) / 1e6
    name = span.name
    if attrs.get(semconv.REPLAYED):  # the marker below says it; the name need not twice
        name = name.removesuffix(semconv.REPLAYED_NAME_SUFFIX)
    parts = [f"[bold]{visible(name)}[/]"]
    if span.status.status_code is StatusCode.ERROR:
        parts.append(f"[red]✗ {visible(span.status.description)}[/]")
    elif attrs.get(semconv.REPLAYED):
        parts.append("[cyan]↺ replayed from the store[/]")
    elif semconv.CHECKPOINT_KEY in attrs:
        parts.append("[green]✓ executed, committed[/]")
    elif semconv.BOUNDARY_KIND in attrs:  # traced inside a committed call, not a boundary
        parts.append("[green]✓ executed[/]")
    if attrs.get(semconv.STATUS) == "interrupted":
        parts.append(f"[yellow]⏸ interrupted ({attrs.get(semconv.LANGGRAPH_INTERRUPT_COUNT)})[/]")
    if any(e.name == semconv.EVENT_AGENT_RESUMED for e in span.events):
        parts.append("[yellow]▶ resumed[/]")
    parts.append(f"[dim]{took:.1f} ms[/]")
    return "  ".join(parts)
