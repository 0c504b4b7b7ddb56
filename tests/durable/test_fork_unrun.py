"""A fork is a run from the moment it is made: ``spanpoint runs`` lists it (no attempt yet,
status ``forked``), ``spanpoint show`` prints the calls it starts from, and ``spanpoint gc``
collects it with its checkpoints, whether it ever ran or not. Every store, every kind of fork
(an override, or executing again from the cut).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_fork import _unique_run_ids, fork, make_runner, record, rid  # noqa: F401
from typer.testing import CliRunner

from harness import Telemetry, make_telemetry
from spanpoint.cli import app
from spanpoint.config import reset_for_tests
from spanpoint.forks import RERUN
from spanpoint.stores import MemoryStore, SqliteStore

cli = CliRunner()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def telemetry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Telemetry]:
    if request.param == "memory":
        store: Any = MemoryStore()
    elif request.param == "sqlite":
        store = SqliteStore(tmp_path / "checkpoints.db")
    else:
        from spanpoint.stores.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    telemetry = make_telemetry(store)
    yield telemetry
    telemetry.provider.shutdown()
    reset_for_tests()
    store.close()


@pytest.mark.parametrize("output", ["ticket 8: closed", RERUN], ids=["override", "rerun"])
def test_a_fork_never_run_is_listed_shown_and_collected(
    telemetry: Telemetry, tmp_path: Path, output: Any
) -> None:
    store = telemetry.store
    agent = make_runner(tmp_path / "effects")
    record(agent, "orig")
    original = store.get_run(rid("orig"))
    assert original is not None

    fork("orig", at="lookup_ticket#2", output=output, new_run_id="f1")
    made = store.get_run(rid("f1"))
    assert made is not None
    assert (made.attempts, made.status, made.name) == (0, "forked", original.name)
    assert made.committed == len(store.list_checkpoints(rid("f1"))) > 0
    assert rid("f1") in [r.run_id for r in store.list_runs(status="forked")]
    if isinstance(store, SqliteStore):  # the command line reads the same records
        listed = cli.invoke(app, ["runs", "--store", str(store.path)])
        row = next(line for line in listed.output.splitlines() if rid("f1")[:12] in line)
        assert "forked" in row and " 0 " in row
        shown = cli.invoke(app, ["show", rid("f1"), "--store", str(store.path)])
        assert shown.exit_code == 0, shown.output
        assert "0 attempt(s), last status forked" in shown.output
        assert "not run yet" in shown.output and "lookup_ticket#1" in shown.output

    # Run, it is an ordinary run: its first attempt is attempt 1.
    record(agent, "f1")
    ran = store.get_run(rid("f1"))
    assert ran is not None and (ran.attempts, ran.status) == (1, "completed")

    # A fork never run is collected with everything it holds, as any old run is.
    fork("orig", at="lookup_ticket#1", output=output, new_run_id="f2")
    assert store.list_checkpoints(rid("f2"))
    assert store.delete_runs_older_than(0.0) >= 3
    for run_id in ("orig", "f1", "f2"):
        assert store.get_run(rid(run_id)) is None
        assert store.list_checkpoints(rid(run_id)) == []


def test_a_fork_id_taken_by_a_fork_never_run_is_refused(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    import spanpoint

    record(make_runner(tmp_path / "effects"), "orig")
    fork("orig", at="lookup_ticket#2", output="x", new_run_id="f1")
    with pytest.raises(spanpoint.errors.ForkError, match="already exists"):
        fork("orig", at="lookup_ticket#1", output="y", new_run_id="f1")
