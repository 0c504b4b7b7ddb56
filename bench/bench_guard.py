"""Guard overhead per agent step (target: < 0.1 ms median).

Four measurements, each printed as a Markdown table row (CPU time of the thread or process
doing the work: on a shared machine, wall time mostly measures the neighbours):

1. the check alone: ``before_model`` + ``after_model`` of the guard engine for one step with
   one tool call, one tool result and reported usage, on a run whose history windows are full;
2. the same checks timed inside real agent runs (both adapters), per step;
3. end to end, ``create_agent``: the same 40-step agent with and without ``GuardMiddleware``
   (InMemorySaver checkpointer), process CPU time per step, interleaved runs, median of the
   per-run differences;
4. end to end, a hand-built ``StateGraph``: plain vs ``guard_graph``.

The fake model answers from the conversation (the number of AI turns so far) and never
repeats a call, so the guard does its full analysis every step but never intervenes.

Run: ``.venv/bin/python bench/bench_guard.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from spanpoint.guard import GuardConfig, GuardMiddleware, guard_graph
from spanpoint.guard.engine import GuardEngine, new_state
from spanpoint.guard.telemetry import GuardTelemetry

STEPS = 40


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


def bench_check(steps: int) -> list[float]:
    """Microseconds per step for the engine's two checks."""
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
        after = engine.after_model(before.state, ai, history)
        samples.append((time.thread_time_ns() - start) / 1000)
        state = after.state
        history = [*history[-6:], ai, result]  # the tail is all a check ever reads
    return samples[steps // 10 :]  # drop warm-up


def reference_us(repeat: int = 2_000) -> float:
    """A fixed pure-Python workload, to scale the other rows to the machine's current speed
    (about 30-50 µs on an idle 2020s x86 core)."""
    samples = []
    for _ in range(repeat):
        start = time.thread_time_ns()
        sum(i * i for i in range(1000))
        samples.append((time.thread_time_ns() - start) / 1000)
    return statistics.median(samples)


def bench_in_run(make: Callable[[], tuple[Any, Any]], runs: int) -> list[float]:
    """Microseconds per step spent in the guard's checks during real runs."""
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
        _, guarded = make()
        per_run = []
        for run in range(runs):
            spent.clear()
            per_step_ms(guarded, run)
            per_run.append(sum(spent) / 1000 / (STEPS + 1))
    finally:
        GuardEngine.before_model, GuardEngine.after_model = original  # type: ignore[method-assign]
    return per_run


def agent_pair() -> tuple[Any, Any]:
    plain = create_agent(TurnModel(), [search], checkpointer=InMemorySaver())
    guarded = create_agent(
        TurnModel(), [search], middleware=[GuardMiddleware(config())], checkpointer=InMemorySaver()
    )
    return plain, guarded


def graph_pair() -> tuple[Any, Any]:
    model = TurnModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    plain = builder.compile(checkpointer=InMemorySaver())
    guarded = guard_graph(builder, config()).compile(checkpointer=InMemorySaver())
    return plain, guarded


def per_step_ms(graph: Any, run: int) -> float:
    # CPU time of this process (all its threads): on a shared machine, wall time mostly
    # measures the neighbours.
    start = time.process_time()
    out = graph.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": f"t{run}"}})
    elapsed = time.process_time() - start
    assert out["messages"][-1].text == "done"
    return elapsed * 1000 / (STEPS + 1)


def bench_pair(make: Callable[[], tuple[Any, Any]], runs: int) -> tuple[float, float, float]:
    """(plain ms/step, guarded ms/step, median per-run difference in ms/step)."""
    plain, guarded = make()
    per_step_ms(plain, -1), per_step_ms(guarded, -1)  # warm-up
    plain_times, guarded_times, diffs = [], [], []
    for run in range(runs):
        # Interleaved, order alternating, so drift hits both sides alike.
        if run % 2:
            g, p = per_step_ms(guarded, run), per_step_ms(plain, run)
        else:
            p, g = per_step_ms(plain, run), per_step_ms(guarded, run)
        plain_times.append(p)
        guarded_times.append(g)
        diffs.append(g - p)
    return (
        statistics.median(plain_times),
        statistics.median(guarded_times),
        statistics.median(diffs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    runs = 8 if args.quick else 30
    check = bench_check(2_000 if args.quick else 20_000)
    print("| measurement | median | p90 |")
    print("| --- | --- | --- |")
    p90 = statistics.quantiles(check, n=10)[-1]
    print(
        f"| check alone (before + after one step) | {statistics.median(check):.1f} µs "
        f"| {p90:.1f} µs |"
    )
    print(f"| reference: sum of 1000 squares, pure Python | {reference_us():.1f} µs | |")
    for label, make in (("create_agent", agent_pair), ("hand-built graph", graph_pair)):
        in_run = bench_in_run(make, runs)
        p90 = statistics.quantiles(in_run, n=10)[-1]
        print(
            f"| checks inside real runs, {label} (per step) | "
            f"{statistics.median(in_run):.1f} µs | {p90:.1f} µs |"
        )
    for label, make in (
        ("create_agent + GuardMiddleware", agent_pair),
        ("hand-built graph + guard_graph", graph_pair),
    ):
        plain, guarded, diff = bench_pair(make, runs)
        print(f"| {label}: plain step | {plain:.3f} ms | |")
        print(f"| {label}: guarded step | {guarded:.3f} ms | |")
        print(f"| {label}: overhead per step | {diff * 1000:.1f} µs | |")


if __name__ == "__main__":
    main()
