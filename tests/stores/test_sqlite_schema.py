"""SQLite schema versions: an older file is migrated in place; a newer one is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from spanpoint.errors import StoreUnavailableError
from spanpoint.stores.base import Checkpoint
from spanpoint.stores.sqlite import SCHEMA_VERSION, SqliteStore


def schema(path: Path) -> tuple[str, list[str]]:
    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT v FROM spanpoint_meta WHERE k='schema_version'").fetchone()
        triggers = [
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        ]
    return version[0], triggers


def test_a_version_1_file_is_migrated_and_commits_end_leases(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:  # make it look like a file written by schema 1
        conn.execute("DROP TRIGGER checkpoint_ends_lease")
        conn.execute("UPDATE spanpoint_meta SET v = '1' WHERE k = 'schema_version'")
    store = SqliteStore(path)
    try:
        assert schema(path) == (str(SCHEMA_VERSION), ["checkpoint_ends_lease"])
        assert store.claim("k", "me", 60).state == "acquired"
        store.put(Checkpoint("k", "r", "p", "n", "step", 0, "null", b"", "0" * 32, "0" * 16))
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT COUNT(*) FROM leases").fetchone() == (0,)
    finally:
        store.close()


def test_a_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE spanpoint_meta SET v = '99' WHERE k = 'schema_version'")
    with pytest.raises(StoreUnavailableError, match=r"schema version 99.*upgrade spanpoint"):
        SqliteStore(path)
