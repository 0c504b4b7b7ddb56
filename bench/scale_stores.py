"""Store size: what a boundary, the CLI and gc cost in a store of 10k, 100k or 1M checkpoints.

For each store (SQLite, PostgreSQL) and each size N, a fresh store holds N checkpoints across
N / 10 runs (10 checkpoints a run, so 1M checkpoints are 100k runs); half of the runs were last
updated two days ago. Then:

- **boundary**: p50/p99 of a *lookup* (``get`` of a committed key, a replay's read), a *replay
  claim* (``claim`` of a committed key), a *claim* of a new key (``fresh=True``) and the
  *commit* that follows it (``put`` with the owner): random keys over the whole store, the
  sizes of one store filled first and then timed interleaved, one sample of each in turn;
- **CLI**: wall time, process start included, of ``spanpoint runs`` (first page, with
  ``--limit 50`` when the command has it), ``spanpoint show`` of one run and ``spanpoint
  doctor``;
- **gc**: ``spanpoint gc --older-than 1d`` (half of the runs and their checkpoints) while two
  writer processes commit boundaries; their p50/p99 before and while gc runs;
- **disk**: bytes per checkpoint (SQLite: the file and its WAL after a checkpoint;
  PostgreSQL: the tables with their indexes and TOAST).

**The fill.** The store is opened once through ``open_store`` (so its schema and migrations
exist) and a calibration sample is written through the store's own ``start_run``/``put``/
``finish_run``. The bulk rows then go straight into the store's tables (SQLite: one
``executemany`` transaction with ``synchronous=OFF``; PostgreSQL: ``COPY``), built column by
column to what ``put`` wrote: every column of the calibration rows must come out identical
(a column the bench does not know stops it with an error instead of guessing), and a sample of
the bulk rows must read back through ``get``, ``claim``, ``list_checkpoints`` and ``get_run``
exactly as the checkpoints they were made from.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import hashlib
import multiprocessing as mp
import os
import random
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import scale_common as common

PER_RUN = 10
OLD_AGE_S = 2 * 86400  # half the runs: gc --older-than 1d deletes them
CALIBRATION_RUNS = 3
OWNER = "scale-bench"
CHUNK = 20_000
WRITER_PAUSE_S = 0.002  # between a writer's boundaries: a worker does work between them


# --- what the store holds ---------------------------------------------------------------


def run_id(r: int) -> str:
    """The id of bulk run ``r``."""
    return f"scale-run-{r:07d}"


def key(run: str, i: int) -> str:
    """A boundary key like the engine's: 64 hex digits."""
    return hashlib.sha256(f"{run}/{i}".encode()).hexdigest()


def checkpoint(run: str, r: int, i: int, base_ns: int) -> Any:
    """The ``i``-th checkpoint of a run: a model call (even ``i``) or a tool call (odd ``i``),
    its output a serialized message of about 360 bytes."""
    from spanpoint import serde
    from spanpoint.stores import Checkpoint

    turn = i // 2
    if i % 2 == 0:
        kind, path, name = "chat", f"support/model:{turn}", "chat bench-fake"
        value: Any = {
            "role": "assistant",
            "content": f"Ticket T-{r}-{turn}: open, priority 2. " * 6,
            "tool_calls": [{"name": "lookup_ticket", "args": {"ticket": f"T-{r}"}, "id": "c1"}],
            "usage": {"input_tokens": 20 + 5 * turn, "output_tokens": 7},
        }
    else:
        kind, path, name = "execute_tool", f"support/tools:{turn}", "execute_tool lookup_ticket"
        value = {"role": "tool", "content": f"T-{r}-{turn}: open, priority 2", "id": "c1"}
    output_type, output = serde.dumps(value)
    started = base_ns + (r * PER_RUN + i) * 1_000_000
    return Checkpoint(
        key=key(run, i),
        run_id=run,
        path=path,
        name=name,
        kind=kind,
        ordinal=turn,
        output_type=output_type,
        output=output,
        trace_id=f"{r + 1:032x}",
        span_id=f"{r * PER_RUN + i + 1:016x}",
        parent_span_id=f"{r + 1:016x}",
        attempt=1,
        started_at_ns=started,
        ended_at_ns=started + 400_000,
        view=VIEWS[kind],
        # What entered the key (schema 7 / PostgreSQL 4): as the engine writes them.
        fingerprint=hashlib.sha256(f"{run}/{i}/input".encode()).hexdigest(),
        identity=f"{hashlib.sha256(f'{run}/task:{turn}'.encode()).hexdigest()}/{name}",
        input_view=INPUT_VIEWS[kind],
    )


