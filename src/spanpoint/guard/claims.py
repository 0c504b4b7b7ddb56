"""Exactly one resume per stop across processes, through a spanpoint checkpoint store.

LangGraph checkpointers have no compare-and-set, so two processes resuming the same stopped
thread could both write a continuation. With a shared :class:`~spanpoint.CheckpointStore`
(SQLite file or PostgreSQL), a resume first takes the store's single-flight lease on a key
derived from (thread, stop checkpoint): the store answers *acquired* to exactly one caller.
The winner commits the key once its continuation is written, so a later resume of the same
stop is refused too; a crash before that commit only leaves a lease that expires.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from spanpoint.errors import GuardConcurrentResumeError
from spanpoint.stores.base import Checkpoint, CheckpointStore, new_owner_id

CLAIM_KIND = "guard_resume"


class ResumeClaims:
    """Single-flight leases for resumes, held in ``store`` for at most ``ttl_s`` seconds."""

    __slots__ = ("store", "ttl_s")

    def __init__(self, store: CheckpointStore, ttl_s: float = 60.0) -> None:
        self.store = store
        self.ttl_s = ttl_s

    @contextmanager
    def hold(self, thread: str, stop_checkpoint: str | None) -> Iterator[Callable[[], None]]:
        """Hold the resume lease for this stop; call the yielded function to commit it."""
        key = hashlib.sha256(
            f"spanpoint.guard.resume\x00{thread}\x00{stop_checkpoint}".encode()
        ).hexdigest()
        owner = new_owner_id()
        claim = self.store.claim(key, owner, self.ttl_s)
        if claim.state == "committed":
            raise GuardConcurrentResumeError(
                f"the stop of thread {thread!r} at checkpoint {stop_checkpoint} was already resumed"
            )
        if claim.state == "held":
            raise GuardConcurrentResumeError(
                f"thread {thread!r} is being resumed by {claim.owner}; exactly one resume wins"
            )
        committed = False

        def commit() -> None:
            nonlocal committed
            now = time.time_ns()
            self.store.put(
                Checkpoint(
                    key=key,
                    run_id=f"guard:{thread}",
                    path="spanpoint.guard.resume",
                    name="resume",
                    kind=CLAIM_KIND,
                    ordinal=0,
                    output_type="json",
                    output=json.dumps({"thread": thread, "stop": stop_checkpoint}).encode(),
                    trace_id="",
                    span_id="",
                    started_at_ns=now,
                    ended_at_ns=now,
                    view={"thread": thread, "owner": owner},
                ),
                owner=owner,
            )
            committed = True

        try:
            yield commit
        finally:
            if not committed:
                self.store.release(key, owner)


@contextmanager
def no_claim(thread: str, stop_checkpoint: str | None) -> Iterator[Callable[[], None]]:
    """The in-process-only stand-in for :meth:`ResumeClaims.hold`."""
    yield lambda: None
