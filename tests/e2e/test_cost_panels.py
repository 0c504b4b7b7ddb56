"""The dashboards' cost panels, evaluated by a real Prometheus on what real runs paid and saved.

Priced agent runs (``cost_workload.py``: a fake model answering from the conversation, priced
by the price table from the usage it reports) execute and replay in several processes; their
OTLP metrics go through the real collector (collector/otelcol.yaml) to its Prometheus exporter,
which a real Prometheus scrapes (``scripts/e2e/stack.sh``). Every PromQL target of every
dashboard that reads a cost metric is then evaluated through Prometheus's HTTP API, with the
dashboard's variables filled in, and must give, per group of its ``sum by``, what the runs paid
or saved: the prices of the model calls the fake actually executed, recorded in a file as they
happened and priced here by genai-prices. The plan of runs is drawn from a seed (printed on
failure; ``SPANPOINT_E2E_SEED`` replays one).

Two time ranges are checked: one holding every run (every series is born inside it), and one
that starts between two phases of work, so the panel must count only the second phase, also
for a long-lived process whose counters already existed when the range began.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from spanpoint import semconv as sc
from tests.e2e.stack import (
    PanelQuery,
    Stack,
    dashboard_queries,
    prometheus_query,
    running_stack,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKLOAD = Path(__file__).resolve().parent / "cost_workload.py"
SERVICE = "spanpoint-cost-e2e"
GRAPHS = ("orders", "refunds")
MODELS = ("gpt-4o-mini", "gpt-4o")
#: The stack's Prometheus scrapes the collector every second (scripts/e2e/stack.sh).
SCRAPE_S = 1.0
#: The shortest range the panels are evaluated over.
MIN_RANGE_S = 30


def prometheus_name(otel_name: str, suffix: str) -> str:
    """The collector's Prometheus exporter's name for an OTel metric with a ``{USD}`` unit
    (an annotation: no unit suffix): dots become underscores, plus ``_total`` for a counter or
    ``_sum`` for a histogram's sum."""
    return otel_name.replace(".", "_") + suffix


#: Each cost metric's Prometheus name -> what it counts: "paid" or "saved".
COST_METRICS = {
    prometheus_name(sc.METRIC_RUN_COST, "_total"): "paid",
    prometheus_name(sc.METRIC_GEN_AI_OPERATION_COST, "_sum"): "paid",
    prometheus_name(sc.METRIC_REPLAY_SAVED_COST, "_total"): "saved",
}
#: A panel's ``sum by`` label -> the field of an executed call that it groups by.
GROUPED_BY = {"gen_ai_agent_name": "graph", "gen_ai_response_model": "model"}


@dataclass(frozen=True)
class Work:
    """What the workload processes did: the runs planned, the calls actually executed."""

    seed: int
    runs: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    began: float  # before the first workload process started
    mid: float  # after Prometheus scraped all of phase a, before phase b began

    def amounts(self, kind: str, field: str, phases: set[str]) -> dict[str, float]:
        """Per ``field`` value: cost paid (every executed call) or saved (the executed calls
        of runs that were then replayed) by the runs of ``phases``."""
        replayed = {r["run_id"] for r in self.runs if r["attempts"] > 1}
        totals: dict[str, float] = {}
        for call in self.calls:
            if call["phase"] in phases and (kind == "paid" or call["run_id"] in replayed):
                totals[call[field]] = totals.get(call[field], 0.0) + price(call)
        return totals


def price(call: dict[str, Any]) -> float:
    usage = Usage(input_tokens=call["input_tokens"], output_tokens=call["output_tokens"])
    return float(calc_price(usage, call["model"], provider_id="openai").total_price)


