"""The ``telemetry`` fixture of the store tests: spans and metrics in memory over every store
(memory, SQLite on disk, PostgreSQL when the service runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spanpoint.stores import MemoryStore, SqliteStore, open_store
from spanpoint.stores.base import CheckpointStore
from tests.conftest import Telemetry, make_telemetry


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def telemetry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Telemetry]:
    store: CheckpointStore
    if request.param == "memory":
        store = MemoryStore()
    elif request.param == "sqlite":
        store = SqliteStore(tmp_path / "store.db")
    else:
        store = open_store(request.getfixturevalue("pg_dsn"))
    t = make_telemetry(store)
    yield t
    t.provider.shutdown()
    store.close()
