"""Durability, both meanings: LangGraph's checkpointer and spanpoint's own commits.

``--part langgraph`` (issue 15 item 4): the price of LangGraph's ``durability="sync"``, what
GraphRunner and the zero-code patch choose inside a run when the graph has a durable
checkpointer and the caller chose none. A 10-node ``StateGraph`` of trivial nodes (the
``linear`` workload's shape) on a file ``SqliteSaver``, a fresh thread per invoke, LangGraph
alone (no spanpoint), with ``durability="async"`` (LangGraph's default) and ``"sync"``,
interleaved rounds; prints the median ms per invoke of each and the difference.

``--part spanpoint`` (issue 18 item 5): spanpoint's ``durability="sync"`` against
``"async"`` side by side with their floors, in one interleaved run each:

- ``@step`` executed (``bench_step.Bench``, SQLite): per boundary, wall and CPU, the steps'
  loop alone (what the code around a boundary waits for) and the whole run with its end
  (under ``"async"`` the end waits for the queued commits); the floors are bench_step's
  (span + commit, and the protocol by hand: attributed span + lease + commit) and, for the
  hot path ``"async"`` leaves, the attributed span + the lease alone;
- the calls strategy on ``agent`` (``bench/run.py``'s worker processes and setups):
  ``none``, ``floor_calls``, ``spanpoint_calls`` and ``spanpoint_calls_async``.

Raw numbers: ``bench/results/durability.json``. Run:
``.venv/bin/python bench/bench_durability.py [--part langgraph|spanpoint] [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict


class State(TypedDict, total=False):
    n: int


def build(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    names = [f"n{i}" for i in range(10)]
    for name in names:
        g.add_node(name, lambda s: {"n": s.get("n", 0) + 1})
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g.compile(checkpointer=saver)


def langgraph_part(invokes: int, rounds: int) -> dict[str, float]:
    """LangGraph alone: median ms per invoke with its durability "async" and "sync"."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(Path(folder) / "lg.db", check_same_thread=False)
        graph = build(SqliteSaver(conn))
        times: dict[str, list[float]] = {"async": [], "sync": []}
        thread = 0
        for _ in range(rounds):
            for mode in ("async", "sync"):
                for _ in range(invokes):
                    thread += 1
                    config = {"configurable": {"thread_id": f"t{thread}"}}
                    start = time.perf_counter()
                    graph.invoke({"n": 0}, config, durability=mode)
                    times[mode].append((time.perf_counter() - start) * 1000)
        conn.close()
    med = {mode: statistics.median(values) for mode, values in times.items()}
    print(
        f"async {med['async']:.3f} ms/invoke, sync {med['sync']:.3f} ms/invoke, "
        f"sync costs {med['sync'] - med['async']:+.3f} ms ({med['sync'] / med['async']:.2f}x)"
    )
    return med


# --- spanpoint's own commits (issue 18 item 5) --------------------------------------------------

STEP_CONTENDERS = (
    "sdk_span",
    "sqlite_commit",
    "protocol_steps",
    "hot_path_floor",
    "executed_steps",
    "executed_async_steps",
    "waiting_steps",
    "waiting_async_steps",
)
#: The body of a "waiting" step: a model or tool call waiting on the network this long.
WAIT_S = 0.002


def step_part(quick: bool, pg_dsn: str | None = None) -> dict[str, dict[str, float]]:
    """Median µs per boundary (wall and CPU) of each contender, interleaved over rounds; on
    PostgreSQL (``pg_dsn``) the spanpoint steps and the protocol by hand use that store."""
    import bench_step

    rounds = 9 if quick else 31
    steps = bench_step.STEPS

    class Bench(bench_step.Bench):
        def hot_path_floor(self) -> None:
            """What "async" leaves on the hot path, by hand: the attributed span, the body
            and the lease (one write); the commit is someone else's."""
            store, owner = self.protocol_store, "bench-owner"
            for i in range(steps):
                key = f"{next(self.keys):064d}"
                with self.tracer.start_as_current_span(
                    "step lookup", attributes=bench_step._ATTRIBUTES
                ):
                    bench_step._body(i)
                    store.claim(key, owner, 300.0, fresh=True)

        def executed_async_steps(self) -> None:
            self._timed_run(f"bench-async-{next(self.runs)}", "async")

        def executed_steps(self) -> None:
            self._timed_run(f"bench-steps-{next(self.runs)}", "sync")

        def waiting_steps(self) -> None:
            self._timed_run(f"bench-wait-{next(self.runs)}", "sync", self.waiting)

        def waiting_async_steps(self) -> None:
            self._timed_run(f"bench-wait-async-{next(self.runs)}", "async", self.waiting)

        def _timed_run(self, run_id: str, durability: str, step: Any = None) -> None:
            step = step or self.step
            run = self.spanpoint.run(run_id, durability=durability)
            run.__enter__()
            w0, c0, t0 = time.perf_counter_ns(), time.process_time_ns(), time.thread_time_ns()
            for i in range(steps):
                step(i)
            self.loop = (
                time.perf_counter_ns() - w0,
                time.process_time_ns() - c0,
                time.thread_time_ns() - t0,
            )
            run.__exit__(None, None, None)

    loops: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": [], "loop_wall": [], "loop_cpu": [], "loop_thread_cpu": []}
        for name in STEP_CONTENDERS
    }
    with tempfile.TemporaryDirectory(prefix="spanpoint-bench-durability-") as tmp:
        bench = Bench(Path(tmp))

        def wait_then_answer(i: int) -> dict[str, Any]:
            time.sleep(WAIT_S)
            return bench_step._body(i)

        bench.waiting = bench.spanpoint.step(name="lookup")(wait_then_answer)  # type: ignore[attr-defined]
        if pg_dsn is not None:
            from spanpoint.stores import open_store

            bench.spanpoint.configure(store=pg_dsn)
            bench.protocol_store = open_store(pg_dsn)
            bench.executed_steps()  # the schema, and a warm pool
        bench.executed_async_steps()  # warm the committer's thread
        for r in range(rounds):
            order = (
                STEP_CONTENDERS[r % len(STEP_CONTENDERS) :]
                + STEP_CONTENDERS[: r % len(STEP_CONTENDERS)]
            )
            for name in order:
                bench.loop = None
                w0, c0, t0 = time.perf_counter_ns(), time.process_time_ns(), time.thread_time_ns()
                getattr(bench, name)()
                wall, cpu = time.perf_counter_ns() - w0, time.process_time_ns() - c0
                loop = bench.loop or (wall, cpu, time.thread_time_ns() - t0)
                loops[name]["wall"].append(wall / steps / 1e3)
                loops[name]["cpu"].append(cpu / steps / 1e3)
                loops[name]["loop_wall"].append(loop[0] / steps / 1e3)
                loops[name]["loop_cpu"].append(loop[1] / steps / 1e3)
                # The boundary's own thread alone (under async the committer's CPU is not in it).
                loops[name]["loop_thread_cpu"].append(loop[2] / steps / 1e3)
                bench.clear()
    return {
        name: {k: statistics.median(v) for k, v in data.items()} for name, data in loops.items()
    }


