"""Store errors that say what happened: each fault of a SQLite store has its own message and fix.

Real files throughout. A full disk is a real 256 KiB tmpfs where this process may mount one (it
runs as root here), and SQLite's own ``max_page_count`` limit everywhere else; a read-only store
is a tmpfs remounted read-only, and ``PRAGMA query_only`` on an open store; a lock is another
connection holding the write lock; a deleted or replaced file is deleted or replaced mid-run.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import spanpoint
from spanpoint.errors import StoreError, StoreUnavailableError
from spanpoint.stores import SqliteStore
from spanpoint.stores.base import BoundaryRecord, Checkpoint
from tests.conftest import make_telemetry

MESSAGES = {
    "full": "is full",
    "read-only": "is read-only",
    "locked": "is locked by another connection",
    "corrupted": "is corrupted or is not a SQLite database",
}


def cp(key: str, output: bytes = b'"out"') -> Checkpoint:
    return Checkpoint(
        key=key,
        run_id="run-1",
        path="step",
        name="step",
        kind="step",
        ordinal=0,
        output_type="json",
        output=output,
        trace_id="ab" * 16,
        span_id="cd" * 8,
    )


def entry(i: int, error_size: int) -> BoundaryRecord:
    """A journal entry with a long error text, to fill pages."""
    return BoundaryRecord(
        "run-1", 1, f"k{i}", "p", "n", "step", "ok", "ef" * 8, None, 1, 2, "x" * error_size
    )


def assert_only(message: str, kind: str) -> None:
    """``message`` names ``kind`` and none of the other three, nor a masking rollback error."""
    assert MESSAGES[kind] in message, message
    for other, text in MESSAGES.items():
        if other != kind:
            assert text not in message, (other, message)
    assert "cannot rollback" not in message
    if kind != "corrupted":
        assert "start empty" not in message  # never "remove it" for a store that is fine


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs folder, or a skip where this process cannot mount one."""
    where = tmp_path / "tiny"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a tmpfs mount needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


# --- a full disk -------------------------------------------------------------------------------


def test_a_full_disk_says_so_not_cannot_rollback(tmpfs: Path) -> None:
    store = SqliteStore(tmpfs / "store.db")
    errors: list[str] = []
    try:
        for i in range(200):  # 256 KiB hold fewer than 200 rows of 4 KiB
            store.put(cp(f"k{i}", os.urandom(4096)))
    except StoreError as exc:
        errors.append(str(exc))
    journal = [entry(i, 2000) for i in range(50)]
    try:  # a transaction: SQLite rolls it back itself, and our ROLLBACK must not mask that
        store.finish_run("run-1", "completed", journal)
    except StoreError as exc:
        errors.append(str(exc))
    store.close()
    assert len(errors) == 2
    for message in errors:
        assert_only(message, "full")
        assert "free disk space" in message


def test_a_store_at_its_size_limit_says_the_disk_is_full(tmp_path: Path) -> None:
    """The same through SQLite's page limit (no mount needed): SQLITE_FULL in a transaction."""
    store = SqliteStore(tmp_path / "store.db")
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    journal = [entry(i, 4000) for i in range(20)]
    with pytest.raises(StoreError) as info:
        store.finish_run("run-1", "completed", journal)
    assert_only(str(info.value), "full")
    with pytest.raises(StoreError) as info:
        store.put(cp("k", os.urandom(50_000)))
    assert_only(str(info.value), "full")
    assert store.get("k") is None  # nothing half-written
    store.close()


def test_dev_null_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="not a regular file") as info:
        SqliteStore("/dev/null")
    assert "cannot rollback" not in str(info.value)
    assert "start empty" not in str(info.value)


# --- read-only ---------------------------------------------------------------------------------


def test_a_read_only_file_system_says_read_only(tmpfs: Path) -> None:
    store = SqliteStore(tmpfs / "store.db")
    store.start_run("run-1", None)
    store.close()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    with pytest.raises(StoreUnavailableError) as info:
        SqliteStore(tmpfs / "store.db")
    assert_only(str(info.value), "read-only")
    assert "writable" in str(info.value)


