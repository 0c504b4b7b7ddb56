"""Guard overhead per agent step, end to end (target: < 0.1 ms median).

The number this prints for issue 6 is the **end-to-end overhead per agent step**: the same
agent run with and without the guard, the difference in process CPU time divided by agent
steps (an agent step is one model call and the tool calls it asks for; a run here has 41).
It is measured for both adapters:

* ``create_agent`` with a fake model, plain vs ``GuardMiddleware``, and plain vs the same
  agent guarded at its model node by ``guard_graph(agent, agent_node="model")``;
* a hand-built agent ⇄ tools ``StateGraph``, plain vs ``guard_graph``.

Method. Each round runs the plain and the guarded agent side by side, interleaved super-step
by super-step (``graph.stream``, alternating which goes first from round to round), and
times every super-step in process CPU time (``durability="sync"``, so that a checkpoint is
written inside the super-step that made it and nothing runs on between super-steps; wall
time on a shared machine mostly measures the neighbours). An agent step is the model
super-step plus the tools super-step after it. Printed:

* **per agent step**: the median over the steps of all rounds of (guarded step − plain step);
  the neighbours' bursts hit single super-steps, and a median over hundreds of paired steps
  leaves them out;
* **start of a run**: ``GuardMiddleware`` opens each run in a super-step of its own
  (``before_agent``); ``guard_graph`` opens it in the graph's input step. Both runs read the
  input in their first window, so the run's start is taken as everything up to the end of
  agent step 0 plus the run's end (guarded minus plain, median over rounds) less one
  ordinary step's overhead, divided by the 41 steps; the per-step median above is over
  steps 1..40;
* **end to end** = the two added; and beside it the median over rounds of the whole-run
  difference per step, which contains the bursts.

Beside those: the **check alone** (the engine's ``before_model`` + ``after_model`` for one
step in a tight loop: one tool call with arguments, one result, reported usage, windows
full), the **checks inside real runs** (the same two calls timed in thread CPU time while
the agent runs) and **repeated at once** (the same calls again, with warm CPU caches), for
``create_agent`` a **pass-through middleware** with the guard's state keys and hooks that
does nothing (what LangChain charges any such middleware), and for the hand-built graph
**keys only**: the agent node itself keeps the guard's three state keys (a state copied and
written each step, the flags once per run) and no check runs (the floor of any guard whose
state lives in the graph state), and **least check**: keys only plus the least per-step
analysis a loop guard can do, written inline in the agent node (see :func:`least_check`).

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
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import ormsgpack
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
from opentelemetry import trace

from spanpoint.guard import GuardConfig, GuardMiddleware, guard_graph
from spanpoint.guard.engine import STATE_KEY, GuardEngine, new_state, state_updates
from spanpoint.guard.graph import with_guard_keys
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
        # The same agent guarded at its model node, without a middleware.
        "guard_graph": guard_graph(agent([]), config(), agent_node="model"),
        "pass-through": agent([PassThrough()]),
    }


def graph_variants() -> dict[str, Any]:
    model = TurnModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = agent_graph(MessagesState, agent)
    return {
        "plain": builder.compile(checkpointer=InMemorySaver()),
        "guarded": guard_graph(builder, config()).compile(checkpointer=InMemorySaver()),
        "keys only": keys_only(model),
        "least check": least_check(model),
    }


def keys_only(model: TurnModel) -> Any:
    """The guard's three state keys kept by hand, and nothing else: the floor of guard_graph.

    The agent node writes a guard state (the last one, copied, with one more step) with every
    answer, and the flags once per run, as any guard must that keeps its state in the graph
    state and says in state keys whether and why it stopped. No check runs.
    """

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        update = {"messages": [model.invoke(state["messages"])]}
        previous = state.get(STATE_KEY) or new_state()
        update[STATE_KEY] = {**previous, "steps": previous["steps"] + 1}
        if "guard_terminated" not in state:
            update.update(guard_terminated=False, guard_reason=None)
        return update

    return agent_graph(with_guard_keys(MessagesState), agent).compile(checkpointer=InMemorySaver())


def least_check(model: TurnModel) -> Any:
    """Keys only, plus the least per-step analysis a loop guard can do, written inline.

    Per step: the wall clock, a fingerprint of the last tool result against the seen ones
    (no progress), the reported tokens, a key for each tool call (its arguments in sorted
    msgpack, CRC-32) and its count in the recent window (tool repeat), a step budget, and the
    current span, to which a guard adds its view (nothing records here). No cycle or
    error-loop detector, no episodes or reflections: a floor, not a guard.
    """

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        history = state["messages"]
        s = dict(state.get(STATE_KEY) or new_state())
        s["wall_seconds"] = time.time() - s["segment_started_at"]
        last = history[-1]
        if type(last) is ToolMessage:
            text = f"{last.name}\x00{last.content}".encode()
            fingerprint = f",{zlib.crc32(text):08x}"
            seen = s["seen_results"]
            if fingerprint in seen:
                s["no_progress_steps"] += 1
            else:
                s["no_progress_steps"] = 0
                s["seen_results"] = (seen + fingerprint)[-1152:]
        reply = model.invoke(history)
        s["steps"] += 1
        usage = reply.usage_metadata or {}
        s["tokens"] += usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        for call in reply.tool_calls:
            data = ormsgpack.packb(call["args"], option=ormsgpack.OPT_SORT_KEYS, default=str)
            key = f"{call['name']}#{zlib.crc32(data):08x}"
            recent = [*s["recent_calls"][-9:], key]
            s["recent_calls"] = recent
            s["repeats"] = recent.count(key)
        if s["steps"] > 10_000:  # the step budget
            raise RuntimeError("over budget")
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute("spanpoint.guard.step", s["steps"])
        update = {"messages": [reply], STATE_KEY: s}
        if "guard_terminated" not in state:
            update.update(guard_terminated=False, guard_reason=None)
        return update

    return agent_graph(with_guard_keys(MessagesState), agent).compile(checkpointer=InMemorySaver())


def agent_graph(schema: type, agent: Callable[[Any], dict[str, Any]]) -> StateGraph:
    """The bench's hand-built agent ⇄ tools graph over ``schema``."""
    builder = StateGraph(schema)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


