"""Guard overhead per agent step, end to end (target: < 0.1 ms median).

The number this prints for issue 6 is the **end-to-end overhead per agent step**: the same
agent run with and without the guard, CPU time of the process for a whole run, the
difference divided by the number of agent steps (one model call and the tool calls it asks
for). It is measured for both adapters:

* ``create_agent`` with a fake model, plain vs ``GuardMiddleware``;
* a hand-built agent ⇄ tools ``StateGraph``, plain vs ``guard_graph``.

Method: interleaved A/B rounds (one run of each variant per round, the order alternating,
``gc.collect()`` before each run, the run's thread deleted from the InMemorySaver after it),
process CPU time (the checkpointer writes on a background thread; wall time on a shared
machine mostly measures the neighbours), medians of the per-round differences. Beside it:

* the **check alone** — the guard engine's ``before_model`` + ``after_model`` for one step
  (one tool call with arguments, one tool result, reported usage) on a run whose windows
  are full, in a tight loop;
* the **checks inside real runs** — the same two calls timed while the agent runs (thread
  CPU time), which is what the end-to-end number contains of the guard's own logic;
* for ``create_agent``, a **pass-through middleware** with the guard's state keys and the
  same hooks that does nothing: what LangChain charges any such middleware per step.

The fake model answers from the conversation (the number of AI turns so far) and never
repeats a call, so the guard runs its full analysis every step without ever intervening.

Run: ``.venv/bin/python bench/bench_guard.py [--quick] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentMiddleware, ExtendedModelResponse
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from spanpoint.guard import GuardConfig, GuardMiddleware, guard_graph
from spanpoint.guard.engine import STATE_KEY, GuardEngine, new_state, state_updates
from spanpoint.guard.middleware import GuardAgentState
from spanpoint.guard.telemetry import GuardTelemetry

STEPS = 40  # tool-calling turns; the run makes STEPS + 1 model calls (the last one answers)
AGENT_STEPS = STEPS + 1
TARGET_US = 100.0


class TurnModel(BaseChatModel):
    """Calls ``search`` with a new query each turn; answers after ``steps`` turns."""

    steps: int = STEPS

    @property
    def _llm_type(self) -> str:
        return "bench-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        return self.bind(**kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = sum(1 for m in messages if m.type == "ai")
        usage = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
        meta = {"model_name": "bench-model"}
        if turn >= self.steps:
            reply = AIMessage(content="done", usage_metadata=usage, response_metadata=meta)
        else:
            call = {
                "name": "search",
                "args": {"query": f"question {turn}", "limit": 5},
                "id": f"call_{turn}",
                "type": "tool_call",
            }
            reply = AIMessage(
                content="", tool_calls=[call], usage_metadata=usage, response_metadata=meta
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def search(query: str, limit: int) -> str:
    """Search (returns a result that differs per query)."""
    return f"{limit} results for {query}"


def config() -> GuardConfig:
    return GuardConfig(max_steps=10_000)


class PassThrough(AgentMiddleware[GuardAgentState, Any, Any]):
    """The guard's state keys and hooks, doing nothing: LangChain's cost of any middleware.

    Like the guard it starts a run in ``before_agent`` and writes a guard state at each
    model call; its ``wrap_model_call`` carries its signature the way the guard's does.
    """

    state_schema = GuardAgentState

    def __init__(self) -> None:
        super().__init__()
        self.tools = []
        self._state = new_state()

        def wrap_model_call(request: Any, handler: Any) -> Any:
            return ExtendedModelResponse(handler(request), Command(update={STATE_KEY: self._state}))

        wrap_model_call.__signature__ = inspect.signature(wrap_model_call)  # type: ignore[attr-defined]
        self.wrap_model_call = wrap_model_call  # type: ignore[method-assign]

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return state_updates(new_state())

    def wrap_model_call(self, request: Any, handler: Any) -> Any:  # replaced per instance
        raise NotImplementedError


def agent_variants() -> dict[str, Any]:
    def agent(middleware: list[Any]) -> Any:
        return create_agent(
            TurnModel(), [search], middleware=middleware, checkpointer=InMemorySaver()
        )

    return {
        "plain": agent([]),
        "guarded": agent([GuardMiddleware(config())]),
        "pass-through": agent([PassThrough()]),
    }


def graph_variants() -> dict[str, Any]:
    model = TurnModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return {
        "plain": builder.compile(checkpointer=InMemorySaver()),
        "guarded": guard_graph(builder, config()).compile(checkpointer=InMemorySaver()),
    }


def run_us(graph: Any, thread: str) -> float:
    """Process CPU µs per agent step for one run on a fresh thread."""
    gc.collect()
    cfg = {"configurable": {"thread_id": thread}}
    start = time.process_time_ns()
    out = graph.invoke({"messages": [("user", "go")]}, cfg)
    elapsed = time.process_time_ns() - start
    assert out["messages"][-1].text == "done"
    graph.checkpointer.delete_thread(thread)  # keeps the saver (and the heap) the same size
    return elapsed / 1000 / AGENT_STEPS


def ab_rounds(variants: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """µs per agent step of each variant, one run of each per round, order alternating."""
    names = list(variants)
    for name in names:  # warm-up
        run_us(variants[name], f"warm-{name}")
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(run_us(variants[name], f"{name}-{r}"))
    return times


def check_alone(steps: int) -> list[float]:
    """µs per step for the engine's two checks, in a tight loop."""
    engine = GuardEngine(config(), GuardTelemetry())
    state = new_state()
    history: list[BaseMessage] = [HumanMessage("go")]
    samples = []
    for turn in range(steps):
        ai = AIMessage(
            content="",
            id=f"ai-{turn}",
            tool_calls=[
                {"name": "search", "args": {"query": f"q{turn}", "limit": 5}, "id": f"c{turn}"}
            ],
            usage_metadata={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
            response_metadata={"model_name": "bench-model"},
        )
        result = ToolMessage(content=f"result {turn}", tool_call_id=f"c{turn}", name="search")
        start = time.thread_time_ns()
        before = engine.before_model(state, history)
        after = engine.after_model(before.state, ai, history, owned=True)
        samples.append((time.thread_time_ns() - start) / 1000)
        state = after.state
        history = [*history[-6:], ai, result]  # the tail is all a check ever reads
    return samples[steps // 10 :]  # drop warm-up


def checks_in_run(graph: Any, runs: int) -> list[float]:
    """µs per agent step spent in the engine's checks during real runs (thread CPU time)."""
    spent: list[int] = []
    original = GuardEngine.before_model, GuardEngine.after_model

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.append(time.thread_time_ns() - start)

        return wrapper

    GuardEngine.before_model = timed(original[0])  # type: ignore[method-assign]
    GuardEngine.after_model = timed(original[1])  # type: ignore[method-assign]
    try:
        per_run = []
        for run in range(runs):
            spent.clear()
            run_us(graph, f"in-run-{run}")
            per_run.append(sum(spent) / 1000 / AGENT_STEPS)
    finally:
        GuardEngine.before_model, GuardEngine.after_model = original  # type: ignore[method-assign]
    return per_run


def reference_us(repeat: int = 2_000) -> float:
    """A fixed pure-Python workload, to scale the other rows to the machine's current speed
    (about 30-50 µs on an idle 2020s x86 core)."""
    samples = []
    for _ in range(repeat):
        start = time.thread_time_ns()
        sum(i * i for i in range(1000))
        samples.append((time.thread_time_ns() - start) / 1000)
    return statistics.median(samples)


def quartiles(values: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.0f} … {q3:.0f}"


def report(label: str, times: dict[str, list[float]], in_run: list[float]) -> float:
    plain = times["plain"]
    print(f"| {label}: plain agent step | {statistics.median(plain):.0f} µs | |")
    overhead = 0.0
    for name in [n for n in times if n != "plain"]:
        diffs = [v - p for v, p in zip(times[name], plain, strict=True)]
        median = statistics.median(diffs)
        print(f"| {label}: {name} agent step | {statistics.median(times[name]):.0f} µs | |")
        what = (
            "**guard overhead per agent step, end to end**"
            if name == "guarded"
            else (f"{name} overhead per agent step")
        )
        print(f"| {label}: {what} | **{median:.1f} µs** | {quartiles(diffs)} µs |")
        if name == "guarded":
            overhead = median
    print(
        f"| {label}: guard checks inside those runs | {statistics.median(in_run):.1f} µs "
        f"| {quartiles(in_run)} µs |"
    )
    return overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, help="A/B rounds per adapter (default 40)")
    args = parser.parse_args()
    rounds = args.rounds or (12 if args.quick else 40)
    check = check_alone(2_000 if args.quick else 20_000)
    load = os.getloadavg()[0]
    print(f"{AGENT_STEPS} agent steps per run, {rounds} A/B rounds, load average {load:.1f}")
    print()
    print("| measurement | median | interquartile range |")
    print("| --- | --- | --- |")
    print(
        f"| check alone (before + after one step) | {statistics.median(check):.1f} µs "
        f"| {quartiles(check)} µs |"
    )
    print(f"| reference: sum of 1000 squares, pure Python | {reference_us():.1f} µs | |")
    results = {}
    for label, make in (("create_agent", agent_variants), ("hand-built graph", graph_variants)):
        variants = make()
        times = ab_rounds(variants, rounds)
        in_run = checks_in_run(variants["guarded"], max(4, rounds // 4))
        results[label] = report(label, times, in_run)
    print()
    for label, overhead in results.items():
        verdict = "meets" if overhead < TARGET_US else "MISSES"
        print(
            f"{label}: guard overhead {overhead:.1f} µs per agent step, {verdict} the "
            f"< {TARGET_US:.0f} µs target"
        )


if __name__ == "__main__":
    main()
