"""Async boundaries never block the event loop on the store: claim, commit, release, replay
and the lease wait run off the loop, on every store, under a blocking-call detector.

``blockbuster`` (the detector LangChain's own test suite runs under) raises ``BlockingError``
when a blocking call (a SQLite statement, a socket, a file read, a sleep) runs on the thread
of a running event loop from spanpoint's code. psycopg's statements go through libpq, which
blockbuster does not see, so the test adds psycopg's own ``execute`` and the pool's
``getconn`` to what it watches.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from blockbuster import BlockBuster, BlockBusterFunction

import spanpoint
from tests.conftest import Telemetry


@contextmanager
def no_blocking_calls_from_spanpoint() -> Iterator[None]:
    """BlockingError for any blocking call spanpoint makes on an event loop's thread."""
    detector = BlockBuster(scanned_modules=["spanpoint"])
    try:
        import psycopg
        import psycopg_pool

        for owner, name in (
            (psycopg.Connection, "execute"),
            (psycopg.Cursor, "execute"),
            (psycopg_pool.ConnectionPool, "getconn"),
        ):
            watched = BlockBusterFunction(owner, name, scanned_modules=["spanpoint"])
            detector.functions[f"{owner.__module__}.{owner.__name__}.{name}"] = watched
    except ImportError:
        pass
    detector.activate()
    try:
        yield
    finally:
        detector.deactivate()


class Effects:
    def __init__(self, path: Path) -> None:
        self.path = path

    def hit(self, what: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(what + "\n")
            fcntl.flock(fh, fcntl.LOCK_UN)

    def count(self, what: str) -> int:
        if not self.path.exists():
            return 0
        return self.path.read_text().splitlines().count(what)


def test_claim_commit_release_and_replay_run_off_the_event_loop(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    effects = Effects(tmp_path / "effects")
    done: list[str] = []

    @spanpoint.step(name="lookup")
    async def lookup(ticket: int) -> str:
        await asyncio.to_thread(effects.hit, f"lookup {ticket}")
        return f"ticket {ticket}"

    @spanpoint.step(name="flaky")
    async def flaky(ticket: int) -> str:
        await asyncio.to_thread(effects.hit, f"flaky {ticket}")
        if not done:
            raise RuntimeError("the service is down")
        return "fixed"

    async def agent() -> list[str]:
        out = [await lookup(1), await lookup(2)]  # claim + commit
        try:
            out.append(await flaky(3))  # claim + release (it raises)
        except RuntimeError:
            out.append("failed")
        # Two tasks at once: both claim, execute and commit while the other's store call runs.
        out += await asyncio.gather(lookup(4), lookup(5))
        return out

    for attempt in (1, 2):  # the second attempt replays what the first committed
        with spanpoint.run("async-tickets"), no_blocking_calls_from_spanpoint():
            result = asyncio.run(agent())
        done.append("attempt")
        assert result[:2] == ["ticket 1", "ticket 2"]
        assert result[3:] == ["ticket 4", "ticket 5"]
        assert result[2] == ("failed" if attempt == 1 else "fixed")
    assert [effects.count(f"lookup {i}") for i in (1, 2, 4, 5)] == [1, 1, 1, 1]
    assert effects.count("flaky 3") == 2  # it failed, committed nothing, and ran again
    replayed = [s for s in telemetry.spans() if s.attributes.get("spanpoint.replayed") is True]
    assert len(replayed) == 4  # the lookups of attempt 2
