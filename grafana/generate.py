"""Generate spanpoint's Grafana dashboards with grafana-foundation-sdk.

    python grafana/generate.py            # write grafana/dashboards/*.json
    python grafana/generate.py --check    # exit 1 if the committed JSON is stale

The JSON files are generated, never edited by hand: change a query here and regenerate.
Metric and label names are the Prometheus exporter's translation of OpenTelemetry names
(dots become underscores, a unit suffix such as ``_seconds`` and ``_total`` on counters are
appended); tests/e2e checks that every PromQL target below returns data from a real stack.

Datasource uids (``prometheus``, ``tempo``, ``jaeger``) match grafana/provisioning/datasources.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, tempo, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.tempo import SearchTableType

OUT = Path(__file__).resolve().parent / "dashboards"
PROMETHEUS = model.DataSourceRef(type_val="prometheus", uid="prometheus")
TEMPO = model.DataSourceRef(type_val="tempo", uid="tempo")

# Span metrics from the collector's spanmetrics connector (collector/otelcol.yaml).
CALLS = "traces_span_metrics_calls_total"
DURATION = "traces_span_metrics_duration_seconds_bucket"
SERVICE = 'service_name=~"$service"'
BOUNDARY = f'{SERVICE}, spanpoint_boundary_kind!=""'
TOOL = f'{SERVICE}, gen_ai_operation_name="execute_tool"'
# The run's root span ("invoke_workflow {run name}"): the one span with spanpoint.run.status.
RUN_SPAN = f'{SERVICE}, spanpoint_run_status!=""'
ERROR = 'status_code="STATUS_CODE_ERROR"'


def query(
    expr: str, legend: str = "", instant: bool = False, ref: str = "A"
) -> prometheus.Dataquery:
    """One PromQL target against the provisioned Prometheus datasource."""
    target = prometheus.Dataquery().expr(expr).datasource(PROMETHEUS).ref_id(ref)
    if legend:
        target = target.legend_format(legend)
    return target.instant().format(PromQueryFormat.TABLE) if instant else target.range()


def series(title: str, description: str, unit: str, *targets: prometheus.Dataquery):
    """A time-series panel of PromQL targets."""
    panel = timeseries.Panel().title(title).description(description).unit(unit)
    panel = panel.datasource(PROMETHEUS).height(8).span(12).fill_opacity(10)
    for ref, target in zip("ABCDEFGH", targets, strict=False):
        panel = panel.with_target(target.ref_id(ref))
    return panel


def totals(title: str, description: str, expr: str, legend: str) -> stat.Panel:
    """A stat panel: one number per series over the dashboard's time range."""
    panel = stat.Panel().title(title).description(description).datasource(PROMETHEUS)
    return panel.with_target(query(expr, legend)).height(6).span(6).unit("short")


def ranking(title: str, description: str, expr: str, unit: str) -> table.Panel:
    """A table of an instant query, highest first (slowest / most failing tools)."""
    panel = table.Panel().title(title).description(description).datasource(PROMETHEUS)
    panel = panel.with_target(query(expr, instant=True)).height(8).span(12).unit(unit)
    return panel.with_transformation(
        model.DataTransformerConfig(
            id_val="sortBy", options={"sort": [{"field": "Value", "desc": True}]}
        )
    )


def spans_table(title: str, description: str, traceql: str) -> table.Panel:
    """A full-width table of the spans a TraceQL query selects (Tempo)."""
    target = (
        tempo.TempoQuery()
        .ref_id("A")
        .datasource(TEMPO)
        .query_type("traceql")
        .query(traceql)
        .table_type(SearchTableType.SPANS)
        .limit(50)
        .spss(200)
    )
    panel = table.Panel().title(title).description(description).datasource(TEMPO)
    return panel.with_target(target).height(10).span(24)


def p(quantile: float, selector: str, by: str, metric: str = DURATION) -> str:
    """PromQL for a latency quantile of a histogram, grouped by ``by``."""
    rate = f"rate({metric}{{{selector}}}[$__rate_interval])"
    return f"histogram_quantile({quantile}, sum by (le, {by}) ({rate}))"


def increase(metric: str, by: str, selector: str = SERVICE) -> str:
    """PromQL for how much a counter grew over the dashboard's range, per ``by``.

    Every process exports its own series (``instance`` is its ``service.instance.id``),
    counting from zero when it starts. ``increase()`` alone sees a series only from its first
    sample, so a series born inside the range (a short-lived worker, a CLI run, a new label
    value) would add nothing of what it counted before it was first scraped. A series that
    already existed when the range began counts its ``increase()``; one born inside the range
    counts its whole last value.
    """
    series = f"{metric}{{{selector}}}"
    existed = f"increase({series}[$__range]) and {series} offset $__range"
    return f"sum by ({by}) (({existed}) or last_over_time({series}[$__range]))"


