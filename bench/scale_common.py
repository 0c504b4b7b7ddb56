"""What the scale benchmarks share: percentiles, tables, a throwaway PostgreSQL, CLI timing.

The scale benchmarks (``bench/scale_*.py``) measure cost against size. They talk to spanpoint
only through its public surface — ``spanpoint.stores.open_store`` and the stores' protocol
methods, ``spanpoint.configure``/``run``/``step``, ``GraphRunner`` with
``CheckpointMiddleware`` — and to the ``spanpoint`` command as a subprocess, so they keep
measuring the same things while the package's insides change.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The ``spanpoint`` console script of the interpreter running the bench.
SPANPOINT = Path(sys.executable).parent / "spanpoint"


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of durations given in seconds, as milliseconds, with the count."""
    return {
        "n": len(seconds),
        "p50_ms": pct(seconds, 0.5) * 1e3,
        "p99_ms": pct(seconds, 0.99) * 1e3,
        "max_ms": (max(seconds) if seconds else float("nan")) * 1e3,
    }


def ratio(largest: float, smallest: float) -> float:
    """largest / smallest, NaN when the smallest is zero or missing."""
    try:
        return largest / smallest if smallest else float("nan")
    except TypeError:
        return float("nan")


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: numbers rounded, None and NaN as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "–"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 2) -> str:
    """A Markdown table; the first column is left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "| --- |" + " ---: |" * (len(headers) - 1),
    ]
    for row in rows:
        lines.append("| " + " | ".join(fmt(cell, digits) for cell in row) + " |")
    return "\n".join(lines)


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- a throwaway PostgreSQL ---------------------------------------------------------------


class Postgres:
    """A server from ``scripts/pg.sh`` (fsync off: the bench measures spanpoint, not the disk),
    or the one ``$SPANPOINT_BENCH_PG_DSN`` names (then it is neither started nor stopped)."""

    def __init__(self) -> None:
        self.dsn = os.environ.get("SPANPOINT_BENCH_PG_DSN", "")
        self.folder: str | None = None

    def start(self) -> Postgres:
        """Start the server unless one was given; return self."""
        if self.dsn:
            return self
        out = subprocess.run(
            ["bash", str(ROOT / "scripts" / "pg.sh"), "start"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PG_FSYNC": "off"},
        )
        exports = dict(re.findall(r"export (\w+)='([^']*)'", out.stdout))
        self.dsn, self.folder = exports["SPANPOINT_PG_DSN"], exports["SPANPOINT_PG_DIR"]
        return self

    def stop(self) -> None:
        """Stop a server this object started and delete its files."""
        if self.folder:
            subprocess.run(["bash", str(ROOT / "scripts" / "pg.sh"), "stop", self.folder])
            self.folder = None

    def database(self, name: str) -> str:
        """A fresh, empty database ``name`` on the server (dropped first); its DSN."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return with_dbname(self.dsn, name)

    def drop(self, name: str) -> None:
        """Drop database ``name`` (frees the disk between sizes)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def server_cpu_s(self) -> float | None:
        """CPU seconds the server's processes have used so far (live and reaped children),
        or None for a server this object did not start."""
        if not self.folder:
            return None
        try:
            pid = int((Path(self.folder) / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry.name) == pid:
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            elif int(fields[1]) == pid:
                total += int(fields[11]) + int(fields[12])
        return total / ticks


def processes_cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) the live processes ``pids`` have used so far; one that
    is gone counts nothing."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def with_dbname(dsn: str, dbname: str) -> str:
    """``dsn`` (a postgresql:// URL) pointing at database ``dbname``."""
    head, sep, query = dsn.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{dbname}{sep}{query}"


def with_param(dsn: str, key: str, value: str) -> str:
    """``dsn`` (a URL) with one more query parameter, e.g. ``application_name``."""
    return f"{dsn}{'&' if '?' in dsn else '?'}{key}={value}"


# --- the command line ---------------------------------------------------------------------


def time_command(
    argv: Sequence[str],
    repeats: int,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> dict:
    """Wall time of ``argv`` (process start included): median and min of ``repeats`` runs.

    A command that fails is reported with its exit code and the end of its stderr, never timed
    as if it had worked; one still running after ``timeout_s`` is killed and reported as such
    (its time is then only a lower bound).
    """
    walls: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                env={**os.environ, **(env or {})},
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return {"ok": False, "timeout_s": timeout_s, "returncode": None, "stderr": ""}
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            return {
                "ok": False,
                "returncode": done.returncode,
                "stderr": done.stderr[-400:],
                "stdout": done.stdout[-400:],
            }
    return {
        "ok": True,
        "median_s": statistics.median(walls),
        "min_s": min(walls),
        "repeats": repeats,
        "stdout_bytes": len(done.stdout),
    }


def runs_flags() -> dict[str, bool]:
    """Which paging options ``spanpoint runs --help`` offers (``--limit``, ``--offset``,
    ``--cursor``/``--after``): pagination means a way to the next page, not only a limit."""
    text = subprocess.run(
        [str(SPANPOINT), "runs", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    ).stdout
    flags = {name: f"--{name}" in text for name in ("limit", "offset", "cursor", "after")}
    flags["paginates"] = flags["offset"] or flags["cursor"] or flags["after"]
    return flags
