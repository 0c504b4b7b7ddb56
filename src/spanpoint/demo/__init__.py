"""``spanpoint demo``: a support-ticket flow that crashes once and is replayed. Offline.

The flow and its fake model live in :mod:`spanpoint.demo.flow` (the examples import its
public names); :mod:`spanpoint.demo.report` prints the trace trees. Nothing in spanpoint
imports this package except the CLI.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

import spanpoint
from spanpoint._terminal import quoted, visible
from spanpoint.demo.flow import (
    HOOKS,
    build_triage_agent,
    langgraph_checkpointer,
    run_ticket_flow,
)
from spanpoint.demo.report import DemoReport
from spanpoint.graph import GraphRunner
from spanpoint.instrumentation import SpanpointInstrumentor


def main(*, run_id: str | None = None, echo: Callable[[Any], None] | None = None) -> int:
    """Run the demo: two attempts of the ticket flow, printed as trace trees. Returns 0/1."""
    console = Console()
    out = echo or console.print
    cfg = spanpoint.configure()
    report = DemoReport(cfg, out)
    counts: Counter[str] = Counter()

    def effects(name: str) -> None:
        counts[name] += 1

    HOOKS.effects, HOOKS.crash = effects, "raise"
    checkpointer = langgraph_checkpointer(Path(cfg.telemetry_dir))
    agent = build_triage_agent(effects, checkpointer)
    runner = GraphRunner(agent, name="triage")
    run_id = run_id or f"demo-ticket-42-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    if cfg.store.get_run(run_id) is not None:
        out(
            f"[red]run {quoted(run_id)} already exists in {visible(cfg.store.description)}[/]: "
            "the demo shows a "
            "first attempt, so it needs a new run id (omit --run-id for a fresh one)"
        )
        return 2
    report.header(run_id)
    outcomes = []
    # The instrumentation the demo showcases: the model and tool calls inside each graph call
    # become ``chat`` (with token usage) and ``execute_tool`` spans.
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument()  # onto the configuration above (a provider would reconfigure)
    try:
        for attempt in (1, 2):
            outcomes.append(run_ticket_flow(runner, run_id))
            report.attempt(attempt, outcomes[-1], counts)
    finally:
        instrumentor.uninstrument()
        checkpointer.conn.close()
    return report.finish(outcomes, counts)