def service_variable() -> dash.QueryVariable:
    """``$service``: every service that sent spans, all selected by default."""
    return (
        dash.QueryVariable("service")
        .label("Service")
        .datasource(PROMETHEUS)
        .query(f"label_values({CALLS}, service_name)")
        .include_all(True)
        .all_value(".*")
        .multi(True)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
    )


def agent_runs() -> dash.Dashboard:
    """The fleet view: how runs end, how long graphs take, what replays and what fails."""
    board = (
        dash.Dashboard("spanpoint · Agent runs")
        .uid("spanpoint-agent-runs")
        .tags(["spanpoint", "genai", "langgraph"])
        .description("Runs, graph calls, boundaries, interrupts, guard terminations and tools.")
        .time("now-1h", "now")
        .refresh("30s")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(service_variable())
    )
    for row, panels in (
        ("Runs", _run_panels()),
        ("Boundaries and replay", _boundary_panels()),
        ("Models and tools", _model_and_tool_panels()),
    ):
        board = board.with_row(dash.Row(row))
        for panel in panels:
            board = board.with_panel(panel)
    return board


def _run_panels() -> list:
    graph_duration = "spanpoint_graph_call_duration_seconds_bucket"
    return [
        totals(
            "Runs by status",
            "spanpoint.run root spans by spanpoint.run.status (span metrics), in the time range.",
            increase(CALLS, "spanpoint_run_status", RUN_SPAN),
            "{{spanpoint_run_status}}",
        ),
        totals(
            "Graph calls by status",
            "Graph calls (spanpoint.graph.calls) by status: completed, interrupted, failed.",
            increase("spanpoint_graph_calls_total", "spanpoint_status"),
            "{{spanpoint_status}}",
        ),
        totals(
            "Interrupts",
            "Human-in-the-loop interrupts returned by graph calls, by graph.",
            increase("spanpoint_interrupts_total", "gen_ai_agent_name"),
            "{{gen_ai_agent_name}}",
        ),
        totals(
            "Guard terminations by reason",
            "Runs the loop guard stopped, by reason.",
            increase("spanpoint_guard_terminations_total", "spanpoint_guard_reason"),
            "{{spanpoint_guard_reason}}",
        ),
        series(
            "Graph-call duration p50 / p95 by graph",
            "spanpoint.graph.call.duration by graph (gen_ai.agent.name).",
            "s",
            query(
                p(0.5, SERVICE, "gen_ai_agent_name", graph_duration), "p50 {{gen_ai_agent_name}}"
            ),
            query(
                p(0.95, SERVICE, "gen_ai_agent_name", graph_duration), "p95 {{gen_ai_agent_name}}"
            ),
        ),
        series(
            "Run spans by status code",
            "spanpoint.run spans per second (span metrics): OK, ERROR or UNSET.",
            "reqps",
            query(
                f"sum by (status_code) (rate({CALLS}{{{RUN_SPAN}}}[$__rate_interval]))",
                "{{status_code}}",
            ),
        ),
    ]


def _boundary_panels() -> list:
    return [
        series(
            "Replayed vs executed boundaries",
            "Boundary spans per second: replayed=true came from the checkpoint store.",
            "ops",
            query(
                f"sum by (spanpoint_replayed) (rate({CALLS}{{{BOUNDARY}}}[$__rate_interval]))",
                "replayed={{spanpoint_replayed}}",
            ),
        ),
        series(
            "Boundaries by kind",
            "graph_call, model_call, tool_call and step boundary spans per second.",
            "ops",
            query(
                f"sum by (spanpoint_boundary_kind) (rate({CALLS}{{{BOUNDARY}}}[$__rate_interval]))",
                "{{spanpoint_boundary_kind}}",
            ),
        ),
        series(
            "Graph calls replayed from the store",
            "spanpoint.replays per second, by graph.",
            "ops",
            query(
                "sum by (gen_ai_agent_name) "
                f"(rate(spanpoint_replays_total{{{SERVICE}}}[$__rate_interval]))",
                "{{gen_ai_agent_name}}",
            ),
        ),
        # spanpoint.run.cost and spanpoint.run.cost.saved (unit {USD}: no unit suffix in
        # Prometheus): what runs paid for the model calls they executed, and what replaying
        # the others saved. Never summed from span attributes: a replayed call pays nothing.
        totals(
            "Cost paid by runs (USD)",
            "Price-table cost of the model calls runs executed, by graph, over the time range "
            "(spanpoint.run.cost).",
            increase("spanpoint_run_cost_total", "gen_ai_agent_name"),
            "{{gen_ai_agent_name}}",
        ),
        totals(
            "Cost saved by replay (USD)",
            "Price-table cost of the model calls replayed instead of executed, by graph, over "
            "the time range (spanpoint.run.cost.saved).",
            increase("spanpoint_run_cost_saved_total", "gen_ai_agent_name"),
            "{{gen_ai_agent_name}}",
        ),
        # gen_ai.client.operation.cost: a histogram, so its _sum is the cost of every executed
        # model call, here by the model that answered (the one the price table priced).
        totals(
            "Cost of executed model calls by model (USD)",
            "Price-table cost of every model call executed in the time range, by response "
            "model (gen_ai.client.operation.cost).",
            increase("gen_ai_client_operation_cost_sum", "gen_ai_response_model"),
            "{{gen_ai_response_model}}",
        ),
    ]


