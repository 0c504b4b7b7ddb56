"""Single-flight boundaries across processes: many workers, one run, each body once.

Workers are real processes (tests/stores/boundary_worker.py) that count their side effects in
a file under a lock. A worker "on another pod" runs in its own UTS namespace with its own host
name, so its lease cannot be taken over as a dead local process's would be: only expiry frees it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from spanpoint.stores import open_store

WORKER = Path(__file__).parent / "boundary_worker.py"
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def expected_result(steps: int) -> int:
    acc = 1
    for i in range(steps):
        acc = acc * 3 % 1_000_003 + (i + 1) * 7
    return acc


def address_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pg_dsn"))


def spawn(
    address: str, run_id: str, effects: Path, *extra: str, pod: str | None = None
) -> subprocess.Popen[str]:
    """Start a worker; ``pod`` runs it under that host name in a UTS namespace of its own."""
    argv = [sys.executable, str(WORKER), address, run_id, str(effects), *extra]
    if pod is not None:
        require_pods()
        argv = ["unshare", "--uts", "sh", "-c", f'hostname {pod} && exec "$@"', "sh", *argv]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def require_pods() -> None:
    """Skip (before any worker starts) when a worker on 'another pod' cannot be made here."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a worker on 'another pod' needs root and unshare(1) for a UTS namespace")


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, float]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)  # type: ignore[no-any-return]


def effects_of(path: Path) -> list[tuple[int, int, float]]:
    """(step, pid, time) of every side effect, in the order they happened."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(step), int(pid), float(at)) for step, pid, at in rows]


def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORES)
def test_many_processes_replaying_one_run_execute_each_boundary_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    address = address_of(kind, request, tmp_path)
    effects, barrier = tmp_path / "fx", tmp_path / "go"
    n = 8 if kind == "postgres" else 4  # the acceptance bar is PostgreSQL's; SQLite is local
    open_store(address).close()  # create the schema before the stampede
    workers = [
        spawn(address, "ticket-8", effects, "--steps", "20", "--sleep", "0.05", "--barrier",
              str(barrier))
        for _ in range(n)
    ]  # fmt: skip
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*.ready"))) < n:
        assert all(w.poll() is None for w in workers) and time.monotonic() < deadline
        time.sleep(0.05)
    barrier.touch()
    reports = [finish(w) for w in workers]
    assert [r["result"] for r in reports] == [expected_result(20)] * n
    assert sorted(r["attempt"] for r in reports) == list(range(1, n + 1))
    counts = Counter(step for step, _, _ in effects_of(effects))
    assert counts == Counter(range(20)), f"bodies executed more than once: {counts}"
    # Concurrency, or nothing was proved: workers inside the run before the first one left.
    # SQLite serializes writers on one file lock, so fewer of them get in that early.
    first_out = min(r["ended"] for r in reports)
    overlapping = sum(r["started"] < first_out for r in reports)
    assert overlapping >= (n if kind == "postgres" else n // 2), overlapping


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORES)
def test_a_sigkilled_workers_boundary_runs_again_after_its_lease_expires_and_not_before(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    address, effects, ready = address_of(kind, request, tmp_path), tmp_path / "fx", tmp_path / "r"
    require_pods()
    ttl, go = 4.0, tmp_path / "go"
    # The successor warms up first and waits at a closed start line, so that the holder's
    # lease (SQLite's is not renewed) is young when the successor arrives at its boundary.
    successor = spawn(address, "ticket-9", effects, "--ttl", str(ttl), "--barrier", str(go))
    wait_for_file(tmp_path / f"go.{successor.pid}.ready", successor)
    holder = spawn(
        address, "ticket-9", effects, "--ttl", str(ttl), "--hold-in", "3", "--ready", str(ready),
        pod="pod-a",
    )  # fmt: skip
    wait_for_file(ready, holder)
    go.touch()
    time.sleep(0.5)  # it replays steps 0-2 and waits on step 3, held by the live holder
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    expires_at = lease_expiry(kind, address)
    report = finish(successor)
    assert report["result"] == expected_result(10)
    runs = effects_of(effects)
    assert Counter(step for step, _, _ in runs) == Counter({**dict.fromkeys(range(10), 1), 3: 2})
    (second_at,) = [at for step, pid, at in runs if step == 3 and pid == report["pid"]]
    assert report["started"] < expires_at, "the successor was not there in time to wait"
    assert second_at >= expires_at - 0.01, f"ran {expires_at - second_at:.2f}s before expiry"
    assert second_at <= expires_at + ttl, "the successor waited far longer than the lease"


def lease_expiry(kind: str, address: str) -> float:
    """When the dead holder's lease runs out, as the store recorded it (epoch seconds)."""
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(address) as conn:
            ((expires_at,),) = conn.execute(
                "SELECT lease_expires_at FROM checkpoints WHERE output IS NULL"
            ).fetchall()
        return float(expires_at)
    import psycopg

    with psycopg.connect(address) as conn:
        ((expires_at,),) = conn.execute(
            "SELECT extract(epoch FROM lease_expires_at)::float8 FROM spanpoint_checkpoints "
            "WHERE output IS NULL"
        ).fetchall()
    return float(expires_at)


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORES)
def test_a_waiter_gives_up_with_a_clear_error_when_the_lease_is_never_freed(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    address, effects, ready = address_of(kind, request, tmp_path), tmp_path / "fx", tmp_path / "r"
    require_pods()
    go = tmp_path / "go"
    waiter = spawn(address, "ticket-10", effects, "--wait-timeout", "1.5", "--barrier", str(go))
    wait_for_file(tmp_path / f"go.{waiter.pid}.ready", waiter)  # warm before the lease starts
    holder = spawn(
        address, "ticket-10", effects, "--hold-in", "0", "--ready", str(ready), "--ttl", "60",
        pod="pod-a",
    )  # fmt: skip
    try:
        wait_for_file(ready, holder)
        go.touch()
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode != 0
        assert "LeaseTimeoutError" in err and "'add'" in err and "ticket-10" in err
        assert "lease_wait_timeout_s" in err
        assert Counter(step for step, _, _ in effects_of(effects)) == Counter({0: 1})
    finally:
        holder.kill()
        holder.wait()
