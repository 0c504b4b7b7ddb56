"""The spanpoint command: runs, show and doctor against a real SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import spanpoint
from spanpoint.cli import app
from tests.conftest import Telemetry

runner = CliRunner()


@pytest.fixture
def recorded_run(configured_sqlite: Telemetry) -> str:
    """A run with two attempts: executed, failed, then replayed and executed boundaries."""
    fail = {"now": True}

    @spanpoint.step(name="load")
    def load() -> str:
        return "ticket"

    @spanpoint.step(name="publish")
    def publish(doc: str) -> str:
        if fail["now"]:
            raise TimeoutError("wiki down")
        return doc.upper()

    with pytest.raises(TimeoutError), spanpoint.run("T-9", name="cli"):
        publish(load())
    fail["now"] = False
    with spanpoint.run("T-9", name="cli"):
        publish(load())
    store = configured_sqlite.store
    return str(store.path)  # type: ignore[attr-defined]


def test_runs_lists_attempts_and_commits(recorded_run: str) -> None:
    result = runner.invoke(app, ["runs", "--store", recorded_run])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "T-9" in line)
    assert "cli" in row and "completed" in row
    assert row.split("│")[3].strip() == "2"  # attempts
    assert row.split("│")[4].strip() == "2"  # committed boundaries


def test_show_draws_one_tree_per_attempt(recorded_run: str) -> None:
    result = runner.invoke(app, ["show", "T-9", "--store", recorded_run], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = result.output
    first, second = text.split("attempt 1")[1].split("attempt 2")
    assert "load" in first and "✓ executed" in first
    assert "publish" in first and "✗ failed: TimeoutError: wiki down" in first
    assert "↺ replayed" in second and "publish" in second and "✓ executed" in second


def test_show_an_unknown_run_says_so(recorded_run: str) -> None:
    result = runner.invoke(app, ["show", "nope", "--store", recorded_run])
    assert result.exit_code == 1
    assert "no run 'nope'" in result.output


def test_an_unusable_store_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite at all" * 50)
    result = runner.invoke(app, ["runs", "--store", str(bad)])
    assert result.exit_code == 2
    assert "cannot open the checkpoint store" in result.output


def test_doctor_names_the_store_and_trace_destination(recorded_run: str) -> None:
    result = runner.invoke(app, ["doctor", "--store", recorded_run])
    assert result.exit_code == 0, result.output
    assert f"sqlite:{recorded_run}" in result.output.replace("\n", "")
    assert "traces: file" in result.output


def test_runs_pages_with_the_printed_cursor_until_every_run_was_listed(tmp_path: Path) -> None:
    from spanpoint.stores import SqliteStore

    path = tmp_path / "many.db"
    store = SqliteStore(path)
    for i in range(5):
        store.start_run(f"R-{i}", "paged")
    store.close()
    seen: list[str] = []
    args = ["runs", "--store", str(path), "--limit", "2"]
    for _ in range(5):
        result = runner.invoke(app, args, terminal_width=200)
        assert result.exit_code == 0, result.output
        seen += [line.split("│")[1].strip() for line in result.output.splitlines() if "R-" in line]
        hint = [line for line in result.output.splitlines() if line.startswith("next page:")]
        if not hint:
            break
        # The printed command as it is (its cursor and limit), on this test's store.
        args = [*hint[0].removeprefix("next page: spanpoint ").split(), "--store", str(path)]
    assert seen == [f"R-{i}" for i in (4, 3, 2, 1, 0)]


def test_runs_refuses_a_cursor_it_did_not_print(recorded_run: str) -> None:
    result = runner.invoke(app, ["runs", "--store", recorded_run, "--cursor", "not-a-cursor"])
    assert result.exit_code == 2
    assert "is not a cursor" in result.output and "previous page" in result.output


def test_doctor_reads_only_the_newest_run(
    recorded_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanpoint.stores import SqliteStore

    limits: list[int] = []
    real = SqliteStore.list_runs

    def spy(self: SqliteStore, **kw: object) -> list[object]:
        limits.append(int(kw.get("limit", 100)))  # type: ignore[call-overload]
        return real(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SqliteStore, "list_runs", spy)
    result = runner.invoke(app, ["doctor", "--store", recorded_run])
    assert result.exit_code == 0, result.output
    assert limits == [1] and "newest run updated" in result.output
