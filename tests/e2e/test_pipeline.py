"""End to end: spanpoint telemetry through the real collector into Jaeger, a file and Prometheus.

The module starts the stack with ``scripts/e2e/stack.sh`` (building the collector from
collector/builder.yaml and Jaeger v2 on first use, cached afterwards), runs real workloads
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointed at the collector — ``spanpoint demo``,
``examples/calls_agent.py`` and ``guard_workload.py`` — then asks each backend what arrived.
The stack is stopped when the module ends, whether the tests passed or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spanpoint import semconv as sc
from tests.e2e.pipeline_probe import PLANTED_KEY, TRUNCATED_TO
from tests.e2e.stack import (
    ROOT,
    PanelQuery,
    Stack,
    dashboard_queries,
    get_json,
    jaeger_traces,
    log_records,
    parent_of,
    prometheus_query,
    running_stack,
    span_tags,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SERVICE = "spanpoint-e2e"


@dataclass(frozen=True)
class Runs:
    """Run ids of the workloads, per round."""

    demo: list[str]
    guard: list[str]
    probe: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A running collector + Jaeger + Prometheus, torn down even when a test fails."""
    with running_stack(tmp_path_factory.mktemp("stack")) as running:
        yield running


def _run(args: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def runs(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Every workload, twice, a few seconds apart: rates need a second sample to be non-zero."""
    work = tmp_path_factory.mktemp("workloads")
    # Nothing from the caller's OTEL_* (a signal-specific endpoint would win over ours) and no
    # local trace file or store override: the workloads behave as a user's shell would.
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key not in ("SPANPOINT_TRACE_FILE", "SPANPOINT_STORE")
    }
    env = {**inherited, **stack.env, "OTEL_SERVICE_NAME": SERVICE}
    spanpoint_cli = str(Path(sys.executable).with_name("spanpoint"))
    runs = Runs(demo=[], guard=[], probe=f"probe-{uuid.uuid4().hex[:8]}")
    for round_ in range(2):
        tag = uuid.uuid4().hex[:8]
        runs.demo.append(f"demo-{tag}")
        runs.guard.append(f"guard-{tag}")
        _run([spanpoint_cli, "demo", "--run-id", runs.demo[-1]], env, work)
        _run([sys.executable, str(ROOT / "examples" / "calls_agent.py")], env, work)
        _run([sys.executable, str(HERE / "guard_workload.py"), runs.guard[-1]], env, work)
        _run([sys.executable, str(HERE / "cost_workload.py"), f"cost-{tag}"], env, work)
        if round_ == 0:
            # Span metrics flush every 5 s and Prometheus scrapes every second: let the first
            # totals land so that the second round shows up as an increase.
            time.sleep(8)
    _run([sys.executable, str(HERE / "pipeline_probe.py"), runs.probe], env, work)
    return runs


def _traces(stack: Stack, run_id: str, count: int) -> list[dict]:
    def arrived() -> list[dict] | None:
        found = jaeger_traces(stack, SERVICE, {sc.RUN_ID: run_id})
        return found if len(found) >= count else None

    return wait_for(arrived, f"{count} trace(s) of run {run_id} in Jaeger", timeout_s=120)


def _spans(trace: dict, name: str) -> list[dict]:
    return [span for span in trace["spans"] if span["operationName"] == name]


def _roots(trace: dict) -> list[dict]:
    """The run's root span (``invoke_workflow {run name}``), found by its marker tag."""
    return [span for span in trace["spans"] if span_tags(span).get(sc.RUN_ROOT) is True]


def test_otelcol_validate_accepts_the_config(stack: Stack) -> None:
    config = ROOT / "collector" / "otelcol.yaml"
    checked = subprocess.run(
        [stack.env["SPANPOINT_OTELCOL_BIN"], "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr


def test_demo_traces_arrive_in_jaeger_with_the_span_tree(stack: Stack, runs: Runs) -> None:
    run_id = runs.demo[0]
    traces = _traces(stack, run_id, 2)  # attempt 1 (crashed) and attempt 2 (replayed)
    by_attempt = {}
    for trace in traces:
        (root,) = _roots(trace)
        assert parent_of(root) is None
        by_attempt[span_tags(root)[sc.RUN_ATTEMPT]] = trace
        by_id = {span["spanID"]: span for span in trace["spans"]}
        for span in trace["spans"]:
            if span is root:
                continue
            parent = by_id[parent_of(span)]  # nothing orphaned
            if span["operationName"].startswith(("chat ", "execute_tool ")):
                # The demo's instrumentation: model and tool calls inside the agent's call.
                assert parent["operationName"] == "invoke_agent triage", span["operationName"]
            else:
                assert parent is root, span["operationName"]
    first, second = by_attempt[1], by_attempt[2]
    chats = _spans(first, "chat triage-fake-1")
    assert len(chats) == 2 and all(span_tags(c)[sc.GEN_AI_USAGE_INPUT_TOKENS] for c in chats)
    assert len(_spans(first, "execute_tool escalate_ticket")) == 2

    graphs = _spans(first, "invoke_agent triage")
    assert len(graphs) == 2
    tags = [span_tags(g) for g in graphs]
    assert {t[sc.GEN_AI_CONVERSATION_ID] for t in tags} == {f"{run_id}:triage"}
    assert all(t[sc.GEN_AI_AGENT_CHECKPOINT_ID] for t in tags)
    assert sorted(t[sc.STATUS] for t in tags) == ["completed", "interrupted"]
    assert sorted(t[sc.LANGGRAPH_INTERRUPT_COUNT] for t in tags) == [0, 1]
    assert not any(t[sc.REPLAYED] for t in tags)
    assert span_tags(_roots(first)[0])[sc.RUN_STATUS] == "failed"
    assert _roots(first)[0]["operationName"] == "invoke_workflow ticket-flow"
    assert _roots(second)[0]["operationName"] == "invoke_workflow ticket-flow (attempt 2)"

    replayed = [span_tags(g) for g in _spans(second, "invoke_agent triage (replayed)")]
    assert len(replayed) == 2 and all(t[sc.REPLAYED] for t in replayed)
    assert all(t[sc.CHECKPOINT_KEY] for t in replayed)
    assert span_tags(_roots(second)[0])[sc.RUN_STATUS] == "completed"
    assert _spans(second, "step notify_customer")


def test_tempo_export_path_delivers_the_same_trace(stack: Stack, runs: Runs) -> None:
    trace_id = _traces(stack, runs.demo[0], 2)[0]["traceID"]

    def archived() -> list[dict] | None:
        try:
            return get_json(f"{stack.env['SPANPOINT_TEMPO_STANDIN_URL']}/api/traces/{trace_id}")[
                "data"
            ]
        except OSError:  # 404 until it arrives
            return None

    (trace,) = wait_for(archived, f"trace {trace_id} through the Tempo exporter")
    assert _roots(trace)


def test_tail_sampling_keeps_failures_and_guard_terminations(stack: Stack, runs: Runs) -> None:
    (guarded,) = _traces(stack, runs.guard[0], 1)
    events = [event for span in guarded["spans"] for event in span.get("logs", [])]
    assert any(
        {"key": "event", "type": "string", "value": sc.EVENT_GUARD_TERMINATED} in e["fields"]
        for e in events
    )
    (failed,) = _traces(stack, f"{runs.guard[0]}-refund", 1)
    (tool,) = _spans(failed, "execute_tool refund")
    assert span_tags(tool)["otel.status_code"] == "ERROR"


def test_span_metrics_count_spans_that_sampling_dropped(stack: Stack, runs: Runs) -> None:
    # calls_agent's runs complete without error or interrupt: tail sampling keeps only a
    # sample of them, but span metrics are computed before sampling and count every call.
    # By tool, not span name: a replayed call's span is "execute_tool approve_ticket (replayed)".
    expr = 'sum(traces_span_metrics_calls_total{gen_ai_tool_name="approve_ticket"})'

    def counted() -> float | None:
        result = prometheus_query(stack, f"{expr} >= 4")  # 2 rounds x (executed + replayed)
        return float(result[0]["value"][1]) if result else None

    assert wait_for(counted, f"{expr} reaching 4") >= 4


def test_collector_redacts_and_truncates(stack: Stack, runs: Runs) -> None:
    (trace,) = _traces(stack, runs.probe, 1)
    tags = span_tags(trace["spans"][0])
    assert PLANTED_KEY not in str(tags)
    assert "****" in tags["app.note"]
    assert tags["app.api_key"] == "****"
    assert len(tags["app.prompt_preview"]) == TRUNCATED_TO


def test_run_summaries_arrive_as_log_records_in_the_file(stack: Stack, runs: Runs) -> None:
    # The demo's first attempt makes two graph calls: one interrupted, one completed.
    def statuses() -> set[object] | None:
        found = {
            value_of(record["body"], "status")
            for record in log_records(stack.log_file)
            if record.get("eventName") == sc.LOG_RUN_SUMMARY and runs.demo[0] in str(record)
        }
        return found if {"interrupted", "completed"} <= found else None

    wait_for(statuses, f"{sc.LOG_RUN_SUMMARY} records of {runs.demo[0]} in {stack.log_file}")


def value_of(body: dict, key: str) -> object:
    """A field of an OTLP JSON kvlist body."""
    for pair in body.get("kvlistValue", {}).get("values", []):
        if pair["key"] == key:
            return next(iter(pair["value"].values()))
    return None


@pytest.mark.parametrize("panel", dashboard_queries(), ids=lambda q: q.id)
def test_every_dashboard_query_returns_data(stack: Stack, runs: Runs, panel: PanelQuery) -> None:
    expr = panel.resolved()
    result = wait_for(lambda: prometheus_query(stack, expr), f"data for {panel.id}: {expr}")
    assert result, expr


def test_run_detail_jaeger_link_finds_the_run(stack: Stack, runs: Runs) -> None:
    board = json.loads((ROOT / "grafana" / "dashboards" / "run-detail.json").read_text())
    (link,) = [link["url"] for link in board["links"] if "/search?" in link["url"]]
    url = (
        link.replace("$jaeger_url", stack.jaeger)
        .replace("$service", SERVICE)
        .replace("$run_id", runs.demo[1])
    )
    search = urllib.parse.urlsplit(url)
    params = dict(urllib.parse.parse_qsl(search.query))
    api = f"{search.scheme}://{search.netloc}/api/traces"

    def found() -> list[dict] | None:
        return get_json(api, **params, lookback="1h").get("data") or None

    traces = wait_for(found, f"the Run detail link's Jaeger search: {url}")
    assert {span_tags(s).get(sc.RUN_ID) for t in traces for s in t["spans"]} >= {runs.demo[1]}
