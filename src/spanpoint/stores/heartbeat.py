"""Lease renewal: a live worker keeps the leases of the boundaries it is executing.

A lease only expires (no store can tell from afar that a worker died), so a body that runs
longer than the TTL would be taken over while it still runs. Every store therefore renews the
leases it holds with a :class:`LeaseHeartbeat`: one daemon thread per store that renews every
held lease **every third of the shortest held TTL** (100 s at the default ``lease_ttl_s`` of
300 s), so two renewals in a row may fail before a lease expires. The thread runs only while
leases are held (it ends after :data:`IDLE_S` without one) and dies with the process, so a
dead worker's leases expire one TTL after its last renewal.

A worker that is suspended (SIGSTOP, a frozen VM, a long GC pause) renews nothing either:
its lease expires and another worker may take the boundary over. The fenced commit
(:meth:`~spanpoint.stores.base.CheckpointStore.put` with ``owner``) is what keeps the
suspended worker from committing over the new holder when it wakes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spanpoint.errors import StoreError

logger = logging.getLogger("spanpoint")

#: (checkpoint key, lease owner) → the lease's TTL in seconds.
Held = dict[tuple[str, str], float]

#: Seconds the thread waits for a lease to renew before it ends (the next hold starts one).
IDLE_S = 5.0


class LeaseHeartbeat:
    """Renews held leases in the background with ``renew(held) -> leases still held``.

    ``renew`` pushes each lease's expiry ``ttl`` ahead and returns those it could renew; a
    lease it could not (taken over, committed, deleted) is forgotten.
    """

    def __init__(self, renew: Callable[[Held], set[tuple[str, str]]], name: str) -> None:
        self._renew = renew
        self._name = name
        self._held: Held = {}
        # hold() and drop() run on every boundary: they take the plain lock (no Python-level
        # Condition methods); the thread waits on a condition over the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stopped = False
        self._thread: threading.Thread | None = None
        #: How long the thread's current sleep is (seconds): a hold whose lease must be
        #: renewed sooner wakes it.
        self._sleep_s = float("inf")

    def hold(self, key: str, owner: str, ttl_s: float) -> None:
        """Start renewing ``owner``'s lease on ``key``."""
        with self._lock:
            self._held[(key, owner)] = ttl_s
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif ttl_s / 3 < self._sleep_s:
                self._cond.notify()  # asleep for longer than this lease may wait

    def drop(self, key: str, owner: str) -> None:
        """Stop renewing ``owner``'s lease on ``key`` (committed, released or abandoned)."""
        with self._lock:
            self._held.pop((key, owner), None)

    def held(self) -> Held:
        """A copy of the leases being renewed."""
        with self._lock:
            return dict(self._held)

    def stop(self) -> None:
        """Stop renewing anything; the leases then expire on their own."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._held and not self._stopped:
                    self._sleep_s = IDLE_S
                    self._cond.wait(IDLE_S)
                if self._stopped or not self._held:
                    self._thread, self._sleep_s = None, float("inf")
                    return
                # A third of the shortest TTL: two renewals in a row may fail before expiry.
                self._sleep_s = interval = min(self._held.values()) / 3
                self._cond.wait(interval)  # woken early by stop() or a shorter lease
                if self._stopped:
                    self._thread, self._sleep_s = None, float("inf")
                    return
                held = dict(self._held)
            if not held:
                continue
            try:
                alive = self._renew(held)
            except StoreError as exc:
                logger.warning("spanpoint: lease heartbeat failed: %s", exc)
                continue
            with self._cond:
                for lease in set(held) - alive:
                    self._held.pop(lease, None)