VIEWS: dict[str, dict[str, Any]] = {
    "chat": {"model": "bench-fake", "finish_reason": "tool_calls", "output_tokens": 7},
    "execute_tool": {"tool": "lookup_ticket", "status": "ok"},
}
INPUT_VIEWS: dict[str, dict[str, Any]] = {
    "chat": {
        "messages": [{"role": "human", "digest": "ab" * 32, "text": None, "chars": 40}],
        "tools": [{"name": "lookup_ticket", "digest": "cd" * 32}],
        "settings": {},
    },
    "execute_tool": {"args": {"ticket": "T-1"}},
}


def checkpoint_fields() -> tuple[str, ...]:
    from spanpoint.stores import Checkpoint

    return tuple(f.name for f in fields(Checkpoint))


# --- the two stores' tables ---------------------------------------------------------------


class Backend:
    """One store kind: its address, its tables, and how to write rows straight into them."""

    name: str
    runs_table: str
    checkpoints_table: str
    #: Columns whose value the store draws itself (sequence numbers, commit clocks).
    volatile: frozenset[str] = frozenset()

    def __init__(self, address: str) -> None:
        self.address = address

    def connect(self) -> Any:
        raise NotImplementedError

    def columns(self, conn: Any, table: str) -> list[str]:
        raise NotImplementedError

    def select(self, conn: Any, table: str, cols: list[str], where: str, value: str) -> list:
        raise NotImplementedError

    def insert(self, conn: Any, table: str, cols: list[str], rows: Iterator[tuple]) -> None:
        raise NotImplementedError

    def epoch(self, seconds: float) -> Any:
        """A run timestamp in the store's own type."""
        raise NotImplementedError

    def extra(self, column: str, index: int, now: float) -> Any:
        """The value of a volatile column for the ``index``-th bulk checkpoint."""
        raise KeyError(column)

    def after_fill(self, conn: Any, count: int) -> None:
        """Bring the store's own counters up to the rows written."""

    def bytes_on_disk(self) -> int:
        raise NotImplementedError

    def count(self, conn: Any, sql: str) -> int:
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"
    runs_table = "runs"
    checkpoints_table = "checkpoints"

    def __init__(self, path: Path) -> None:
        super().__init__(f"sqlite:{path}")
        self.path = path

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=60)
        conn.execute("PRAGMA synchronous = OFF")  # the fill only: the store sets its own
        return conn

    def columns(self, conn: sqlite3.Connection, table: str) -> list[str]:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]

    def select(self, conn: Any, table: str, cols: list[str], where: str, value: str) -> list:
        sql = f"SELECT {', '.join(cols)} FROM {table} WHERE {where} = ?"
        return conn.execute(sql, (value,)).fetchall()

    def insert(self, conn: Any, table: str, cols: list[str], rows: Iterator[tuple]) -> None:
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        conn.execute("BEGIN")
        batch: list[tuple] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= CHUNK:
                conn.executemany(sql, batch)
                batch.clear()
        conn.executemany(sql, batch)
        conn.execute("COMMIT")

    def epoch(self, seconds: float) -> float:
        return seconds

    def after_fill(self, conn: Any, count: int) -> None:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def bytes_on_disk(self) -> int:
        conn = sqlite3.connect(self.path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        files = [self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")]
        return sum(f.stat().st_size for f in files if f.exists())

    def count(self, conn: Any, sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])


class PostgresBackend(Backend):
    name = "postgres"
    runs_table = "spanpoint_runs"
    checkpoints_table = "spanpoint_checkpoints"
    volatile = frozenset({"seq", "committed_at"})

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.address, autocommit=True)

    def columns(self, conn: Any, table: str) -> list[str]:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        return [r[0] for r in rows]

    def select(self, conn: Any, table: str, cols: list[str], where: str, value: str) -> list:
        sql = f"SELECT {', '.join(cols)} FROM {table} WHERE {where} = %s"
        return [tuple(row) for row in conn.execute(sql, (value,)).fetchall()]

    def insert(self, conn: Any, table: str, cols: list[str], rows: Iterator[tuple]) -> None:
        statement = f"COPY {table} ({', '.join(cols)}) FROM STDIN"
        with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)

    def epoch(self, seconds: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(seconds, dt.UTC)

    def extra(self, column: str, index: int, now: float) -> Any:
        if column == "seq":
            return index + 1_000_000  # above the calibration rows' own sequence numbers
        if column == "committed_at":
            return dt.datetime.fromtimestamp(now, dt.UTC)
        raise KeyError(column)

    def after_fill(self, conn: Any, count: int) -> None:
        conn.execute(
            "SELECT setval('spanpoint_commit_seq', (SELECT max(seq) FROM spanpoint_checkpoints))"
        )
        conn.execute("VACUUM ANALYZE spanpoint_checkpoints")
        conn.execute("VACUUM ANALYZE spanpoint_runs")

    def bytes_on_disk(self) -> int:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT pg_total_relation_size('spanpoint_checkpoints') "
                "+ pg_total_relation_size('spanpoint_runs')"
            ).fetchone()
        return int(row[0])

    def count(self, conn: Any, sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])