def test_an_open_store_that_turns_read_only_says_read_only(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    store._conn.execute("PRAGMA query_only = ON")  # every write now fails with SQLITE_READONLY
    with pytest.raises(StoreError) as info:
        store.put(cp("k"))
    assert_only(str(info.value), "read-only")
    with pytest.raises(StoreError) as info:
        store.start_run("run-1", None)
    assert_only(str(info.value), "read-only")
    store.close()


# --- locked ------------------------------------------------------------------------------------


def test_a_lock_held_elsewhere_says_locked_and_never_remove_it(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SqliteStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailableError) as info:
            SqliteStore(path, busy_timeout_s=0.05)
        assert_only(str(info.value), "locked")
        assert "busy_timeout_s" in str(info.value)
        holder.execute("COMMIT")
        store = SqliteStore(path, busy_timeout_s=0.05)
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError) as info:
            store.start_run("run-1", None)
        assert_only(str(info.value), "locked")
        store.close()
    finally:
        holder.close()


# --- corrupted ---------------------------------------------------------------------------------


def test_a_corrupted_file_says_corrupted(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a SQLite database" * 200)
    with pytest.raises(StoreUnavailableError) as info:
        SqliteStore(garbage)
    assert_only(str(info.value), "corrupted")
    assert "backup" in str(info.value)

    path = tmp_path / "store.db"
    store = SqliteStore(path)
    for i in range(200):
        store.put(cp(f"k{i}", os.urandom(2000)))
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(2 * page, len(data), page):  # every page but the first two: garbage
        data[offset : offset + 100] = b"\xff" * 100
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info:
        reopened = SqliteStore(path)
        try:
            reopened.list_checkpoints("run-1")
        finally:
            reopened.close()
    assert_only(str(info.value), "corrupted")


# --- deleted or replaced mid-run ---------------------------------------------------------------


def effect(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line + "\n")
        fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_file_deleted_or_replaced_mid_run_is_reported(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    telemetry = make_telemetry(store)
    effects = tmp_path / "effects.txt"

    @spanpoint.step(name="work")
    def work(i: int) -> int:
        effect(effects, str(i))
        if i == 0:
            path.unlink()
            if how == "replaced":
                SqliteStore(path).close()  # a new, empty store at the same path
        return i

    run_id = f"gone-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING, logger="spanpoint"), spanpoint.run(run_id) as run:
        assert [work(i) for i in range(3)] == [0, 1, 2]
    reported = [w for w in run.warnings if f"was {how}" in w]
    # The commits of steps 0, 1 and 2, each reported: never lost in silence.
    assert len(reported) >= 3, run.warnings
    assert any("executed but was not committed" in w for w in reported)
    assert f"was {how}" in caplog.text

    with pytest.raises(StoreError, match=f"was {how}"), spanpoint.run(run_id, strict=True):
        work(5)  # a new run on the lost file does not start
    telemetry.provider.shutdown()
    store.close()


def test_strict_mode_raises_at_the_first_commit_after_the_file_is_deleted(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    telemetry = make_telemetry(store)
    effects = tmp_path / "effects.txt"

    @spanpoint.step(name="work")
    def work(i: int) -> int:
        effect(effects, str(i))
        return i

    with pytest.raises(StoreError, match="was deleted"), spanpoint.run("strict-gone", strict=True):
        work(0)
        path.unlink()
        work(1)
    assert (tmp_path / "effects.txt").read_text().split() == ["0", "1"]
    telemetry.provider.shutdown()
    store.close()


# --- permissions -------------------------------------------------------------------------------


def test_a_new_store_is_private(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "new" / "store.db")
    store.put(cp("k"))
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    store.close()


def test_a_world_readable_store_is_made_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    store.put(cp("k"))
    store.close()
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            os.chmod(p, 0o644)
    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        reopened = SqliteStore(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for p in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    assert "now private" in caplog.text
    assert reopened.get("k") == cp("k")
    reopened.close()
