"""Shared fixtures: real OpenTelemetry SDK providers wired to in-memory exporters, and stores.

``configured`` is the usual entry point: it installs spanpoint on a fresh SDK tracer provider
(with an in-memory span exporter) and a fresh store, and resets spanpoint afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import spanpoint
from harness import Telemetry, make_telemetry
from spanpoint.config import reset_for_tests
from spanpoint.stores import MemoryStore, SqliteStore

# --- the full suite (.ci/run) and the default one (`make test`) ---------------------------

#: Crash-fuzz trials per store: a few for `make test`, the full count in the full suite.
FUZZ_TRIALS, FULL_FUZZ_TRIALS = 20, 100


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("spanpoint")
    group.addoption(
        "--full",
        action="store_true",
        default=os.environ.get("SPANPOINT_FULL_SUITE") == "1",
        help="the full suite .ci/run runs: tests marked `full` or `e2e` and "
        f"{FULL_FUZZ_TRIALS} crash-fuzz trials per store ($SPANPOINT_FULL_SUITE=1)",
    )
    group.addoption(
        "--fuzz-trials",
        type=int,
        default=None,
        help=f"crash-fuzz trials per store (default {FUZZ_TRIALS}, "
        f"{FULL_FUZZ_TRIALS} with --full; $SPANPOINT_FUZZ_TRIALS)",
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    # The fork servers of tests/spawn.py, if this process started any (atexit would too).
    spawn = sys.modules.get("spawn")
    if spawn is not None and hasattr(spawn, "FORKSERVER"):
        spawn.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Upstream suites and the collector stack take many minutes on a clean machine (downloads,
    # Go builds): .ci/run runs them; `make test` says it skipped them and why.
    if config.getoption("--full"):
        return
    skip = pytest.mark.skip(reason="full suite only: `pytest --full` (.ci/run runs it)")
    for item in items:
        if "full" in item.keywords or "e2e" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def fuzz_trials(request: pytest.FixtureRequest) -> int:
    """How many crash-fuzz trials each store gets in this session."""
    given = request.config.getoption("--fuzz-trials") or os.environ.get("SPANPOINT_FUZZ_TRIALS")
    if given:
        return int(given)
    return FULL_FUZZ_TRIALS if request.config.getoption("--full") else FUZZ_TRIALS


# --- stores and configured telemetry -------------------------------------------------------


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "checkpoints.db")
    yield store
    store.close()


@pytest.fixture(params=["memory", "sqlite"])
def any_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[spanpoint.CheckpointStore]:
    """Each embedded store in turn."""
    if request.param == "memory":
        yield MemoryStore()
    else:
        store = SqliteStore(tmp_path / "checkpoints.db")
        yield store
        store.close()


@pytest.fixture
def route(request: pytest.FixtureRequest, configured: Telemetry) -> Iterator[str]:
    """The route a test's calls take, parametrized indirectly: a name starting ``zero_code``
    runs with the zero-code instrumentor on (``zero_code_calls``: the calls strategy, else
    ``graph_call``); any other name is the test's own to set up."""
    name = str(request.param)
    if not name.startswith("zero_code"):
        yield name
        return
    from spanpoint.instrumentation import SpanpointInstrumentor

    instrumentor = SpanpointInstrumentor()
    strategy = "calls" if name.startswith("zero_code_calls") else "graph_call"
    instrumentor.instrument(tracer_provider=configured.provider, strategy=strategy)
    try:
        yield name
    finally:
        instrumentor.uninstrument()


@pytest.fixture
def configured(memory_store: MemoryStore) -> Iterator[Telemetry]:
    """spanpoint on a fresh SDK provider + in-memory exporter + MemoryStore."""
    telemetry = make_telemetry(memory_store)
    yield telemetry
    telemetry.provider.shutdown()
    reset_for_tests()


@pytest.fixture
def configured_sqlite(sqlite_store: SqliteStore) -> Iterator[Telemetry]:
    """spanpoint on a fresh SDK provider + in-memory exporter + SqliteStore."""
    telemetry = make_telemetry(sqlite_store)
    yield telemetry
    telemetry.provider.shutdown()
    reset_for_tests()


@pytest.fixture(autouse=True)
def _isolated_spanpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts unconfigured, with defaults pointing into its own tmp folder."""
    monkeypatch.setenv("SPANPOINT_STORE", str(tmp_path / "default.db"))
    monkeypatch.setenv("SPANPOINT_TRACE_FILE", str(tmp_path / "traces.jsonl"))
    reset_for_tests()
    yield
    reset_for_tests()


# --- PostgreSQL (tests marked `postgres`) -------------------------------------------------
# scripts/test.sh starts a throwaway server (scripts/services.d/postgres.sh) and exports its
# DSN; a bare `pytest` starts one itself. Never a fake database: when no server can be
# started the tests skip loudly, and in CI (CI=true) they fail.

PG_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pg.sh"


@dataclass
class PgServer:
    """A PostgreSQL server for tests: its DSN and, when this process started it, its folder."""

    dsn: str
    folder: str | None = None

    @classmethod
    def start(cls) -> PgServer:
        """Start a private server with scripts/pg.sh (fsync off: tests kill clients, not it)."""
        env = {**os.environ, "PG_FSYNC": "off"}
        out = subprocess.run(
            ["bash", str(PG_SCRIPT), "start"], capture_output=True, text=True, env=env, timeout=600
        )
        if out.returncode != 0:
            raise RuntimeError(f"scripts/pg.sh start failed: {out.stderr.strip()[-2000:]}")
        exports = dict(re.findall(r"export (\w+)='([^']*)'", out.stdout))
        return cls(exports["SPANPOINT_PG_DSN"], exports["SPANPOINT_PG_DIR"])

    def control(self, action: str) -> None:
        """``pause`` (stop, keep data), ``resume`` or ``stop`` (and delete) this server."""
        assert self.folder, "only a server this process started can be controlled"
        subprocess.run(["bash", str(PG_SCRIPT), action, self.folder], check=True, timeout=120)

    def fresh_database(self) -> str:
        """Create an empty database and return its DSN."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn.rsplit("/", 1)[0] + "/" + name

    def drop_database(self, dsn: str) -> None:
        """Drop a database made by :meth:`fresh_database`, whoever is still connected."""
        import psycopg

        name = dsn.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_unavailable(reason: str) -> None:
    """Fail in CI, skip loudly elsewhere."""
    message = f"PostgreSQL is not available: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: postgres tests must run)", pytrace=False)
    print(f"\n*** SKIPPING postgres tests: {message} ***", file=sys.stderr)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server ($SPANPOINT_TEST_PG_DSN, or one started now)."""
    dsn = os.environ.get("SPANPOINT_TEST_PG_DSN")
    if dsn:
        yield PgServer(dsn)
        return
    try:
        server = PgServer.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pg_unavailable(str(exc))
    yield server
    server.control("stop")


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """The DSN of a fresh, empty database on the session's server (dropped afterwards)."""
    try:
        dsn = pg_server.fresh_database()
    except Exception as exc:
        pg_unavailable(f"cannot create a database on {pg_server.dsn}: {exc}")
        raise
    yield dsn
    pg_server.drop_database(dsn)
