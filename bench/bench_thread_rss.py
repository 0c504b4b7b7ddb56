"""Memory under thread durability: RSS and live objects over many thread-durable invokes.

The support agent (``workloads.build_agent``: 6 model calls and 5 tool calls per invoke) on
a LangGraph ``SqliteSaver`` on disk, each invoke on a new thread, zero-code with
``SPANPOINT_STRATEGY=calls SPANPOINT_DURABLE=thread`` (every model and tool call a durable
boundary, committed to spanpoint's SQLite store on disk). Both stores live on disk, so what
grows in memory is what the process keeps. Prints, after 0 (10 warm-up invokes), 1,000,
5,000 and 10,000 invokes: RSS (``/proc/self/statm``, after a full collection) and the number
of objects the collector tracks.

    .venv/bin/python bench/bench_thread_rss.py [invokes]
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import resource
import sqlite3
import sys
import tempfile
from pathlib import Path

os.environ["SPANPOINT_STRATEGY"] = "calls"
os.environ["SPANPOINT_DURABLE"] = "thread"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from langgraph.checkpoint.sqlite import SqliteSaver
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint.instrumentation import SpanpointInstrumentor

MARKS = (0, 1000, 5000, 10000)


def rss_mib() -> float:
    """Resident set size now, in MiB."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def main(total: int = MARKS[-1]) -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        provider = TracerProvider()
        spanpoint.configure(tracer_provider=provider, store=str(Path(tmp) / "checkpoints.db"))
        SpanpointInstrumentor().instrument(tracer_provider=provider)
        conn = sqlite3.connect(Path(tmp) / "langgraph.db", check_same_thread=False)
        graph = workloads.build_agent(checkpointer=SqliteSaver(conn))
        threads = itertools.count()

        def invoke(i: int) -> None:
            config = {"configurable": {"thread_id": f"t-{next(threads)}"}}
            workloads.check_agent_output(graph.invoke(workloads.agent_input(i), config))

        for i in range(10):  # warm-up: imports, memos of the fixed parts (tools, prompt)
            invoke(-1 - i)
        marks = [m for m in MARKS if m <= total] or [total]
        print(f"{'invokes':>8} {'RSS MiB':>9} {'gc objects':>11}")
        done = 0
        for mark in marks:
            while done < mark:
                invoke(done)
                done += 1
            gc.collect()
            print(f"{done:>8} {rss_mib():>9.1f} {len(gc.get_objects()):>11}", flush=True)
        SpanpointInstrumentor().uninstrument()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else MARKS[-1])
