"""Lease renewal for a store shared across machines: a live worker keeps what it holds.

A store whose leases only expire (no way to tell from afar that a worker died) must renew the
leases of the boundaries it is executing, or a body longer than the TTL would be taken over
while it still runs. :class:`LeaseHeartbeat` keeps the set of held leases and one daemon
thread that renews them every third of the shortest TTL; the thread exists only while leases
are held and dies with the process, so a dead worker's leases expire one TTL later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spanpoint.errors import StoreError

logger = logging.getLogger("spanpoint")

#: (checkpoint key, lease owner) → the lease's TTL in seconds.
Held = dict[tuple[str, str], float]


class LeaseHeartbeat:
    """Renews held leases in the background with ``renew(held) -> leases still held``.

    ``renew`` pushes each lease's expiry ``ttl`` ahead and returns those it could renew; a
    lease it could not (taken over, committed, deleted) is forgotten.
    """

    def __init__(self, renew: Callable[[Held], set[tuple[str, str]]], name: str) -> None:
        self._renew = renew
        self._name = name
        self._held: Held = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, key: str, owner: str, ttl_s: float) -> None:
        """Start renewing ``owner``'s lease on ``key``."""
        with self._lock:
            self._held[(key, owner)] = ttl_s
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

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
        self._stopped.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._held:
                    self._thread = None
                    return
                # A third of the shortest TTL: two renewals in a row may fail before expiry.
                interval = min(self._held.values()) / 3
            if self._stopped.wait(interval):
                return
            held = self.held()
            if not held:
                continue
            try:
                alive = self._renew(held)
            except StoreError as exc:
                logger.warning("spanpoint: lease heartbeat failed: %s", exc)
                continue
            with self._lock:
                for lease in set(held) - alive:
                    self._held.pop(lease, None)