def draw_plan(rng: random.Random) -> dict[str, list[list[dict[str, Any]]]]:
    """Per process kind, the runs each process makes: short processes of phase a and of phase
    b, and one long-lived process working in both. Every phase has, for every graph, at least
    one run that is replayed, so every group pays and saves something in every range. The
    long-lived process runs one replayed run of one graph and model in each phase, so its
    series exist before phase b and grow during it."""
    plan: dict[str, list[list[dict[str, Any]]]] = {"a": [[], []], "b": [[]], "long": [[]]}
    long_lived = plan["long"][0]
    for phase in ("a", "b"):
        runs = []
        for graph in GRAPHS:
            for forced in [True] + [False] * rng.randint(0, 2):
                runs.append(
                    {
                        "run_id": f"{phase}-{graph}-{len(runs)}-{rng.getrandbits(32):08x}",
                        "graph": graph,
                        "model": rng.choice(MODELS),
                        "lookups": rng.randint(0, 2),
                        "attempts": 2 if forced else rng.randint(1, 2),
                        "phase": phase,
                    }
                )
        rng.shuffle(runs)
        graph = long_lived[0]["graph"] if long_lived else runs[-1]["graph"]
        mine = next(item for item in runs if item["graph"] == graph)
        runs.remove(mine)
        mine.update(attempts=2, model=long_lived[0]["model"] if long_lived else mine["model"])
        long_lived.append(mine)
        short = plan[phase]
        for index, item in enumerate(runs):
            short[index % len(short)].append(item)
    return plan


def _env(stack: Stack) -> dict[str, str]:
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key not in ("SPANPOINT_TRACE_FILE", "SPANPOINT_STORE")
    }
    # Export every second, so the long-lived process's counters are seen while it waits.
    return {
        **inherited,
        **stack.env,
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
    }


def _short(runs: list[dict[str, Any]], work: Path, env: dict[str, str], name: str) -> None:
    plan_file = work / f"{name}.json"
    plan_file.write_text(json.dumps(runs))
    args = [sys.executable, str(WORKLOAD), "--plan", str(plan_file)]
    done = subprocess.run(
        [*args, "--calls", str(work / "calls.jsonl")],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def _calls(work: Path) -> list[dict[str, Any]]:
    path = work / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _totals_reached(stack: Stack, work: Work, phases: set[str]) -> bool:
    """Whether Prometheus holds every cost the runs of ``phases`` paid and saved."""
    for metric, kind in COST_METRICS.items():
        want = sum(work.amounts(kind, "graph", phases).values())
        got = prometheus_query(stack, f'sum({metric}{{service_name="{SERVICE}"}})')
        if not got or not math.isclose(float(got[0]["value"][1]), want, rel_tol=1e-9):
            return False
    return True


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("cost-stack")) as running:
        yield running


