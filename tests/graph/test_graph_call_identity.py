"""A graph call's key covers everything its result depends on: the input, the thread,
LangGraph's runtime ``context``, every ``configurable`` value, the caller's ``metadata`` and
``tags`` and the call's keyword arguments.
A graph that can reach a LangGraph store is never cached as a graph call.

The same rule holds through every route that makes a graph call a boundary (:data:`ROUTES`:
``GraphRunner`` and the zero-code instrumentor, sync and async). The cases are generated: two
attempts of one run id call the graph on one thread with generated contexts, configurable
values, metadata, tags and keyword arguments. When the two calls differ in anything but a print-only
keyword, the second executes (the executions are counted in a file); when they are equal, it
replays the first's output.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

import spanpoint
from fakes import ConversationModel, count_effect, read_effects

FIXED = {"derandomize": True, "deadline": None, "database": None}
PER_TEST = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]

ROUTES = ["runner", "runner_async", "zero_code", "zero_code_async"]
_TAGS = itertools.count()


@dataclasses.dataclass
class Account:
    user: str
    tier: int = 0


class State(TypedDict, total=False):
    q: str
    seen: str
    answer: str


def _visible(configurable: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in configurable.items() if k in ("user_id", "locale")}


def plain_graph(effects: Path, store: Any = None) -> Any:
    """read (counted, answers from context, configurable and the store) → answer."""

    def read(state: State, runtime: Runtime) -> dict[str, Any]:
        count_effect(effects, state["q"])
        held = runtime.store.get(("balances",), "alice") if runtime.store else None
        config = get_config()
        tags = sorted(t for t in config.get("tags", ()) if "step" not in t)
        said = (config.get("metadata", {}).get("user"), tags)
        seen = (runtime.context, _visible(config["configurable"]), said, held and held.value)
        return {"seen": repr(seen)}

    def answer(state: State) -> dict[str, Any]:
        return {"answer": state["seen"]}

    builder = StateGraph(State)
    builder.add_node("read", read)
    builder.add_node("answer", answer)
    builder.add_edge(START, "read")
    builder.add_edge("read", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def call(
    route: str,
    graph: Any,
    run_id: str,
    graph_input: Any,
    thread: str,
    configurable: dict[str, Any],
    kwargs: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> tuple[Any, list[str]]:
    """One attempt of ``run_id`` that calls ``graph`` once: (its output, the run's warnings).
    ``extra``: more of the config (metadata, tags)."""
    config = {"configurable": {"thread_id": thread, **configurable}, **(extra or {})}
    runner = spanpoint.GraphRunner(graph, name="g")

    def body() -> Any:
        if route == "runner":
            return runner.invoke(graph_input, config, **kwargs).output
        return graph.invoke(graph_input, config, **kwargs)

    async def abody() -> Any:
        if route == "runner_async":
            return (await runner.ainvoke(graph_input, config, **kwargs)).output
        return await graph.ainvoke(graph_input, config, **kwargs)

    if route.endswith("_async"):

        async def main() -> tuple[Any, list[str]]:
            async with spanpoint.run(run_id) as scope:
                output = await abody()
            return output, scope.warnings

        return asyncio.run(main())
    with spanpoint.run(run_id) as scope:
        output = body()
    return output, scope.warnings


contexts = st.one_of(
    st.none(),
    st.builds(Account, user=st.sampled_from(["alice", "bob"]), tier=st.sampled_from([0, 1])),
    st.fixed_dictionaries({"user": st.sampled_from(["alice", "bob"])}),
)
configurables = st.fixed_dictionaries(
    {},
    optional={
        "user_id": st.sampled_from(["alice", "bob", 7]),
        "locale": st.sampled_from(["en", "fr"]),
    },
)
keywords = st.fixed_dictionaries(
    {},
    optional={
        "stream_mode": st.sampled_from(["values", "updates"]),
        "output_keys": st.sampled_from([["answer"], ["q", "answer"]]),
        "interrupt_before": st.just(["answer"]),
        "durability": st.sampled_from(["sync", "exit"]),
        "debug": st.just(False),  # prints only: never part of the key
    },
)
extras = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"user": st.sampled_from(["alice", "bob"])}),
        "tags": st.lists(st.sampled_from(["alice", "bob", "nightly"]), max_size=2),
    },
)
calls = st.tuples(contexts, configurables, keywords, extras)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    def norm(spec: tuple[Any, ...]) -> Any:
        context, configurable, kwargs, extra = spec
        rest = {k: v for k, v in kwargs.items() if k != "debug"}
        said = (extra.get("metadata") or {}, sorted(set(extra.get("tags") or ())))
        return (type(context), context, configurable, rest, said)

    return norm(a) == norm(b)


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@settings(max_examples=25, suppress_health_check=PER_TEST, **FIXED)
@given(first=calls, second=calls)
def test_differing_calls_never_replay_each_other(
    route: str, tmp_path: Path, first: tuple[Any, ...], second: tuple[Any, ...]
) -> None:
    effects = tmp_path / "effects.txt"
    graph = plain_graph(effects)
    tag = f"q{next(_TAGS)}"
    outputs = []
    for context, configurable, kwargs, extra in (first, second):
        kw = dict(kwargs) if context is None else {**kwargs, "context": context}
        output, _ = call(route, graph, f"run-{tag}", {"q": tag}, tag, configurable, kw, extra)
        outputs.append(output)
    expected = 1 if _same(first, second) else 2
    assert read_effects(effects)[tag] == expected, (first, second)
    if expected == 1:
        assert outputs[1] == outputs[0]  # the replay gives back the first call's output


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize("where", ["compiled", "config"])
def test_a_graph_that_reaches_a_store_is_never_replayed(
    route: str, where: str, tmp_path: Path
) -> None:
    """Same input, context and thread on one run id, but the store changed between the
    attempts: the second attempt executes and sees the new balance, with a warning. The store
    is compiled in, or handed over in the config's runtime (as LangGraph's server does)."""
    store = InMemoryStore()
    effects = tmp_path / "effects.txt"
    graph = plain_graph(effects, store=store if where == "compiled" else None)
    configurable: dict[str, Any] = {}
    if where == "config":
        configurable["__pregel_runtime"] = Runtime(store=store)
    seen = []
    for balance in (10, 99):
        store.put(("balances",), "alice", {"n": balance})
        kw = {"context": Account("alice")}
        output, warnings = call(route, graph, "run-store", {"q": "s"}, "t", configurable, kw)
        seen.append(output["answer"])
        assert any("store" in w and "not cacheable" in w for w in warnings), warnings
    assert read_effects(effects)["s"] == 2
    assert "10" in seen[0] and "99" in seen[1]


# --- a real create_agent agent --------------------------------------------------------


def balance_agent(effects: Path, read: str, store: Any = None) -> Any:
    @tool
    def balance(runtime: ToolRuntime[Account]) -> str:
        """The current user's balance."""
        count_effect(effects, "balance")
        if read == "store":
            held = runtime.store.get(("balances",), "current")
            return f"balance: {held.value['n']}"
        if read == "context":
            return f"{runtime.context.user}: balance"
        return f"{runtime.config['configurable']['user_id']}: balance"

    model = ConversationModel(plan=[[{"name": "balance", "args": {}}]], final="Here it is.")
    return create_agent(model, [balance], context_schema=Account, store=store)


