"""Run length: one agent run of 10, 100 or 1,000 model calls on a growing conversation.

The agent is ``bench/workloads.py``'s ``create_agent`` support agent with its fake model
(``TicketModel``, which answers from the conversation: it calls ``lookup_ticket`` until the
conversation holds N AI turns, then answers), so a run of N model calls also makes N - 1 tool
calls and ends with a conversation of 2N + 1 messages. Each size runs in a fresh process per
setup:

- ``none``: the agent uninstrumented (what LangGraph and LangChain themselves cost: the
  conversation grows, so even they do more per call as it grows);
- ``floor_calls``: the same agent with ``bench/setups.py``'s floor middleware, every model and
  tool call a bare span plus the SQLite lease and commit of its output, with no spanpoint code:
  the control that says how much any durable middleware's cost per call grows with the run
  on this machine (the workload's own per-call work grows, and with it what the caches hold);
- ``spanpoint_calls``: ``spanpoint.CheckpointMiddleware()`` and ``GraphRunner(strategy=
  "calls")`` inside a ``spanpoint.run``, every model and tool call a boundary committed to a
  fresh SQLite store.

Per setup and size: wall and CPU time per model call (the invoke divided by N; medians over
enough repeated runs to make ~200 calls), the added cost per call (``spanpoint_calls`` or
``floor_calls`` minus ``none``), RSS before and after the timed runs and the peak, and the
spans and the bytes exported per call (one more run whose spans are encoded as OTLP
protobuf, outside the timings).
"""

from __future__ import annotations

import gc
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import scale_common as common

SETUPS = ("none", "floor_calls", "spanpoint_calls")
CALLS_PER_SIZE = 200  # repeat short runs until about this many model calls are timed
#: Fresh processes per setup and size, alternating setups; each figure is their median. One
#: process's median moved `none` alone by ±15 % at 10 calls (memory layout, the core it got),
#: and the criterion is a difference of two such medians: with 3 it still moved by ±0.1.
PROCESSES = 5


class Exporter:
    """Counts spans; in ``bytes`` mode also the size of their OTLP protobuf encoding."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.ok = SpanExportResult.SUCCESS
        self.spans = 0
        self.bytes = 0
        self.encode = False

    def export(self, spans: Sequence[Any]) -> Any:
        self.spans += len(spans)
        if self.encode:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            self.bytes += len(encode_spans(spans).SerializeToString())
        return self.ok

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is buffered."""
        return True


def build(setup: str, calls: int, store_dir: Path, exporter: Exporter) -> Any:
    """A function that performs one whole run of ``calls`` model calls under ``setup``."""
    import itertools

    import workloads
    from langchain.agents import create_agent
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[arg-type]
    middleware: list[Any] = []
    if setup == "floor_calls":
        import types

        import setups

        telemetry = types.SimpleNamespace(tracer_provider=provider)
        middleware = [setups.floor_middleware(store_dir, telemetry)]
    if setup == "spanpoint_calls":
        import spanpoint

        spanpoint.configure(store=str(store_dir / "checkpoints.db"), tracer_provider=provider)
        middleware = [spanpoint.CheckpointMiddleware()]
    agent = create_agent(
        workloads.TicketModel(tool_calls=calls - 1),
        tools=[workloads.lookup_ticket],
        system_prompt="You resolve support tickets.",
        middleware=middleware,
        name="support",
    )
    config = {"recursion_limit": 2 * calls + 10}
    ids = itertools.count()

    def check(messages: list[Any]) -> None:
        ai = sum(1 for m in messages if m.type == "ai")
        if ai != calls:
            raise AssertionError(f"the agent made {ai} model calls, not {calls}")

    if setup != "spanpoint_calls":

        def once() -> None:
            check(agent.invoke(workloads.agent_input(next(ids)), config)["messages"])

        return once
    import spanpoint
    from spanpoint.graph import GraphRunner, RunRequest

    runner = GraphRunner(agent, name="support", strategy="calls")

    def durable() -> None:
        i = next(ids)
        with spanpoint.run(f"length-{calls}-{i}"):
            request = RunRequest.start(workloads.agent_input(i), thread_id=f"t-{i}", config=config)
            result = runner.invoke(request)
        if result.replayed:
            raise AssertionError("a fresh run was replayed: the store was not fresh")
        check(result.output["messages"])

    return durable


def child(setup: str, calls: int) -> dict[str, Any]:
    """Measure one setup at one size in this (fresh) process; its store is deleted after."""
    store_dir = Path(tempfile.mkdtemp(prefix="spanpoint-scale-length-"))
    try:
        return _measure(setup, calls, store_dir)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


