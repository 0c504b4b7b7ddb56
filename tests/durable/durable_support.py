"""Helpers of the durable-calls tests: telemetry, the instrumentor, subprocess attempts (forks
of tests/spawn.py's pre-imported servers, killed for real)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_fakes import KILL_ENV, LOG_ENV, labels

from spawn import run_python

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "durable_driver.py"

#: The zero-code switch of the durable scope (research note DESIGN15 §5). One constant, so a
#: different name chosen by the implementation is a one-line change here.
DURABLE_ENV = "SPANPOINT_DURABLE"


def load_instrumentor() -> Any:
    """spanpoint's zero-code instrumentor, as ``opentelemetry-instrument`` finds it.

    The entry point first; then the module it lives in, before or after the re-layout.
    """
    from importlib import import_module
    from importlib.metadata import entry_points

    for ep in entry_points(group="opentelemetry_instrumentor"):
        if ep.value.startswith("spanpoint"):
            try:
                return ep.load()()
            except ImportError:
                break
    for module in ("spanpoint.instrumentation", "spanpoint.instrumentor"):
        try:
            return import_module(module).SpanpointInstrumentor()
        except (ImportError, AttributeError):
            continue
    raise RuntimeError("spanpoint's zero-code instrumentor cannot be found")


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child attempt: no inherited spanpoint or OTel settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env.pop(KILL_ENV, None)
    env.update(extra)
    return env


@dataclass
class Attempt:
    """One subprocess attempt: how it ended, what it printed, what it executed."""

    returncode: int
    stdout: str
    stderr: str
    log: Path

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def out(self) -> dict[str, Any]:
        assert self.returncode == 0, f"attempt failed, rc={self.returncode}:\n{self.stderr[-4000:]}"
        return json.loads(self.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def executed(self, kind: str | None = None) -> Counter[str]:
        """What this attempt really executed (its own log file)."""
        return labels(self.log, kind)


def attempt(
    scenario: str,
    folder: Path,
    run_id: str,
    number: int,
    *options: str,
    kill_at: str | None = None,
    env: dict[str, str] | None = None,
    script: Path = DRIVER,
) -> Attempt:
    """Run attempt ``number`` of ``scenario`` in a new process (logging to its own file)."""
    log = folder / f"executions-{number}.jsonl"
    extra = {LOG_ENV: str(log), **(env or {})}
    if kill_at:
        extra[KILL_ENV] = kill_at
    done = run_python(
        [str(script), scenario, str(folder), run_id, *options],
        timeout=120, cwd=folder, env=child_env(**extra),
    )  # fmt: skip
    return Attempt(done.returncode, done.stdout, done.stderr, log)


def total(folder: Path, kind: str | None = None) -> Counter[str]:
    """Everything executed across all attempts in ``folder``."""
    counts: Counter[str] = Counter()
    for path in sorted(folder.glob("executions-*.jsonl")):
        counts += labels(path, kind)
    return counts
