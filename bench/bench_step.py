"""The core engine: what one ``@spanpoint.step`` boundary costs, against its floor.

A boundary inside a durable run is a span plus a commit of its output; its replay is a read
plus a span. So the floor of an executed boundary is *one bare SDK span + one SQLite commit*,
and of a replayed one *one SQLite read + one bare span*; the target is at most 2× the floor.
All in one process, interleaved round by round:

- ``function``: a bare call of the step's body;
- ``sdk span``: the body inside ``start_as_current_span`` (``SimpleSpanProcessor`` + in-memory
  exporter, the exporter cleared between rounds);
- ``sqlite commit`` / ``sqlite read``: one ``INSERT`` of a checkpoint-sized row in its own
  transaction / one ``SELECT`` by primary key, on a WAL file with ``synchronous=NORMAL``
  (the SQLite store's settings);
- ``step``: a run of 100 ``@spanpoint.step`` boundaries with the SQLite store, per boundary
  (the run's own span and writes are amortized over its 100 steps);
- ``step replay``: the same run again, every boundary replayed from the store;
- ``protocol`` / ``replay protocol``: what an executed / replayed boundary cannot avoid, done
  by hand with spanpoint's store and serializer but none of its boundary code (see their
  docstrings): the line spanpoint's own glue is measured against.

Run alone: ``.venv/bin/python bench/bench_step.py [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

STEPS = 100


# What a step span carries inside a run (kind, name, run id, path, ordinal, key, replayed).
_ATTRIBUTES = {
    "spanpoint.boundary.kind": "step",
    "spanpoint.boundary.name": "lookup",
    "spanpoint.run.id": "bench-steps-1",
    "spanpoint.boundary.path": "lookup",
    "spanpoint.boundary.ordinal": 0,
    "spanpoint.checkpoint.key": "0" * 64,
    "spanpoint.replayed": False,
}

# What a replayed step's span carries: the same, replayed, and the original span's ids.
_REPLAY_ATTRIBUTES = {
    **_ATTRIBUTES,
    "spanpoint.replayed": True,
    "spanpoint.replay.original_trace_id": "0" * 31 + "1",
    "spanpoint.replay.original_span_id": "0" * 15 + "1",
}


def _body(i: int) -> dict[str, Any]:
    return {"ticket": i, "status": "open", "priority": 2}


class Bench:
    """The contenders, each a callable that does ``STEPS`` boundaries' worth of work."""

    def __init__(self, directory: Path) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        import spanpoint

        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("bench")
        spanpoint.configure(store=str(directory / "steps.db"), tracer_provider=provider)
        self.spanpoint = spanpoint
        self.step = spanpoint.step(name="lookup")(_body)
        self.db = sqlite3.connect(directory / "floor.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE t (key TEXT PRIMARY KEY, output BLOB, view TEXT)")
        self.keys = itertools.count()
        from spanpoint import serde
        from spanpoint.stores.base import Checkpoint
        from spanpoint.stores.sqlite import SqliteStore

        self.serde = serde
        self.protocol_store = SqliteStore(directory / "protocol.db")
        self.checkpoint = Checkpoint(
            "", "bench-protocol", "lookup", "lookup", "step", 0, "", b"", "0" * 32, "0" * 16
        )
        self.runs = itertools.count()
        self.replayed_run = "bench-steps-replayed"
        self.executed_steps()  # warm up, and the run every replay round replays
        self._run_steps(self.replayed_run)
        self.sqlite_commit()
        from spanpoint.stores.sqlite import SqliteStore as _Store

        self.replay_store = _Store(directory / "steps.db")
        self.replay_keys = [cp.key for cp in self.replay_store.list_checkpoints(self.replayed_run)]
        assert len(self.replay_keys) == STEPS

    def function(self) -> None:
        for i in range(STEPS):
            _body(i)

    def sdk_span(self) -> None:
        for i in range(STEPS):
            with self.tracer.start_as_current_span("step lookup"):
                _body(i)

    def sdk_span_attrs(self) -> None:
        for i in range(STEPS):
            with self.tracer.start_as_current_span("step lookup", attributes=_ATTRIBUTES):
                _body(i)

    def sqlite_commit(self) -> None:
        payload = b'{"ticket": 1, "status": "open", "priority": 2}'
        for _ in range(STEPS):
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(
                "INSERT INTO t VALUES (?, ?, ?)", (f"k{next(self.keys)}", payload, "{}")
            )
            self.db.execute("COMMIT")

    def sqlite_read(self) -> None:
        for i in range(STEPS):
            self.db.execute("SELECT output, view FROM t WHERE key = ?", (f"k{i}",)).fetchone()

    def protocol_steps(self) -> None:
        """What an executed boundary cannot avoid, done by hand on the same kind of store:
        its attributed span, the body, the lease (one write) and the commit (one write)."""
        store, owner = self.protocol_store, "bench-owner"
        for i in range(STEPS):
            key = f"{next(self.keys):064d}"
            with self.tracer.start_as_current_span("step lookup", attributes=_ATTRIBUTES):
                output = _body(i)
                store.claim(key, owner, 300.0, fresh=True)
            tag, data = self.serde.dumps(output)
            store.put(replace(self.checkpoint, key=key, output_type=tag, output=data), owner=owner)

    def replay_protocol(self) -> None:
        """What a replayed boundary cannot avoid, by hand, on the run every replay round
        replays: the store's claim of the committed key (one read, its integrity digest
        checked), the output read through the serializer's allow list, and the replay span
        with the step's attributes and a link to the original span, ended OK."""
        from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

        store, keys, ok = self.replay_store, self.replay_keys, Status(StatusCode.OK)
        for key in keys:
            cp = store.claim(key, "bench-owner", 300.0).checkpoint
            assert cp is not None
            self.serde.loads(cp.output_type, cp.output)
            original = SpanContext(
                int(cp.trace_id, 16), int(cp.span_id, 16), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )  # fmt: skip
            span = self.tracer.start_span(
                "step lookup (replayed)",
                attributes=_REPLAY_ATTRIBUTES,
                links=[Link(original, {"spanpoint.link": "original_execution"})],
            )
            span.set_status(ok)
            span.end()

    def executed_steps(self) -> None:
        self._run_steps(f"bench-steps-{next(self.runs)}")

    def replayed_steps(self) -> None:
        self._run_steps(self.replayed_run)

    def _run_steps(self, run_id: str) -> None:
        with self.spanpoint.run(run_id):
            for i in range(STEPS):
                self.step(i)

    def clear(self) -> None:
        self.exporter.clear()


