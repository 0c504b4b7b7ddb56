"""The committed Grafana dashboards are exactly what grafana/generate.py produces, and every
panel queries a datasource that grafana/provisioning defines (fast; no stack needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.stack import DASHBOARDS, ROOT, dashboard_queries

PROVISIONED = ROOT / "grafana" / "provisioning" / "datasources" / "spanpoint.yaml"


def test_committed_json_matches_the_generator() -> None:
    checked = subprocess.run(
        [sys.executable, str(ROOT / "grafana" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("path", sorted(DASHBOARDS.glob("*.json")), ids=lambda p: p.name)
def test_every_target_uses_a_provisioned_datasource(path) -> None:
    provisioned = PROVISIONED.read_text()
    board = json.loads(path.read_text())
    assert board["panels"], path
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            uid = target["datasource"]["uid"]
            assert f"uid: {uid}\n" in provisioned, (path.name, panel["title"], uid)
            assert target["refId"], (path.name, panel["title"])


def test_agent_runs_covers_what_the_issue_asks_for() -> None:
    titles = {q.panel for q in dashboard_queries() if q.dashboard == "agent-runs"}
    for wanted in (
        "Runs by status",
        "Graph-call duration p50 / p95 by graph",
        "Interrupts",
        "Replayed vs executed boundaries",
        "Guard terminations by reason",
        "Token usage by model",
        "Slowest tools (p95)",
        "Most failing tools",
    ):
        assert wanted in titles