@pytest.fixture(scope="module")
def work(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Work]:
    """Phase a (short processes, and a long-lived one), then, once Prometheus has all of it,
    phase b (the long-lived process goes on, new short processes)."""
    seed = int(os.environ.get("SPANPOINT_E2E_SEED") or random.randrange(2**32))
    plan = draw_plan(random.Random(seed))
    folder = tmp_path_factory.mktemp("cost-work")
    env = _env(stack)
    began = time.time()
    (folder / "long.json").write_text(json.dumps(plan["long"][0]))
    ready, go = folder / "long.ready", folder / "long.go"
    long_args = ["--plan", str(folder / "long.json"), "--calls", str(folder / "calls.jsonl")]
    long_lived = subprocess.Popen(
        [sys.executable, str(WORKLOAD), *long_args, "--ready", str(ready), "--go", str(go)],
        env=env,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for index, runs in enumerate(plan["a"]):
            _short(runs, folder, env, f"a{index}")
        wait_for(ready.exists, "the long-lived workload to finish phase a", timeout_s=300)
        runs = [item for group in plan.values() for process in group for item in process]
        phase_a = Work(seed, runs, _calls(folder), began, mid=0.0)
        wait_for(lambda: _totals_reached(stack, phase_a, {"a"}), "phase a's costs in Prometheus")
        mid = time.time()
        time.sleep(3 * SCRAPE_S)  # scrapes of phase a's totals alone, after `mid`
        go.touch()
        for index, runs_b in enumerate(plan["b"]):
            _short(runs_b, folder, env, f"b{index}")
        out, err = long_lived.communicate(timeout=300)
        assert long_lived.returncode == 0, f"long-lived workload failed:\n{out}\n{err[-4000:]}"
        done = Work(seed, runs, _calls(folder), began, mid=mid)
        wait_for(lambda: _totals_reached(stack, done, {"a", "b"}), "every cost in Prometheus")
        # A range after phase a long enough that increase()'s extrapolation stays small.
        time.sleep(max(0.0, mid + MIN_RANGE_S - time.time()))
        yield done
    finally:
        if long_lived.poll() is None:
            long_lived.kill()
            long_lived.wait()


def cost_queries() -> list[PanelQuery]:
    """Every dashboard target that reads a cost metric."""
    return [q for q in dashboard_queries() if any(m in q.expr for m in COST_METRICS)]


def resolve(query: PanelQuery, range_s: int) -> str:
    """The expression as Grafana sends it for a stat panel over the last ``range_s`` seconds
    of one service's data."""
    return query.resolved(
        {
            "$__rate_interval": f"{int(4 * SCRAPE_S)}s",
            "$__interval": f"{int(SCRAPE_S)}s",
            "$__range": f"{range_s}s",
            "$service": SERVICE,  # a regex that matches just this name
        }
    )


def test_each_cost_metric_has_a_panel() -> None:
    queried = {m for q in cost_queries() for m in COST_METRICS if m in q.expr}
    assert queried == set(COST_METRICS), f"no panel reads {set(COST_METRICS) - queried}"


def test_replays_executed_no_model_call(work: Work) -> None:
    # The saved amounts below assume it: a replayed attempt pays nothing, the fake never ran.
    assert work.calls and all(call["attempt"] == 1 for call in work.calls), work.seed


@pytest.mark.parametrize("window", ["every run", "after phase a"])
@pytest.mark.parametrize("query", cost_queries(), ids=lambda q: q.id)
def test_cost_panel_shows_what_the_runs_paid_and_saved(
    stack: Stack, work: Work, query: PanelQuery, window: str
) -> None:
    at = time.time()
    if window == "every run":
        start, phases = work.began, {"a", "b"}
    else:
        start, phases = work.mid, {"b"}
    range_s = math.floor(at - start)  # the range starts at or after `start`
    expr = resolve(query, range_s)
    (kind,) = {kind for metric, kind in COST_METRICS.items() if metric in query.expr}
    (by,) = re.match(r"sum by \((\w+)\)", query.expr).groups()
    assert by in GROUPED_BY, f"{query.id}: which field of a call is {by!r}?"
    want = work.amounts(kind, GROUPED_BY[by], phases)
    rows = prometheus_query(stack, expr, at=at)
    got = {row["metric"].get(by, ""): float(row["value"][1]) for row in rows}
    context = f"{query.id} over {window} (seed {work.seed}): {expr}"
    if window == "after phase a":
        # The range must hold a series that existed when it began and grew inside it (the
        # long-lived process's), or it would not test how such a series is counted.
        (metric,) = {metric for metric in COST_METRICS if metric in query.expr}
        series = f'{metric}{{service_name="{SERVICE}"}}'
        grown = f"(increase({series}[{range_s}s]) and {series} offset {range_s}s) > 0"
        assert prometheus_query(stack, grown, at=at), f"{context}: nothing grew: {grown}"
    assert want and all(amount > 0 for amount in want.values()), context
    unpaid = {group: value for group, value in got.items() if group not in want and value}
    assert not unpaid, f"{context}: amounts nobody paid or saved in the range: {unpaid}"
    # Series born inside the range count exactly; a series that existed when it began counts
    # through increase(), which extrapolates its samples to the range's edges by at most about
    # one scrape interval each.
    stretch = range_s / (range_s - 3 * SCRAPE_S)
    for group, amount in want.items():
        assert group in got, f"{context}: no {group} in {got}, want {want}"
        assert amount * (1 - 1e-9) <= got[group] <= amount * stretch, (
            f"{context}: {group} {got[group]} != {amount}"
        )
