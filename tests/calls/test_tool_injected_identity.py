"""A tool call's key covers every value LangChain injects into the tool, on a real
``create_agent`` agent, through every route (``CheckpointMiddleware``, ``GraphRunner``'s
seams, zero-code with either strategy; see :data:`ROUTES`), sync and async.

The cases are generated: every way a tool reads an injected input (``ToolRuntime.context``,
``ToolRuntime.state``, ``ToolRuntime.config``'s ``configurable`` and ``metadata``, a
``RunnableConfig`` parameter's ``configurable``, ``metadata`` and ``tags``, ``InjectedState``
whole and by field) × route × sync/async. For each, the same run id is run for alice, then bob, then
alice again: bob never gets alice's answer (his call executes), alice's second attempt
replays hers. A tool that can read a store is not cacheable: it executes every time, with a
warning naming the argument.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import AgentState, create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState, InjectedStore
from langgraph.store.memory import InMemoryStore

import spanpoint
from fakes import ConversationModel, count_effect, read_effects

BALANCES = {"alice": 100, "bob": 7}


@dataclasses.dataclass
class Account:
    user: str


class AccountState(AgentState):  # type: ignore[type-arg]
    user: str


def balance_tools(effects: Path) -> dict[str, Any]:
    """One tool per way of reading the current user; each answers that user's balance."""

    def answer(user: str) -> str:
        count_effect(effects, "balance")
        return f"{user}: {BALANCES[user]}"

    @tool
    def from_context(runtime: ToolRuntime[Account]) -> str:
        """The current user's balance."""
        return answer(runtime.context.user)

    @tool
    def from_runtime_state(runtime: ToolRuntime) -> str:
        """The current user's balance."""
        return answer(runtime.state["user"])

    @tool
    def from_configurable(runtime: ToolRuntime) -> str:
        """The current user's balance."""
        return answer(runtime.config["configurable"]["user_id"])

    @tool
    def from_runtime_metadata(runtime: ToolRuntime) -> str:
        """The current user's balance."""
        return answer(runtime.config["metadata"]["user"])

    @tool
    def from_config(config: RunnableConfig) -> str:
        """The current user's balance."""
        return answer(config["configurable"]["user_id"])

    @tool
    def from_config_metadata(config: RunnableConfig) -> str:
        """The current user's balance."""
        return answer(config["metadata"]["user"])

    @tool
    def from_config_tags(settings: RunnableConfig) -> str:
        """The current user's balance."""
        return answer(next(t for t in settings["tags"] if t in BALANCES))

    class FromConfigSubclass(BaseTool):
        """A tool class of its own whose _run takes the config."""

        name: str = "from_config_subclass"
        description: str = "The current user's balance."

        def _run(self, config: RunnableConfig) -> str:
            return answer(config["configurable"]["user_id"])

        async def _arun(self, config: RunnableConfig) -> str:
            return answer(config["configurable"]["user_id"])

    from_config_subclass = FromConfigSubclass()

    @tool
    def from_state(state: Annotated[dict[str, Any], InjectedState]) -> str:
        """The current user's balance."""
        return answer(state["user"])

    @tool
    def from_state_field(user: Annotated[str, InjectedState("user")]) -> str:
        """The current user's balance."""
        return answer(user)

    return {
        t.name: t
        for t in (
            from_context,
            from_runtime_state,
            from_configurable,
            from_runtime_metadata,
            from_config,
            from_config_metadata,
            from_config_tags,
            from_config_subclass,
            from_state,
            from_state_field,
        )
    }


READS = [
    "from_context",
    "from_runtime_state",
    "from_configurable",
    "from_runtime_metadata",
    "from_config",
    "from_config_metadata",
    "from_config_tags",
    "from_config_subclass",
    "from_state",
    "from_state_field",
]


#: middleware: ``CheckpointMiddleware`` in the agent; seams: ``GraphRunner(strategy="calls")``
#: with no middleware (every tool call through ``BaseTool.run``); zero_code: the
#: instrumentor and a plain ``agent.invoke``, the default strategy (the tool through the seam;
#: the graph call is a boundary too, so only attempts whose graph input differs reach the
#: tool: the alice and bob case); zero_code_calls: the instrumentor with the calls strategy
#: (it adds the middleware to ``create_agent``).
ROUTES = ["middleware", "seams", "zero_code", "zero_code_calls"]
CALL_ROUTES = ["middleware", "seams", "zero_code_calls"]


def agent_for(route: str, tool_: Any, **kw: Any) -> Any:
    model = ConversationModel(plan=[[{"name": tool_.name, "args": {}}]], final="Here it is.")
    middleware = [spanpoint.CheckpointMiddleware()] if route == "middleware" else []
    kw.setdefault("context_schema", Account)
    return create_agent(model, [tool_], middleware=middleware, state_schema=AccountState, **kw)