# --- the fill -----------------------------------------------------------------------------


class Filler:
    """Writes bulk rows exactly as the store's ``put`` and ``start_run`` write them."""

    def __init__(self, backend: Backend, base_ns: int, now: float) -> None:
        self.backend = backend
        self.base_ns = base_ns
        self.now = now
        self.view_text: dict[str, Any] = {}
        self.input_view_text: dict[str, Any] = {}
        self.digest: Callable[[Any], str] | None = None
        self.cp_cols: list[str] = []
        self.run_cols: list[str] = []

    def calibrate(self, store: Any, conn: Any) -> dict[str, Any]:
        """Write a sample through the store's API and learn (and check) its rows."""
        b = self.backend
        self.cp_cols = b.columns(conn, b.checkpoints_table)
        self.run_cols = b.columns(conn, b.runs_table)
        if "digest" in self.cp_cols:
            from spanpoint.stores import base

            self.digest = getattr(base, "digest_of", None)
            if self.digest is None:
                raise RuntimeError(
                    "the checkpoints table has a digest column but spanpoint.stores.base has no "
                    "digest_of(); teach bench/scale_stores.py how the store computes it"
                )
        samples = []
        for c in range(CALIBRATION_RUNS):
            run = f"scale-calibration-{c}"
            store.start_run(run, "scale")
            for i in range(PER_RUN):
                cp = checkpoint(run, 10_000_000 + c, i, self.base_ns)
                store.put(cp)
                samples.append(cp)
            store.finish_run(run, "completed")
        for cp in samples:
            (row,) = b.select(conn, b.checkpoints_table, self.cp_cols, "key", cp.key)
            stored = dict(zip(self.cp_cols, row, strict=True))
            self.view_text.setdefault(cp.kind, stored["view"])
            self.input_view_text.setdefault(cp.kind, stored.get("input_view"))
            ours = self.checkpoint_values(cp, 0)
            for column in self.cp_cols:
                if column in b.volatile:
                    continue
                if ours[column] != _plain(stored[column]):
                    raise RuntimeError(
                        f"{b.name}: column {column!r} of a bulk row would be "
                        f"{ours[column]!r} where put() wrote {stored[column]!r}; fix the bench's "
                        "fill before trusting its numbers"
                    )
        (run_row,) = b.select(conn, b.runs_table, self.run_cols, "run_id", "scale-calibration-0")
        stored_run = dict(zip(self.run_cols, run_row, strict=True))
        ours_run = self.run_values("scale-calibration-0", self.now)
        for column in self.run_cols:
            if column in ("created_at", "updated_at"):
                continue
            if ours_run[column] != stored_run[column]:
                raise RuntimeError(
                    f"{b.name}: run column {column!r} would be {ours_run[column]!r} where "
                    f"start_run/finish_run wrote {stored_run[column]!r}"
                )
        return {"calibration_checkpoints": len(samples), "columns": self.cp_cols}

    def checkpoint_values(self, cp: Any, index: int) -> dict[str, Any]:
        values: dict[str, Any] = {name: getattr(cp, name) for name in checkpoint_fields()}
        values["view"] = self.view_text.get(cp.kind, values["view"])
        values["input_view"] = self.input_view_text.get(cp.kind, values["input_view"])
        values["lease_owner"] = None
        values["lease_expires_at"] = None
        if self.digest is not None:
            values["digest"] = self.digest(cp)
        for column in self.cp_cols:
            if column not in values:
                try:
                    values[column] = self.backend.extra(column, index, self.now)
                except KeyError:
                    raise RuntimeError(
                        f"{self.backend.name}: the checkpoints table has a column {column!r} "
                        "the bench does not know how to fill; teach bench/scale_stores.py"
                    ) from None
        return values

    def run_values(self, run: str, updated: float) -> dict[str, Any]:
        values = {
            "run_id": run,
            "name": "scale",
            "attempts": 1,
            "status": "completed",
            "created_at": self.backend.epoch(updated),
            "updated_at": self.backend.epoch(updated),
        }
        unknown = [c for c in self.run_cols if c not in values]
        if unknown:
            raise RuntimeError(
                f"{self.backend.name}: the runs table has columns {unknown} the bench does not "
                "know how to fill; teach bench/scale_stores.py"
            )
        return values

    def updated_at(self, r: int) -> float:
        """Odd runs are two days old (gc's half), even ones recent, newest first by index."""
        return self.now - (OLD_AGE_S if r % 2 else 0) - r * 1e-3

    def fill(self, conn: Any, runs: int) -> None:
        b = self.backend

        def run_rows() -> Iterator[tuple]:
            for r in range(runs):
                values = self.run_values(run_id(r), self.updated_at(r))
                yield tuple(values[c] for c in self.run_cols)

        def checkpoint_rows() -> Iterator[tuple]:
            for r in range(runs):
                run = run_id(r)
                for i in range(PER_RUN):
                    values = self.checkpoint_values(checkpoint(run, r, i, self.base_ns), r * 10 + i)
                    yield tuple(values[c] for c in self.cp_cols)

        b.insert(conn, b.runs_table, self.run_cols, run_rows())
        b.insert(conn, b.checkpoints_table, self.cp_cols, checkpoint_rows())
        b.after_fill(conn, runs * PER_RUN)

    def verify(self, store: Any, runs: int, rng: random.Random, samples: int = 100) -> int:
        """Bulk rows read back through the store's API as the checkpoints they came from."""
        checked = 0
        for _ in range(samples):
            r = rng.randrange(runs)
            run = run_id(r)
            expected = [checkpoint(run, r, i, self.base_ns) for i in range(PER_RUN)]
            i = rng.randrange(PER_RUN)
            got = store.get(expected[i].key)
            claim = store.claim(expected[i].key, OWNER, 60.0)
            listed = store.list_checkpoints(run)
            record = store.get_run(run)
            problems = []
            if got != expected[i]:
                problems.append(f"get() returned {got!r}")
            if claim.state != "committed" or claim.checkpoint != expected[i]:
                problems.append(f"claim() returned {claim.state}")
            if listed != expected:
                problems.append(f"list_checkpoints() returned {len(listed)} checkpoints")
            if record is None or record.committed != PER_RUN or record.status != "completed":
                problems.append(f"get_run() returned {record!r}")
            if problems:
                raise RuntimeError(
                    f"{self.backend.name}: bulk run {run} does not replay as written: "
                    + "; ".join(problems)
                )
            checked += 1
        return checked