def agent_part(quick: bool) -> dict[str, dict[str, float]]:
    """The calls strategy on ``agent``, both modes and the floor, one interleaved run."""
    import run as suite

    plan = suite.Plan(quick)
    names = ["none", "floor_calls", "spanpoint_calls", "spanpoint_calls_async"]
    return suite.bench_workload("agent", names, plan)


def step_table(store: str, steps: dict[str, dict[str, float]]) -> list[str]:
    """One store's ``@step`` table."""
    floor = steps["protocol_steps"]["loop_wall"]
    rows = [
        f"`@step` executed, {store}, µs per boundary (median of interleaved rounds; loop = the "
        "100 steps alone, run = with the run's start and end, under async its flush)",
        "",
        "| contender | loop wall | loop CPU | its thread's CPU | run wall | run CPU "
        "| loop wall × protocol by hand |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    labels = {
        "sdk_span": "bare SDK span",
        "sqlite_commit": "one SQLite commit",
        "protocol_steps": "protocol by hand: attributed span + lease + commit (sync floor)",
        "hot_path_floor": "attributed span + lease, no commit (async's hot-path floor)",
        "executed_steps": '**step, durability="sync"**',
        "executed_async_steps": '**step, durability="async"**',
        "waiting_steps": f"step whose body waits {WAIT_S * 1e3:g} ms, sync (wall − wait)",
        "waiting_async_steps": f"step whose body waits {WAIT_S * 1e3:g} ms, async (wall − wait)",
    }
    for name in STEP_CONTENDERS:
        m = dict(steps[name])
        if name.startswith("waiting"):  # what the boundary adds to a body that waits
            m["loop_wall"] -= WAIT_S * 1e6
            m["wall"] -= WAIT_S * 1e6
        rows.append(
            f"| {labels[name]} | {m['loop_wall']:.1f} | {m['loop_cpu']:.1f} "
            f"| {m['loop_thread_cpu']:.1f} | {m['wall']:.1f} | {m['cpu']:.1f} "
            f"| {m['loop_wall'] / floor:.2f} |"
        )
    return [*rows, ""]


def spanpoint_tables(report: dict[str, Any]) -> str:
    """The Markdown tables of the spanpoint part."""
    rows = step_table("SQLite", report["steps_us"])
    if "steps_pg_us" in report:
        rows += step_table("PostgreSQL (fsync on, local socket)", report["steps_pg_us"])
    agent = report["agent"]
    rows += [
        "",
        "calls strategy on `agent` (bench/run.py workers; µs per invoke; added = ratio − 1)",
        "",
        "| setup | median wall µs | paired wall ratio | paired CPU ratio | added / floor_calls' |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    floor_added = agent.get("floor_calls", {}).get("paired_cpu_ratio", float("nan")) - 1
    for name, m in agent.items():
        added = m["paired_cpu_ratio"] - 1
        rows.append(
            f"| {name} | {m['wall_median_us']:,.0f} | {m['paired_wall_ratio']:.3f} "
            f"| {m['paired_cpu_ratio']:.3f} | {added / floor_added:.2f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["langgraph", "spanpoint", "both"], default="both")
    parser.add_argument("--invokes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL @step table")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("SPANPOINT_TRACE_FILE", os.devnull)
    report: dict[str, Any] = {}
    if args.part in ("langgraph", "both"):
        report["langgraph_ms"] = langgraph_part(args.invokes, args.rounds)
    if args.part in ("spanpoint", "both"):
        import run as suite

        report["machine"] = suite.machine()
        report["steps_us"] = step_part(args.quick)
        if not args.no_pg:
            import bench_stores

            dsn, folder = bench_stores.start_postgres()
            try:
                report["steps_pg_us"] = step_part(args.quick, dsn)
            finally:
                if folder:
                    pg_sh = Path(__file__).resolve().parents[1] / "scripts" / "pg.sh"
                    subprocess.run(["bash", str(pg_sh), "stop", folder], check=False)
        report["agent"] = agent_part(args.quick)
        report["machine"]["load_average_end"] = os.getloadavg()
        print(spanpoint_tables(report))
        out = Path(__file__).resolve().parent / "results" / "durability.json"
        out.write_text(json.dumps(report, indent=2))
        print(f"raw numbers: bench/results/{out.name}")


if __name__ == "__main__":
    main()
