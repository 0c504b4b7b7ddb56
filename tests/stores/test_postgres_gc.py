"""Retention: ``spanpoint gc --older-than`` on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spanpoint.cli import app
from spanpoint.stores import open_store
from spanpoint.stores.base import Checkpoint


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def address(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "gc.db")
    return str(request.getfixturevalue("pg_dsn"))


def test_gc_deletes_only_runs_older_than_the_age(address: str) -> None:
    store = open_store(address)
    store.start_run("old", None)
    store.put(Checkpoint("k-old", "old", "p", "n", "step", 0, "json", b"1", "a" * 32, "b" * 16))
    time.sleep(1.2)
    store.start_run("new", None)
    runner = CliRunner()
    dry = runner.invoke(app, ["gc", "--older-than", "1s", "--store", address, "--dry-run"])
    assert dry.exit_code == 0 and "1 runs older than 1s" in dry.output
    assert store.get_run("old") is not None
    result = runner.invoke(app, ["gc", "--older-than", "1s", "--store", address])
    assert result.exit_code == 0, result.output
    assert "deleted 1 runs older than 1s" in result.output
    assert store.get_run("old") is None and store.get("k-old") is None
    assert store.get_run("new") is not None
    store.close()


@pytest.mark.parametrize("age", ["", "x", "3x", "-5d", "0"])
def test_gc_rejects_an_age_it_cannot_read(age: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gc", "--older-than", age, "--store", "memory"])
    assert result.exit_code == 2
    assert "30d" in result.output


@pytest.mark.parametrize(
    ("age", "seconds"),
    [
        ("45s", 45),
        ("90m", 5400),
        ("12h", 43200),
        ("30d", 2_592_000),
        ("2w", 1_209_600),
        ("600", 600),
    ],
)
def test_gc_units(age: str, seconds: float, tmp_path: Path) -> None:
    """Each unit, through the CLI: a run idle a little longer than the age counts as old, one
    idle a little shorter does not."""
    path = tmp_path / "units.db"
    store = open_store(str(path))
    store.start_run("older", None)
    store.start_run("younger", None)
    store.close()
    now = time.time()
    with sqlite3.connect(path) as conn:
        for run_id, idle in (("older", seconds * 1.01 + 5), ("younger", seconds * 0.99 - 5)):
            conn.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", (now - idle, run_id))
    result = CliRunner().invoke(app, ["gc", "--older-than", age, "--store", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"1 runs older than {age}" in result.output