INPUT = {"messages": [("user", "go")]}


def run_us(graph: Any, thread: str) -> float:
    """Process CPU µs per agent step for one whole run on a fresh thread."""
    gc.collect()
    cfg = {"configurable": {"thread_id": thread}}
    start = time.process_time_ns()
    out = graph.invoke(INPUT, cfg)
    elapsed = time.process_time_ns() - start
    assert out["messages"][-1].text == "done"
    graph.checkpointer.delete_thread(thread)  # keeps the saver (and the heap) the same size
    return elapsed / 1000 / AGENT_STEPS


class Round(NamedTuple):
    """One variant's run in a round: CPU ns per agent step, and of the run's other supersteps."""

    steps: list[int]
    other: int


def paired_round(graphs: list[Any], model_node: str, number: int) -> list[Round]:
    """One run of each graph, interleaved super-step by super-step."""
    thread = f"round-{number}"
    cfg = {"configurable": {"thread_id": thread}}
    streams = [g.stream(INPUT, cfg, stream_mode="updates", durability="sync") for g in graphs]
    logs: list[list[tuple[bool | None, int]]] = [[] for _ in graphs]
    order = list(range(len(graphs)))
    if number % 2:
        order.reverse()
    live = set(order)
    gc.collect()
    while live:
        for i in order:
            if i not in live:
                continue
            start = time.process_time_ns()
            try:
                is_model: bool | None = model_node in next(streams[i])
            except StopIteration:
                is_model = None
                live.discard(i)
            logs[i].append((is_model, time.process_time_ns() - start))
    for g in graphs:
        g.checkpointer.delete_thread(thread)
    return [_agent_steps(log) for log in logs]


def _agent_steps(log: list[tuple[bool | None, int]]) -> Round:
    steps: list[int] = []
    other = 0
    for is_model, ns in log:
        if is_model:
            steps.append(ns)
        elif (
            is_model is None or not steps
        ):  # the run's end, or super-steps before the first model call
            other += ns
        else:
            steps[-1] += ns
    assert len(steps) == AGENT_STEPS, len(steps)
    return Round(steps, other)


def ab_rounds(variants: dict[str, Any], model_node: str, rounds: int) -> dict[str, list[Round]]:
    """Each variant's runs, one per round, interleaved with the others."""
    names = list(variants)
    graphs = [variants[name] for name in names]
    paired_round(graphs, model_node, -1)  # warm-up
    out: dict[str, list[Round]] = {name: [] for name in names}
    for number in range(rounds):
        for name, result in zip(names, paired_round(graphs, model_node, number), strict=True):
            out[name].append(result)
    return out


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


def checks_in_run(graph: Any, runs: int) -> tuple[list[float], list[float]]:
    """µs per agent step spent in the engine's checks during real runs (thread CPU time).

    Each check is then run a second time at once, on a copy of its input: the first call
    finds the guard's code and data pushed out of the CPU caches by the step that ran before
    it, the second finds them warm. Returns (first, second), a value per run.
    """
    first: list[int] = []
    second: list[int] = []
    before_model, after_model = GuardEngine.before_model, GuardEngine.after_model

    def timed_before(self: GuardEngine, state: Any, history: Any, now: Any = None) -> Any:
        start = time.thread_time_ns()
        decision = before_model(self, state, history, now)
        first.append(time.thread_time_ns() - start)
        start = time.thread_time_ns()
        before_model(self, state, history, now)
        second.append(time.thread_time_ns() - start)
        return decision

    def timed_after(self: GuardEngine, state: Any, *args: Any, owned: bool = False) -> Any:
        spare = dict(state) if state else state
        start = time.thread_time_ns()
        decision = after_model(self, state, *args, owned=owned)
        first.append(time.thread_time_ns() - start)
        start = time.thread_time_ns()
        after_model(self, spare, *args, owned=owned)
        second.append(time.thread_time_ns() - start)
        return decision

    GuardEngine.before_model = timed_before  # type: ignore[method-assign]
    GuardEngine.after_model = timed_after  # type: ignore[method-assign]
    try:
        cold, warm = [], []
        for run in range(runs):
            first.clear()
            second.clear()
            run_us(graph, f"in-run-{run}")
            cold.append(sum(first) / 1000 / AGENT_STEPS)
            warm.append(sum(second) / 1000 / AGENT_STEPS)
    finally:
        GuardEngine.before_model, GuardEngine.after_model = before_model, after_model  # type: ignore[method-assign]
    return cold, warm


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


