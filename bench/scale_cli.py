"""The command line: wall time of each ``spanpoint`` command, and whether it imports LangChain.

Commands, on a SQLite store filled like ``bench/scale_stores.py``'s (``--cli-runs`` runs of 10
checkpoints): ``--help``, ``runs``, ``show RUN``, ``doctor``, ``input RUN NAME --json``
(provides a wait) and ``gc --older-than 3650d`` (deletes nothing). Wall time is the median of
fresh processes of the installed ``spanpoint`` script, process start included; ``python -c
pass`` is the interpreter's own floor. Whether a command imports ``langchain*`` or
``langgraph*`` is read from ``sys.modules`` when that same command exits (the CLI run in a
probe interpreter), and ``python -X importtime`` gives the cumulative import time of
``spanpoint.cli`` itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import scale_common as common

# Runs the CLI as the console script does; at exit, writes which heavy packages were loaded.
PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
def report():
    roots = sorted({m.split(".")[0] for m in sys.modules})
    heavy = [r for r in roots if r.startswith(("langchain", "langgraph", "langsmith"))]
    with open(out, "w") as fh:
        json.dump({"heavy": heavy, "modules": len(sys.modules)}, fh)
atexit.register(report)
from spanpoint.cli import main
sys.argv[0] = "spanpoint"
main()
"""


def commands(address: str, run: str) -> dict[str, list[str]]:
    """Each measured command's arguments."""
    store = ["--store", address]
    return {
        "--help": ["--help"],
        "runs": ["runs", *store],
        "show": ["show", run, *store],
        "doctor": ["doctor", *store],
        "input": ["input", run, "approval", "--json", '"yes"', *store],
        "gc": ["gc", "--older-than", "3650d", *store],
    }


def imports(args: list[str]) -> dict[str, Any]:
    """Which heavy packages the command loads, and ``spanpoint.cli``'s import time."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    subprocess.run(
        [sys.executable, "-c", PROBE, out, *args], capture_output=True, text=True, env=env
    )
    try:
        loaded = json.loads(Path(out).read_text() or "{}")
    finally:
        os.unlink(out)
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE, os.devnull, *args],
        capture_output=True,
        text=True,
        env=env,
    ).stderr
    cli_us = None
    for line in timed.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s+spanpoint\.cli$", line)
        if match:
            cli_us = int(match.group(1))
    return {
        "heavy": loaded.get("heavy"),
        "modules": loaded.get("modules"),
        "cli_import_ms": None if cli_us is None else cli_us / 1e3,
    }


def run(cli_runs: int, repeats: int, log: Any) -> dict[str, Any]:
    """Fill a small store, then time and probe every command."""
    import random

    import scale_stores

    from spanpoint.stores import open_store

    folder = Path(tempfile.mkdtemp(prefix="spanpoint-scale-cli-"))
    try:
        backend = scale_stores.SqliteBackend(folder / "checkpoints.db")
        store = open_store(backend.address)
        conn = backend.connect()
        filler = scale_stores.Filler(backend, time.time_ns() - 10**15, time.time())
        filler.calibrate(store, conn)
        filler.fill(conn, cli_runs)
        conn.close()
        filler.verify(store, cli_runs, random.Random(0), samples=10)
        store.close()
        run_id = scale_stores.run_id(0)
        interpreter = common.time_command([sys.executable, "-c", "pass"], repeats)
        out: dict[str, Any] = {
            "runs_in_store": cli_runs,
            "python_startup_s": interpreter.get("median_s"),
            "commands": {},
        }
        env = {"COLUMNS": "200", "NO_COLOR": "1"}
        for name, args in commands(backend.address, run_id).items():
            timed = common.time_command([str(common.SPANPOINT), *args], repeats, env)
            out["commands"][name] = {**timed, **imports(args)}
            log(f"cli: {name} done")
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tables(result: dict[str, Any]) -> str:
    """Markdown: one row per command."""
    headers = [
        "command", "wall s (median)", "min s", "imports LangChain/LangGraph",
        "modules loaded", "spanpoint.cli import ms",
    ]  # fmt: skip
    rows = []
    for name, r in result["commands"].items():
        heavy = r.get("heavy")
        rows.append(
            [
                f"`spanpoint {name}`",
                r["median_s"] if r.get("ok") else f"failed ({r.get('returncode')})",
                r.get("min_s"),
                "?" if heavy is None else (", ".join(heavy) if heavy else "no"),
                r.get("modules"),
                r.get("cli_import_ms"),
            ]
        )
    return (
        f"On a SQLite store of {result['runs_in_store']:,} runs; `python -c pass` takes "
        f"{common.fmt(result['python_startup_s'], 3)} s.\n\n" + common.md_table(headers, rows, 3)
    )


if __name__ == "__main__":
    got = run(int(sys.argv[1]) if len(sys.argv) > 1 else 1000, 3,
              lambda m: print(f"[scale] {m}", file=sys.stderr))  # fmt: skip
    print(tables(got))
