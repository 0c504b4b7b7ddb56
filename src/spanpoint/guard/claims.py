"""Exactly one resume per stop across processes, through a once-token of a checkpoint store.

LangGraph checkpointers have no compare-and-set, so two processes resuming the same stopped
thread could both write a continuation. With a shared store (SQLite file or PostgreSQL), a
resume first takes the once-token of (thread, stop checkpoint): the store answers *taken* to
exactly one caller. The winner spends the token once its continuation is written, so a later
resume of the same stop is refused too; a crash before that only leaves a lease that expires.

A once-token is its own kind of row (``spanpoint.stores.once``), not a checkpoint: no run owns
it and ``spanpoint gc`` sweeps it. Guard *state* stays in graph state; the guard takes nothing
else from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from spanpoint.errors import GuardConcurrentResumeError
from spanpoint.stores.once import OnceStore, new_owner_id, once_key

#: The once-token kind of a guard resume.
CLAIM_KIND = "guard_resume"


class ResumeClaims:
    """One resume per stop: once-tokens in ``store``, each leased for at most ``ttl_s``."""

    __slots__ = ("store", "ttl_s")

    def __init__(self, store: OnceStore, ttl_s: float = 60.0) -> None:
        self.store = store
        self.ttl_s = ttl_s

    @contextmanager
    def hold(self, thread: str, stop_checkpoint: str | None) -> Iterator[Callable[[], None]]:
        """Hold the resume token of this stop; call the yielded function to spend it."""
        key = once_key("spanpoint.guard.resume", thread, stop_checkpoint)
        owner = new_owner_id()
        token = self.store.take_once(CLAIM_KIND, key, owner, self.ttl_s)
        if token.state == "spent":
            raise GuardConcurrentResumeError(
                f"the stop of thread {thread!r} at checkpoint {stop_checkpoint} was already resumed"
            )
        if token.state == "held":
            raise GuardConcurrentResumeError(
                f"thread {thread!r} is being resumed by {token.owner}; exactly one resume wins"
            )
        spent = False

        def spend() -> None:
            nonlocal spent
            if not self.store.spend_once(CLAIM_KIND, key, owner):
                raise GuardConcurrentResumeError(
                    f"the resume token of thread {thread!r} expired after {self.ttl_s:g}s and "
                    "another resume took it; raise the claims' ttl_s above a resume's duration"
                )
            spent = True

        try:
            yield spend
        finally:
            if not spent:
                self.store.release_once(CLAIM_KIND, key, owner)


@contextmanager
def no_claim(thread: str, stop_checkpoint: str | None) -> Iterator[Callable[[], None]]:
    """The in-process-only stand-in for :meth:`ResumeClaims.hold`."""
    yield lambda: None
