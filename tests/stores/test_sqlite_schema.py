"""SQLite schema versions: an older file is migrated in place; a newer one is refused."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spanpoint.errors import StoreUnavailableError
from spanpoint.stores import sqlite as sqlite_module
from spanpoint.stores.base import Checkpoint
from spanpoint.stores.sqlite import _MIGRATIONS, SCHEMA_VERSION, SqliteStore


def version_of(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(
            conn.execute("SELECT v FROM spanpoint_meta WHERE k='schema_version'").fetchone()[0]
        )


def write_version_2_file(path: Path) -> None:
    """A file exactly as spanpoint with schema 2 left it: a committed checkpoint, a live lease."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE spanpoint_meta (k TEXT PRIMARY KEY, v TEXT)")
        for version in (1, 2):
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("INSERT INTO spanpoint_meta VALUES ('schema_version', '2')")
        for seq, key in enumerate(("done-2", "done-1"), start=1):
            conn.execute(
                "INSERT INTO checkpoints VALUES (?, 'run', 'p', 'n', 'step', 0, 'json', ?, ?, ?, "
                "NULL, 1, 1, ?, '{}', ?)",
                (key, b'"out"', "0" * 32, "0" * 16, 10 + seq, seq),
            )
        conn.execute("INSERT INTO leases VALUES ('busy', 'host-a:1:aaa', ?)", (time.time() + 60,))


