"""Workers: 1, 8 and 32 worker processes on one PostgreSQL store (this machine: 2 cores).

Each worker is a process of its own with ``spanpoint.configure(store=<dsn>)`` (its own pool,
tagged ``application_name=scale-w<N>`` so ``pg_stat_activity`` tells the workers apart) and a
``@spanpoint.step`` boundary; the store's protocol methods on the configured store object are
timed in place, so the store's own share of each boundary is measured without touching
spanpoint's code. Two phases per worker count, from a common start line:

- **distinct runs**: every worker runs its own runs of 20 boundaries (a trivial body) for a
  fixed time; boundaries per second of all workers together and per core (the machine's
  cores, shared by the workers and the server), the CPU the workers and the server spent per
  boundary, and the store's time per boundary (wall time inside the store's claim/put/
  start_run/finish_run calls, so it includes waiting for a core);
- **one shared run**: every worker runs the *same* run of 50 boundaries, each body sleeping
  5 ms (work worth single-flight); the first worker to claim a boundary executes it, the
  others wait for its lease and replay it. Reported: wall time, boundaries executed (must be
  exactly 50: single-flight), lease waits (claims answered ``held``), replays.

During each phase the orchestrator samples ``pg_stat_activity`` every 0.2 s (connections held,
active); after it, the workers sit idle for 2 s and it counts the connections each idle worker
still holds.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
import uuid
from typing import Any

import scale_common as common

DISTINCT_BOUNDARIES = 20
SHARED_BOUNDARIES = 50
SHARED_BODY_S = 0.005
IDLE_S = 2.0
TIMED = ("claim", "put", "get", "release", "start_run", "finish_run", "get_run")


class StoreClock:
    """Times the store object's protocol methods in place and counts claim answers.

    Two clocks per call: wall time (``seconds``: on a shared machine it includes waiting for a
    core and for the server) and the calling thread's CPU time (``cpu_seconds``: the client's
    own work inside the call, pool checkout, encoding and libpq included, no waiting).
    """

    def __init__(self, store: Any) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.calls = 0
        self.claims: dict[str, int] = {}
        for name in TIMED:
            method = getattr(store, name, None)
            if method is not None:
                setattr(store, name, self._timed(name, method))

    def reset(self) -> None:
        """Zero every count (the start of a phase)."""
        self.seconds, self.cpu_seconds, self.calls, self.claims = 0.0, 0.0, 0, {}

    def _timed(self, name: str, method: Any) -> Any:
        perf, cpu = time.perf_counter, time.thread_time

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = perf(), cpu()
            try:
                result = method(*args, **kwargs)
            finally:
                self.seconds += perf() - t0
                self.cpu_seconds += cpu() - c0
                self.calls += 1
            if name == "claim":
                self.claims[result.state] = self.claims.get(result.state, 0) + 1
            return result

        return timed


def worker(dsn: str, index: int, commands: Any, answers: Any) -> None:
    """One worker process: waits for a phase, runs it, reports, then idles until told."""
    from opentelemetry.sdk.trace import TracerProvider

    import spanpoint

    spanpoint.configure(
        store=common.with_param(dsn, "application_name", f"scale-w{index}"),
        tracer_provider=TracerProvider(),
    )
    store = spanpoint.settings().store
    clock = StoreClock(store)
    executed = {"n": 0}

    @spanpoint.step(name="work")
    def work(i: int, sleep_s: float) -> dict[str, Any]:
        executed["n"] += 1
        if sleep_s:
            time.sleep(sleep_s)
        return {"i": i, "status": "open", "notes": "x" * 100}

    # Whole runs before the start line: the first boundary of a process pays one-time costs
    # (lazy imports such as serde's writer, the pool's first connection, psycopg preparing a
    # statement at its fifth use, so five runs for start_run/finish_run). Unwarmed, 32 workers
    # of one 20-boundary run each measured those costs, not a boundary's (14 ms of worker CPU
    # per boundary at 32 workers against 0.65 ms at 1).
    for _ in range(5):
        with spanpoint.run(f"warm-up-{index}-{uuid.uuid4().hex[:12]}"):
            for i in range(DISTINCT_BOUNDARIES):
                work(i, 0.0)
    answers.put(("ready", index, None))
    while True:
        command = commands.get()
        if command[0] == "quit":
            break
        phase, start_at, arg = command
        while time.time() < start_at:
            time.sleep(0.001)
        clock.reset()
        executed["n"] = 0
        cpu0, t0 = time.process_time(), time.time()
        boundaries = 0
        if phase == "distinct":
            deadline = start_at + arg
            while time.time() < deadline:
                with spanpoint.run(f"distinct-{index}-{uuid.uuid4().hex[:12]}"):
                    for i in range(DISTINCT_BOUNDARIES):
                        work(i, 0.0)
                        boundaries += 1
        else:
            with spanpoint.run(arg):
                for i in range(SHARED_BOUNDARIES):
                    work(i, SHARED_BODY_S)
                    boundaries += 1
        answers.put(
            (
                "done",
                index,
                {
                    "boundaries": boundaries,
                    "executed": executed["n"],
                    "began": t0,
                    "ended": time.time(),
                    "cpu_s": time.process_time() - cpu0,
                    "store_s": clock.seconds,
                    "store_cpu_s": clock.cpu_seconds,
                    "store_calls": clock.calls,
                    "claims": dict(clock.claims),
                },
            )
        )
    store.close()


class ActivitySampler:
    """Samples the workers' connections in ``pg_stat_activity`` on a thread of its own."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> dict[str, int]:
        """Connections per worker and in total, and how many are running a statement."""
        rows = self.conn.execute(
            "SELECT application_name, state FROM pg_stat_activity "
            "WHERE application_name LIKE 'scale-w%'"
        ).fetchall()
        per: dict[str, int] = {}
        for name, _ in rows:
            per[name] = per.get(name, 0) + 1
        return {
            "total": len(rows),
            "active": sum(1 for _, state in rows if state == "active"),
            "workers": len(per),
            "max_per_worker": max(per.values(), default=0),
        }

    def start(self) -> None:
        self.samples = []
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(0.2):
                self.samples.append(self.snapshot())

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        keys = ("total", "active", "max_per_worker")
        return {f"max_{k}": max((s[k] for s in self.samples), default=0) for k in keys}


