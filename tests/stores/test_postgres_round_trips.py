"""What PostgresStore costs per boundary on the wire and in connections (issue 18, workers).

A boundary is a claim and a commit, a run a start and a finish: each is one round trip (one
Sync of the extended protocol, read from libpq's own trace of the store's only connection).
The claim's lease does not wait for the WAL flush; the commit does. A worker that ran its
boundaries one after another holds one connection, not two.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import pq

from spanpoint.stores.base import BoundaryRecord, Checkpoint
from spanpoint.stores.postgres import PostgresStore

pytestmark = pytest.mark.postgres

# Long leases: the heartbeat renews every TTL / 3, and a renewal inside a measured window
# would be counted as that call's round trip.
TTL_S = 600.0


def checkpoint(key: str, run_id: str = "r") -> Checkpoint:
    return Checkpoint(key, run_id, "p", "n", "step", 0, "json", b"1", "ab" * 16, "cd" * 8)


def record(run_id: str, key: str, status: str) -> BoundaryRecord:
    return BoundaryRecord(run_id, 1, key, "p", "n", "step", status, "cd" * 8, None, 1, 2)  # type: ignore[arg-type]


class Wire:
    """libpq's trace of the single connection of a one-connection store: round trips sent."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.path = Path(tempfile.mkstemp(prefix="spanpoint-wire-")[1])

    @contextlib.contextmanager
    def round_trips(self) -> Iterator[list[int]]:
        """Counts the Sync and Query messages the client sends inside the block."""
        got: list[int] = []
        with self.path.open("w") as fh:
            with self.store._pool.connection() as conn:
                conn.pgconn.trace(fh.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            try:
                yield got
            finally:
                with self.store._pool.connection() as conn:
                    conn.pgconn.untrace()
        sent = [line.split("\t") for line in self.path.read_text().splitlines()]
        got.append(sum(1 for f in sent if len(f) > 2 and f[0] == "F" and f[2] in ("Sync", "Query")))


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn, min_connections=1, max_connections=1)
    try:
        yield s
    finally:
        s.close()


def round_trips_of_one_run(store: PostgresStore, wire: Wire) -> dict[str, int]:
    """A run of one executed boundary, replayed once, with a journal: round trips per call."""
    key, run_id = uuid.uuid4().hex, f"run-{uuid.uuid4().hex[:8]}"
    journal = [record(run_id, key, "replayed"), record(run_id, "k2", "failed")]
    calls = {
        "start_run": lambda: store.start_run(run_id, "name"),
        "claim (a new key)": lambda: store.claim(key, "owner", TTL_S),
        "put (the commit)": lambda: store.put(checkpoint(key, run_id), owner="owner"),
        "claim (committed: a replay)": lambda: store.claim(key, "other", TTL_S),
        "get": lambda: store.get(key),
        "finish_run (with a journal)": lambda: store.finish_run(run_id, "completed", journal),
    }
    trips = {}
    for name, call in calls.items():
        with wire.round_trips() as got:
            call()
        trips[name] = got[0]
    # ... and each did its work.
    assert store.claim(key, "x", TTL_S).state == "committed"
    assert [r.status for r in store.list_journal(run_id)] == ["replayed", "failed"]
    assert store.get_run(run_id).status == "completed"  # type: ignore[union-attr]
    return trips


def test_each_store_call_of_a_boundary_and_a_run_is_one_round_trip(store: PostgresStore) -> None:
    wire = Wire(store)
    seen = [round_trips_of_one_run(store, wire) for _ in range(8)]
    # psycopg prepares a statement at its fifth use on a connection, one round trip once;
    # before that and after it, every call is one round trip.
    assert seen[0] == dict.fromkeys(seen[0], 1)
    assert seen[-1] == seen[0]
    assert all(n <= 2 for trips in seen for n in trips.values())


def test_a_run_without_journal_entries_finishes(store: PostgresStore) -> None:
    store.start_run("quiet", None)
    store.finish_run("quiet", "completed", ())
    assert store.get_run("quiet").status == "completed"  # type: ignore[union-attr]
    assert store.list_journal("quiet") == []


def wal_writes(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(conn.execute("SELECT wal_write FROM pg_stat_wal").fetchone()[0])  # type: ignore[index]


def test_the_lease_does_not_wait_for_the_wal_flush_and_the_commit_does(pg_dsn: str) -> None:
    # The test server runs with synchronous_commit off; this database asks for it on, as a
    # production server would. A synchronous commit writes the WAL out before it returns (one
    # XLogWrite each); an asynchronous one leaves it to the WAL writer's next round.
    name = pg_dsn.rsplit("/", 1)[1]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET synchronous_commit = on")
    store = PostgresStore(pg_dsn, min_connections=1, max_connections=1)
    n = 100
    keys = [uuid.uuid4().hex for _ in range(n)]

    def flushed_stats() -> None:  # the store's backend reports its WAL counters when idle
        with store._pool.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
            conn.execute("SELECT pg_stat_force_next_flush()")

    try:
        flushed_stats()
        before = wal_writes(pg_dsn)
        for key in keys:
            assert store.claim(key, "owner", TTL_S).state == "acquired"
        flushed_stats()
        after_claims = wal_writes(pg_dsn)
        for key in keys:
            assert store.put(checkpoint(key), owner="owner")
        flushed_stats()
        after_puts = wal_writes(pg_dsn)
    finally:
        store.close()
    assert after_puts - after_claims >= n  # every commit waited for its WAL
    assert after_claims - before < n / 2  # the leases did not


def test_a_worker_running_boundaries_one_at_a_time_holds_one_connection(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn + "?application_name=one-worker")
    try:
        for _ in range(20):
            key = uuid.uuid4().hex
            store.claim(key, "owner", TTL_S)
            store.put(checkpoint(key), owner="owner")
        # The pool counts a connection it is still opening: nothing is on its way either.
        assert store._pool.get_stats()["pool_size"] == 1
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            held = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'one-worker'"
            ).fetchone()
        assert held == (1,)
    finally:
        store.close()


def scans(plan: dict) -> Iterator[dict]:
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads a table."""
    if "Relation Name" in plan and "Scan" in plan["Node Type"]:
        yield plan
    for child in plan.get("Plans", []):
        yield from scans(child)


def test_a_lease_wait_reads_the_row_by_its_key_not_every_pending_lease(
    store: PostgresStore, pg_dsn: str
) -> None:
    from spanpoint.stores.postgres_sql import CLAIM

    for _ in range(300):  # committed boundaries leave their old lease entries until a vacuum
        key = uuid.uuid4().hex
        store.claim(key, "owner", TTL_S)
        store.put(checkpoint(key), owner="owner")
    assert store.claim("busy", "holder", 600.0).state == "acquired"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE spanpoint_checkpoints")
        with conn.transaction(force_rollback=True):
            (plan,) = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + CLAIM,
                {"key": "busy", "owner": "waiter", "ttl": TTL_S},
            ).fetchone()  # type: ignore[misc]
    read = [(s["Node Type"], s.get("Index Name")) for s in scans(plan[0]["Plan"])]
    # One lookup by primary key (the row as the snapshot sees it), then the upsert's own
    # conflict check; never a scan of the pending-leases index or of the table.
    assert read == [("Index Scan", "spanpoint_checkpoints_pkey")]
    held = store.claim("busy", "waiter", TTL_S)
    assert (held.state, held.owner) == ("held", "holder")