class Overhead(NamedTuple):
    """A variant's overhead over the plain agent, µs per agent step."""

    per_step: float
    start: float
    whole_run: float
    step_diffs: list[float]

    @property
    def end_to_end(self) -> float:
        """Per-step median plus the start of a run spread over its steps."""
        return self.per_step + self.start


def overhead(variant: list[Round], plain: list[Round]) -> Overhead:
    pairs = list(zip(variant, plain, strict=True))
    # Steps 1..40: step 0 of the plain run also reads the input, which the guarded run
    # does in its start window; step 0 is counted with the start below instead.
    step_diffs = [
        (v - p) / 1000
        for mine, base in pairs
        for v, p in zip(mine.steps[1:], base.steps[1:], strict=True)
    ]
    per_step = statistics.median(step_diffs)
    # Everything up to the end of step 0, and the end of the run, minus one ordinary step.
    first = [
        (mine.other + mine.steps[0] - base.other - base.steps[0]) / 1000 for mine, base in pairs
    ]
    whole = [
        (sum(mine.steps) + mine.other - sum(base.steps) - base.other) / 1000 / AGENT_STEPS
        for mine, base in pairs
    ]
    return Overhead(
        per_step,
        (statistics.median(first) - per_step) / AGENT_STEPS,
        statistics.median(whole),
        step_diffs,
    )


def report(label: str, who: str, runs: dict[str, list[Round]]) -> Overhead:
    o = overhead(runs[who], runs["plain"])
    name = "guard" if who == "guarded" else who
    print(
        f"| {label}: {name} overhead per agent step (median of paired steps) "
        f"| {o.per_step:.1f} µs | {quartiles(o.step_diffs)} µs |"
    )
    print(f"| {label}: {name} start of a run, per agent step | {o.start:.1f} µs | |")
    print(
        f"| {label}: **{name} overhead per agent step, end to end** | **{o.end_to_end:.1f} µs** | |"
    )
    print(f"| {label}: {name} whole-run difference per agent step | {o.whole_run:.1f} µs | |")
    return o


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, help="rounds per pair (default 30)")
    args = parser.parse_args()
    rounds = args.rounds or (8 if args.quick else 30)
    check = check_alone(2_000 if args.quick else 20_000)
    load = os.getloadavg()[0]
    print(f"{AGENT_STEPS} agent steps per run, {rounds} rounds per pair, load average {load:.1f}")
    print()
    print("| measurement | median | interquartile range |")
    print("| --- | --- | --- |")
    print(
        f"| check alone (before + after one step) | {statistics.median(check):.1f} µs "
        f"| {quartiles(check)} µs |"
    )
    print(f"| reference: sum of 1000 squares, pure Python | {reference_us():.1f} µs | |")
    results = {}
    for label, make, model_node in (
        ("create_agent", agent_variants, "model"),
        ("hand-built graph", graph_variants, "agent"),
    ):
        variants = make()
        # Pairs, not a three-way interleave: with two, each side is first in half the rounds.
        for who in [name for name in variants if name != "plain"]:
            pair = {"plain": variants["plain"], who: variants[who]}
            runs = ab_rounds(pair, model_node, rounds)
            if who == "guarded":
                plain = [ns / 1000 for r in runs["plain"] for ns in r.steps]
                print(f"| {label}: plain agent step | {statistics.median(plain):.0f} µs | |")
            outcome = report(label, who, runs)
            if who in ("guarded", "guard_graph"):
                results[label if who == "guarded" else f"{label} via guard_graph"] = outcome
        cold, warm = checks_in_run(variants["guarded"], max(4, rounds // 4))
        print(
            f"| {label}: guard checks inside real runs | {statistics.median(cold):.1f} µs "
            f"| {quartiles(cold)} µs |"
        )
        print(
            f"| {label}: the same checks repeated at once (warm caches) "
            f"| {statistics.median(warm):.1f} µs | {quartiles(warm)} µs |"
        )
    print()
    for label, o in results.items():
        verdict = "meets" if o.end_to_end < TARGET_US else "MISSES"
        print(
            f"{label}: guard overhead {o.end_to_end:.1f} µs per agent step end to end "
            f"({o.per_step:.1f} per step + {o.start:.1f} for the run's start), {verdict} the "
            f"< {TARGET_US:.0f} µs target"
        )


if __name__ == "__main__":
    main()