def phase(
    procs: list[Any], commands: list[Any], answers: Any, sampler: ActivitySampler,
    name: str, arg: Any, pg: common.Postgres,
) -> dict[str, Any]:  # fmt: skip
    """Run one phase in every worker from a common start line; gather what they report."""
    start_at = time.time() + 1.0
    cpu0 = pg.server_cpu_s()
    for q in commands:
        q.put((name, start_at, arg))
    sampler.start()
    reports = [_answer(answers, "done", 900) for _ in procs]
    busy = sampler.stop()
    cpu1 = pg.server_cpu_s()
    time.sleep(IDLE_S)  # the workers now sit idle, their stores open
    idle = sampler.snapshot()
    wall = max(r["ended"] for r in reports) - start_at
    boundaries = sum(r["boundaries"] for r in reports)
    claims: dict[str, int] = {}
    for r in reports:
        for state, n in r["claims"].items():
            claims[state] = claims.get(state, 0) + n
    cores = os.cpu_count() or 1
    server_ms = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / boundaries * 1e3
    client_ms = sum(r["store_cpu_s"] for r in reports) / boundaries * 1e3
    return {
        "workers": len(procs),
        "wall_s": wall,
        "boundaries": boundaries,
        "executed": sum(r["executed"] for r in reports),
        "boundaries_per_s": boundaries / wall,
        "boundaries_per_s_per_core": boundaries / wall / cores,
        "worker_cpu_ms_per_boundary": sum(r["cpu_s"] for r in reports) / boundaries * 1e3,
        "server_cpu_ms_per_boundary": server_ms,
        "store_ms_per_boundary": sum(r["store_s"] for r in reports) / boundaries * 1e3,
        "store_ms_per_boundary_worst_worker": 1e3
        * max(r["store_s"] / max(1, r["boundaries"]) for r in reports),
        # The store's own time as CPU: the client threads' CPU inside store calls plus the
        # server's CPU, per boundary (waiting for a core or a lock counts in neither).
        "store_client_cpu_ms_per_boundary": client_ms,
        "store_cpu_ms_per_boundary": None if server_ms is None else client_ms + server_ms,
        "claims": claims,
        "lease_waits": claims.get("held", 0),
        "connections_busy": busy,
        "connections_idle": idle,
        "idle_worker_holds_connection": idle["workers"] == len(procs) and idle["total"] > 0,
    }


