"""Integrity digests: a committed row that changed is executed again, never replayed.

Every committed row carries the sha256 of its output, type tag and identity columns (key, run
id, path, ordinal, kind). These tests change rows behind the store's back, with raw SQL on the
real files and servers, and check that what a run returns is always the original value: either
replayed from an intact row or executed again, and executed again whenever the row changed.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import spanpoint
from spanpoint import semconv
from spanpoint.errors import CorruptCheckpointError
from spanpoint.stores import MemoryStore, SqliteStore, open_store
from spanpoint.stores.base import Checkpoint, CheckpointStore, checkpoint_digest, digest_of
from tests.conftest import make_telemetry

ORIGINAL = {"approved": True, "amount": 125000, "account": "ACME-001"}


@dataclass
class Raw:
    """A store and raw SQL on its tables (``%s`` placeholders, PostgreSQL table names)."""

    kind: str
    store: CheckpointStore
    fetch: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
    write: Callable[[str, tuple[Any, ...]], None]


def _sqlite_raw(path: Path) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def sql(query: str) -> str:
        return query.replace("%s", "?").replace("spanpoint_checkpoints", "checkpoints")

    def fetch(query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with sqlite3.connect(path) as conn:
            return conn.execute(sql(query), params).fetchall()

    def write(query: str, params: tuple[Any, ...]) -> None:
        with sqlite3.connect(path) as conn:
            conn.execute(sql(query), params)

    return fetch, write


def _pg_raw(dsn: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    import psycopg

    def fetch(query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()  # type: ignore[arg-type]

    def write(query: str, params: tuple[Any, ...]) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(query, params)  # type: ignore[arg-type]

    return fetch, write


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def raw(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Raw]:
    if request.param == "sqlite":
        path = tmp_path / "integrity.db"
        store: CheckpointStore = SqliteStore(path)
        fetch, write = _sqlite_raw(path)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        store = open_store(dsn)
        fetch, write = _pg_raw(dsn)
    yield Raw(request.param, store, fetch, write)
    store.close()


def cp(key: str = "k1", **kw: Any) -> Checkpoint:
    fields: dict[str, Any] = {
        "key": key,
        "run_id": "run-1",
        "path": "outer/step",
        "name": "step",
        "kind": "step",
        "ordinal": 0,
        "output_type": "json",
        "output": b'{"approved": true}',
        "trace_id": "ab" * 16,
        "span_id": "cd" * 8,
    }
    fields.update(kw)
    return Checkpoint(**fields)


# --- the digest itself -------------------------------------------------------------------------


def test_the_digest_covers_output_type_tag_and_identity() -> None:
    base = cp()
    digests = {digest_of(base)}
    for change in (
        {"output": b'{"approved": false}'},
        {"output_type": "bytes"},
        {"output_type": "null"},
        {"key": "k2"},
        {"run_id": "run-2"},
        {"path": "outer/stop"},
        {"ordinal": 1},
        {"kind": "tool_call"},
    ):
        digests.add(digest_of(replace(base, **change)))
    assert len(digests) == 9
    # Length prefixes: moving a character from one column to the next changes the digest.
    assert checkpoint_digest("ab", "c", "p", "step", 0, "json", b"") != checkpoint_digest(
        "a", "bc", "p", "step", 0, "json", b""
    )
    # What a replay does not depend on (the view, the span ids) is not covered.
    assert digest_of(replace(base, view={"x": 1}, span_id="ef" * 8)) == digest_of(base)


# --- conformance: every store verifies on claim and get ----------------------------------------


def corrupt_memory(store: MemoryStore, key: str, **change: Any) -> None:
    store._checkpoints[key] = replace(store._checkpoints[key], **change)


@pytest.mark.parametrize(
    "column, value",
    [
        ("output", b'{"approved": false}'),
        ("output_type", "bytes"),
        ("output_type", "null"),
        ("path", "outer/stop"),
        ("ordinal", 1),
        ("kind", "tool_call"),
        ("run_id", "run-2"),
    ],
)
def test_a_changed_column_is_executed_again_on_every_store(
    raw: Raw, column: str, value: object
) -> None:
    store = raw.store
    assert store.put(cp()) is True
    raw.write(f"UPDATE spanpoint_checkpoints SET {column} = %s WHERE key = %s", (value, "k1"))
    with pytest.raises(CorruptCheckpointError, match="integrity check"):
        store.get("k1")
    claim = store.claim("k1", "host-a:1:aaa", 30.0)
    assert claim.state == "acquired" and claim.checkpoint is None
    assert claim.error and "integrity check" in claim.error
    assert store.claim("k1", "host-b:2:bbb", 30.0).state == "held"
    assert store.put(cp(), owner="host-a:1:aaa") is True
    assert store.claim("k1", "host-b:2:bbb", 30.0).checkpoint == cp()
    # A fresh-run claim (lease first) sees the corruption just the same.
    raw.write("UPDATE spanpoint_checkpoints SET output = %s WHERE key = %s", (b"{}", "k1"))
    fresh = store.claim("k1", "host-c:3:ccc", 30.0, fresh=True)
    assert fresh.state == "acquired" and fresh.error


def test_a_changed_column_is_executed_again_in_memory() -> None:
    store = MemoryStore()
    store.start_run("run-1", None)
    assert store.put(cp()) is True
    corrupt_memory(store, "k1", output=b'{"approved": false}')
    with pytest.raises(CorruptCheckpointError):
        store.get("k1")
    claim = store.claim("k1", "host-a:1:aaa", 30.0)
    assert claim.state == "acquired" and claim.error
    run = store.get_run("run-1")
    assert run is not None and run.committed == 0
    assert store.put(cp(), owner="host-a:1:aaa") is True
    assert store.claim("k1", "host-b:2:bbb", 30.0).checkpoint == cp()


def test_a_row_committed_before_digests_reads_as_before(raw: Raw) -> None:
    """Schema migration keeps old rows readable: a NULL digest is not checked."""
    store = raw.store
    store.put(cp())
    raw.write("UPDATE spanpoint_checkpoints SET digest = NULL WHERE key = %s", ("k1",))
    assert store.get("k1") == cp()
    assert store.claim("k1", "host-a:1:aaa", 30.0).checkpoint == cp()


def test_a_digest_is_written_with_every_commit(raw: Raw) -> None:
    raw.store.put(cp())
    rows = raw.fetch("SELECT digest FROM spanpoint_checkpoints WHERE key = %s", ("k1",))
    assert rows == [(digest_of(cp()),)]


def test_an_sqlite_store_of_schema_3_migrates_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    store.put(cp())
    store.close()
    # Make it a version-3 store again: no digest column, the rows as an older spanpoint left them.
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE checkpoints DROP COLUMN digest")
        # ... and without what schemas 5 and 6 added (the runs index, the once-tokens table).
        conn.execute("DROP INDEX runs_updated")
        conn.execute("DROP TABLE once_tokens")
        for column in ("fingerprint", "identity", "input_view"):  # schema 7's input identity
            conn.execute(f"ALTER TABLE checkpoints DROP COLUMN {column}")
        conn.execute("ALTER TABLE checkpoints DROP COLUMN lease_epoch")  # schema 8's fencing
        conn.execute("DROP TABLE notes")  # schema 9's notes
        conn.execute("UPDATE spanpoint_meta SET v = '3' WHERE k = 'schema_version'")
    reopened = SqliteStore(path)
    try:
        assert reopened.get("k1") == cp()
        reopened.put(cp("k2"))
        assert reopened.get("k2") == cp("k2")
    finally:
        reopened.close()


# --- end to end: bit flips never replay a different value --------------------------------------


def effect(path: Path) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write("approve\n")
        fcntl.flock(fh, fcntl.LOCK_UN)


def executions(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_bit_flips_in_a_stored_output_never_replay_a_different_value(
    raw: Raw, tmp_path: Path
) -> None:
    """Every byte of the stored output, three bits each (1, 16, 128), on SQLite and PostgreSQL.

    After each flip the run must return the original value, and must have executed the body
    again (the digest caught the flip); the re-execution re-commits an intact row.
    """
    telemetry = make_telemetry(raw.store)
    effects = tmp_path / "effects.txt"

    @spanpoint.step(name="approve")
    def approve(ticket: str) -> dict[str, Any]:
        effect(effects)
        return dict(ORIGINAL)

    run_id = f"fuzz-{uuid.uuid4().hex[:8]}"
    with spanpoint.run(run_id):
        assert approve("T-1") == ORIGINAL
    [(key, output)] = raw.fetch(
        "SELECT key, output FROM spanpoint_checkpoints WHERE run_id = %s AND output IS NOT NULL",
        (run_id,),
    )
    output = bytes(output)
    with spanpoint.run(run_id):
        assert approve("T-1") == ORIGINAL
    assert executions(effects) == 1  # an intact row replays

    flips = 0
    for index in range(len(output)):
        for bit in (0x01, 0x10, 0x80):
            flipped = bytearray(output)
            flipped[index] ^= bit
            raw.write(
                "UPDATE spanpoint_checkpoints SET output = %s WHERE key = %s", (bytes(flipped), key)
            )
            before = executions(effects)
            with spanpoint.run(run_id):
                assert approve("T-1") == ORIGINAL, (index, bit)
            assert executions(effects) == before + 1, f"byte {index} bit {bit:#x} replayed"
            flips += 1
    assert flips == 3 * len(output)
    [(restored,)] = raw.fetch("SELECT output FROM spanpoint_checkpoints WHERE key = %s", (key,))
    assert bytes(restored) == output  # the re-executions re-committed the original

    executed = [
        s
        for s in telemetry.spans("step approve")
        if s.attributes and semconv.CHECKPOINT_INTEGRITY_ERROR in s.attributes
    ]
    assert len(executed) == flips
    assert all(s.attributes[semconv.REPLAYED] is False for s in executed)  # type: ignore[index]
    telemetry.provider.shutdown()


@pytest.mark.parametrize("tag", ["null", "bytes", "json", "msgpack", ""])
def test_a_changed_type_tag_never_replays_silently(raw: Raw, tmp_path: Path, tag: str) -> None:
    make_telemetry(raw.store)
    effects = tmp_path / "effects.txt"

    @spanpoint.step(name="approve")
    def approve(ticket: str) -> dict[str, Any]:
        effect(effects)
        return dict(ORIGINAL)

    run_id = f"tag-{uuid.uuid4().hex[:8]}"
    with spanpoint.run(run_id):
        approve("T-1")
    [(key, original_tag)] = raw.fetch(
        "SELECT key, output_type FROM spanpoint_checkpoints WHERE run_id = %s", (run_id,)
    )
    if tag == original_tag:
        tag = tag + "x"
    raw.write("UPDATE spanpoint_checkpoints SET output_type = %s WHERE key = %s", (tag, key))
    with spanpoint.run(run_id) as run:
        assert approve("T-1") == ORIGINAL
    assert executions(effects) == 2
    assert any("corrupted" in w for w in run.warnings), run.warnings


def test_bit_flips_in_the_key_execute_again(raw: Raw, tmp_path: Path) -> None:
    """A flipped key names no boundary: the original key is missing, so the body executes."""
    make_telemetry(raw.store)
    effects = tmp_path / "effects.txt"

    @spanpoint.step(name="approve")
    def approve(ticket: str) -> dict[str, Any]:
        effect(effects)
        return dict(ORIGINAL)

    run_id = f"key-{uuid.uuid4().hex[:8]}"
    with spanpoint.run(run_id):
        approve("T-1")
    for index in (0, 5, 31, 63):
        [(key,)] = raw.fetch(
            "SELECT key FROM spanpoint_checkpoints WHERE run_id = %s AND output IS NOT NULL "
            "ORDER BY key LIMIT 1",
            (run_id,),
        )
        chars = list(key)
        chars[index] = chr(ord(chars[index]) ^ 0x01)
        raw.write("UPDATE spanpoint_checkpoints SET key = %s WHERE key = %s", ("".join(chars), key))
        before = executions(effects)
        with spanpoint.run(run_id):
            assert approve("T-1") == ORIGINAL
        assert executions(effects) == before + 1
        raw.write("DELETE FROM spanpoint_checkpoints WHERE key = %s", ("".join(chars),))


def test_json_view_is_untouched_by_the_digest(raw: Raw) -> None:
    """The view is for humans: a digest mismatch is never reported for it."""
    raw.store.put(cp(view={"a": 1}))
    raw.write(
        "UPDATE spanpoint_checkpoints SET view = %s WHERE key = %s", (json.dumps({"a": 2}), "k1")
    )
    got = raw.store.get("k1")
    assert got is not None and got.view == {"a": 2}


@pytest.mark.postgres
def test_a_postgres_store_of_schema_1_migrates_and_keeps_its_rows(pg_dsn: str) -> None:
    import psycopg

    store = open_store(pg_dsn)
    store.put(cp())
    store.close()
    # Make it a version-1 store again: no digest column, the rows as an older spanpoint left them.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE spanpoint_checkpoints DROP COLUMN digest")
        conn.execute("DROP TABLE spanpoint_once")  # schema 3's once-tokens
        conn.execute("DROP TABLE spanpoint_notes")  # schema 6's notes
        conn.execute(  # schema 4's input identity
            "ALTER TABLE spanpoint_checkpoints DROP COLUMN fingerprint, DROP COLUMN identity, "
            "DROP COLUMN input_view, DROP COLUMN lease_epoch"
        )
        conn.execute("DELETE FROM spanpoint_migrations WHERE version > 1")
    reopened = open_store(pg_dsn)
    try:
        assert reopened.get("k1") == cp()
        assert reopened.claim("k1", "host-a:1:aaa", 30.0).checkpoint == cp()
        reopened.put(cp("k2"))
        assert reopened.get("k2") == cp("k2")
    finally:
        reopened.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT key, digest FROM spanpoint_checkpoints ORDER BY key").fetchall()
    assert rows == [("k1", None), ("k2", digest_of(cp("k2")))]


@pytest.mark.postgres
def test_a_postgres_store_of_schema_5_migrates_to_notes_and_keeps_its_rows(pg_dsn: str) -> None:
    import psycopg

    store = open_store(pg_dsn)
    store.put(cp())
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as spanpoint with schema 5 left it
        conn.execute("DROP TABLE spanpoint_notes")
        conn.execute("DELETE FROM spanpoint_migrations WHERE version > 5")
    reopened = open_store(pg_dsn)
    try:
        assert reopened.get("k1") == cp()
        assert reopened.get_note("n") is None
        reopened.put_note("n", "v")
        assert reopened.get_note("n") == "v"
    finally:
        reopened.close()


def test_a_committed_output_set_to_null_executes_again(raw: Raw) -> None:
    """A row whose output is gone (NULL, no lease) is free: claimed, executed, re-committed.
    It used to raise a TypeError out of the SQLite store's claim."""
    store = raw.store
    store.put(cp())
    raw.write("UPDATE spanpoint_checkpoints SET output = NULL WHERE key = %s", ("k1",))
    assert store.get("k1") is None
    for fresh in (False, True):
        claim = store.claim("k1", f"host-a:1:aa{fresh:d}", 30.0, fresh=fresh)
        assert claim.state == "acquired", claim
        store.release("k1", f"host-a:1:aa{fresh:d}")
        store.put(cp())
        raw.write("UPDATE spanpoint_checkpoints SET output = NULL WHERE key = %s", ("k1",))
    assert store.put(cp()) is True
    assert store.get("k1") == cp()


@pytest.mark.parametrize(
    "column", ["run_id", "path", "kind", "ordinal", "output_type", "output", "digest", "view"]
)
@pytest.mark.parametrize("value", [None, 7, "text", b"\x00\xff"])
def test_a_column_of_any_type_never_replays_a_wrong_value(
    raw: Raw, column: str, value: object
) -> None:
    """Whatever lands in a column, a claim answers: the intact checkpoint, or a lease."""
    store = raw.store
    store.put(cp())
    try:
        raw.write(f"UPDATE spanpoint_checkpoints SET {column} = %s WHERE key = %s", (value, "k1"))
    except Exception as exc:  # PostgreSQL's column types refuse some values outright
        pytest.skip(f"{raw.kind} refuses {value!r} in {column}: {type(exc).__name__}")
    claim = store.claim("k1", "host-a:1:aaa", 30.0)
    if claim.state == "committed":
        got = claim.checkpoint
        assert got is not None
        assert (got.output, got.output_type, got.path, got.ordinal) == (
            cp().output,
            cp().output_type,
            cp().path,
            cp().ordinal,
        )
    else:
        assert claim.state == "acquired"