def _plain(value: Any) -> Any:
    """A column value as Python compares it (PostgreSQL hands bytea back as bytes already)."""
    return bytes(value) if isinstance(value, memoryview) else value


# --- the measurements -------------------------------------------------------------------


@dataclass
class Target:
    """One filled store whose boundaries are timed, and what it needs to draw keys."""

    store: Any
    runs: int
    rng: random.Random
    base_ns: int


def boundaries(targets: list[Target], samples: int) -> list[dict[str, Any]]:
    """p50/p99 of lookup, replay claim, claim and commit on random keys of each whole store.

    The stores' samples are interleaved (each round one sample of every store, in a rotating
    order): on a machine shared with other work, noise lands on every size alike, so the ratio
    between sizes is the stores' and not the neighbours'. The interpreter's cyclic GC is off
    while timing: its pauses are the bench's allocations, not the store's.
    """
    perf = time.perf_counter
    lookup: list[list[float]] = [[] for _ in targets]
    replay: list[list[float]] = [[] for _ in targets]
    claims: list[list[float]] = [[] for _ in targets]
    commits: list[list[float]] = [[] for _ in targets]
    probes = [f"scale-probe-{uuid.uuid4().hex[:8]}" for _ in targets]
    for t, probe in zip(targets, probes, strict=True):
        t.store.start_run(probe, "scale-probe")
    order = list(range(len(targets)))
    gc.collect()
    gc.disable()
    try:
        for n in range(samples + 100):  # the first 100 rounds: warm-up, not kept
            order = order[1:] + order[:1]
            for x in order:
                t = targets[x]
                r = t.rng.randrange(t.runs)
                k = key(run_id(r), t.rng.randrange(PER_RUN))
                t0 = perf()
                cp = t.store.get(k)
                t1 = perf()
                claim = t.store.claim(k, OWNER, 60.0)
                t2 = perf()
                if cp is None or claim.state != "committed":
                    raise RuntimeError(f"committed key {k[:12]}… of run {r} is missing")
                if n >= 100:
                    lookup[x].append(t1 - t0)
                    replay[x].append(t2 - t1)
        for i in range(samples):
            order = order[1:] + order[:1]
            for x in order:
                t = targets[x]
                cp = checkpoint(probes[x], t.runs + 1, i, t.base_ns)
                t0 = perf()
                claim = t.store.claim(cp.key, OWNER, 60.0, fresh=True)
                t1 = perf()
                stored = t.store.put(cp, owner=OWNER)
                t2 = perf()
                if claim.state != "acquired" or not stored:
                    raise RuntimeError(f"a new boundary was not acquired and committed: {claim}")
                claims[x].append(t1 - t0)
                commits[x].append(t2 - t1)
    finally:
        gc.enable()
    for t, probe in zip(targets, probes, strict=True):
        t.store.finish_run(probe, "completed")
    return [
        {
            "lookup": common.summary_ms(lookup[x]),
            "replay_claim": common.summary_ms(replay[x]),
            "claim": common.summary_ms(claims[x]),
            "commit": common.summary_ms(commits[x]),
            "interleaved_with": len(targets),
        }
        for x in range(len(targets))
    ]


