"""SQLite schema versions: an older file is migrated in place; a newer one is refused."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from spanpoint.errors import StoreUnavailableError
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