def _answer(answers: Any, kind: str, timeout: float) -> Any:
    got = answers.get(timeout=timeout)
    if got[0] != kind:
        raise RuntimeError(f"a worker said {got!r}, expected {kind}")
    return got[2]


def measure(pg: common.Postgres, workers: int, seconds: float, log: Any) -> dict[str, Any]:
    """Both phases with ``workers`` processes on a fresh database."""
    dbname = f"scale_workers_{workers}"
    dsn = pg.database(dbname)
    from spanpoint.stores import open_store

    open_store(dsn).close()  # migrate once, before the workers race to
    ctx = mp.get_context("spawn")
    answers = ctx.Queue()
    commands = [ctx.Queue() for _ in range(workers)]
    procs = [
        ctx.Process(target=worker, args=(dsn, w, commands[w], answers), daemon=True)
        for w in range(workers)
    ]
    sampler = ActivitySampler(dsn)
    try:
        for p in procs:
            p.start()
        for _ in procs:
            _answer(answers, "ready", 300)
        log(f"workers: {workers} ready")
        distinct = phase(procs, commands, answers, sampler, "distinct", seconds, pg)
        log(f"workers: {workers} distinct runs done")
        shared_run = f"shared-{uuid.uuid4().hex[:12]}"
        shared = phase(procs, commands, answers, sampler, "shared", shared_run, pg)
        if shared["executed"] != SHARED_BOUNDARIES:
            shared["single_flight_violation"] = True
        log(f"workers: {workers} shared run done")
    finally:
        for q in commands:
            q.put(("quit",))
        for p in procs:
            if p.pid is None:  # never started
                continue
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
        sampler.conn.close()
        pg.drop(dbname)
    return {"distinct": distinct, "shared": shared}


def scheduler_groups(pg: common.Postgres | None) -> dict[str, Any]:
    """Give the bench's and the server's scheduler groups the niceness the bench runs at.

    With Linux's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) the CPU is
    shared between sessions first, so a process's own ``nice`` only ranks it inside its
    session: ``nice -n -10`` alone does not lift the bench above other work on the machine.
    The server is a session of its own too (``pg_ctl`` calls ``setsid``), so 32 workers' 32
    backends shared one session's share. When the bench runs at a negative nice and may write
    ``/proc/PID/autogroup`` (root), both sessions get that nice; otherwise nothing changes. What
    was found and done is returned for the JSON.
    """
    nice = os.nice(0)
    out: dict[str, Any] = {"process_nice": nice}
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="ascii") as fh:
            out["autogroup"] = fh.read().strip() == "1"
    except OSError:
        out["autogroup"] = False
    pid = None if pg is None else _postmaster_pid(pg)
    out["server_included"] = pid is not None
    if not out["autogroup"] or nice >= 0:
        out["set"] = False
        return out
    try:
        for target in ("self", *([str(pid)] if pid is not None else [])):
            with open(f"/proc/{target}/autogroup", "w", encoding="ascii") as fh:
                fh.write(str(nice))
        out["set"] = True
        out["autogroup_nice"] = nice
    except OSError as exc:
        out["set"] = False
        out["error"] = str(exc)
    return out


def _postmaster_pid(pg: common.Postgres) -> int | None:
    if not pg.folder:
        return None
    try:
        with open(os.path.join(pg.folder, "data", "postmaster.pid"), encoding="ascii") as fh:
            return int(fh.readline())
    except (OSError, ValueError):
        return None