def cli(address: str, show_run: str, repeats: int, flags: dict[str, bool]) -> dict[str, Any]:
    """Wall time of ``runs`` (first page), ``show`` and ``doctor``, process start included."""
    spanpoint = str(common.SPANPOINT)
    page = ["--limit", "50"] if flags["limit"] else []
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    store = ["--store", address]
    return {
        "runs": common.time_command([spanpoint, "runs", *store, *page], repeats, env),
        "show": common.time_command([spanpoint, "show", show_run, *store], repeats, env),
        "doctor": common.time_command([spanpoint, "doctor", *store], repeats, env),
    }


def writer(address: str, index: int, ready: Any, stop: Any, out: Any) -> None:
    """A writer process: an executed boundary (claim, commit) every 2 ms until ``stop``."""
    from spanpoint.stores import open_store

    store = open_store(address)
    run = f"scale-writer-{index}-{uuid.uuid4().hex[:8]}"
    store.start_run(run, "scale-writer")
    ready.put(index)
    samples: list[tuple[float, float, bool]] = []
    i = 0
    while not stop.is_set():
        cp = checkpoint(run, 20_000_000 + index, i, 0)
        began, t0 = time.time(), time.perf_counter()
        try:
            store.claim(cp.key, OWNER, 60.0, fresh=True)
            store.put(cp, owner=OWNER)
            ok = True
        except Exception:  # a store error (a lock timeout) is a result here, not a crash
            ok = False
        samples.append((began, time.perf_counter() - t0, ok))
        i += 1
        time.sleep(WRITER_PAUSE_S)
    store.finish_run(run, "completed")
    store.close()
    out.put(samples)


