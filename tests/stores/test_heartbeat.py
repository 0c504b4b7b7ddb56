"""LeaseHeartbeat: renews what is held, forgets what could not be renewed, stops when told."""

from __future__ import annotations

import threading
import time

from spanpoint.errors import StoreError
from spanpoint.stores.heartbeat import Held, LeaseHeartbeat


class Renewals:
    """A renew callback that records its calls; ``lost`` leases are reported as not renewed."""

    def __init__(self) -> None:
        self.calls: list[Held] = []
        self.lost: set[tuple[str, str]] = set()
        self.fail = False
        self.called = threading.Event()

    def __call__(self, held: Held) -> set[tuple[str, str]]:
        self.calls.append(dict(held))
        self.called.set()
        if self.fail:
            raise StoreError("store down")
        return set(held) - self.lost


def test_renews_at_a_third_of_the_ttl_and_forgets_lost_leases() -> None:
    renew = Renewals()
    beat = LeaseHeartbeat(renew, name="test-heartbeat")
    renew.lost = {("b", "me")}
    beat.hold("a", "me", 0.3)
    beat.hold("b", "me", 0.3)
    deadline = time.monotonic() + 10
    while len(renew.calls) < 2:  # renewal periods of 0.1 s; a loaded machine may stretch them
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert all(call.keys() <= {("a", "me"), ("b", "me")} for call in renew.calls)
    assert beat.held() == {("a", "me"): 0.3}
    beat.drop("a", "me")
    calls = len(renew.calls)
    time.sleep(0.25)
    assert len(renew.calls) <= calls + 1 and beat.held() == {}
    beat.stop()


def test_a_failed_renewal_keeps_the_lease_and_stop_ends_the_thread() -> None:
    renew = Renewals()
    renew.fail = True
    beat = LeaseHeartbeat(renew, name="test-heartbeat")
    beat.hold("a", "me", 0.15)
    assert renew.called.wait(2)
    assert beat.held() == {("a", "me"): 0.15}  # a store error is not a lost lease
    beat.stop()
    time.sleep(0.1)
    calls = len(renew.calls)
    time.sleep(0.2)
    assert len(renew.calls) == calls
    beat.hold("b", "me", 0.15)  # a stopped heartbeat starts no thread again
    time.sleep(0.2)
    assert len(renew.calls) == calls