def test_a_version_2_file_keeps_its_checkpoints_and_leases(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    write_version_2_file(path)
    store = SqliteStore(path)
    try:
        assert version_of(path) == str(SCHEMA_VERSION)
        assert [c.key for c in store.list_checkpoints("run")] == ["done-2", "done-1"]
        # Committed before schema 7: no input identity (a fork refuses such rows by name).
        assert all(
            (c.fingerprint, c.identity, c.input_view) == (None, None, None)
            for c in store.list_checkpoints("run")
        )
        assert store.claim("done-1", "me", 60).state == "committed"
        held = store.claim("busy", "host-b:2:bbb", 60)
        assert (held.state, held.owner) == ("held", "host-a:1:aaa")
        assert store.get_run("run") is None  # no run row was written by this fixture
        assert store.put(
            Checkpoint("busy", "run", "p", "n", "step", 0, "json", b"1", "0" * 32, "0" * 16)
        )
        assert store.claim("busy", "host-b:2:bbb", 60).state == "committed"
    finally:
        store.close()


def test_a_version_8_file_gains_notes_and_keeps_its_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "v8.db"
    with sqlite3.connect(path) as conn:  # exactly as spanpoint with schema 8 left it
        conn.execute("CREATE TABLE spanpoint_meta (k TEXT PRIMARY KEY, v TEXT)")
        for version in range(1, 9):
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("INSERT INTO spanpoint_meta VALUES ('schema_version', '8')")
    first = SqliteStore(path)
    first.put(Checkpoint("done", "run", "p", "n", "step", 0, "json", b"1", "0" * 32, "0" * 16))
    first.close()
    with sqlite3.connect(path) as conn:  # the store wrote schema 9: back to 8, without notes
        conn.execute("DROP TABLE notes")
        conn.execute("UPDATE spanpoint_meta SET v = '8' WHERE k = 'schema_version'")
    store = SqliteStore(path)
    try:
        assert version_of(path) == str(SCHEMA_VERSION) == "9"
        assert [c.key for c in store.list_checkpoints("run")] == ["done"]
        assert store.get_note("n") is None
        store.put_note("n", "v")
        assert store.get_note("n") == "v"
    finally:
        store.close()


def test_a_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE spanpoint_meta SET v = '99' WHERE k = 'schema_version'")
    with pytest.raises(StoreUnavailableError, match=r"schema version 99.*upgrade spanpoint"):
        SqliteStore(path)


def test_gc_drops_leases_abandoned_before_the_age_and_keeps_live_ones(tmp_path: Path) -> None:
    path = tmp_path / "gc.db"
    store = SqliteStore(path)
    try:
        store.claim("abandoned", "host-a:1:aaa", 60)
        store.claim("live", "host-b:2:bbb", 600)
        with sqlite3.connect(path) as conn:  # a worker that died two hours ago
            conn.execute(
                "UPDATE checkpoints SET lease_expires_at = ? WHERE key = 'abandoned'",
                (time.time() - 7200,),
            )
        assert store.delete_runs_older_than(3600) == 0  # no run was old; leases are not runs
        with sqlite3.connect(path) as conn:
            left = [r[0] for r in conn.execute("SELECT key FROM checkpoints ORDER BY key")]
        assert left == ["live"]
        assert store.claim("live", "host-c:3:ccc", 60).state == "held"
    finally:
        store.close()


def _plans_under_write_lock(path: Path, action: Callable[[SqliteStore], object]) -> list[str]:
    """SQLite's query plan of each statement ``action`` runs inside a write transaction."""
    store = SqliteStore(path)
    statements: list[tuple[bool, str]] = []
    in_write = False

    def trace(sql: str) -> None:
        nonlocal in_write
        head = sql.strip().upper()
        if head.startswith("BEGIN"):
            in_write = True
        elif head.startswith(("COMMIT", "ROLLBACK")):
            in_write = False
        else:
            statements.append((in_write, sql))

    store._conn.set_trace_callback(trace)
    try:
        action(store)
    finally:
        store._conn.set_trace_callback(None)
        store.close()
    plans = []
    with sqlite3.connect(path) as conn:
        for locked, sql in statements:
            if locked and not sql.lstrip().upper().startswith("EXPLAIN"):
                # The traced text has its parameters inlined: the plan of exactly that.
                rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
                plans.append(f"{sql.strip()[:60]} -> " + "; ".join(r[-1] for r in rows))
    return plans


def _old_store(path: Path, runs: int) -> None:
    store = SqliteStore(path)
    for i in range(runs):
        store.start_run(f"run-{i}", None)
        for j in range(3):
            store.put(
                Checkpoint(
                    f"k-{i}-{j}", f"run-{i}", "p", "n", "step", j, "json", b"1", "0" * 32, "0" * 16
                )
            )
        store.finish_run(f"run-{i}", "completed")
    store.claim("abandoned", "host-a:1:aaa", 60)
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET updated_at = updated_at - 7200")
        conn.execute("UPDATE checkpoints SET lease_expires_at = 1 WHERE key = 'abandoned'")


def test_gc_scans_no_table_while_it_holds_the_write_lock(tmp_path: Path) -> None:
    # A full scan per deleted run made gc quadratic in the store (128 s at 100k checkpoints)
    # and held concurrent writers for all of it: each statement under the lock uses an index.
    path = tmp_path / "gc.db"
    _old_store(path, 5)
    deleted: list[int] = []
    plans = _plans_under_write_lock(path, lambda s: deleted.append(s.delete_runs_older_than(3600)))
    assert deleted == [5]
    assert plans and all(" SCAN " not in f" {p.split(' -> ')[1]} " for p in plans), plans
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_gc_deletes_in_short_transactions_and_keeps_a_run_restarted_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "GC_BATCH_RUNS", 2)
    path = tmp_path / "gc.db"
    _old_store(path, 5)
    store = SqliteStore(path)
    commits: list[str] = []
    real = store._delete_runs

    def restart_run_4_first(conn: sqlite3.Connection, run_ids: list[str], cutoff: float) -> int:
        if not commits:  # another process restarts run-4 after gc read its candidates
            conn.execute("UPDATE runs SET updated_at = ? WHERE run_id = 'run-4'", (time.time(),))
        commits.append(",".join(run_ids))
        return real(conn, run_ids, cutoff)

    monkeypatch.setattr(store, "_delete_runs", restart_run_4_first)
    try:
        assert store.delete_runs_older_than(3600) == 4
        assert len(commits) == 3  # 5 runs, 2 per transaction
        assert [r.run_id for r in store.list_runs()] == ["run-4"]
        assert len(store.list_checkpoints("run-4")) == 3
    finally:
        store.close()


def test_a_page_of_runs_reads_an_index_not_the_whole_table(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _old_store(path, 3)
    store = SqliteStore(path)
    try:
        first = store.list_runs(limit=2)
        with sqlite3.connect(path) as conn:
            for cursor in (None, first[-1].cursor):
                where = "" if cursor is None else f"WHERE (r.updated_at, r.run_id) < {cursor!r}"
                rows = conn.execute(
                    "EXPLAIN QUERY PLAN SELECT r.run_id FROM runs r "
                    f"{where} ORDER BY r.updated_at DESC, r.run_id DESC LIMIT 2"
                ).fetchall()
                plan = "; ".join(r[-1] for r in rows)
                assert "runs_updated" in plan and "TEMP B-TREE" not in plan, plan
    finally:
        store.close()
