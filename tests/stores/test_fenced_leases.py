"""Fenced leases across real processes: a worker that lost its lease never commits over the
output of the worker that took it, and its caller never gets a value the store does not hold.

A worker is paused past its lease with SIGSTOP (its heartbeat stops with it, as on a frozen
host), another worker takes the boundary over, then the first is let go with SIGCONT. Step
outputs carry the pid of the worker that executed them (``--tagged``), so a result tells whose
outputs it was built from. Workers are tests/stores/boundary_worker.py; side effects are
counted in a file under a lock.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from spanpoint import serde
from spanpoint.stores import open_store
from tests.stores.test_single_flight import (
    STORES,
    address_of,
    effects_of,
    finish,
    spawn,
    wait_for_file,
)

pytestmark = pytest.mark.slow


def tagged_result(pids: list[int]) -> int:
    """The result of a tagged chain whose step ``i`` was executed by ``pids[i]``."""
    acc = 1
    for i, pid in enumerate(pids):
        acc = (acc * 3 % 1_000_003 + (i + 1) * 7) * 10_000_000 + pid
    return acc


def committed_steps(address: str, run_id: str) -> list[int]:
    """The committed outputs of ``run_id``'s steps, in commit order (the chain's order)."""
    store = open_store(address)
    try:
        return [int(serde.loads(c.output_type, c.output)) for c in store.list_checkpoints(run_id)]
    finally:
        store.close()


def paused_past_its_lease(
    address: str, run_id: str, tmp_path: Path
) -> tuple[subprocess.Popen[str], Path]:
    """A worker stopped (SIGSTOP) inside step 3 after its side effect, its lease left to expire;
    it goes on once the returned file exists and it is sent SIGCONT."""
    ready, go = tmp_path / "paused.ready", tmp_path / "paused.go"
    effects = tmp_path / "fx"
    paused = spawn(
        address, run_id, str(effects), "--steps", "6", "--tagged", "--ttl", "1.5",
        "--pause-in", "3", "--ready", str(ready), "--go", str(go),
    )  # fmt: skip
    wait_for_file(ready, paused)
    paused.send_signal(signal.SIGSTOP)
    go.touch()  # seen only once it runs again
    return paused, effects


@pytest.mark.parametrize("kind", STORES)
def test_a_worker_paused_past_its_lease_returns_the_output_the_other_worker_committed(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    address, run_id = address_of(kind, request, tmp_path), "fenced-1"
    open_store(address).close()
    paused, effects = paused_past_its_lease(address, run_id, tmp_path)
    try:
        # The successor replays steps 0-2, waits for the paused worker's lease to expire,
        # takes step 3 over and finishes the run.
        successor = spawn(address, run_id, str(effects), "--steps", "6", "--tagged")
        won = finish(successor)
    finally:
        paused.send_signal(signal.SIGCONT)
    lost = finish(paused)
    a, b = int(lost["pid"]), int(won["pid"])
    assert won["result"] == tagged_result([a, a, a, b, b, b])
    # The paused worker's own step 3 output was never committed and never returned.
    assert lost["result"] == won["result"]
    # What the store holds is the successor's step 3 and what it built on it.
    stored = committed_steps(address, run_id)
    assert [value % 10_000_000 for value in stored] == [a, a, a, b, b, b]
    assert stored[-1] == won["result"]
    assert any("lost its lease" in w for w in lost["warnings"]), lost["warnings"]
    counts = Counter(step for step, _, _ in effects_of(effects))
    assert counts == Counter({0: 1, 1: 1, 2: 1, 3: 2, 4: 1, 5: 1})


@pytest.mark.parametrize("kind", STORES)
def test_a_worker_paused_past_its_lease_fails_with_lease_lost_when_nothing_is_committed(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    address, run_id = address_of(kind, request, tmp_path), "fenced-2"
    open_store(address).close()
    paused, effects = paused_past_its_lease(address, run_id, tmp_path)
    taken = tmp_path / "taken.ready"
    # The successor takes step 3 over and is still executing it (its lease renewed).
    successor = spawn(
        address, run_id, str(effects), "--steps", "6", "--tagged", "--hold-in", "3",
        "--ready", str(taken),
    )  # fmt: skip
    try:
        try:
            wait_for_file(taken, successor)
        finally:
            paused.send_signal(signal.SIGCONT)
        _, err = paused.communicate(timeout=120)
        assert paused.returncode != 0
        assert "LeaseLostError" in err and "'add'" in err and run_id in err, err[-2000:]
        stored = committed_steps(address, run_id)
        assert len(stored) == 3, "the worker that lost its lease committed step 3"
        assert successor.poll() is None
    finally:
        successor.kill()
        successor.wait()
    counts = Counter(step for step, _, _ in effects_of(effects))
    assert counts == Counter({0: 1, 1: 1, 2: 1, 3: 2})


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("kind", STORES)
def test_two_hosts_sharing_a_host_name_never_take_each_others_live_lease(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The holder's owner ids name this host name and pid namespace number but another
    machine, and a pid that is not running here: as a worker on a twin host would."""
    address, run_id = address_of(kind, request, tmp_path), "twins"
    open_store(address).close()
    effects, ready, go = tmp_path / "fx", tmp_path / "held.ready", tmp_path / "go"
    waiter = spawn(address, run_id, str(effects), "--wait-timeout", "3", "--barrier", str(go))
    wait_for_file(tmp_path / f"go.{waiter.pid}.ready", waiter)
    holder = spawn(
        address, run_id, str(effects), "--hold-in", "0", "--ready", str(ready), "--ttl", "60",
        "--machine", uuid.uuid4().hex, "--owner-pid", str(dead_pid()),
    )  # fmt: skip
    try:
        wait_for_file(ready, holder)
        go.touch()
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode != 0
        assert "LeaseTimeoutError" in err, err[-2000:]
        assert Counter(step for step, _, _ in effects_of(effects)) == Counter({0: 1})
    finally:
        holder.kill()
        holder.wait()