def gc_under_writers(
    backend: Backend, gc_timeout_s: float, writers: int = 2, baseline_s: float = 2.0
) -> dict:
    """``spanpoint gc --older-than 1d`` while ``writers`` processes commit boundaries; a gc
    still running after ``gc_timeout_s`` is killed (its transaction rolls back)."""
    ctx = mp.get_context("spawn")
    ready, out, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=writer, args=(backend.address, w, ready, stop, out))
        for w in range(writers)
    ]
    conn = backend.connect()
    # Only the bulk runs' checkpoints: the writers add their own meanwhile.
    committed = (
        f"SELECT count(*) FROM {backend.checkpoints_table} "
        "WHERE run_id LIKE 'scale-run-%' AND output IS NOT NULL"
    )
    before = backend.count(conn, committed)
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    t_base = time.time()
    time.sleep(baseline_s)
    t_gc = time.time()
    gc = common.time_command(
        [str(common.SPANPOINT), "gc", "--older-than", "1d", "--store", backend.address],
        1,
        timeout_s=gc_timeout_s,
    )
    t_end = time.time()
    time.sleep(0.5)
    stop.set()
    samples = [s for _ in procs for s in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
    after = backend.count(conn, committed)
    conn.close()
    base = [lat for began, lat, _ in samples if t_base <= began < t_gc]
    during = [lat for began, lat, _ in samples if t_gc <= began < t_end]
    failed = sum(1 for began, _, ok in samples if not ok and t_gc <= began < t_end)
    return {
        "gc": gc,
        "checkpoints_before": before,
        "checkpoints_after": after,
        "writers": writers,
        "writer_baseline": common.summary_ms(base),
        "writer_during_gc": common.summary_ms(during),
        "writes_during_gc": len(during),
        "writes_failed_during_gc": failed,
    }


def fill_size(backend: Backend, size: int, log: Any) -> tuple[Target, dict[str, Any]]:
    """A fresh store of ``size`` checkpoints, filled and verified, left open for timing."""
    from spanpoint.stores import open_store

    runs = max(1, size // PER_RUN)
    rng = random.Random(size)
    now = time.time()
    base_ns = time.time_ns() - 10**15
    store = open_store(backend.address)
    conn = backend.connect()
    filler = Filler(backend, base_ns, now)
    calibration = filler.calibrate(store, conn)
    t0 = time.perf_counter()
    filler.fill(conn, runs)
    fill_s = time.perf_counter() - t0
    conn.close()
    log(f"{backend.name} {size:,}: filled in {fill_s:.1f} s")
    verified = filler.verify(store, runs, rng)
    result: dict[str, Any] = {
        "checkpoints": runs * PER_RUN,
        "runs": runs,
        "fill_s": fill_s,
        "verified_runs": verified,
        "calibration": calibration,
    }
    return Target(store, runs, rng, base_ns), result


def finish_size(
    backend: Backend,
    result: dict[str, Any],
    repeats: int,
    flags: dict[str, bool],
    log: Any,
    gc_timeout_s: float,
) -> dict[str, Any]:
    """Disk, CLI and gc of a filled store whose boundaries were timed (and its store closed)."""
    size = result["checkpoints"]
    disk = backend.bytes_on_disk()
    result["bytes_on_disk"] = disk
    result["bytes_per_checkpoint"] = disk / size
    result["output_bytes_per_checkpoint"] = sum(
        len(checkpoint("x", r, i, 0).output) for r in range(10) for i in range(PER_RUN)
    ) / (10 * PER_RUN)
    log(f"{backend.name} {size:,}: disk done")
    result["cli"] = cli(backend.address, run_id(0), repeats, flags)
    log(f"{backend.name} {size:,}: cli done")
    result["gc"] = gc_under_writers(backend, gc_timeout_s)
    log(f"{backend.name} {size:,}: gc done")
    return result


def run(
    stores: list[str],
    sizes: list[int],
    pg: common.Postgres | None,
    samples: int,
    repeats: int,
    log: Any,
    gc_timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Every store at every size; the result per store and size."""
    import scale_workers  # the same scheduler footing for the store part's timings

    flags = common.runs_flags()
    out: dict[str, Any] = {"runs_flags": flags, "per_run": PER_RUN, "stores": {}}
    out["scheduler"] = scale_workers.scheduler_groups(pg)
    log(f"stores: scheduler groups {out['scheduler']}")
    for name in stores:
        out["stores"][name] = {}
        folder = Path(tempfile.mkdtemp(prefix="spanpoint-scale-"))
        filled: list[tuple[Backend, Target, dict[str, Any]]] = []
        try:
            # Every size filled first and kept open, so their boundaries are timed together.
            for size in sizes:
                if name == "sqlite":
                    backend: Backend = SqliteBackend(folder / f"checkpoints-{size}.db")
                else:
                    assert pg is not None
                    backend = PostgresBackend(pg.database(f"scale_{size}"))
                target, result = fill_size(backend, size, log)
                filled.append((backend, target, result))
            timed = boundaries([target for _, target, _ in filled], samples)
            for (_, target, result), boundary in zip(filled, timed, strict=True):
                result["boundary"] = boundary
                target.store.close()
            log(f"{name}: boundaries timed, sizes interleaved")
            for size, (backend, _, result) in zip(sizes, filled, strict=True):
                out["stores"][name][str(size)] = finish_size(
                    backend, result, repeats, flags, log, gc_timeout_s
                )
                if name == "postgres" and pg is not None:
                    pg.drop(f"scale_{size}")  # its memory and disk back before the next gc
        finally:
            for _, target, _ in filled:
                with contextlib.suppress(Exception):  # closed already, or never usable
                    target.store.close()
            shutil.rmtree(folder, ignore_errors=True)
            if name == "postgres" and pg is not None:
                for size in sizes:
                    pg.drop(f"scale_{size}")
    return out


def tables(result: dict[str, Any]) -> str:
    """Markdown: one table per store, a row per size, then the largest/smallest ratio."""
    parts = []
    flags = result["runs_flags"]
    parts.append(
        f"`spanpoint runs` options: --limit {common.fmt(flags['limit'])}, --offset "
        f"{common.fmt(flags['offset'])}, --cursor/--after "
        f"{common.fmt(flags['cursor'] or flags['after'])}: paginates (a way to the next page) "
        f"**{common.fmt(flags['paginates'])}**; measured "
        f"{'with --limit 50' if flags['limit'] else 'without a limit (the default page)'}."
    )
    headers = [
        "checkpoints (runs)", "lookup p50/p99 ms", "replay claim p50/p99 ms", "claim p50/p99 ms",
        "commit p50/p99 ms", "runs s", "show s", "doctor s", "gc s (deleted)",
        "writers p99 ms before / during gc", "bytes/checkpoint",
    ]  # fmt: skip
    for name, by_size in result["stores"].items():
        rows = []
        for r in by_size.values():
            b, c, g = r["boundary"], r["cli"], r["gc"]
            deleted = g["checkpoints_before"] - g["checkpoints_after"]
            rows.append(
                [
                    f"{r['checkpoints']:,} ({r['runs']:,})",
                    *(f"{b[k]['p50_ms']:.3f} / {b[k]['p99_ms']:.3f}"
                      for k in ("lookup", "replay_claim", "claim", "commit")),
                    *(_wall(c[k]) for k in ("runs", "show", "doctor")),
                    f"{_wall(g['gc'])} ({deleted:,})",
                    f"{g['writer_baseline']['p99_ms']:.1f} / {g['writer_during_gc']['p99_ms']:.1f}"
                    f" (max {g['writer_during_gc']['max_ms']:.0f}, "
                    f"{g.get('writes_failed_during_gc', 0)} failed)",
                    f"{r['bytes_per_checkpoint']:.0f}",
                ]
            )  # fmt: skip
        sizes = list(by_size.values())
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            rows.append(
                [
                    "ratio largest/smallest (p99)",
                    *(common.fmt(common.ratio(hi["boundary"][k]["p99_ms"],
                                              lo["boundary"][k]["p99_ms"])) + "×"
                      for k in ("lookup", "replay_claim", "claim", "commit")),
                    *(_ratio_wall(hi["cli"][k], lo["cli"][k]) for k in ("runs", "show", "doctor")),
                    _ratio_wall(hi["gc"]["gc"], lo["gc"]["gc"]),
                    common.fmt(common.ratio(hi["gc"]["writer_during_gc"]["p99_ms"],
                                            lo["gc"]["writer_during_gc"]["p99_ms"])) + "×",
                    common.fmt(common.ratio(hi["bytes_per_checkpoint"],
                                            lo["bytes_per_checkpoint"])) + "×",
                ]
            )  # fmt: skip
        parts.append(f"#### {name}\n\n" + common.md_table(headers, rows))
    return "\n\n".join(parts)


def _wall(timed: dict[str, Any]) -> str:
    if timed.get("ok"):
        return f"{timed['median_s']:.2f}"
    if timed.get("timeout_s"):
        return f"> {timed['timeout_s']:.0f} (killed)"
    return f"failed ({timed['returncode']})"


def _ratio_wall(hi: dict[str, Any], lo: dict[str, Any]) -> str:
    if not (hi.get("ok") and lo.get("ok")):
        return "–"
    return common.fmt(common.ratio(hi["median_s"], lo["median_s"])) + "×"


def log_stderr(message: str) -> None:
    """Progress on stderr, so stdout stays the tables."""
    import sys

    print(f"[scale] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    import json
    import sys

    pg = common.Postgres().start() if "postgres" in sys.argv[1] else None
    try:
        got = run(sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")], pg, 500, 3,
                  log_stderr)  # fmt: skip
    finally:
        if pg:
            pg.stop()
    print(tables(got))
    print(json.dumps(got, indent=1, default=str)[:3000], file=sys.stderr)
    os._exit(0)
