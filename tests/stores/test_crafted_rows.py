"""A crafted checkpoint row can make spanpoint do nothing but execute the boundary again.

The attacker here can write the store (a shared PostgreSQL database, a SQLite file on a shared
volume): the test commits a real checkpoint through ``@spanpoint.step``, then rewrites that row
with plain sqlite3 / psycopg, digest included (a digest is no signature: whoever can write a
row can compute it). Replaying the run must leave no file behind, import no module, and
execute the body again cleanly, counted in a file.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import ormsgpack
import pytest

import spanpoint
from spanpoint import semconv
from spanpoint.stores import open_store
from spanpoint.stores.base import checkpoint_digest
from tests.conftest import Telemetry, make_telemetry
from tests.fakes import count_effect, read_effects

Writer = Callable[[str, str, bytes], None]


@dataclass
class Target:
    """A real store, and a raw writer that rewrites one run's committed row."""

    telemetry: Telemetry
    rewrite: Writer  # (run_id, output_type, output)


def _rewrite_sqlite(path: Path) -> Writer:
    def rewrite(run_id: str, output_type: str, output: bytes) -> None:
        with sqlite3.connect(path) as conn:
            key, path_, kind, ordinal = conn.execute(
                "SELECT key, path, kind, ordinal FROM checkpoints WHERE run_id = ?", (run_id,)
            ).fetchone()
            digest = checkpoint_digest(key, run_id, path_, kind, ordinal, output_type, output)
            conn.execute(
                "UPDATE checkpoints SET output_type = ?, output = ?, digest = ? WHERE key = ?",
                (output_type, output, digest, key),
            )

    return rewrite


def _rewrite_postgres(dsn: str) -> Writer:
    def rewrite(run_id: str, output_type: str, output: bytes) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT key, path, kind, ordinal FROM spanpoint_checkpoints WHERE run_id = %s",
                (run_id,),
            ).fetchone()
            assert row is not None
            key, path_, kind, ordinal = row
            digest = checkpoint_digest(key, run_id, path_, kind, ordinal, output_type, output)
            conn.execute(
                "UPDATE spanpoint_checkpoints SET output_type = %s, output = %s, digest = %s "
                "WHERE key = %s",
                (output_type, output, digest, key),
            )

    return rewrite


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        path = tmp_path / "shared.db"
        store, rewrite = open_store(str(path)), _rewrite_sqlite(path)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        store, rewrite = open_store(dsn), _rewrite_postgres(dsn)
    telemetry = make_telemetry(store)
    yield Target(telemetry, rewrite)
    telemetry.provider.shutdown()
    store.close()


# --- the payloads ----------------------------------------------------------------------------
# LangGraph's msgpack extension codes: 0 = cls(arg), 1 = cls(*args), 2 = cls(**kwargs),
# 5 = a pydantic model. A payload names (module, name) and the arguments.


def _ext(code: int, module: str, name: str, args: object) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb([module, name, args]))


def _msgpack(value: object) -> tuple[str, bytes]:
    return "msgpack", ormsgpack.packb(value)


class _Reduce:
    """Pickles as a call of os.system (what a pickle row can do)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, (self.command,))


def _payloads(marker: Path, module_name: str) -> dict[str, tuple[str, bytes]]:
    touch = f"touch {marker}"
    system = _ext(0, "os", "system", touch)
    popen = _ext(1, "subprocess", "Popen", [["touch", str(marker)]])
    shell = _ext(2, "subprocess", "run", {"args": touch, "shell": True})
    imported = _ext(0, module_name, "anything", 1)
    return {
        "os.system": _msgpack(system),
        "subprocess.Popen": _msgpack(popen),
        "subprocess.run(shell=True)": _msgpack(shell),
        "pydantic path to os.system": _msgpack(_ext(5, "os", "system", {"command": touch})),
        "import of a planted module": _msgpack(imported),
        "import this": _msgpack(_ext(0, "this", "s", "x")),
        "os.system nested in a dict": _msgpack({"ok": "T-1", "extra": [{"x": system}]}),
        "Popen nested in a dict": _msgpack({"result": {"deep": popen}}),
        "planted import nested": _msgpack({"ok": [imported]}),
        "lc 2 constructor json": (
            "json",
            json.dumps(
                {
                    "lc": 2,
                    "type": "constructor",
                    "id": ["subprocess", "Popen"],
                    "args": [["touch", str(marker)]],
                }
            ).encode(),
        ),
        "lc 1 constructor json": (
            "json",
            json.dumps(
                {
                    "lc": 1,
                    "type": "constructor",
                    "id": ["langchain", "schema", "messages", "HumanMessage"],
                    "kwargs": {"content": "not what the step returned"},
                }
            ).encode(),
        ),
        "pickle": ("pickle", pickle.dumps(_Reduce(touch))),
    }


PAYLOAD_NAMES = list(_payloads(Path("m"), "m"))


@pytest.mark.parametrize("payload", PAYLOAD_NAMES)
def test_a_crafted_row_runs_nothing_and_the_body_executes_again(
    target: Target, tmp_path: Path, payload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    module_name = f"planted_{tmp_path.name.replace('-', '_')}"
    # A module that leaves a file behind if anything ever imports it.
    (tmp_path / f"{module_name}.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    effects = tmp_path / "effects.txt"

    @spanpoint.step(name="approve")
    def approve(ticket: str) -> dict[str, str]:
        count_effect(effects, "approve")
        return {"ok": ticket}

    run_id = f"crafted-{PAYLOAD_NAMES.index(payload)}"
    with spanpoint.run(run_id):
        assert approve("T-1") == {"ok": "T-1"}
    output_type, output = _payloads(marker, module_name)[payload]
    target.rewrite(run_id, output_type, output)

    modules_before = set(sys.modules)
    with spanpoint.run(run_id) as run:
        replayed = approve("T-1")

    assert replayed == {"ok": "T-1"}  # the body's own value, never the row's
    assert read_effects(effects)["approve"] == 2  # executed again, cleanly
    assert not marker.exists() and not (tmp_path / "imported").exists()
    assert set(sys.modules) - modules_before == set()
    assert module_name not in sys.modules and "this" not in sys.modules
    assert any("unreadable, executing again" in w and "refusing" in w for w in run.warnings)
    spans = target.telemetry.spans("step approve")
    assert spans[-1].attributes[semconv.REPLAYED] is False
