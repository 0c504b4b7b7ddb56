"""Helpers for the end-to-end tests: the running stack, its HTTP APIs and the dashboards' queries.

The stack itself is started and stopped by ``scripts/e2e/stack.sh`` (the same script users run);
this module only reads what it exported and asks Jaeger, Prometheus and the collector's file
output what arrived.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "grafana" / "dashboards"
STACK_SH = ROOT / "scripts" / "e2e" / "stack.sh"
T = TypeVar("T")


@dataclass(frozen=True)
class Stack:
    """Addresses of one running stack, as ``stack.sh start`` exported them."""

    env: dict[str, str]

    @property
    def jaeger(self) -> str:
        return self.env["SPANPOINT_JAEGER_URL"]

    @property
    def prometheus(self) -> str:
        return self.env["SPANPOINT_PROMETHEUS_URL"]

    @property
    def log_file(self) -> Path:
        return Path(self.env["SPANPOINT_COLLECTOR_LOG_FILE"])

    @classmethod
    def from_exports(cls, text: str) -> Stack:
        """Parse the ``export KEY=VALUE`` lines ``stack.sh start`` prints."""
        pairs = (line.removeprefix("export ").split("=", 1) for line in text.splitlines())
        return cls({key: value for key, value in pairs})


@contextmanager
def running_stack(state: Path) -> Iterator[Stack]:
    """Start the stack with ``stack.sh`` (state, logs and pids in ``state``); stop it on exit,
    whether the body passed or not."""
    try:
        started = subprocess.run(
            ["bash", str(STACK_SH), "start", str(state)],
            capture_output=True,
            text=True,
            timeout=3600,  # a cold machine builds the collector and Jaeger first
        )
        assert started.returncode == 0, f"stack.sh start failed:\n{started.stderr[-4000:]}"
        yield Stack.from_exports(started.stdout)
    finally:
        subprocess.run(["bash", str(STACK_SH), "stop", str(state)], timeout=120, check=False)


def get_json(url: str, **params: str) -> Any:
    """GET ``url`` with query ``params`` and decode the JSON answer."""
    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 60.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(1.0)


def jaeger_traces(stack: Stack, service: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    """Traces of ``service`` whose spans carry ``tags``, from Jaeger's query API."""
    answer = get_json(
        f"{stack.jaeger}/api/traces",
        service=service,
        tags=json.dumps(tags),
        lookback="1h",
        limit="50",
    )
    return answer.get("data") or []


def span_tags(span: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger span's tags as a plain dict."""
    return {tag["key"]: tag["value"] for tag in span.get("tags", [])}


def parent_of(span: dict[str, Any]) -> str | None:
    """The span id of a Jaeger span's parent, if it has one."""
    for ref in span.get("references", []):
        if ref.get("refType") == "CHILD_OF":
            return ref["spanID"]
    return None


def log_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every log record in the collector's file exporter output (OTLP JSON lines)."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for resource in json.loads(line).get("resourceLogs", []):
            for scope in resource.get("scopeLogs", []):
                yield from scope.get("logRecords", [])


# Values for the dashboard variables when the test evaluates a query by hand.
PROMQL_VARIABLES = {
    "$__rate_interval": "2m",
    "$__range": "1h",
    "$__interval": "15s",
    "$service": ".*",
}


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL target of one panel of one generated dashboard."""

    dashboard: str
    panel: str
    ref: str
    expr: str

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.panel}:{self.ref}"

    def resolved(self, values: dict[str, str] = PROMQL_VARIABLES) -> str:
        """The expression with Grafana's variables replaced by test ``values``."""
        expr = self.expr
        for name, value in values.items():
            expr = expr.replace(name, value)
        leftover = re.findall(r"\$\{?\w+", expr)
        assert not leftover, f"{self.id}: no test value for variables {leftover}"
        return expr


def dashboard_queries() -> list[PanelQuery]:
    """Every Prometheus target of every dashboard under grafana/dashboards/."""
    queries = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                if target.get("datasource", {}).get("type") == "prometheus":
                    queries.append(
                        PanelQuery(path.stem, panel["title"], target["refId"], target["expr"])
                    )
    return queries


def prometheus_query(stack: Stack, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """The result vector of an instant PromQL query (now, or at unix time ``at``); raises on
    a PromQL error."""
    params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    try:
        answer = get_json(f"{stack.prometheus}/api/v1/query", **params)
    except urllib.error.HTTPError as refused:  # a PromQL error: say which
        raise AssertionError(f"Prometheus refused {expr}: {refused.read().decode()}") from None
    assert answer["status"] == "success", answer
    return answer["data"]["result"]
