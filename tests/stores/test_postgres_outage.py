"""The PostgreSQL server goes away mid-run: a clear failure, nothing wrongly committed, and a
rerun after it returns continues from the last committed boundary.

These tests stop and start a server of their own (scripts/pg.sh pause / resume), never the
session's shared one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanpoint import serde
from spanpoint.errors import StoreUnavailableError
from spanpoint.stores.postgres import PostgresStore
from tests.conftest import PgServer, pg_unavailable

pytestmark = pytest.mark.postgres

WORKER = Path(__file__).parent / "boundary_worker.py"


@pytest.fixture(scope="module")
def own_server() -> Iterator[PgServer]:
    try:
        server = PgServer.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pg_unavailable(str(exc))
    yield server
    server.control("stop")


def expected_outputs(steps: int) -> list[int]:
    outputs, acc = [], 1
    for i in range(steps):
        acc = acc * 3 % 1_000_003 + (i + 1) * 7
        outputs.append(acc)
    return outputs


def worker(dsn: str, effects: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, str(WORKER), dsn, "ticket-outage", str(effects), *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_file(path: Path, proc: subprocess.Popen[str]) -> None:
    import time

    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.slow
def test_server_stopped_mid_run_fails_the_run_and_the_rerun_continues(
    own_server: PgServer, tmp_path: Path
) -> None:
    dsn = own_server.fresh_database() + "?connect_timeout=3"
    name = PostgresStore(dsn)
    description = name.description
    name.close()
    effects, ready, go = tmp_path / "fx", tmp_path / "ready", tmp_path / "go"
    # No --strict: an unreachable shared store fails the run by default.
    first = worker(dsn, effects, "--pause-in", "4", "--ready", str(ready), "--go", str(go))
    try:
        wait_for_file(ready, first)
        own_server.control("pause")  # the server stops while step 4's body runs
        go.touch()
        _, err = first.communicate(timeout=120)
    finally:
        own_server.control("resume")
    assert first.returncode != 0
    assert "StoreUnavailableError" in err, err[-3000:]
    assert description in err and "unreachable" in err, err[-3000:]

    outputs = expected_outputs(10)
    store = PostgresStore(dsn)
    try:
        committed = [serde.loads(c.output_type, c.output) for c in store.list_checkpoints(
            "ticket-outage")]  # fmt: skip
        assert committed == outputs[:4], "only the boundaries that ended before the outage"
    finally:
        store.close()

    rerun = worker(dsn, effects)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err[-3000:]
    assert json.loads(out)["result"] == outputs[-1]
    counts = Counter(int(line.split()[0]) for line in effects.read_text().splitlines())
    assert counts == Counter({**dict.fromkeys(range(10), 1), 4: 2})


@pytest.mark.slow
def test_a_store_survives_a_server_restart(own_server: PgServer) -> None:
    dsn = own_server.fresh_database() + "?connect_timeout=3"
    store = PostgresStore(dsn, min_connections=2)
    try:
        store.start_run("r", None)
        own_server.control("pause")
        with pytest.raises(StoreUnavailableError, match="start_run failed, the store is unreach"):
            store.start_run("r", None)
        own_server.control("resume")
        attempts = []
        for _ in range(3):  # stale pooled connections fail once at most, then are replaced
            try:
                attempts.append(store.start_run("r", None))
            except StoreUnavailableError:
                attempts.append(None)
        assert attempts[-1] is not None and attempts.count(None) <= 1
    finally:
        store.close()


@pytest.mark.slow
def test_with_keep_going_the_run_goes_on_uncommitted_and_says_so(
    own_server: PgServer, tmp_path: Path
) -> None:
    dsn = own_server.fresh_database() + "?connect_timeout=2"
    effects, ready, go = tmp_path / "fx", tmp_path / "ready", tmp_path / "go"
    first = worker(dsn, effects, "--keep-going", "--steps", "6", "--pause-in", "4", "--ready",
                   str(ready), "--go", str(go))  # fmt: skip
    try:
        wait_for_file(ready, first)
        own_server.control("pause")
        go.touch()
        out, err = first.communicate(timeout=180)
    finally:
        own_server.control("resume")
    outputs = expected_outputs(6)
    assert first.returncode == 0, err[-3000:]
    assert json.loads(out)["result"] == outputs[-1]  # the application kept running
    assert "could not commit boundary 'add'" in err and "unreachable" in err

    store = PostgresStore(dsn)
    try:
        assert len(store.list_checkpoints("ticket-outage")) == 4
    finally:
        store.close()
    rerun = worker(dsn, effects, "--keep-going", "--steps", "6")
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err[-3000:]
    assert json.loads(out)["result"] == outputs[-1]
    counts = Counter(int(line.split()[0]) for line in effects.read_text().splitlines())
    assert counts == Counter({0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 2})
