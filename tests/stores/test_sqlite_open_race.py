"""Processes that open one new SQLite store at the same moment all get it.

Workers of one job start together and open the store file none of them has created yet.
They race to switch it to WAL, and SQLite answers the loser "database is locked" at once,
without waiting on its busy timeout: before the fix about 2 of 100 such opens failed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

OPEN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from spanpoint.stores.sqlite import SqliteStore
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    store = SqliteStore(Path(sys.argv[1]))
    store.start_run("opened", None)
    print("opened")
    """
)

PROCESSES = 8
ROUNDS = 6


def test_processes_opening_a_new_store_at_once_all_get_it(tmp_path: Path) -> None:
    failures = []
    for round_ in range(ROUNDS):
        db = tmp_path / f"fresh-{round_}.db"
        start = time.time() + 1.0  # every process imported and waiting at the line
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN, str(db), str(start)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(PROCESSES)
        ]
        for racer in racers:
            out, err = racer.communicate(timeout=120)
            if racer.returncode != 0 or out.strip() != "opened":
                failures.append(err.strip().splitlines()[-1:] or [out])
    assert failures == [], failures
