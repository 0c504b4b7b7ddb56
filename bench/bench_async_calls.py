"""``agent_async`` under the ``calls`` strategy: wall time per invoke, alone and 8 at once.

The support agent (``workloads.build_agent``: 6 model calls and 5 tool calls per invoke, an
``InMemorySaver``) with ``CheckpointMiddleware``, driven by ``GraphRunner(strategy="calls")
.ainvoke``, each invoke inside its own ``spanpoint.run`` on a new thread, on a SQLite store on
disk: every model and tool call is a durable boundary that claims, commits and releases. The
model answers after ``await asyncio.sleep(MODEL_LATENCY_S)``, as a remote model would, so
while one run waits for its model the event loop can serve the others, unless a boundary
blocks it with store I/O.

- ``1``: one invoke at a time; the median wall time per invoke.
- ``8``: 8 invokes at once (``asyncio.gather``); the median of (batch wall time / 8).

``--compare SRC...`` measures each source tree (``PYTHONPATH=<tree>/src``, this file's
workloads) in a fresh interpreter, interleaved round by round, so a tree's figures and its
baseline's share the machine's state:

    .venv/bin/python bench/bench_async_calls.py --compare src /tmp/compat-base/src [--rounds 5]
        [--store postgres]

``--store postgres`` puts the checkpoints in PostgreSQL (a throwaway server from
``scripts/pg.sh``, a new database per process): every claim and commit is a round trip, the
case where a store call on the event loop stalls every other run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODEL_LATENCY_S = 0.002
INVOKES_SINGLE = 30
BATCHES_CONCURRENT = 5
CONCURRENCY = 8


def measure() -> dict[str, float]:
    """Median wall time per invoke (ms) alone and with CONCURRENCY at once, in this process."""
    import workloads
    from langchain_core.outputs import ChatResult
    from langgraph.checkpoint.memory import InMemorySaver
    from opentelemetry.sdk.trace import TracerProvider

    import spanpoint
    from spanpoint.graph import GraphRunner

    class RemoteTicketModel(workloads.TicketModel):
        async def _agenerate(self, messages: Any, stop: Any = None, **kwargs: Any) -> ChatResult:
            await asyncio.sleep(MODEL_LATENCY_S)
            return self._generate(messages, stop)

    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp()
    store = os.environ.get("BENCH_ASYNC_STORE") or str(Path(tmp) / "cp.db")
    spanpoint.configure(tracer_provider=TracerProvider(), store=store)
    from langchain.agents import create_agent

    agent = create_agent(
        RemoteTicketModel(),
        tools=[workloads.lookup_ticket],
        system_prompt="You resolve support tickets.",
        middleware=[spanpoint.CheckpointMiddleware()],
        checkpointer=InMemorySaver(),
        name="support",
    )
    runner = GraphRunner(agent, name="agent_async", strategy="calls")
    ids = itertools.count()

    async def one() -> None:
        n = next(ids)
        with spanpoint.run(f"run-{n}"):
            out = await runner.ainvoke(workloads.agent_input(n), thread_id=f"t-{n}")
        workloads.check_agent_output(out)

    async def main() -> dict[str, float]:
        for _ in range(5):  # warm-up
            await one()
        single = []
        for _ in range(INVOKES_SINGLE):
            start = time.perf_counter()
            await one()
            single.append(time.perf_counter() - start)
        concurrent = []
        for _ in range(BATCHES_CONCURRENT):
            start = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(CONCURRENCY)))
            concurrent.append((time.perf_counter() - start) / CONCURRENCY)
        return {
            "1": statistics.median(single) * 1e3,
            str(CONCURRENCY): statistics.median(concurrent) * 1e3,
        }

    return asyncio.run(main())


def compare(trees: list[str], rounds: int, store: str) -> None:
    """Each tree in a fresh interpreter per round, interleaved; medians over the rounds. With
    ``store="postgres"`` each process gets a new database on one throwaway server."""
    from scale_common import Postgres

    pg = Postgres().start() if store == "postgres" else None
    results: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    try:
        for n in range(rounds):
            for i, tree in enumerate(trees):
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                if pg is not None:
                    env["BENCH_ASYNC_STORE"] = pg.database(f"bench_async_{n}_{i}")
                out = subprocess.run(
                    [sys.executable, __file__], env=env, capture_output=True, text=True, check=True
                ).stdout
                results[tree].append(json.loads(out.strip().splitlines()[-1]))
    finally:
        if pg is not None:
            pg.stop()
    print(f"store: {store}")
    print(f"{'source':<28} {'1 at a time ms':>15} {f'{CONCURRENCY} at once ms':>15}")
    for tree, rows in results.items():
        alone = statistics.median(r["1"] for r in rows)
        together = statistics.median(r[str(CONCURRENCY)] for r in rows)
        print(f"{tree:<28} {alone:>15.2f} {together:>15.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--compare", nargs="+", default=None, help="source trees (src dirs)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare, args.rounds, args.store)
    else:
        print(json.dumps(measure()))
