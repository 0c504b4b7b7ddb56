"""A boundary whose lease was taken over while its body ran never hands back a value the store
does not hold: every store, sync and async bodies, the takeover committed or still running.

Inside the body the test does what another worker would: the lease expires (the store's clock
moves, or PostgreSQL's row is aged), another owner claims the boundary, and it commits its own
output, or does not yet. The body then returns its own output, which the store refuses.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from opentelemetry import trace

import spanpoint
from spanpoint import semconv, serde
from spanpoint.errors import LeaseLostError
from spanpoint.stores.base import Checkpoint
from tests.conftest import Telemetry

OTHER = "twin-host#1#0:1:other-worker"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def expire_lease(store: Any, key: str) -> None:
    """Make the lease on ``key`` expired, as a worker paused past its TTL finds it."""
    if isinstance(store.__dict__.get("clock"), Clock):
        store.clock.now += 10 * spanpoint.settings().lease_ttl_s
        return
    import psycopg

    with psycopg.connect(store._pool.conninfo, autocommit=True) as conn:
        conn.execute(
            "UPDATE spanpoint_checkpoints SET lease_expires_at = now() - interval '1 second' "
            "WHERE key = %s",
            (key,),
        )


def take_over(store: Any, commit: bool) -> str:
    """What another worker does while this body runs: take the lease, maybe commit. Returns
    the key."""
    key = str(trace.get_current_span().attributes[semconv.CHECKPOINT_KEY])  # type: ignore[attr-defined]
    expire_lease(store, key)
    claim = store.claim(key, OTHER, 300.0)
    assert claim.state == "acquired", claim
    if commit:
        output_type, output = serde.dumps("theirs")
        theirs = Checkpoint(
            key=key, run_id="fenced", path="work", name="work", kind="step", ordinal=0,
            output_type=output_type, output=output, trace_id="ab" * 16, span_id="cd" * 8,
        )  # fmt: skip
        assert store.put(theirs, owner=OTHER, epoch=claim.epoch)
    return key


CASES = list(itertools.product(["sync", "async"], ["committed", "held"]))


@pytest.mark.parametrize(("body", "other"), CASES)
def test_a_commit_refused_for_a_lost_lease_returns_only_what_the_store_holds(
    telemetry: Telemetry, body: str, other: str
) -> None:
    store: Any = telemetry.store
    if not hasattr(store, "_pool"):
        store.clock = Clock()
    keys: list[str] = []

    @spanpoint.step(name="work")
    def work_sync(x: int) -> str:
        keys.append(take_over(store, other == "committed"))
        return "mine"

    @spanpoint.step(name="work")
    async def work_async(x: int) -> str:
        keys.append(take_over(store, other == "committed"))
        return "mine"

    def call() -> str:
        return work_sync(1) if body == "sync" else asyncio.run(work_async(1))

    with spanpoint.run("fenced") as run:
        if other == "committed":
            assert call() == "theirs"
        else:
            with pytest.raises(LeaseLostError, match=r"'work' of run 'fenced' lost its lease"):
                call()
    got = store.get(keys[0])
    assert (serde.loads(got.output_type, got.output) if got else None) == (
        "theirs" if other == "committed" else None
    )
    (run_span,) = telemetry.runs()
    (event,) = [e for e in run_span.events if e.name == semconv.EVENT_LEASE_LOST]
    assert event.attributes is not None
    assert event.attributes[semconv.LEASE_OUTCOME] == (
        "returned_committed" if other == "committed" else "failed"
    )
    assert event.attributes[semconv.CHECKPOINT_KEY] == keys[0]
    if other == "committed":
        assert any("lost its lease" in w for w in run.warnings)


def test_under_async_durability_a_refused_queued_commit_is_reported_when_the_run_ends(
    telemetry: Telemetry,
) -> None:
    """The boundary returned before its write: the run says the store holds another output."""
    store: Any = telemetry.store
    if not hasattr(store, "_pool"):
        store.clock = Clock()
    keys: list[str] = []

    @spanpoint.step(name="work")
    def work(x: int) -> str:
        keys.append(take_over(store, commit=True))
        return "mine"

    with spanpoint.run("fenced", durability="async") as run:
        assert work(1) == "mine"
    got = store.get(keys[0])
    assert got is not None and serde.loads(got.output_type, got.output) == "theirs"
    assert any("LeaseLost" in w or "lost its lease" in w for w in run.warnings), run.warnings
    (run_span,) = telemetry.runs()
    assert run_span.attributes is not None
    assert run_span.attributes[semconv.RUN_COMMIT_FAILURES] == 1
