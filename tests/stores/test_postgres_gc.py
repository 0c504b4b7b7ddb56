"""Retention: ``spanpoint gc --older-than`` on SQLite and PostgreSQL."""

from __future__ import annotations

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


def test_gc_units(tmp_path: Path) -> None:
    from spanpoint.cli import _parse_age

    assert [_parse_age(a) for a in ("45s", "90m", "12h", "30d", "2w", "600")] == [
        45,
        5400,
        43200,
        2_592_000,
        1_209_600,
        600,
    ]
