"""Once-tokens: "this happens at most once", across processes, held in a checkpoint store.

A once-token is its own kind of row, beside checkpoints, runs, journals and waits: a
``(kind, key)`` pair that one owner takes (a lease with a time to live), then either spends
(for good: every later take answers ``spent``) or releases (the next caller may take it). It
is no checkpoint — no run owns it, it has no span and no output — so it never shows in a run's
checkpoints and never replays. ``spanpoint gc --older-than AGE`` sweeps tokens spent (or
leases expired) longer than ``AGE`` ago, as it sweeps runs.

The guard's resume claims are once-tokens (``guard/claims.py``): exactly one resume of a
stopped thread wins. The guard imports this module and nothing else of ``spanpoint.stores``:
it knows the stores only as :class:`OnceStore`.
"""

from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

from spanpoint.stores.base import OnceState, OnceToken, new_owner_id

__all__ = ["OnceState", "OnceStore", "OnceToken", "new_owner_id", "once_key"]


@runtime_checkable
class OnceStore(Protocol):
    """The part of a checkpoint store that keeps once-tokens (every spanpoint store has it)."""

    #: A short human name for errors (``sqlite:/path``, ``memory``).
    description: str

    def take_once(self, kind: str, key: str, owner: str, ttl_s: float) -> OnceToken:
        """Take the token ``(kind, key)`` for ``owner`` for ``ttl_s`` seconds, if nobody else
        holds it and it was never spent; a held token whose lease expired (or whose owner
        died on this host) is taken over. One atomic step."""
        ...

    def spend_once(self, kind: str, key: str, owner: str) -> bool:
        """Spend ``owner``'s token for good; False when ``owner`` does not hold it (its lease
        expired and another owner took it, or it was spent already)."""
        ...

    def release_once(self, kind: str, key: str, owner: str) -> None:
        """Give back ``owner``'s unspent token (no-op when it holds none)."""
        ...


def once_key(*parts: str | None) -> str:
    """A fixed-length key for a token from its parts (a thread id, a checkpoint id, ...)."""
    return hashlib.sha256("\x00".join("" if p is None else p for p in parts).encode()).hexdigest()
