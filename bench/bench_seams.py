"""Call boundaries made by the seams vs CheckpointMiddleware's (issue 15, performance).

One ``create_agent`` call (two model calls, one tool call) under ``GraphRunner(strategy=
"calls")`` inside a fresh ``spanpoint.run`` each time (every call executes and commits), on an
SDK tracer provider with no exporter and a MemoryStore:

- ``middleware``: the agent has ``CheckpointMiddleware``; the seams step aside;
- ``seams``: the agent has no middleware; the model and tool seams make the boundaries;
- ``plain``: the same agent's ``invoke`` without spanpoint (the floor).

Prints the added cost per call (model or tool) of each way, in µs: ``(way - plain) / 3``.

    .venv/bin/python bench/bench_seams.py [rounds]
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from langchain.agents import create_agent
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from fakes import ConversationModel
from spanpoint.stores import MemoryStore

CALLS = 3  # two model calls and one tool call per agent call
REQUEST = {"messages": [{"role": "user", "content": "ticket 42?"}]}


@tool
def lookup(ticket: int) -> str:
    """Look a ticket up."""
    return f"ticket {ticket}: open"


def agent(middleware: bool) -> Any:
    model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": 42}}]])
    extra = [spanpoint.CheckpointMiddleware()] if middleware else []
    return create_agent(model, [lookup], middleware=extra)


def timed(fn: Any, rounds: int) -> float:
    for _ in range(20):  # warm-up: memos, imports, JIT-free but cache-hungry paths
        fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    spanpoint.configure(tracer_provider=TracerProvider(), store=MemoryStore())
    counter = iter(range(10**9))
    logging.getLogger("spanpoint").setLevel(logging.ERROR)  # the runners' graph warnings
    plain = agent(middleware=False)
    ways: dict[str, Any] = {"plain": lambda: plain.invoke(REQUEST)}
    for way in ("middleware", "seams"):
        runner = spanpoint.GraphRunner(agent(way == "middleware"), name=way, strategy="calls")

        def once(runner: Any = runner) -> None:
            with spanpoint.run(f"bench-{next(counter)}"):
                runner.invoke(REQUEST, thread_id="t")

        ways[way] = once
    # Interleaved blocks, the best block's median each: the machine is shared and noisy.
    blocks: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(5):
        for way, fn in ways.items():
            blocks[way].append(timed(fn, rounds // 5))
    results = {way: min(found) for way, found in blocks.items()}
    floor = results["plain"]
    print(f"plain agent call: {floor:.0f} µs")
    for way in ("middleware", "seams"):
        added = (results[way] - floor) / CALLS
        print(f"{way:>10}: {results[way]:.0f} µs per agent call, {added:.0f} µs added per call")


if __name__ == "__main__":
    main()