def _model_and_tool_panels() -> list:
    chat = f'{SERVICE}, gen_ai_operation_name="chat"'
    failed = increase(CALLS, "gen_ai_tool_name", f"{TOOL}, {ERROR}")
    # Tools that never failed rank with 0 rather than vanishing from the table.
    every_tool = f"0 * {increase(CALLS, 'gen_ai_tool_name', TOOL)}"
    return [
        series(
            "Token usage by model",
            "Tokens per second by model and token type (gen_ai.client.token.usage).",
            "short",
            query(
                "sum by (gen_ai_request_model, gen_ai_token_type) "
                f"(rate(gen_ai_client_token_usage_sum{{{SERVICE}}}[$__rate_interval]))",
                "{{gen_ai_request_model}} {{gen_ai_token_type}}",
            ),
        ),
        series(
            "Model-call duration p95 by model",
            "chat spans (span metrics), 95th percentile, by requested model.",
            "s",
            query(p(0.95, chat, "gen_ai_request_model"), "{{gen_ai_request_model}}"),
        ),
        ranking(
            "Slowest tools (p95)",
            "execute_tool spans, 95th percentile duration over the last rate interval.",
            f"topk(10, {p(0.95, TOOL, 'gen_ai_tool_name')})",
            "s",
        ),
        ranking(
            "Most failing tools",
            "execute_tool spans that ended with ERROR in the time range, per tool.",
            f"topk(10, {failed} or {every_tool})",
            "short",
        ),
    ]


def run_detail() -> dash.Dashboard:
    """One run (by run id) or one LangGraph thread: its boundaries and a way to its trace."""
    run_filter = '{ span.spanpoint.run.root = true && span.spanpoint.run.id = "$run_id" }'
    select = (
        "select(span.spanpoint.boundary.kind, span.spanpoint.replayed,"
        " span.spanpoint.checkpoint.key)"
    )
    jaeger_search = '$jaeger_url/search?service=$service&tags={"spanpoint.run.id":"$run_id"}'
    board = (
        dash.Dashboard("spanpoint · Run detail")
        .uid("spanpoint-run-detail")
        .tags(["spanpoint", "genai", "langgraph"])
        .description(
            "One durable run or thread: every boundary, replayed or executed, and its traces."
        )
        .time("now-24h", "now")
        .with_variable(dash.TextBoxVariable("run_id").label("Run id"))
        .with_variable(dash.TextBoxVariable("thread_id").label("Thread id"))
        .with_variable(service_variable().multi(False).include_all(False))
        .with_variable(
            dash.ConstantVariable("jaeger_url").value("http://localhost:16686").label("Jaeger UI")
        )
        .link(
            dash.DashboardLink("Run in Jaeger")
            .type(model.DashboardLinkType.LINK)
            .url(jaeger_search)
            .target_blank(True)
        )
    )
    board = board.with_panel(
        spans_table(
            "Boundaries of run $run_id",
            "Every boundary under the run's root spans, across attempts; a trace id opens it.",
            f"{run_filter} >> {{ span.spanpoint.boundary.kind != nil }} | {select}",
        ).height(12)
    )
    board = board.with_panel(
        spans_table(
            "Graph calls of thread $thread_id",
            "invoke_agent / invoke_workflow spans of one LangGraph thread (conversation id).",
            '{ span.gen_ai.conversation.id = "$thread_id"'
            ' && span.spanpoint.boundary.kind = "graph_call" }'
            " | select(span.spanpoint.replayed, span.langgraph.interrupt.count,"
            " span.gen_ai.agent.checkpoint.id)",
        )
    )
    return board.with_panel(
        series(
            "Boundary replays in $service",
            "Context for the run: replayed vs executed boundaries per kind in the same service.",
            "ops",
            query(
                "sum by (spanpoint_boundary_kind, spanpoint_replayed) "
                f"(rate({CALLS}{{{BOUNDARY}}}[$__rate_interval]))",
                "{{spanpoint_boundary_kind}} replayed={{spanpoint_replayed}}",
            ),
        ).span(24)
    )


DASHBOARDS: dict[str, Callable[[], dash.Dashboard]] = {
    "agent-runs.json": agent_runs,
    "run-detail.json": run_detail,
}


def render(build: Callable[[], dash.Dashboard]) -> str:
    """The dashboard as stable, diff-friendly JSON."""
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) every dashboard; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the JSON files are stale")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path, text = OUT / name, render(build)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(
            f"stale dashboards: {', '.join(stale)}; run python grafana/generate.py", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
