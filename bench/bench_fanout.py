"""A fan-out run against its replay, LangGraph's floor beside them; a stream's cost per chunk.

Self-contained: the graphs, the model and the measures are all in this file.

``fanout`` (this source tree, one subprocess, every measure interleaved round by round):
``Send`` × 3 into a compiled research subgraph, each branch two model calls and one tool call
(nine calls), no checkpointer. Per round, three runs of the same graph shape:

- **floor**: the plain graph (``graph.invoke``, no spanpoint) with an instant model: what
  LangGraph itself costs to run the nine nodes' worth of work, the least any replay can cost
  under ``strategy="calls"`` (the graph runs again and each call replays inside it);
- **run**: ``GraphRunner.invoke`` inside a new ``spanpoint.run``, every call executed;
- **replay**: the same run again (a rerun of the completed run): under ``calls`` the graph
  runs and each of the nine calls replays; under ``graph_call`` the whole call replays.

Each model and tool call takes LATENCY seconds (0: an instant model, spanpoint and LangGraph
alone; 0.05: a provider's round trip). The bench checks what it measures: a run executes nine
calls, a replay none. Target: replay / run <= 0.1.

``--profile``: where the time of an instant-model replay under ``calls`` goes, by package
(cProfile in every thread, own time summed by package).

``stream`` (one subprocess per source tree per round, trees in alternating order): a graph of
CHUNK_STEPS steps streamed in ``updates`` mode, bare (``graph.stream``/``astream``) and through
``GraphRunner.stream``/``astream`` inside a run, with no checkpointer and with
``InMemorySaver`` (a thread with state: the path that plans a rerun). Per chunk = the stream's
wall time over its chunks; added = runner - bare, split into what one more chunk adds (the
slope from a SHORT_STEPS-chunk stream) and a fixed part per stream. ``--baseline [NAME=]SRC``
(repeatable) adds another source tree, e.g. a ``git worktree`` of an earlier commit; the
differences are paired round by round.

Run: ``.venv/bin/python bench/bench_fanout.py [--rounds 7] [--latency 0.05] [--profile]
[--baseline base=/tmp/fanout-base/src ...]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import threading
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

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
CHUNK_STEPS = 200
SHORT_STEPS = 20
TOPICS = ["a", "b", "c"]
CALLS = 3 * len(TOPICS)


class Executions:
    """Real executions of the bench's model and tool (a check on the bench, not an answer)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.count += 1