def _measure(setup: str, calls: int, store_dir: Path) -> dict[str, Any]:
    exporter = Exporter()
    # The short warm-up agent is built first: building configures spanpoint, and the measured
    # run's configuration (its tracer provider, so its exporter) must be the one in force.
    warm = build(setup, 10, store_dir, Exporter()) if calls > 10 else None
    once = build(setup, calls, store_dir, exporter)
    warm = warm or once
    for _ in range(3):
        warm()
    repeats = max(3, CALLS_PER_SIZE // calls)
    gc.collect()
    rss_before = common.rss_bytes()
    walls, cpus = [], []
    spans_before = exporter.spans
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        once()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    spans = (exporter.spans - spans_before) / repeats
    gc.collect()
    rss_after = common.rss_bytes()
    exporter.encode, exporter.spans = True, 0
    once()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "setup": setup,
        "calls": calls,
        "repeats": repeats,
        "wall_per_call_us": statistics.median(walls) / calls * 1e6,
        "cpu_per_call_us": statistics.median(cpus) / calls * 1e6,
        "run_wall_s": statistics.median(walls),
        "spans_per_call": spans / calls,
        "bytes_per_call": exporter.bytes / calls,
        "rss_before_mb": rss_before / 2**20,
        "rss_after_mb": rss_after / 2**20,
        "rss_peak_mb": peak / 2**20,
    }


def run(sizes: list[int], log: Any, processes: int = PROCESSES) -> dict[str, Any]:
    """Every setup at every size, ``processes`` fresh processes each (setups alternating, so
    both see the same phases of the machine's load); each figure is the processes' median,
    and every process's own figures are kept under ``processes``."""
    out: dict[str, Any] = {"sizes": sizes, "processes": processes, "setups": {}}
    seen: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for calls in sizes:
        for p in range(processes):
            for setup in SETUPS if p % 2 == 0 else SETUPS[::-1]:
                done = subprocess.run(
                    [sys.executable, __file__, "--child", setup, str(calls)],
                    capture_output=True,
                    text=True,
                    cwd=common.HERE,
                    env={**_env(), "PYTHONHASHSEED": "0"},
                )
                if done.returncode != 0:
                    raise RuntimeError(f"run length {setup} {calls}: {done.stderr[-2000:]}")
                seen.setdefault((setup, calls), []).append(json.loads(done.stdout.splitlines()[-1]))
            log(f"run length: {calls} calls, process {p + 1}/{processes} done")
    for (setup, calls), results in seen.items():
        merged: dict[str, Any] = {"setup": setup, "calls": calls, "processes": results}
        for key, value in results[0].items():
            if isinstance(value, int | float) and key not in ("calls",):
                merged[key] = statistics.median(r[key] for r in results)
        out["setups"].setdefault(setup, {})[str(calls)] = merged
    return out


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def tables(result: dict[str, Any]) -> str:
    """Markdown: per size, the setups and the added costs; then the ratios."""
    none, sp = result["setups"]["none"], result["setups"]["spanpoint_calls"]
    floor = result["setups"].get("floor_calls")
    headers = [
        "model calls", "none µs/call", "spanpoint µs/call", "added µs/call", "added CPU µs/call",
        "floor_calls added CPU µs/call",
        "spans/call", "bytes exported/call", "RSS MB before → after (peak)",
    ]  # fmt: skip
    rows = []
    for calls in result["sizes"]:
        n, s = none[str(calls)], sp[str(calls)]
        f = floor[str(calls)]["cpu_per_call_us"] - n["cpu_per_call_us"] if floor else "–"
        rows.append(
            [
                f"{calls:,}",
                n["wall_per_call_us"],
                s["wall_per_call_us"],
                s["wall_per_call_us"] - n["wall_per_call_us"],
                s["cpu_per_call_us"] - n["cpu_per_call_us"],
                f,
                s["spans_per_call"],
                s["bytes_per_call"],
                f"{s['rss_before_mb']:.0f} → {s['rss_after_mb']:.0f} ({s['rss_peak_mb']:.0f})",
            ]
        )
    if len(result["sizes"]) > 1:
        lo, hi = str(result["sizes"][0]), str(result["sizes"][-1])

        def added(key: str, size: str, setup: dict[str, Any] = sp) -> float:
            return float(setup[size][key] - none[size][key])

        floor_ratio = (
            common.fmt(common.ratio(added("cpu_per_call_us", hi, floor),
                                    added("cpu_per_call_us", lo, floor))) + "×"
            if floor else "–"
        )  # fmt: skip

        rows.append(
            [
                "ratio largest/smallest",
                common.fmt(common.ratio(none[hi]["wall_per_call_us"],
                                        none[lo]["wall_per_call_us"])) + "×",
                common.fmt(common.ratio(sp[hi]["wall_per_call_us"],
                                        sp[lo]["wall_per_call_us"])) + "×",
                common.fmt(common.ratio(added("wall_per_call_us", hi),
                                        added("wall_per_call_us", lo))) + "×",
                common.fmt(common.ratio(added("cpu_per_call_us", hi),
                                        added("cpu_per_call_us", lo))) + "×",
                floor_ratio,
                common.fmt(common.ratio(sp[hi]["spans_per_call"], sp[lo]["spans_per_call"])) + "×",
                common.fmt(common.ratio(sp[hi]["bytes_per_call"], sp[lo]["bytes_per_call"])) + "×",
                "",
            ]
        )  # fmt: skip
    return common.md_table(headers, rows, digits=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
    else:
        sizes = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "10,100").split(",")]
        print(tables(run(sizes, lambda m: print(f"[scale] {m}", file=sys.stderr))))
