"""One benchmark process: one setup around one workload, driven by ``bench/run.py``.

Protocol (JSON lines): the worker builds the setup, warms it up and prints ``{"ready": ...}``;
then for each command line on stdin it answers one line:

- ``{"op": "batch", "n": N}`` → ``{"wall_ns": [...], "cpu_ns": [...], "spans": S}``: N invokes
  each timed with ``perf_counter_ns`` (wall) and ``process_time_ns`` (CPU of the process, which
  machine load does not inflate); S spans were exported during the batch;
- ``{"op": "rss", "n": N}`` → ``{"rss_before": B, "rss_after": A}``: resident set size (bytes,
  from /proc, after a full GC) before and after N more invokes;
- ``{"op": "quit"}``.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import setups

WARMUP = 30
RSS_BATCH = 100  # invokes per run when a setup keeps a run open over a batch


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    """Build ``argv[1]`` (setup) around ``argv[2]`` (workload) and serve commands."""
    setup, workload = sys.argv[1], sys.argv[2]
    store_dir = Path(tempfile.mkdtemp(prefix=f"spanpoint-bench-{setup}-"))
    telemetry = setups.Telemetry()
    invoker = setups.make(setup, workload, store_dir, telemetry)
    counter = iter(range(1, 1 << 62))
    invoker.open_batch()
    for _ in range(WARMUP):
        invoker.call(next(counter))
    if workload != "linear":
        from workloads import check_agent_output

        check_agent_output(invoker.call(next(counter)))
    invoker.close_batch()
    _reply({"ready": True, "pid": os.getpid()})
    try:
        _serve(invoker, counter, telemetry)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


def _serve(invoker: setups.Invoker, counter: Any, telemetry: setups.Telemetry) -> None:
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        if command["op"] == "batch":
            _reply(_batch(invoker, counter, command["n"], telemetry))
        elif command["op"] == "rss":
            gc.collect()
            before = rss_bytes()
            for done in range(command["n"]):
                if done % RSS_BATCH == 0:
                    invoker.open_batch()
                invoker.call(next(counter))
                if done % RSS_BATCH == RSS_BATCH - 1 or done == command["n"] - 1:
                    invoker.close_batch()
            gc.collect()
            _reply({"rss_before": before, "rss_after": rss_bytes()})


def _batch(invoker: setups.Invoker, counter: object, n: int, telemetry: setups.Telemetry) -> dict:
    wall, cpu = [], []
    spans_before = telemetry.spans.count
    perf, proc = time.perf_counter_ns, time.process_time_ns
    invoker.open_batch()
    for _ in range(n):
        i = next(counter)  # type: ignore[call-overload]
        w0, c0 = perf(), proc()
        invoker.call(i)
        c1, w1 = proc(), perf()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
    invoker.close_batch()
    return {"wall_ns": wall, "cpu_ns": cpu, "spans": telemetry.spans.count - spans_before}


def _reply(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
