"""What a store can do beyond the protocol is declared on it (``capabilities``), not probed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanpoint.stores import MemoryStore, SqliteStore
from spanpoint.stores.base import PROTOCOL_ONLY, StoreCapabilities, capabilities


class Delegating:
    """A user's store written to the protocol: it forwards everything to another store, and
    declares nothing of its own."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.description = "delegating"

    def start_run(self, run_id: str, name: str | None) -> int:
        return int(self._inner.start_run(run_id, name))


def test_the_built_in_stores_declare_what_they_can_do(tmp_path: Path) -> None:
    sqlite = SqliteStore(tmp_path / "s.db")
    try:
        assert capabilities(sqlite) == StoreCapabilities(start_run_probing=True, create_run=True)
    finally:
        sqlite.close()
    assert capabilities(MemoryStore()) == StoreCapabilities(create_run=True)


def test_a_store_that_declares_nothing_gets_the_protocol_only(tmp_path: Path) -> None:
    # It has no create_run and no start_run_probing: nothing is probed for, nothing called.
    assert capabilities(Delegating(MemoryStore())) is PROTOCOL_ONLY
    assert StoreCapabilities() == PROTOCOL_ONLY
    odd = Delegating(MemoryStore())
    odd.capabilities = {"create_run": True}  # type: ignore[attr-defined]  # not a declaration
    assert capabilities(odd) is PROTOCOL_ONLY