def run(pg: common.Postgres, counts: list[int], seconds: float, log: Any) -> dict[str, Any]:
    """Every worker count; the results by count."""
    groups = scheduler_groups(pg)
    log(f"workers: scheduler groups {groups}")
    return {
        "scheduler": groups,
        "cores": os.cpu_count(),
        "distinct_boundaries_per_run": DISTINCT_BOUNDARIES,
        "shared_boundaries": SHARED_BOUNDARIES,
        "shared_body_ms": SHARED_BODY_S * 1e3,
        "seconds": seconds,
        "counts": {str(n): measure(pg, n, seconds, log) for n in counts},
    }


def _cpu_cell(d: dict[str, Any]) -> str:
    """``total (client + server)`` of the CPU-based store figure; – without server CPU."""
    total = d.get("store_cpu_ms_per_boundary")
    if total is None:
        return common.fmt(total)
    client, server = d["store_client_cpu_ms_per_boundary"], d["server_cpu_ms_per_boundary"]
    return f"{total:.2f} ({client:.2f} + {server:.2f})"


def tables(result: dict[str, Any]) -> str:
    """Markdown: distinct runs, then the shared run, one row per worker count."""
    by = result["counts"]
    d_headers = [
        "workers", "boundaries/s", "per core", "worker CPU ms/boundary",
        "server CPU ms/boundary",
        "store wall ms/boundary (worst worker)", "store CPU ms/boundary (client + server)",
        "lease waits", "connections held (active) max",
        "idle: connections held (workers)",
    ]  # fmt: skip
    s_headers = [
        "workers", "wall s", "executed (of 50)", "replayed", "lease waits", "boundaries/s",
        "store ms/boundary", "connections held (active) max",
    ]  # fmt: skip
    d_rows, s_rows = [], []
    for n, r in by.items():
        d, s = r["distinct"], r["shared"]
        d_rows.append(
            [
                n, d["boundaries_per_s"], d["boundaries_per_s_per_core"],
                d["worker_cpu_ms_per_boundary"], d["server_cpu_ms_per_boundary"],
                f"{d['store_ms_per_boundary']:.2f} ({d['store_ms_per_boundary_worst_worker']:.2f})",
                _cpu_cell(d),
                d["lease_waits"],
                f"{d['connections_busy']['max_total']} ({d['connections_busy']['max_active']})",
                f"{d['connections_idle']['total']} ({d['connections_idle']['workers']})",
            ]
        )  # fmt: skip
        s_rows.append(
            [
                n, s["wall_s"], s["executed"], s["claims"].get("committed", 0), s["lease_waits"],
                s["boundaries_per_s"], s["store_ms_per_boundary"],
                f"{s['connections_busy']['max_total']} ({s['connections_busy']['max_active']})",
            ]
        )  # fmt: skip
    counts = list(by.values())
    if len(counts) > 1:
        lo, hi = counts[0]["distinct"], counts[-1]["distinct"]
        d_rows.append(
            [
                "ratio largest/smallest",
                common.fmt(common.ratio(hi["boundaries_per_s"], lo["boundaries_per_s"])) + "×",
                "", "", "",
                common.fmt(common.ratio(hi["store_ms_per_boundary"],
                                        lo["store_ms_per_boundary"])) + "×",
                common.fmt(common.ratio(hi.get("store_cpu_ms_per_boundary"),
                                        lo.get("store_cpu_ms_per_boundary"))) + "×",
                "", "", "",
            ]
        )  # fmt: skip
    return (
        f"Distinct runs ({result['seconds']:.0f} s, runs of {result['distinct_boundaries_per_run']}"
        f" boundaries, {result['cores']} cores):\n\n"
        + common.md_table(d_headers, d_rows)
        + f"\n\nOne shared run ({result['shared_boundaries']} boundaries of "
        f"{result['shared_body_ms']:.0f} ms each, every worker on the same run):\n\n"
        + common.md_table(s_headers, s_rows)
    )


if __name__ == "__main__":
    import sys

    server = common.Postgres().start()
    try:
        counts = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "1,2").split(",")]
        seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
        got = run(server, counts, seconds, lambda m: print(f"[scale] {m}", file=sys.stderr))
    finally:
        server.stop()
    print(tables(got))
