"""Fenced commits: what the lease check in a commit costs, and how the store scales with workers.

Two parts, one command, one run:

- **fence**: one committed ``@spanpoint.step`` boundary (claim, body, span, commit) on SQLite
  and on PostgreSQL, with the store as it is (its commit names the lease owner and epoch, and
  writes only while that lease is still held) against the same store whose commit is the
  unfenced one (``put`` without an owner: the first commit of a key wins; the heartbeat's
  hold on the key is dropped as the fenced commit does). Both store objects share one file or
  database, and the rounds alternate (fenced first in even rounds, control first in odd
  ones) so that a load drifting on the machine weighs on both. Per round, over
  ``--boundaries`` boundaries in fresh runs of 20: the CPU per boundary (this process's, plus
  the server's on PostgreSQL) and the median wall time of a boundary; reported for each: the
  median over rounds of fenced ÷ control, and the spread (lowest and highest round).
- **workers**: store CPU per boundary (client threads' CPU inside store calls plus the
  server's CPU) with 1, 2, 4, 8, 16 and 32 PostgreSQL worker processes, against a control of
  plain psycopg processes replaying the statements the store sent, byte for byte
  (``bench/scale_workers.py`` does the measuring). The growth of each, 32 workers over 1, and
  spanpoint's over the control's.

PostgreSQL is a throwaway server from ``scripts/pg.sh`` (fsync off: the fence is CPU and round
trips, not the disk), or ``$SPANPOINT_BENCH_PG_DSN``.

    .venv/bin/python bench/bench_fence.py [--quick] [--rounds N] [--workers 1,2,4,8,16,32]

Results go to ``bench/results/fence.json``; the figures are copied into bench/README.md's
"Fenced commits" section by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scale_common as common  # noqa: E402

BOUNDARIES_PER_RUN = 20


def unfenced(store_class: type) -> type:
    """``store_class`` whose commit is its unfenced ``put`` (the control)."""

    class Unfenced(store_class):  # type: ignore[misc, valid-type]
        def put(self, checkpoint: Any, *, owner: str | None = None, epoch: int | None = None):  # type: ignore[no-untyped-def]
            if owner is not None:
                self._heartbeat.drop(checkpoint.key, owner)  # as the fenced commit does
            return super().put(checkpoint)

    Unfenced.__name__ = f"Unfenced{store_class.__name__}"
    return Unfenced


def open_pair(kind: str, address: str) -> dict[str, Any]:
    """The store as it is, and its unfenced control, on one file or database."""
    if kind == "sqlite":
        from spanpoint.stores.sqlite import SqliteStore as cls
    else:
        from spanpoint.stores.postgres import PostgresStore as cls
    return {"fenced": cls(address), "control": unfenced(cls)(address)}


def boundary_seconds(spanpoint: Any, step: Any, store: Any, boundaries: int) -> list[float]:
    """Wall seconds of each of ``boundaries`` executed (committed) boundaries, fresh runs."""
    out: list[float] = []
    perf = time.perf_counter
    while len(out) < boundaries:
        with spanpoint.run(f"fence-{uuid.uuid4().hex}", store=store):
            for i in range(BOUNDARIES_PER_RUN):
                t0 = perf()
                step(i)
                out.append(perf() - t0)
    return out


def fence_part(
    kind: str, address: str, rounds: int, boundaries: int, server_cpu: Any, log: Any
) -> dict[str, Any]:
    """Interleaved rounds of the fenced store and its unfenced control on ``address``.

    Per round and variant: the median wall time of a boundary, and the CPU per boundary
    (this process's, plus the server's for PostgreSQL when ``server_cpu`` can read it). On a
    machine shared with other work the CPU figure is the steadier one: waiting for a core
    counts in the wall time only."""
    import spanpoint

    @spanpoint.step(name="lookup")
    def lookup(i: int) -> dict[str, Any]:
        return {"ticket": i, "status": "open", "priority": 2, "notes": "x" * 200}

    def server() -> float:
        got = server_cpu() if kind == "postgres" else 0.0
        return 0.0 if got is None else got

    stores = open_pair(kind, address)
    wall: dict[str, list[float]] = {"fenced": [], "control": []}
    cpu: dict[str, list[float]] = {"fenced": [], "control": []}
    try:
        for store in stores.values():  # warm: lazy imports, prepared statements, the pool
            boundary_seconds(spanpoint, lookup, store, 5 * BOUNDARIES_PER_RUN)
        for n in range(rounds):
            order = ("fenced", "control") if n % 2 == 0 else ("control", "fenced")
            for which in order:
                c0, s0 = time.process_time(), server()
                times = boundary_seconds(spanpoint, lookup, stores[which], boundaries)
                spent = time.process_time() - c0 + server() - s0
                wall[which].append(statistics.median(times))
                cpu[which].append(spent / len(times))
            log(
                f"fence {kind} round {n + 1}/{rounds}: CPU fenced {cpu['fenced'][-1] * 1e6:.0f}"
                f" µs, control {cpu['control'][-1] * 1e6:.0f} µs; wall fenced "
                f"{wall['fenced'][-1] * 1e6:.0f} µs, control {wall['control'][-1] * 1e6:.0f} µs"
            )
    finally:
        for store in stores.values():
            store.close()

    def figures(per: dict[str, list[float]]) -> dict[str, Any]:
        ratios = [f / c for f, c in zip(per["fenced"], per["control"], strict=True)]
        return {
            "fenced_us": statistics.median(per["fenced"]) * 1e6,
            "control_us": statistics.median(per["control"]) * 1e6,
            "overhead_pct": (statistics.median(ratios) - 1) * 100,
            "overhead_pct_lowest": (min(ratios) - 1) * 100,
            "overhead_pct_highest": (max(ratios) - 1) * 100,
            "per_round_fenced_us": [m * 1e6 for m in per["fenced"]],
            "per_round_control_us": [m * 1e6 for m in per["control"]],
        }

    return {
        "rounds": rounds,
        "boundaries_per_round": boundaries,
        "server_cpu_included": kind == "postgres" and server_cpu() is not None,
        "cpu": figures(cpu),
        "wall": figures(wall),
    }


def workers_part(
    pg: common.Postgres, counts: list[int], seconds: float, rounds: int, log: Any
) -> dict[str, Any]:
    import scale_workers

    result = scale_workers.run(pg, counts, seconds, log, rounds=rounds)
    rows = {q["workers"]: q for q in scale_workers.quotients(result)}
    if not rows:
        raise SystemExit(
            "bench_fence: the workers part needs the server's CPU, so a server this bench "
            "starts itself: unset SPANPOINT_BENCH_PG_DSN (or run --parts fence)"
        )
    low, high = min(rows), max(rows)
    growth_s = common.ratio(rows[high]["spanpoint_ms"], rows[low]["spanpoint_ms"])
    growth_c = common.ratio(rows[high]["control_ms"], rows[low]["control_ms"])
    return {
        "raw": result,
        "per_count": [rows[n] for n in sorted(rows)],
        "growth": {
            "from": low,
            "to": high,
            "spanpoint": growth_s,
            "control": growth_c,
            "spanpoint_over_control": common.ratio(growth_s, growth_c),
        },
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        "| store | measure | fenced µs | control µs | fence cost (median) | lowest … highest |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, part in result.get("fence", {}).items():
        for measure in ("cpu", "wall"):
            f = part[measure]
            lines.append(
                f"| {kind} | {measure} | {f['fenced_us']:.0f} | {f['control_us']:.0f} | "
                f"{f['overhead_pct']:+.2f} % | {f['overhead_pct_lowest']:+.2f} … "
                f"{f['overhead_pct_highest']:+.2f} % |"
            )
    w = result.get("workers")
    if w:
        lines += [
            "",
            "| workers | spanpoint store CPU ms/boundary | control ms/boundary | ÷ control |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for row in w["per_count"]:
            lines.append(
                f"| {row['workers']} | {row['spanpoint_ms']:.3f} | {row['control_ms']:.3f} | "
                f"{row['total']:.3f} |"
            )
        g = w["growth"]
        lines.append(
            f"\ngrowth {g['to']} vs {g['from']} workers: spanpoint {g['spanpoint']:.3f}, "
            f"control {g['control']:.3f}, spanpoint ÷ control {g['spanpoint_over_control']:.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="few rounds, 1 and 4 workers")
    p.add_argument("--rounds", type=int, default=11, help="fence rounds per store")
    p.add_argument("--boundaries", type=int, default=400, help="boundaries per fence round")
    p.add_argument("--workers", default="1,2,4,8,16,32")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per worker round")
    p.add_argument("--worker-rounds", type=int, default=2)
    p.add_argument("--parts", default="fence,workers")
    p.add_argument("--out", default=str(HERE / "results" / "fence.json"))
    args = p.parse_args()
    if args.quick:
        args.rounds, args.boundaries, args.workers, args.seconds = 3, 100, "1,4", 2.0
    parts = set(args.parts.split(","))
    counts = [int(n) for n in args.workers.split(",")]

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    from opentelemetry.sdk.trace import TracerProvider

    import spanpoint

    spanpoint.configure(store="memory", tracer_provider=TracerProvider())
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_before": os.getloadavg(),
        "cores": os.cpu_count(),
    }
    pg = common.Postgres().start()
    try:
        if "fence" in parts:
            result["fence"] = {}
            with tempfile.TemporaryDirectory() as tmp:
                result["fence"]["sqlite"] = fence_part(
                    "sqlite",
                    str(Path(tmp) / "fence.db"),
                    args.rounds,
                    args.boundaries,
                    pg.server_cpu_s,
                    log,
                )
            dsn = pg.database("bench_fence")
            try:
                result["fence"]["postgres"] = fence_part(
                    "postgres", dsn, args.rounds, args.boundaries, pg.server_cpu_s, log
                )
            finally:
                pg.drop("bench_fence")
        if "workers" in parts:
            result["workers"] = workers_part(pg, counts, args.seconds, args.worker_rounds, log)
    finally:
        pg.stop()
    result["load_average_after"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(report(result))
    print(
        f"\n(load average {result['load_average_before']} → {result['load_average_after']}; "
        f"raw figures in {out})"
    )


if __name__ == "__main__":
    main()
