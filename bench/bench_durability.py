"""The price of ``durability="sync"`` (issue 15 item 4): what GraphRunner and the zero-code
patch choose inside a run when the graph has a durable checkpointer and the caller chose none.

Run: ``.venv/bin/python bench/bench_durability.py [--invokes N]``. A 10-node ``StateGraph`` of
trivial nodes (the ``linear`` workload's shape) on a file ``SqliteSaver``, a fresh thread per
invoke, LangGraph alone (no spanpoint), with ``durability="async"`` (LangGraph's default) and
``"sync"``, interleaved rounds; prints the median ms per invoke of each and the difference.
"""

from __future__ import annotations

import argparse
import itertools
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict


class State(TypedDict, total=False):
    n: int


def build(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    names = [f"n{i}" for i in range(10)]
    for name in names:
        g.add_node(name, lambda s: {"n": s.get("n", 0) + 1})
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g.compile(checkpointer=saver)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--invokes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(Path(folder) / "lg.db", check_same_thread=False)
        graph = build(SqliteSaver(conn))
        times: dict[str, list[float]] = {"async": [], "sync": []}
        thread = 0
        for _ in range(args.rounds):
            for mode in ("async", "sync"):
                for _ in range(args.invokes):
                    thread += 1
                    config = {"configurable": {"thread_id": f"t{thread}"}}
                    start = time.perf_counter()
                    graph.invoke({"n": 0}, config, durability=mode)
                    times[mode].append((time.perf_counter() - start) * 1000)
        conn.close()
    med = {mode: statistics.median(values) for mode, values in times.items()}
    print(f"async {med['async']:.3f} ms/invoke, sync {med['sync']:.3f} ms/invoke, "
          f"sync costs {med['sync'] - med['async']:+.3f} ms ({med['sync'] / med['async']:.2f}x)")


if __name__ == "__main__":
    main()
