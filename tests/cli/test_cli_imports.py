"""The store commands import no LangChain or LangGraph (issue 18: a CLI that answers at once).

Each command runs in a fresh interpreter, as the ``spanpoint`` script would, and reports the
modules loaded when it exits. Nothing here is timed: the wall times are bench/scale_cli.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spanpoint.stores import SqliteStore
from spanpoint.stores.base import Checkpoint

# Runs the command in-process, then writes the roots of sys.modules at exit (atexit: typer
# ends every command with SystemExit).
PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
def report():
    with open(out, "w") as fh:
        json.dump(sorted({m.split(".")[0] for m in sys.modules}), fh)
atexit.register(report)
from spanpoint.cli import main
sys.argv[0] = "spanpoint"
main()
"""

HEAVY = ("langchain", "langgraph", "langsmith")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli-imports") / "checkpoints.db"
    store = SqliteStore(path)
    store.start_run("R-1", "imports")
    store.put(
        Checkpoint(
            "k-1", "R-1", "outer/step", "step", "step", 0, "json", b'"out"', "ab" * 16, "cd" * 8
        )
    )
    store.record_wait("R-1", "approve", "ok?", None)
    store.finish_run("R-1", "waiting")
    store.close()
    return path


def loaded_roots(args: list[str], tmp_path: Path) -> tuple[list[str], str]:
    out = tmp_path / "modules.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "SPANPOINT_TRACE_FILE": str(tmp_path / "traces.jsonl"),
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text()), done.stdout


@pytest.mark.parametrize(
    ("args", "prints"),
    [
        (["--help"], "Durable runs"),
        (["runs"], "R-1"),
        (["runs", "--waiting"], "approve"),
        (["show", "R-1"], "attempt 1"),
        (["doctor"], "store: sqlite:"),
        (["input", "R-1", "approve", "--json", '"yes"'], "provided 'approve'"),
        (["gc", "--older-than", "3650d"], "deleted 0 runs"),
    ],
    ids=["help", "runs", "runs-waiting", "show", "doctor", "input", "gc"],
)
def test_a_store_command_imports_no_langchain_or_langgraph(
    args: list[str], prints: str, store_path: Path, tmp_path: Path
) -> None:
    command = args if args == ["--help"] else [*args, "--store", str(store_path)]
    roots, output = loaded_roots(command, tmp_path)
    assert prints in output, output  # the command did its work
    assert "spanpoint" in roots and "typer" in roots
    assert [r for r in roots if r.startswith(HEAVY)] == []