def ask(
    route: str, agent: Any, run_id: str, user: str, use_async: bool = False, context: Any = None
) -> tuple[list[str], list[str]]:
    """The tool results the agent gives ``user`` inside run ``run_id``, and the run's warnings."""
    request = {"messages": [{"role": "user", "content": "my balance?"}], "user": user}
    configurable = {"user_id": user}
    # Who asks, in every place a caller's config can say it.
    extra = {"metadata": {"user": user}, "tags": [user]}
    context = Account(user) if context is None else context
    runner = spanpoint.GraphRunner(agent, name="accounts", strategy="calls")
    call = spanpoint.RunRequest.start(
        request,
        thread_id=f"{run_id}-thread",
        context=context,
        configurable=configurable,
        config=extra,
    )

    def output(result: Any) -> Any:
        return result.output if route == "seams" else result

    async def body() -> Any:
        if route == "seams":
            return await runner.ainvoke(call)
        return await agent.ainvoke(
            request, {"configurable": configurable, **extra}, context=context
        )

    if use_async:

        async def main() -> tuple[Any, list[str]]:
            async with spanpoint.run(run_id) as scope:
                out = await body()
            return out, list(scope.warnings)

        out, warnings = asyncio.run(main())
    else:
        with spanpoint.run(run_id) as scope:
            if route == "seams":
                out = runner.invoke(call)
            else:
                out = agent.invoke(
                    request, {"configurable": configurable, **extra}, context=context
                )
        warnings = list(scope.warnings)
    messages = output(out)["messages"]
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)], warnings


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("reads", READS)
def test_one_users_answer_is_never_replayed_to_another(
    route: str, reads: str, use_async: bool, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    agent = agent_for(route, balance_tools(effects)[reads])
    run_id = f"accounts-{reads}"
    assert ask(route, agent, run_id, "alice", use_async)[0] == ["alice: 100"]
    assert ask(route, agent, run_id, "bob", use_async)[0] == ["bob: 7"], "bob got alice's"
    assert read_effects(effects)["balance"] == 2
    assert ask(route, agent, run_id, "alice", use_async)[0] == ["alice: 100"]
    assert read_effects(effects)["balance"] == 2, "alice's recorded call was not replayed"


def store_tools(effects: Path) -> list[Callable[..., Any]]:
    @tool
    def via_runtime(runtime: ToolRuntime) -> str:
        """Read the user's notes."""
        count_effect(effects, "notes")
        item = runtime.store.get(("notes",), "user") if runtime.store else None
        return f"notes: {item.value if item else None}"

    @tool
    def via_store(store: Annotated[Any, InjectedStore()]) -> str:
        """Read the user's notes."""
        count_effect(effects, "notes")
        item = store.get(("notes",), "user")
        return f"notes: {item.value if item else None}"

    return [via_runtime, via_store]


@pytest.mark.parametrize("route", CALL_ROUTES, indirect=True)
@pytest.mark.parametrize("which", [0, 1], ids=["ToolRuntime.store", "InjectedStore"])
def test_a_tool_that_reads_a_store_executes_every_time_with_a_warning(
    route: str, which: int, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    store = InMemoryStore()
    tool_ = store_tools(effects)[which]
    argument = "runtime" if which == 0 else "store"
    answers = []
    for note in ("first", "second"):
        store.put(("notes",), "user", {"text": note})
        agent = agent_for(route, tool_, store=store)
        results, warnings = ask(route, agent, "notes", "alice")
        answers.append(results)
        mine = [w for w in warnings if "not cacheable" in w and tool_.name in w]
        assert len(mine) == 1, warnings
        assert repr(argument) in mine[0]
    assert answers == [["notes: {'text': 'first'}"], ["notes: {'text': 'second'}"]]
    assert read_effects(effects)["notes"] == 2


@pytest.mark.parametrize("route", CALL_ROUTES, indirect=True)
def test_an_injected_value_without_readable_state_executes_with_a_warning(
    route: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"

    @dataclasses.dataclass
    class Guarded:
        user: str
        lock: Any

    @tool
    def guarded(runtime: ToolRuntime) -> str:
        """The current user's balance."""
        count_effect(effects, "guarded")
        return str(BALANCES[runtime.context.user])

    agent = agent_for(route, guarded, context_schema=Guarded)
    for user in ("alice", "bob"):
        context = Guarded(user, threading.Lock())
        results, warnings = ask(route, agent, "guarded", "carol", context=context)
        assert results == [str(BALANCES[user])]
        mine = [w for w in warnings if "not cacheable" in w]
        assert len(mine) == 1 and "'runtime.context'" in mine[0], warnings
    assert read_effects(effects)["guarded"] == 2


@pytest.mark.parametrize("route", CALL_ROUTES, indirect=True)
def test_a_call_committed_under_another_key_version_executes_again(
    route: str, tmp_path: Path, configured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows keyed by an earlier rule never match: every call of the run executes once more
    (nothing is replayed from them), and is then replayed under the current rule."""
    from spanpoint.calls import identity as call_identity

    effects = tmp_path / "effects.txt"
    agent = agent_for(route, balance_tools(effects)["from_context"])
    current = call_identity.CALL_KEY_VERSION
    for version in (current - 1, current, current):
        monkeypatch.setattr(call_identity, "CALL_KEY_VERSION", version)
        monkeypatch.setattr(call_identity, "_REQUEST_IDENTITIES", {})  # memoized per version
        assert ask(route, agent, "versions", "alice")[0] == ["alice: 100"]
    assert read_effects(effects)["balance"] == 2
    replayed = [
        bool(s.attributes.get("spanpoint.replayed"))
        for s in configured.exporter.get_finished_spans()
        if s.name.startswith(("chat ", "execute_tool "))
    ]
    assert replayed == [False] * 3 + [False] * 3 + [True] * 3
