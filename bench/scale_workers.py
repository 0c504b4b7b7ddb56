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

**The control** (no spanpoint code): as many plain processes as workers, each with one psycopg
connection (autocommit, as the store's pool holds it), replaying the statements spanpoint's
store sent for one whole warm-up run of worker 0 (recorded at ``psycopg.Connection.execute``:
the same SQL text and parameters, byte for byte, with each key, run id and lease owner
replaced by a fresh one of the same length), so the server does the same work per boundary.
It runs the distinct-runs phase the same way, in the same run: common start line, same
seconds, client thread CPU inside each statement plus the server's CPU. The rounds alternate
spanpoint and control (``--worker-rounds 2``: spanpoint, control, control, spanpoint), so a
load that drifts during the part weighs on both alike; both sets of processes stay up, the
set not measured blocked on its queue. spanpoint's CPU per boundary divided by the control's,
at each worker count, is what spanpoint's own code adds; the machine's own growth with
processes is the control's.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
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
        #: The protocol method running now (the control's recording names each statement by it).
        self.current: str | None = None
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
            self.current = name
            t0, c0 = perf(), cpu()
            try:
                result = method(*args, **kwargs)
            finally:
                self.seconds += perf() - t0
                self.cpu_seconds += cpu() - c0
                self.calls += 1
                self.current = None
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
    recording = None
    for n in range(5):
        run_id = f"warm-up-{index}-{uuid.uuid4().hex[:12]}"
        recorder = Recorder(clock, active=index == 0 and n == 4)
        with recorder, spanpoint.run(run_id):  # the recorder outermost: finish_run included
            for i in range(DISTINCT_BOUNDARIES):
                work(i, 0.0)
        if recorder.active:
            recording = {"run_id": run_id, "statements": recorder.statements}
    answers.put(("ready", index, recording))
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


class Recorder:
    """Records what the store sends to PostgreSQL in one run: the control replays it.

    While active, ``psycopg.Connection.execute`` is wrapped for the worker's own thread (the
    lease heartbeat's thread is left out): each call's query text and parameters, with the
    store's protocol method running at the time (``StoreClock.current``). Every statement the
    store sends goes through ``Connection.execute`` (its ``_fetchall``); one it sent another
    way would be missing from the control, and the orchestrator checks the recording has a
    claim and a commit per boundary.
    """

    def __init__(self, clock: StoreClock, *, active: bool) -> None:
        self.clock = clock
        self.active = active
        self.statements: list[tuple[str | None, str, Any]] = []
        self._original: Any = None

    def __enter__(self) -> Recorder:
        if not self.active:
            return self
        import psycopg

        original = self._original = psycopg.Connection.execute
        thread = threading.get_ident()
        statements, clock = self.statements, self.clock

        def execute(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if threading.get_ident() == thread:
                statements.append((clock.current, str(query), params))
            return original(conn, query, params, **kwargs)

        psycopg.Connection.execute = execute  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is not None:
            import psycopg

            psycopg.Connection.execute = self._original  # type: ignore[method-assign]


def _substitute(value: Any, mapping: dict[str, str]) -> Any:
    """``value`` with every string that is a key of ``mapping`` replaced (inside lists, tuples
    and dicts too); anything else as it is."""
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, list):
        return [_substitute(v, mapping) for v in value]
    if isinstance(value, tuple):
        return tuple(_substitute(v, mapping) for v in value)
    if isinstance(value, dict):
        return {k: _substitute(v, mapping) for k, v in value.items()}
    return value


def _fresh(text: str) -> str:
    """A random hexadecimal string as long as ``text``."""
    return os.urandom(len(text) // 2 + 1).hex()[: len(text)]


def control_worker(dsn: str, index: int, recording: Any, commands: Any, answers: Any) -> None:
    """One control process: plain psycopg, one connection, no spanpoint code.

    Replays the recorded run's statements, with a fresh run id, fresh keys and its own lease
    owner of the same lengths (a claim of a new key takes a new lease, as the workers' do),
    and reports what a worker reports: client thread CPU and wall inside each statement.
    """
    import psycopg

    conn = psycopg.connect(
        common.with_param(dsn, "application_name", f"scale-c{index}"), autocommit=True
    )
    tuples_ok = psycopg.pq.ExecStatus.TUPLES_OK
    statements = recording["statements"]
    keys = sorted({p["key"] for m, _, p in statements if m == "claim"})
    owners = sorted({p["owner"] for m, _, p in statements if m == "claim"})
    boundaries_per_run = sum(1 for m, _, _ in statements if m == "claim")
    owner_map = {o: _fresh(o) for o in owners}
    perf, cpu = time.perf_counter, time.thread_time
    totals = {"seconds": 0.0, "cpu": 0.0, "calls": 0}
    claims: dict[str, int] = {}

    def one_run() -> None:
        mapping = {recording["run_id"]: _fresh(recording["run_id"]), **owner_map}
        mapping.update((k, _fresh(k)) for k in keys)
        run = [(m, q, _substitute(p, mapping)) for m, q, p in statements]
        for method, query, params in run:
            t0, c0 = perf(), cpu()
            # What the store's `_fetchall` does with a statement, and no more.
            cur = conn.execute(query, params)
            result = cur.pgresult
            rows = cur.fetchall() if result is not None and result.status == tuples_ok else []
            totals["seconds"] += perf() - t0
            totals["cpu"] += cpu() - c0
            totals["calls"] += 1
            if method == "claim" and rows:
                claims[rows[0][0]] = claims.get(rows[0][0], 0) + 1

    for _ in range(5):  # as the workers: psycopg prepares a statement at its fifth use
        one_run()
    answers.put(("ready", index, "spanpoint" in sys.modules))
    while True:
        command = commands.get()
        if command[0] == "quit":
            break
        _, start_at, seconds = command
        while time.time() < start_at:
            time.sleep(0.001)
        totals.update(seconds=0.0, cpu=0.0, calls=0)
        claims.clear()
        cpu0, t0 = time.process_time(), time.time()
        boundaries = 0
        deadline = start_at + seconds
        while time.time() < deadline:
            one_run()
            boundaries += boundaries_per_run
        answers.put(
            (
                "done",
                index,
                {
                    "boundaries": boundaries,
                    "executed": boundaries,
                    "began": t0,
                    "ended": time.time(),
                    "cpu_s": time.process_time() - cpu0,
                    "store_s": totals["seconds"],
                    "store_cpu_s": totals["cpu"],
                    "store_calls": totals["calls"],
                    "claims": dict(claims),
                },
            )
        )
    conn.close()


class ActivitySampler:
    """Samples the workers' connections in ``pg_stat_activity`` on a thread of its own
    (``prefix``: their ``application_name``, ``scale-w`` the workers, ``scale-c`` the control)."""

    def __init__(self, dsn: str, prefix: str = "scale-w") -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.prefix = prefix
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> dict[str, int]:
        """Connections per worker and in total, and how many are running a statement."""
        rows = self.conn.execute(
            "SELECT application_name, state FROM pg_stat_activity WHERE application_name LIKE %s",
            (self.prefix + "%",),
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

    def backend_pids(self) -> list[int]:
        """The server processes serving the sampled connections (their backends)."""
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
            (self.prefix + "%",),
        ).fetchall()
        return [pid for (pid,) in rows]

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
    """Run one phase in every process from a common start line; what they report, raw."""
    start_at = time.time() + 1.0
    # The processes' own backends apart from the whole server (postmaster, WAL writer,
    # checkpointer, autovacuum, the sampler's backend): work that runs by the second, not by
    # the statement, weighs more per boundary on the phase with fewer boundaries per second.
    backends = sampler.backend_pids()
    cpu0, b0 = pg.server_cpu_s(), common.processes_cpu_s(backends)
    for q in commands:
        q.put((name, start_at, arg))
    sampler.start()
    reports = [_answer(answers, "done", 900) for _ in procs]
    busy = sampler.stop()
    cpu1, b1 = pg.server_cpu_s(), common.processes_cpu_s(backends)
    time.sleep(IDLE_S)  # the workers now sit idle, their stores open
    idle = sampler.snapshot()
    return {
        "reports": reports,
        "wall_s": max(r["ended"] for r in reports) - start_at,
        "server_cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        "backend_cpu_s": b1 - b0,
        "backends": len(backends),
        "busy": busy,
        "idle": idle,
        "load_average": os.getloadavg(),
    }


def summarize(raws: list[dict[str, Any]], processes: int) -> dict[str, Any]:
    """The figures of one or more rounds of a phase (summed over rounds: a 2 × 10 s phase
    reads as one of 20 s), one dict per phase as the tables read it."""
    reports = [r for raw in raws for r in raw["reports"]]
    wall = sum(raw["wall_s"] for raw in raws)
    server = [raw["server_cpu_s"] for raw in raws]
    boundaries = sum(r["boundaries"] for r in reports)
    claims: dict[str, int] = {}
    for r in reports:
        for state, n in r["claims"].items():
            claims[state] = claims.get(state, 0) + n
    cores = os.cpu_count() or 1
    server_ms = None if None in server else sum(server) / boundaries * 1e3  # type: ignore[arg-type]
    client_ms = sum(r["store_cpu_s"] for r in reports) / boundaries * 1e3
    backend_ms = sum(raw["backend_cpu_s"] for raw in raws) / boundaries * 1e3
    busy = {k: max(raw["busy"][k] for raw in raws) for k in raws[0]["busy"]}
    idle = raws[-1]["idle"]
    return {
        "workers": processes,
        "rounds": len(raws),
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
        # The part of the server's CPU spent in these processes' own backends.
        "backend_cpu_ms_per_boundary": backend_ms,
        "store_cpu_ms_per_boundary": None if server_ms is None else client_ms + server_ms,
        "store_calls_per_boundary": sum(r["store_calls"] for r in reports) / boundaries,
        "claims": claims,
        "lease_waits": claims.get("held", 0),
        "connections_busy": busy,
        "connections_idle": idle,
        "idle_worker_holds_connection": idle["workers"] == processes and idle["total"] > 0,
        "load_average_per_round": [raw["load_average"] for raw in raws],
        # Each round on its own: how far apart rounds of the same phase fall (the noise).
        "per_round": [_round_figures(raw) for raw in raws] if len(raws) > 1 else [],
    }


def _round_figures(raw: dict[str, Any]) -> dict[str, float | None]:
    """Throughput and store CPU per boundary (client, server, own backends) of one round."""
    boundaries = sum(r["boundaries"] for r in raw["reports"])
    client = sum(r["store_cpu_s"] for r in raw["reports"]) / boundaries * 1e3
    server = None if raw["server_cpu_s"] is None else raw["server_cpu_s"] / boundaries * 1e3
    return {
        "boundaries_per_s": boundaries / raw["wall_s"],
        "store_client_cpu_ms_per_boundary": client,
        "server_cpu_ms_per_boundary": server,
        "backend_cpu_ms_per_boundary": raw["backend_cpu_s"] / boundaries * 1e3,
        "store_cpu_ms_per_boundary": None if server is None else client + server,
    }


def _answer(answers: Any, kind: str, timeout: float) -> Any:
    got = answers.get(timeout=timeout)
    if got[0] != kind:
        raise RuntimeError(f"a worker said {got!r}, expected {kind}")
    return got[2]


def measure(
    pg: common.Postgres, workers: int, seconds: float, rounds: int, log: Any
) -> dict[str, Any]:
    """Distinct runs (``rounds`` rounds of spanpoint and the control, alternating) and the
    shared run, with ``workers`` processes of each on fresh databases."""
    dbname, control_db = f"scale_workers_{workers}", f"scale_control_{workers}"
    dsn, control_dsn = pg.database(dbname), pg.database(control_db)
    from spanpoint.stores import open_store

    for d in (dsn, control_dsn):
        open_store(d).close()  # migrate once, before the workers race to; the same schema
    ctx = mp.get_context("spawn")
    answers = ctx.Queue()
    commands = [ctx.Queue() for _ in range(workers)]
    c_commands = [ctx.Queue() for _ in range(workers)]
    procs = [
        ctx.Process(target=worker, args=(dsn, w, commands[w], answers), daemon=True)
        for w in range(workers)
    ]
    c_procs: list[Any] = []
    sampler, c_sampler = ActivitySampler(dsn), ActivitySampler(dsn, "scale-c")
    try:
        for p in procs:
            p.start()
        ready = [_answer(answers, "ready", 300) for _ in procs]
        recording = next(r for r in ready if r is not None)
        shape = _shape(recording)
        log(f"workers: {workers} ready; recorded {shape}")
        c_procs = [
            ctx.Process(
                target=control_worker,
                args=(control_dsn, w, recording, c_commands[w], answers),
                daemon=True,
            )
            for w in range(workers)
        ]
        _start_without_main(c_procs)
        imported = [_answer(answers, "ready", 300) for _ in c_procs]
        log(f"workers: {workers} control processes ready")
        s_raw, c_raw = [], []
        for n in range(rounds):
            # Alternate which goes first (S C, C S, ...): a drifting load weighs on both.
            order = ("spanpoint", "control") if n % 2 == 0 else ("control", "spanpoint")
            for which in order:
                if which == "spanpoint":
                    s_raw.append(phase(procs, commands, answers, sampler, "distinct", seconds, pg))
                else:
                    c_raw.append(
                        phase(c_procs, c_commands, answers, c_sampler, "control", seconds, pg)
                    )
                log(f"workers: {workers} distinct runs, round {n + 1}: {which} done")
        distinct, control = summarize(s_raw, workers), summarize(c_raw, workers)
        control["recorded"] = shape
        control["spanpoint_imported"] = any(imported)
        shared_run = f"shared-{uuid.uuid4().hex[:12]}"
        shared = summarize(
            [phase(procs, commands, answers, sampler, "shared", shared_run, pg)], workers
        )
        if shared["executed"] != SHARED_BOUNDARIES:
            shared["single_flight_violation"] = True
        log(f"workers: {workers} shared run done")
    finally:
        for q in commands + c_commands:
            q.put(("quit",))
        for p in procs + c_procs:
            if p.pid is None:  # never started
                continue
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
        sampler.conn.close()
        c_sampler.conn.close()
        pg.drop(dbname)
        pg.drop(control_db)
    return {"distinct": distinct, "control": control, "shared": shared}


def _shape(recording: dict[str, Any]) -> dict[str, Any]:
    """Statements per method in the recorded run, and its parameters' size; refuses a run
    without a claim and a commit per boundary (the control would replay other work)."""
    per: dict[str, int] = {}
    size = 0
    for method, _, params in recording["statements"]:
        per[str(method)] = per.get(str(method), 0) + 1
        size += len(repr(params))
    if per.get("claim") != DISTINCT_BOUNDARIES or per.get("put") != DISTINCT_BOUNDARIES:
        raise RuntimeError(
            f"the recorded run sent {per}, not one claim and one put per boundary "
            f"({DISTINCT_BOUNDARIES}): the control would not replay a boundary's round trips"
        )
    return {"statements": per, "params_repr_bytes": size}


def _start_without_main(procs: list[Any]) -> None:
    """Start spawned processes without importing the bench's main script in them.

    A spawned child runs the parent's ``__main__`` file first (as ``__mp_main__``), and
    bench/run.py imports setups and workloads, so spanpoint and LangChain. The control must
    hold no spanpoint code: with no ``__file__`` on ``__main__`` while it starts, spawn skips
    that step (the target lives in this module, which imports neither).
    """
    main = sys.modules["__main__"]
    saved = main.__dict__.pop("__file__", None)
    try:
        for p in procs:
            p.start()
    finally:
        if saved is not None:
            main.__file__ = saved


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


def run(
    pg: common.Postgres, counts: list[int], seconds: float, log: Any, rounds: int = 2
) -> dict[str, Any]:
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
        "rounds": rounds,
        "counts": {str(n): measure(pg, n, seconds, rounds, log) for n in counts},
    }


def _cpu_cell(d: dict[str, Any]) -> str:
    """``total (client + server)`` of the CPU-based store figure; – without server CPU."""
    total = d.get("store_cpu_ms_per_boundary")
    if total is None:
        return common.fmt(total)
    client, server = d["store_client_cpu_ms_per_boundary"], d["server_cpu_ms_per_boundary"]
    return f"{total:.2f} ({client:.2f} + {server:.2f})"


def _server_cell(d: dict[str, Any]) -> str:
    """``server (own backends)`` CPU per boundary; the backends' part only when measured."""
    server, own = d["server_cpu_ms_per_boundary"], d.get("backend_cpu_ms_per_boundary")
    return common.fmt(server) + ("" if own is None else f" ({own:.2f})")


def _distinct_rows(label: str, phases: list[dict[str, Any]]) -> list[list[Any]]:
    """One distinct-runs row per worker count, then the ratio largest / smallest."""
    rows: list[list[Any]] = []
    for d in phases:
        rows.append(
            [
                f"{label}{d['workers']}", d["boundaries_per_s"], d["boundaries_per_s_per_core"],
                d["worker_cpu_ms_per_boundary"], _server_cell(d),
                f"{d['store_ms_per_boundary']:.2f} ({d['store_ms_per_boundary_worst_worker']:.2f})",
                _cpu_cell(d),
                d["lease_waits"],
                f"{d['connections_busy']['max_total']} ({d['connections_busy']['max_active']})",
                f"{d['connections_idle']['total']} ({d['connections_idle']['workers']})",
            ]
        )  # fmt: skip
    if len(phases) > 1:
        lo, hi = phases[0], phases[-1]
        rows.append(
            [
                f"{label}ratio largest/smallest",
                common.fmt(common.ratio(hi["boundaries_per_s"], lo["boundaries_per_s"])) + "×",
                "", "", "",
                common.fmt(common.ratio(hi["store_ms_per_boundary"],
                                        lo["store_ms_per_boundary"])) + "×",
                common.fmt(common.ratio(hi.get("store_cpu_ms_per_boundary"),
                                        lo.get("store_cpu_ms_per_boundary"))) + "×",
                "", "", "",
            ]
        )  # fmt: skip
    return rows


def quotients(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per worker count, spanpoint's store CPU per boundary over the control's: in total, the
    client part and the server part (none without a control or the server's CPU)."""
    out = []
    for n, r in result["counts"].items():
        d, c = r["distinct"], r.get("control")
        if not c or c.get("store_cpu_ms_per_boundary") is None:
            continue
        out.append(
            {
                "workers": int(n),
                "spanpoint_ms": d["store_cpu_ms_per_boundary"],
                "control_ms": c["store_cpu_ms_per_boundary"],
                "total": common.ratio(d["store_cpu_ms_per_boundary"],
                                      c["store_cpu_ms_per_boundary"]),
                "client": common.ratio(d["store_client_cpu_ms_per_boundary"],
                                       c["store_client_cpu_ms_per_boundary"]),
                "server": common.ratio(d["server_cpu_ms_per_boundary"],
                                       c["server_cpu_ms_per_boundary"]),
                "backends": common.ratio(d["backend_cpu_ms_per_boundary"],
                                         c["backend_cpu_ms_per_boundary"]),
                "spanpoint_client_plus_backends_ms": d["store_client_cpu_ms_per_boundary"]
                + d["backend_cpu_ms_per_boundary"],
                "control_client_plus_backends_ms": c["store_client_cpu_ms_per_boundary"]
                + c["backend_cpu_ms_per_boundary"],
            }
        )  # fmt: skip
    return out


Q_HEADERS = (
    "workers", "spanpoint ms", "control ms", "spanpoint ÷ control",
    "client: spanpoint ÷ control", "server: spanpoint ÷ control",
    "own backends: spanpoint ÷ control",
)  # fmt: skip
Q_KEYS = ("spanpoint_ms", "control_ms", "total", "client", "server", "backends")


def tables(result: dict[str, Any]) -> str:
    """Markdown: distinct runs (spanpoint, then the control, then their quotient), then the
    shared run, one row per worker count."""
    by = result["counts"]
    d_headers = [
        "workers", "boundaries/s", "per core", "worker CPU ms/boundary",
        "server CPU ms/boundary (own backends)",
        "store wall ms/boundary (worst worker)", "store CPU ms/boundary (client + server)",
        "lease waits", "connections held (active) max",
        "idle: connections held (workers)",
    ]  # fmt: skip
    s_headers = [
        "workers", "wall s", "executed (of 50)", "replayed", "lease waits", "boundaries/s",
        "store ms/boundary", "connections held (active) max",
    ]  # fmt: skip
    s_rows = []
    for n, r in by.items():
        s = r["shared"]
        s_rows.append(
            [
                n, s["wall_s"], s["executed"], s["claims"].get("committed", 0), s["lease_waits"],
                s["boundaries_per_s"], s["store_ms_per_boundary"],
                f"{s['connections_busy']['max_total']} ({s['connections_busy']['max_active']})",
            ]
        )  # fmt: skip
    d_rows = _distinct_rows("", [r["distinct"] for r in by.values()])
    controls = [r["control"] for r in by.values() if r.get("control")]
    d_rows += _distinct_rows("control: ", controls)
    rounds = result.get("rounds", 1)
    text = (
        f"Distinct runs ({rounds} × {result['seconds']:.0f} s, runs of "
        f"{result['distinct_boundaries_per_run']} boundaries, {result['cores']} cores); "
        "`control:` rows are plain psycopg processes replaying the store's statements:\n\n"
        + common.md_table(d_headers, d_rows)
    )
    q = quotients(result)
    if q:
        q_rows = [[x["workers"], *(x[k] for k in Q_KEYS)] for x in q]
        if len(q) > 1:
            q_rows.append(
                ["ratio largest/smallest"]
                + [f"{common.fmt(common.ratio(q[-1][k], q[0][k]))}×" for k in Q_KEYS]
            )
        text += "\n\nStore CPU per boundary, spanpoint against the control (same run, same "
        text += "statements):\n\n" + common.md_table(Q_HEADERS, q_rows)
    text += f"\n\nOne shared run ({result['shared_boundaries']} boundaries of "
    text += f"{result['shared_body_ms']:.0f} ms each, every worker on the same run):\n\n"
    return text + common.md_table(s_headers, s_rows)


if __name__ == "__main__":
    server = common.Postgres().start()
    try:
        counts = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "1,2").split(",")]
        seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
        rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
        got = run(server, counts, seconds, lambda m: print(f"[scale] {m}", file=sys.stderr), rounds)
    finally:
        server.stop()
    print(tables(got))
