"""Invariant 5 and bad input: store failures are never silent and never a wrong replay."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

import spanpoint
import spanpoint.errors
from spanpoint import semconv
from spanpoint.errors import StoreError
from spanpoint.stores import MemoryStore, SqliteStore
from tests.conftest import Telemetry, make_telemetry


class FlakyStore(MemoryStore):
    """A real MemoryStore whose reads or writes can be switched to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_reads = False
        self.fail_writes = False

    def claim(self, key, owner, ttl_s, *, fresh=False):  # type: ignore[no-untyped-def]
        if self.fail_reads:
            raise StoreError("memory: claim failed: connection reset")
        return super().claim(key, owner, ttl_s, fresh=fresh)

    def put(self, checkpoint, *, owner=None, epoch=None):  # type: ignore[no-untyped-def]
        if self.fail_writes:
            raise StoreError("memory: put failed: disk full")
        return super().put(checkpoint, owner=owner, epoch=epoch)


def counting_step(counter: list[int]):  # type: ignore[no-untyped-def]
    @spanpoint.step(name="work")
    def work(x: int) -> int:
        counter.append(x)
        return x + 1

    return work


def test_a_failed_commit_is_reported_and_executes_again(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore()
    telemetry = make_telemetry(store)
    executed: list[int] = []
    work = counting_step(executed)
    store.fail_writes = True
    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        with spanpoint.run("w") as run:
            assert work(1) == 2  # the result is unaffected
    assert run.status == "completed"
    assert any("not committed" in w for w in run.warnings)
    assert "disk full" in caplog.text
    run_span = telemetry.runs()[0]
    assert run_span.attributes[semconv.RUN_COMMIT_FAILURES] == 1
    assert [e.name for e in run_span.events] == [semconv.EVENT_CHECKPOINT_COMMIT_FAILED]

    store.fail_writes = False
    with spanpoint.run("w"):
        work(1)
    assert executed == [1, 1]


def test_a_failed_read_means_execute(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore()
    make_telemetry(store)
    executed: list[int] = []
    work = counting_step(executed)
    with spanpoint.run("r"):
        work(1)
    store.fail_reads = True
    with caplog.at_level(logging.WARNING, logger="spanpoint"), spanpoint.run("r") as run:
        assert work(1) == 2
    assert executed == [1, 1]
    assert any("lookup" in w and "connection reset" in w for w in run.warnings)


def test_strict_mode_raises_on_a_failed_commit() -> None:
    store = FlakyStore()
    make_telemetry(store)
    work = counting_step([])
    store.fail_writes = True
    with pytest.raises(StoreError, match="disk full"), spanpoint.run("s", strict=True):
        work(1)


def test_a_corrupted_row_executes_instead_of_replaying(
    configured_sqlite: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    store = configured_sqlite.store
    assert isinstance(store, SqliteStore)
    executed: list[int] = []
    work = counting_step(executed)
    with spanpoint.run("c"):
        work(1)
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE checkpoints SET output = x'c1ffee', output_type = 'msgpack'")
    with caplog.at_level(logging.WARNING, logger="spanpoint"), spanpoint.run("c") as run:
        assert work(1) == 2
    assert executed == [1, 1]
    assert any("corrupted" in w for w in run.warnings)

    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE checkpoints SET output = 'text, not a blob'")
    with spanpoint.run("c") as run:
        assert work(1) == 2
    assert executed == [1, 1, 1]


def test_an_unreadable_store_file_is_a_clear_error(tmp_path: Path) -> None:
    garbage = tmp_path / "not-a-db.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(spanpoint.errors.StoreUnavailableError, match=r"not-a-db\.db") as info:
        SqliteStore(garbage)
    assert "SPANPOINT_STORE" in str(info.value)
    directory = tmp_path / "a-directory.db"
    directory.mkdir()
    with pytest.raises(spanpoint.errors.StoreUnavailableError, match=r"a-directory\.db"):
        spanpoint.open_store(directory)


def test_unknown_store_address_is_a_clear_error() -> None:
    with pytest.raises(spanpoint.ConfigurationError, match="unknown store address scheme"):
        spanpoint.open_store("redis://localhost")
    with pytest.raises(spanpoint.ConfigurationError, match="empty store address"):
        spanpoint.open_store("  ")


def test_sqlite_file_is_private(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "private" / "c.db")
    store.close()
    assert (tmp_path / "private" / "c.db").stat().st_mode & 0o777 == 0o600
