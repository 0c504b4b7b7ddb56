"""A store's leases expire by the clock it is given (``clock=``): a test moves it, never sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanpoint.stores import MemoryStore, SqliteStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_lease_expires_when_the_given_clock_passes_it(kind: str, tmp_path: Path) -> None:
    clock = Clock()
    store = (
        MemoryStore(clock=clock)
        if kind == "memory"
        else SqliteStore(tmp_path / "s.db", clock=clock)
    )
    try:
        assert store.claim("k1", "host-a:1:aaa", 30.0).state == "acquired"
        clock.now += 29.0
        assert store.claim("k1", "host-b:2:bbb", 30.0).state == "held"
        clock.now += 2.0  # past the lease: taken over, no time slept
        taken = store.claim("k1", "host-b:2:bbb", 30.0)
        assert taken.state == "acquired" and taken.owner == "host-b:2:bbb"
    finally:
        store.close()