CONTENDERS = (
    "function",
    "sdk_span",
    "sdk_span_attrs",
    "sqlite_commit",
    "sqlite_read",
    "protocol_steps",
    "executed_steps",
    "replayed_steps",
    "replay_protocol",
)


def run(quick: bool = False) -> dict[str, float]:
    """Median µs per boundary of each contender, interleaved over rounds."""
    rounds = 7 if quick else 25
    with tempfile.TemporaryDirectory(prefix="spanpoint-bench-steps-") as tmp:
        bench = Bench(Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
        for r in range(rounds):
            order = CONTENDERS[r % len(CONTENDERS) :] + CONTENDERS[: r % len(CONTENDERS)]
            for name in order:
                fn: Callable[[], None] = getattr(bench, name)
                start = time.process_time_ns()
                fn()
                times[name].append((time.process_time_ns() - start) / STEPS / 1e3)
                bench.clear()
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["floor_executed"] = medians["sdk_span"] + medians["sqlite_commit"]
    medians["floor_replayed"] = medians["sdk_span"] + medians["sqlite_read"]
    medians["protocol_executed"] = (
        medians["sdk_span_attrs"] + medians["sqlite_read"] + 2 * medians["sqlite_commit"]
    )
    return medians


def table(m: dict[str, float]) -> str:
    """A Markdown table of the step benchmark."""
    rows = [
        "### @spanpoint.step (µs of CPU per boundary, median of interleaved rounds)\n",
        "| contender | µs | × floor |",
        "| --- | ---: | ---: |",
        f"| bare function call | {m['function']:.1f} | |",
        f"| bare SDK span | {m['sdk_span']:.1f} | |",
        f"| SDK span with a step's 7 attributes | {m['sdk_span_attrs']:.1f} | |",
        f"| one SQLite commit | {m['sqlite_commit']:.1f} | |",
        f"| one SQLite read | {m['sqlite_read']:.1f} | |",
        f"| floor, executed = span + commit | {m['floor_executed']:.1f} | 1.00 |",
        f"| **step, executed (SQLite)** | {m['executed_steps']:.1f} "
        f"| **{m['executed_steps'] / m['floor_executed']:.2f}** |",
        f"| protocol floor, executed = attributed span + read + 2 commits (lease, checkpoint) "
        f"| {m['protocol_executed']:.1f} | {m['protocol_executed'] / m['floor_executed']:.2f} |",
        f"| protocol by hand, in place: attributed span + the store's lease + commit "
        f"| {m['protocol_steps']:.1f} | {m['protocol_steps'] / m['floor_executed']:.2f} |",
        f"| floor, replayed = span + read | {m['floor_replayed']:.1f} | 1.00 |",
        f"| **step, replayed (SQLite)** | {m['replayed_steps']:.1f} "
        f"| **{m['replayed_steps'] / m['floor_replayed']:.2f}** |",
        f"| replay protocol by hand: the store's claim (read + digest) + allow-listed load + "
        f"the attributed, linked span | {m['replay_protocol']:.1f} "
        f"| {m['replay_protocol'] / m['floor_replayed']:.2f} |",
    ]
    return "\n".join(rows)


def main() -> None:
    """Run alone and print the table."""
    parser = argparse.ArgumentParser(description="the @spanpoint.step benchmark")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("SPANPOINT_TRACE_FILE", os.devnull)
    print(table(run(quick=args.quick)))


if __name__ == "__main__":
    main()