def fanout_graph(latency: float, executions: Executions, *, calls: bool = True) -> Any:
    """Send × 3 into a compiled subgraph: plan (model), search (tool), write (model). Without
    ``calls`` the nodes write the same answers themselves: LangGraph alone."""

    class Model(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "bench"

        def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
            executions.add()
            time.sleep(latency)
            turns = sum(isinstance(m, AIMessage) for m in messages)
            reply = AIMessage(content=f"{messages[0].content} turn {turns}")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    def search(query: str) -> str:
        """Search."""
        executions.add()
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

    def answer(messages: list[BaseMessage]) -> BaseMessage:
        if calls:
            return model.invoke(messages)
        return AIMessage(
            f"{messages[0].content} turn {sum(isinstance(m, AIMessage) for m in messages)}"
        )

    def plan(state: Branch) -> dict[str, Any]:
        return {"messages": [answer(state["messages"])]}

    def look(state: Branch) -> dict[str, Any]:
        query = str(state["messages"][0].content)
        found = search.invoke({"query": query}) if calls else f"results for {query}"
        return {"messages": [HumanMessage(f"notes {found}")]}

    def write(state: Branch) -> dict[str, Any]:
        return {"reports": [str(answer(state["messages"]).content)]}

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


QUESTION = {"topics": TOPICS, "reports": []}
REPORTS = sorted(f"{t} turn 1" for t in TOPICS)


def _setup(folder: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    import spanpoint

    spanpoint.configure(
        tracer_provider=TracerProvider(), store=spanpoint.SqliteStore(folder / "store.db")
    )


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# --- fan-out: run, replay, floor -------------------------------------------------------------


def measure_fanout(rounds: int, latency: float, strategy: str, folder: Path) -> dict[str, Any]:
    """Wall ms (medians over rounds) of the floors, a run and its replay; checked as it goes.

    Two floors, each the best of three in its round, taken before the run in even rounds and
    after the replay in odd ones: ``plain`` (the graph with an instant model and tool, no
    spanpoint) and ``langgraph`` (the nodes answer themselves: LangGraph alone)."""
    import spanpoint

    _setup(folder)
    counted = Executions()
    runner = spanpoint.GraphRunner(fanout_graph(latency, counted), name="fanout", strategy=strategy)
    plain = fanout_graph(0.0, Executions())
    bare = fanout_graph(0.0, Executions(), calls=False)
    assert sorted(bare.invoke(QUESTION)["reports"]) == REPORTS
    plains: list[float] = []
    bares: list[float] = []
    runs, replays = [], []

    def floors() -> tuple[float, float]:
        return (
            min(_timed(lambda: plain.invoke(QUESTION)) for _ in range(3)),
            min(_timed(lambda: bare.invoke(QUESTION)) for _ in range(3)),
        )

    for r in range(-1, rounds):  # round -1 warms up
        if r % 2 == 0:
            floor = floors()
        results = []
        for bucket in (runs, replays):  # the first attempt runs, the second replays
            before = counted.count
            with spanpoint.run(f"fanout-{strategy}-{latency}-{r}"):
                started = time.perf_counter()
                results.append(runner.invoke(QUESTION, thread_id=f"t{r}"))
                took = time.perf_counter() - started
            executed = counted.count - before
            expected = CALLS if bucket is runs else 0
            assert executed == expected, f"{strategy}: {executed} executions, not {expected}"
            assert sorted(results[-1].output["reports"]) == REPORTS, results[-1].output
            if r >= 0:
                bucket.append(took)
        if r % 2:
            floor = floors()
        if r >= 0:
            plains.append(floor[0])
            bares.append(floor[1])
    run, replay, plain_ms, bare_ms = (statistics.median(x) for x in (runs, replays, plains, bares))
    return {
        "run_ms": run * 1e3,
        "replay_ms": replay * 1e3,
        "floor_plain_ms": plain_ms * 1e3,
        "floor_langgraph_ms": bare_ms * 1e3,
        "replay_over_run": replay / run,
        "floor_langgraph_over_run": bare_ms / run,
        "langgraph_share_of_replay": bare_ms / replay,
        "replay_ratio_per_round": [round(p / q, 3) for p, q in zip(replays, runs, strict=True)],
    }


PACKAGES = ("langgraph", "langchain_core", "spanpoint", "opentelemetry", "pydantic", "ormsgpack")
#: C functions in which a thread waits rather than works (LangGraph's calling thread on its
#: branches, a pool thread between tasks): not counted.
WAITING = ("acquire' of '_thread", "method 'get' of '_queue", "built-in method time.sleep")


def _package(filename: str) -> str | None:
    for name in PACKAGES:
        if f"/{name}/" in filename:
            return name
    return None


def _own_times(stats: dict[Any, Any]) -> dict[str, float]:
    """Own time by package. A function of none of them (the standard library, a C function)
    counts for the packages that called it, in proportion to the time each call took there,
    followed up the callers until a package's function; "other" if none is found."""
    owners: dict[Any, dict[str, float]] = {}

    def owner(func: Any, seen: frozenset[Any]) -> dict[str, float]:
        if func in owners:
            return owners[func]
        name = _package(func[0])
        if name is not None:
            return {name: 1.0}
        callers = stats[func][4] if func in stats else {}
        spread = sum(c[3] for c in callers.values())
        if not spread or func in seen:
            return {"other": 1.0}
        found: dict[str, float] = {}
        for caller, c in callers.items():
            for pkg, share in owner(caller, seen | {func}).items():
                found[pkg] = found.get(pkg, 0.0) + share * c[3] / spread
        owners[func] = found
        return found

    shares: dict[str, float] = {}
    for func, (_cc, _nc, own, _cum, _callers) in stats.items():
        if func[0] == "~" and any(w in func[2] for w in WAITING):
            continue
        for pkg, share in owner(func, frozenset()).items():
            shares[pkg] = shares.get(pkg, 0.0) + own * share
    return shares


def profile_replay(replays: int, folder: Path) -> dict[str, Any]:
    """Where an instant-model replay under ``calls`` spends its CPU, by package: cProfile in
    every thread (LangGraph runs the branches on a pool's threads, started per call), timed
    by each thread's CPU clock (a wall clock would charge a C call that released the GIL with
    the other threads' turn), own time summed by the package of each function's file (the
    standard library's and C functions' by the package that called them)."""
    import spanpoint

    _setup(folder)
    runner = spanpoint.GraphRunner(fanout_graph(0.0, Executions()), name="fanout", strategy="calls")
    with spanpoint.run("profiled"):
        runner.invoke(QUESTION, thread_id="p")
    profiles: list[cProfile.Profile] = []

    def start_in_thread(*_: Any) -> None:  # a new thread's first event: profile it from here
        profile = cProfile.Profile(time.thread_time)
        profiles.append(profile)
        profile.enable()

    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    threading.setprofile(start_in_thread)
    try:
        for _ in range(replays):
            with spanpoint.run("profiled"):
                main.enable()
                runner.invoke(QUESTION, thread_id="p")
                main.disable()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    shares: dict[str, float] = {}
    for profile in profiles:
        profile.create_stats()
        for name, own in _own_times(profile.stats).items():  # type: ignore[attr-defined]
            shares[name] = shares.get(name, 0.0) + own
    total = sum(shares.values())
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return {
        "replays": replays,
        "threads": len(profiles),
        "own_time_share": {k: round(v / total, 3) for k, v in ranked},
    }


def fanout_worker(rounds: int, latencies: list[float], profile: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for latency in latencies:
            for strategy in ("calls", "graph_call"):
                folder = Path(tmp) / f"{strategy}-{latency}"
                folder.mkdir()
                out[f"{strategy} @ {latency * 1e3:g} ms/call"] = measure_fanout(
                    rounds, latency, strategy, folder
                )
        if profile:
            folder = Path(tmp) / "profile"
            folder.mkdir()
            out["profile"] = profile_replay(profile, folder)
    return out


# --- stream: per chunk, bare and through the runner -------------------------------------------


def chunk_graph(checkpointer: Any, steps: int) -> Any:
    class Count(TypedDict):
        n: int

    g = StateGraph(Count)
    g.add_node("bump", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "bump")
    g.add_conditional_edges("bump", lambda s: END if s["n"] >= steps else "bump")
    return g.compile(checkpointer=checkpointer)


STREAMS = [f"{form} {saver}" for form in ("stream", "astream") for saver in ("none", "memory")]


def _count(chunks: Any) -> int:
    return sum(1 for _ in chunks)


async def _acount(chunks: Any) -> int:
    return sum([1 async for _ in chunks])


def stream_worker(reps: int) -> dict[str, Any]:
    """One tree, each form and saver, medians over reps. Per chunk, µs: a CHUNK_STEPS-chunk
    stream's wall time over its chunks, bare and through the runner (the stream's fixed costs
    spread over its chunks). And the split of what the runner adds: ``added_marginal_us``, the
    slope between a SHORT_STEPS- and a CHUNK_STEPS-chunk stream (what one more chunk costs),
    and ``added_fixed_ms``, what is left at zero chunks (the span, the rerun plan, the final
    state)."""
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver

    import spanpoint

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        _setup(Path(tmp))
        for case in STREAMS:
            form, saver = case.split()

            def count(chunks: Any, form: str = form) -> int:
                return _count(chunks) if form == "stream" else asyncio.run(_acount(chunks))

            took: dict[tuple[str, int], list[float]] = {}
            for steps in (SHORT_STEPS, CHUNK_STEPS):
                graph = chunk_graph(InMemorySaver() if saver == "memory" else None, steps)
                runner = spanpoint.GraphRunner(graph, name="chunks", strategy="calls")
                limit = {"recursion_limit": steps + 10}
                for r in range(-1, reps):  # rep -1 warms up
                    thread = {"configurable": {"thread_id": f"bare-{case}-{r}"}, **limit}
                    started = time.perf_counter()
                    n = count(getattr(graph, form)({"n": 0}, thread, stream_mode="updates"))
                    bare = time.perf_counter() - started
                    # A RunRequest: the form every version of the runner takes.
                    request = spanpoint.RunRequest.start({"n": 0}, thread_id=f"s-{r}", config=limit)
                    with spanpoint.run(f"{case}-{steps}-{r}"):
                        started = time.perf_counter()
                        m = count(getattr(runner, form)(request, stream_mode="updates"))
                        ran = time.perf_counter() - started
                    assert n == m == steps, (n, m, steps)
                    if r >= 0:
                        took.setdefault(("bare", steps), []).append(bare)
                        took.setdefault(("runner", steps), []).append(ran)
            t = {key: statistics.median(v) for key, v in took.items()}
            added = {
                steps: t["runner", steps] - t["bare", steps] for steps in (SHORT_STEPS, CHUNK_STEPS)
            }
            marginal = (added[CHUNK_STEPS] - added[SHORT_STEPS]) / (CHUNK_STEPS - SHORT_STEPS)
            out[case] = {
                "bare_us": t["bare", CHUNK_STEPS] / CHUNK_STEPS * 1e6,
                "runner_us": t["runner", CHUNK_STEPS] / CHUNK_STEPS * 1e6,
                "added_us": added[CHUNK_STEPS] / CHUNK_STEPS * 1e6,
                "added_marginal_us": marginal * 1e6,
                "added_fixed_ms": (added[SHORT_STEPS] - SHORT_STEPS * marginal) * 1e3,
            }
    return out


def _worker(src: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "SPANPOINT_STRICT": "0"}
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"worker on {src} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def compare_streams(trees: dict[str, Path], rounds: int, reps: int) -> dict[str, Any]:
    """Each round runs every tree's worker, in alternating order; medians over rounds."""
    per_round: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    names = list(trees)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            per_round[name].append(_worker(trees[name], "--worker", "stream", "--reps", str(reps)))
    out: dict[str, Any] = {}
    for name, found in per_round.items():
        out[name] = {
            saver: {
                k: round(statistics.median(f[saver][k] for f in found), 1)
                for k in ("bare_us", "runner_us", "added_us", "added_marginal_us", "added_fixed_ms")
            }
            for saver in STREAMS
        }
    head = names[0]
    for name in names[1:]:
        for saver in STREAMS:
            pairs = list(zip(per_round[head], per_round[name], strict=True))
            found = {}
            for k in ("added_us", "added_marginal_us", "added_fixed_ms"):
                deltas = [h[saver][k] - b[saver][k] for h, b in pairs]
                found[f"{k} median"] = round(statistics.median(deltas), 2)
                found[f"{k} per round"] = [round(d, 2) for d in deltas]
            out.setdefault(f"{head} - {name}", {})[saver] = found
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=5, help="stream reps per worker")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="profile N replays")
    parser.add_argument(
        "--baseline", action="append", default=[], metavar="[NAME=]SRC", help="another src tree"
    )
    parser.add_argument("--skip", choices=["fanout", "stream"], default=None)
    parser.add_argument("--worker", choices=["fanout", "stream"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "stream":
        print(json.dumps(stream_worker(args.reps)))
        return
    if args.worker == "fanout":
        latencies = sorted({0.0, args.latency})
        print(json.dumps(fanout_worker(args.rounds, latencies, args.profile)))
        return
    results: dict[str, Any] = {"rounds": args.rounds}
    if args.skip != "fanout":
        go = ["--worker", "fanout", "--rounds", str(args.rounds), "--latency", str(args.latency)]
        results["fanout"] = _worker(SRC, *go, "--profile", str(args.profile))
    if args.skip != "stream":
        trees = {"head": SRC}
        for given in args.baseline:
            name, _, path = given.rpartition("=")
            trees[name or path] = Path(path)
        results["stream"] = compare_streams(trees, args.rounds, args.reps)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
