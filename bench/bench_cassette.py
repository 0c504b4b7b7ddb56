"""A cassette replay against the live run it recorded, and recording against the calls
strategy (issue 16, performance; a benchmark, not a test).

The workload: one ``create_agent`` call with ``CheckpointMiddleware`` (four model calls, three
tool calls, two of them parallel), on an SDK tracer provider with no exporter. The model
answers from the conversation after ``latency`` seconds per call (a provider's round trip:
0.3 s by default, a fast hosted model); the tools take no time.

- ``live``: the agent inside a fresh ``spanpoint.run`` (the calls strategy, MemoryStore);
- ``record``: the agent inside ``spanpoint.cassette(path, mode="all")`` (writes the file);
- ``replay``: inside ``spanpoint.cassette(path, mode="none")`` (reads it, calls nothing);
- ``graph``: the same agent with no spanpoint at all and a model that answers at once: the
  graph's own work, which a cassette replay still does (a cassette replaces the calls, not the
  agent's code), so replay can never cost less than this.

Prints the median of each, replay / live (the issue's bound: at most 0.06) and record - live
(the issue's bound: recording adds no more than the calls strategy does, i.e. about 0).

    .venv/bin/python bench/bench_cassette.py [rounds] [latency_s]
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from langchain.agents import create_agent
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from fakes import ConversationModel
from spanpoint.stores import MemoryStore

REQUEST = {"messages": [{"role": "user", "content": "tickets 7 and 8, then order toner"}]}
PLAN = [
    [{"name": "lookup", "args": {"ticket": 7}}, {"name": "lookup", "args": {"ticket": 8}}],
    [{"name": "order", "args": {"item": "toner"}}],
    [],
]


class SlowModel(ConversationModel):
    """Answers from the conversation after ``latency`` seconds (a provider's round trip)."""

    latency: float = 0.3

    def answer(self, messages: Any) -> Any:
        time.sleep(self.latency)
        return super().answer(messages)


@tool
def lookup(ticket: int) -> str:
    """Look up a ticket."""
    return f"ticket {ticket}: toner"


@tool
def order(item: str) -> str:
    """Order an item."""
    return f"ordered {item}"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    latency = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3
    logging.getLogger("spanpoint").setLevel(logging.ERROR)
    spanpoint.configure(tracer_provider=TracerProvider(), store=MemoryStore())
    agent = create_agent(
        SlowModel(plan=[t for t in PLAN if t], final="Done.", latency=latency),
        [lookup, order],
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    bare = create_agent(
        SlowModel(plan=[t for t in PLAN if t], final="Done.", latency=0.0), [lookup, order]
    )
    path = Path(tempfile.mkdtemp()) / "bench.json"
    times: dict[str, list[float]] = {"live": [], "record": [], "replay": [], "graph": []}
    for _ in range(rounds):
        start = time.perf_counter()
        bare.invoke(REQUEST)
        times["graph"].append(time.perf_counter() - start)
        start = time.perf_counter()
        with spanpoint.run(f"live-{uuid.uuid4().hex}"):
            agent.invoke(REQUEST)
        times["live"].append(time.perf_counter() - start)
        start = time.perf_counter()
        with spanpoint.cassette(path, mode="all"):
            agent.invoke(REQUEST)
        times["record"].append(time.perf_counter() - start)
        start = time.perf_counter()
        with spanpoint.cassette(path, mode="none"):
            agent.invoke(REQUEST)
        times["replay"].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, value in med.items():
        print(f"{name:>7}: {value * 1000:9.1f} ms (median of {rounds})")
    print(f"replay / live: {med['replay'] / med['live']:.4f} (bound 0.06)")
    print(f"record - live: {(med['record'] - med['live']) * 1000:+.1f} ms")
    print(f"replay - graph alone: {(med['replay'] - med['graph']) * 1000:+.1f} ms")


if __name__ == "__main__":
    main()
