"""The statements a run costs the SQLite store at its start (issue 15: replay at <= 0.06 of a
run, where every round trip of a replayed run counts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import spanpoint
from spanpoint.stores import SqliteStore


def traced(store: SqliteStore) -> list[str]:
    statements: list[str] = []
    store._conn.set_trace_callback(lambda sql: statements.append(" ".join(sql.split())))
    return statements


def test_a_run_starts_with_one_statement_that_also_probes_its_fork_record(
    configured_sqlite: Any,
) -> None:
    store = configured_sqlite.store

    @spanpoint.step(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    with spanpoint.run("trips-1"):
        add(1, 2)
    statements = traced(store)
    with spanpoint.run("trips-1") as run:
        seen_at_start = list(statements)
        assert add(1, 2) == 3  # replayed
    store._conn.set_trace_callback(None)
    assert run.attempt == 2 and run.status == "completed"
    # No BEGIN/COMMIT around it, and no separate read of the fork record: one statement.
    (start,) = seen_at_start
    assert start.startswith("INSERT INTO runs") and "EXISTS (SELECT 1 FROM checkpoints" in start
    assert store.get_run("trips-1").attempts == 2  # type: ignore[union-attr]


def test_a_fork_found_by_the_probe_is_read_and_linked(configured_sqlite: Any) -> None:
    @spanpoint.step(name="lookup")
    def lookup(ticket: str) -> str:
        return f"ticket {ticket}: open"

    with spanpoint.run("trips-2"):
        lookup("7")
    fork_id = spanpoint.fork("trips-2", at="lookup", output="ticket 7: closed")
    configured_sqlite.clear()
    with spanpoint.run(fork_id):
        assert lookup("7") == "ticket 7: closed"
    (root,) = configured_sqlite.runs()
    assert root.attributes["spanpoint.fork.origin.run_id"] == "trips-2"
    assert len(root.links) == 1


def test_a_subclass_with_its_own_start_run_is_still_asked(tmp_path: Path) -> None:
    calls: list[str] = []

    class Counting(SqliteStore):
        def start_run(self, run_id: str, name: str | None) -> int:
            calls.append(run_id)
            return super().start_run(run_id, name)

    store = Counting(tmp_path / "c.db")
    try:
        assert store.start_run_probing("r", None, "no-such-key") == (1, True)
        assert calls == ["r"]
        plain = SqliteStore(tmp_path / "d.db")
        assert plain.start_run_probing("r", None, "no-such-key") == (1, False)
        plain.close()
    finally:
        store.close()