def tool_answers(output: Any) -> list[str]:
    return [str(m.content) for m in output["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize("read", ["context", "configurable"])
def test_an_agent_never_gives_one_users_answer_to_another(
    route: str, read: str, tmp_path: Path
) -> None:
    """alice, then bob, then alice on one run id and one thread name: bob's attempt
    executes and gets his own answer; alice's second attempt replays hers."""
    effects = tmp_path / "effects.txt"
    agent = balance_agent(effects, read)
    question = {"messages": [{"role": "user", "content": "my balance?"}]}
    answers = []
    for user in ("alice", "bob", "alice"):
        configurable = {"user_id": user} if read == "configurable" else {}
        kw = {"context": Account(user)} if read == "context" else {}
        output, _ = call(route, agent, "run-users", question, "t", configurable, kw)
        answers.append(tool_answers(output))
    assert answers == [["alice: balance"], ["bob: balance"], ["alice: balance"]]
    assert read_effects(effects)["balance"] == 2


@pytest.mark.parametrize("route", ROUTES, indirect=True)
def test_an_agent_with_a_store_is_never_replayed(route: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    store = InMemoryStore()
    agent = balance_agent(effects, "store", store=store)
    question = {"messages": [{"role": "user", "content": "my balance?"}]}
    answers = []
    for balance in (10, 99):
        store.put(("balances",), "current", {"n": balance})
        output, warnings = call(route, agent, "run-agent-store", question, "t", {}, {})
        answers.append(tool_answers(output)[-1])
        assert any("store" in w for w in warnings), warnings
    assert answers == ["balance: 10", "balance: 99"]


@pytest.mark.parametrize("route", ROUTES, indirect=True)
def test_a_value_that_cannot_be_read_is_never_replayed_and_is_named(
    route: str, tmp_path: Path
) -> None:
    """A configurable value spanpoint cannot fingerprint (an ``io.StringIO`` the node reads)
    makes the call not cacheable: alice and bob on one run id and thread both execute and get
    their own answer (the thread's earlier state is not handed over either), and the warning
    names the argument."""
    effects = tmp_path / "effects.txt"
    graph = plain_graph(effects)

    def who(state: State) -> dict[str, Any]:
        return {"answer": get_config()["configurable"]["client"].getvalue()}

    graph = _with_answer(graph, who)
    answers = []
    for user in ("alice", "bob"):
        configurable = {"client": io.StringIO(user)}
        output, warnings = call(route, graph, "run-io", {"q": "io"}, "t", configurable, {})
        answers.append(output["answer"])
        assert any("['configurable']['client']" in w for w in warnings), warnings
    assert answers == ["alice", "bob"]
    assert read_effects(effects)["io"] == 2


def _with_answer(graph: Any, answer: Any) -> Any:
    """``graph``'s builder with its answer node replaced, compiled the same way."""
    builder = graph.builder
    builder.nodes.pop("answer")
    builder.add_node("answer", answer)
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("route", ["runner", "runner_async"], indirect=True)
def test_a_request_keys_the_configurable_values_of_its_config(route: str, tmp_path: Path) -> None:
    """``RunRequest.start(config={"configurable": ...})``: those values reach the graph, so
    they are part of the key as much as ``configurable=``'s."""
    effects = tmp_path / "effects.txt"
    runner = spanpoint.GraphRunner(plain_graph(effects), name="g")
    answers = []
    for user in ("alice", "bob", "alice"):
        req = spanpoint.RunRequest.start(
            {"q": "cfg"}, thread_id="t", config={"configurable": {"user_id": user}}
        )

        async def main(req: Any = req) -> Any:
            async with spanpoint.run("run-cfg"):
                return (await runner.ainvoke(req)).output

        if route == "runner_async":
            output = asyncio.run(main())
        else:
            with spanpoint.run("run-cfg"):
                output = runner.invoke(req).output
        answers.append(output["answer"])
    assert all(u in a for a, u in zip(answers, ("alice", "bob", "alice"), strict=True))
    assert read_effects(effects)["cfg"] == 2


@pytest.mark.parametrize("configured_route", ["stream", "astream"])
def test_a_stream_of_a_graph_that_reaches_a_store_is_never_returned_from_its_thread(
    configured: Any, configured_route: str, tmp_path: Path
) -> None:
    """A ``GraphRunner`` stream inside a run is recognised by its thread on a rerun; a graph
    that reaches a store is not: the second attempt executes and streams the new balance."""
    store = InMemoryStore()
    effects = tmp_path / "effects.txt"
    runner = spanpoint.GraphRunner(plain_graph(effects, store=store), name="g")
    seen = []
    for balance in (10, 99):
        store.put(("balances",), "alice", {"n": balance})

        async def chunks() -> list[Any]:
            async with spanpoint.run("run-stream"):
                return [c async for c in runner.astream({"q": "st"}, thread_id="t")]

        if configured_route == "astream":
            streamed = asyncio.run(chunks())
        else:
            with spanpoint.run("run-stream"):
                streamed = list(runner.stream({"q": "st"}, thread_id="t"))
        seen.append(repr(streamed))
    assert read_effects(effects)["st"] == 2
    assert "10" in seen[0] and "99" in seen[1]


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize(
    "alice, bob",
    [
        ({"metadata": {"user": "alice"}}, {"metadata": {"user": "bob"}}),
        ({"tags": ["alice"]}, {"tags": ["bob"]}),
    ],
    ids=["metadata", "tags"],
)
def test_what_the_caller_says_in_the_config_is_an_input(
    route: str, alice: dict[str, Any], bob: dict[str, Any], tmp_path: Path
) -> None:
    """A node that reads who asks from the config's metadata or tags: bob's attempt of alice's
    run id executes and answers bob; LangGraph's own step tags and metadata change no key
    (alice's second attempt replays)."""
    effects = tmp_path / "effects.txt"
    graph = plain_graph(effects)
    answers = [
        call(route, graph, "run-said", {"q": "said"}, "t-said", {}, {}, extra)[0]["answer"]
        for extra in (alice, bob, alice)
    ]
    assert read_effects(effects)["said"] == 2
    assert "alice" in answers[0] and "bob" in answers[1] and answers[2] == answers[0]
