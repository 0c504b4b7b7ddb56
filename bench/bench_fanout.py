"""A fan-out run and its replay; what a runner's stream adds per chunk.

Two measures, in one process, interleaved round by round:

- ``fanout``: ``Send`` × 3 into a compiled research subgraph (two model calls and one tool
  call per branch, no checkpointer) run inside a new ``spanpoint.run``, then the same run
  again: under ``strategy="calls"`` the graph runs again and every call replays; under
  ``graph_call`` the whole call replays. The model answers after LATENCY seconds (a
  provider's round trip; 0 measures spanpoint alone). Target: replay / run <= 0.1.
- ``stream``: a 200-step graph streamed in ``updates`` mode, bare (``graph.stream``) and through
  ``GraphRunner.stream`` inside a run; the difference per chunk is what the runner adds.

``--baseline SRC`` measures the stream part again with spanpoint imported from another source
tree (``/work/main/src``: today's), in a subprocess, and prints both: the per-chunk cost
compared in the same run.

Run: ``.venv/bin/python bench/bench_fanout.py [--rounds 5] [--latency 0.05] [--baseline SRC]``.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send

CHUNK_STEPS = 200
LIMIT = {"recursion_limit": CHUNK_STEPS + 10}


def _fanout_graph(latency: float) -> Any:
    class Model(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "bench"

        def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
            time.sleep(latency)
            turns = sum(isinstance(m, AIMessage) for m in messages)
            reply = AIMessage(content=f"{messages[0].content} turn {turns}")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    def search(query: str) -> str:
        """Search."""
        time.sleep(latency)
        return f"results for {query}"

    model = Model()

    class Branch(TypedDict):
        messages: Annotated[list[BaseMessage], add_messages]
        reports: Annotated[list[str], operator.add]

    class Out(TypedDict):
        reports: Annotated[list[str], operator.add]

    class Outer(TypedDict):
        topics: list[str]
        reports: Annotated[list[str], operator.add]

    def plan(state: Branch) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def look(state: Branch) -> dict[str, Any]:
        found = search.invoke({"query": str(state["messages"][0].content)})
        return {"messages": [HumanMessage(f"notes {found}")]}

    def write(state: Branch) -> dict[str, Any]:
        return {"reports": [str(model.invoke(state["messages"]).content)]}

    sub = StateGraph(Branch, output_schema=Out)
    for name, fn in (("plan", plan), ("search", look), ("write", write)):
        sub.add_node(name, fn)
    sub.add_edge(START, "plan")
    sub.add_edge("plan", "search")
    sub.add_edge("search", "write")
    outer = StateGraph(Outer)
    outer.add_node("researcher", sub.compile())
    outer.add_conditional_edges(
        START,
        lambda s: [
            Send("researcher", {"messages": [HumanMessage(t)], "reports": []}) for t in s["topics"]
        ],
    )
    return outer.compile()


def _chunk_graph() -> Any:
    class Count(TypedDict):
        n: int

    g = StateGraph(Count)
    g.add_node("bump", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "bump")
    g.add_conditional_edges("bump", lambda s: END if s["n"] >= CHUNK_STEPS else "bump")
    return g.compile()


def _setup(folder: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    import spanpoint

    spanpoint.configure(
        tracer_provider=TracerProvider(), store=spanpoint.SqliteStore(folder / "store.db")
    )


def measure_stream(rounds: int, folder: Path) -> dict[str, float]:
    """Per chunk, in µs: the bare stream, and the runner's stream inside a run."""
    import spanpoint

    _setup(folder)
    graph = _chunk_graph()
    runner = spanpoint.GraphRunner(graph, name="chunks", strategy="calls")
    bare, ran = [], []
    # A RunRequest: the form both today's runner and older ones take.
    request = spanpoint.RunRequest.start({"n": 0}, thread_id="t", config=LIMIT)
    for r in range(rounds):
        started = time.perf_counter()
        chunks = list(graph.stream({"n": 0}, LIMIT, stream_mode="updates"))
        bare.append((time.perf_counter() - started) / len(chunks))
        with spanpoint.run(f"stream-{r}"):
            started = time.perf_counter()
            chunks = list(runner.stream(request, stream_mode="updates"))
            ran.append((time.perf_counter() - started) / len(chunks))
    return {
        "bare_us_per_chunk": statistics.median(bare) * 1e6,
        "runner_us_per_chunk": statistics.median(ran) * 1e6,
        "added_us_per_chunk": (statistics.median(ran) - statistics.median(bare)) * 1e6,
    }


def measure_fanout(
    rounds: int, latency: float, folder: Path, strategy: str = "calls"
) -> dict[str, float]:
    """Wall ms of a fan-out run and of its replay (medians), and their ratio."""
    import spanpoint

    _setup(folder)
    runner = spanpoint.GraphRunner(_fanout_graph(latency), name="fanout", strategy=strategy)
    question = {"topics": ["a", "b", "c"], "reports": []}
    runs, replays = [], []
    for r in range(rounds):
        for bucket in (runs, replays):  # the first attempt runs, the second replays
            with spanpoint.run(f"fanout-{r}"):
                started = time.perf_counter()
                runner.invoke(question, thread_id=f"t-{r}")
                bucket.append(time.perf_counter() - started)
    run, replay = statistics.median(runs), statistics.median(replays)
    return {"run_ms": run * 1e3, "replay_ms": replay * 1e3, "replay_over_run": replay / run}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--baseline", default=None, help="another src tree for the stream part")
    parser.add_argument("--stream-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("SPANPOINT_STRICT", "0")
    with tempfile.TemporaryDirectory() as tmp:
        if args.stream_only:
            print(json.dumps(measure_stream(args.rounds, Path(tmp))))
            return
        results: dict[str, Any] = {"latency_s": args.latency}
        for strategy in ("calls", "graph_call"):
            for latency in sorted({0.0, args.latency}):
                sub = Path(tmp) / f"fanout-{strategy}-{latency}"
                sub.mkdir()
                found = measure_fanout(args.rounds, latency, sub, strategy)
                results[f"fanout {strategy} @{latency}s"] = found
        stream = Path(tmp) / "stream"
        stream.mkdir()
        results["stream"] = measure_stream(args.rounds, stream)
    if args.baseline:
        env = {**os.environ, "PYTHONPATH": args.baseline}
        done = subprocess.run(
            [sys.executable, __file__, "--stream-only", "--rounds", str(args.rounds)],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        results["stream_baseline"] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
