"""Helpers of the durable-calls tests: telemetry, the instrumentor, subprocess attempts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_fakes import KILL_ENV, LOG_ENV, labels
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanpoint

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "durable_driver.py"

#: The zero-code switch of the durable scope (research note DESIGN15 §5). One constant, so a
#: different name chosen by the implementation is a one-line change here.
DURABLE_ENV = "SPANPOINT_DURABLE"


@dataclass
class Otel:
    """spanpoint on a fresh SDK provider with an in-memory exporter and a SQLite store."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    store: Any
    extra: dict[str, Any] = field(default_factory=dict)

    def spans(self, prefix: str | None = None) -> list[ReadableSpan]:
        spans = list(self.exporter.get_finished_spans())
        return [s for s in spans if prefix is None or s.name.startswith(prefix)]

    def by_id(self) -> dict[int, ReadableSpan]:
        return {s.context.span_id: s for s in self.spans()}

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        return self.by_id().get(span.parent.span_id) if span.parent else None

    def runs(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if (s.attributes or {}).get("spanpoint.run.root")]


def make_otel(store_path: Path) -> Otel:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = spanpoint.SqliteStore(store_path)
    spanpoint.configure(tracer_provider=provider, store=store)
    return Otel(provider, exporter, store)


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
    done = subprocess.run(
        [sys.executable, str(script), scenario, str(folder), run_id, *options],
        capture_output=True, text=True, timeout=120, cwd=folder, env=child_env(**extra),
    )  # fmt: skip
    return Attempt(done.returncode, done.stdout, done.stderr, log)


def total(folder: Path, kind: str | None = None) -> Counter[str]:
    """Everything executed across all attempts in ``folder``."""
    counts: Counter[str] = Counter()
    for path in sorted(folder.glob("executions-*.jsonl")):
        counts += labels(path, kind)
    return counts
