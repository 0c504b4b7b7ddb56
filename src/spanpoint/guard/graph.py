"""``guard_graph``: the guard for hand-built agent ⇄ tools ``StateGraph``s.

The graph is rebuilt with the same nodes, edges and options, and three changes:

* the state schema gains the guard's keys (``spanpoint_guard``, ``guard_terminated``,
  ``guard_reason``), so they exist even with a plain ``MessagesState``;
* a ``spanpoint_guard.start`` node runs after ``START`` once per invocation with new input and
  opens a new guarded run (fresh counters, the clock starts);
* the agent node is wrapped (sync and async): the guard checks before it, hands it the
  reflection along with the history, and analyses the AI message it returns. The node's own
  update is extended, never duplicated, so reducer channels see each message once.

Only TypedDict state schemas (``MessagesState`` and friends) are supported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NotRequired

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph._internal._runnable import RunnableCallable
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from opentelemetry.metrics import MeterProvider
from typing_extensions import is_typeddict

from spanpoint.errors import ConfigurationError
from spanpoint.guard.config import GuardConfig
from spanpoint.guard.engine import STATE_KEY, Decision, GuardEngine, state_updates
from spanpoint.guard.telemetry import GuardTelemetry

START_NODE = "spanpoint_guard.start"


def guard_graph(
    graph: StateGraph | CompiledStateGraph,
    config: GuardConfig | None = None,
    *,
    agent_node: str = "agent",
    tools_node: str = "tools",
    messages_key: str = "messages",
    meter_provider: MeterProvider | None = None,
) -> Any:
    """Return ``graph`` with the guard around ``agent_node``.

    A ``StateGraph`` builder gives a new (uncompiled) builder; a compiled graph gives a new
    compiled graph with the same checkpointer, store, cache, interrupts, name and config.
    ``tools_node`` must exist: it is where a resumed run continues from.
    """
    builder = graph.builder if isinstance(graph, CompiledStateGraph) else graph
    if not isinstance(builder, StateGraph):
        raise ConfigurationError(
            f"guard_graph needs a StateGraph or a compiled StateGraph, got {type(graph).__name__}"
        )
    _check_graph(builder, agent_node, tools_node, messages_key)
    engine = GuardEngine(config or GuardConfig(), GuardTelemetry(meter_provider))
    guarded = _rebuild(builder, engine, agent_node, messages_key)
    if not isinstance(graph, CompiledStateGraph):
        return guarded
    compiled = guarded.compile(
        checkpointer=graph.checkpointer,
        store=graph.store,
        cache=graph.cache,
        interrupt_before=graph.interrupt_before_nodes or None,
        interrupt_after=graph.interrupt_after_nodes or None,
        debug=graph.debug,
        name=graph.name,
    )
    return compiled.with_config(graph.config) if graph.config else compiled


def _check_graph(builder: StateGraph, agent: str, tools: str, messages_key: str) -> None:
    if STATE_KEY in builder.channels:
        raise ConfigurationError(
            "this graph is already guarded (it has a 'spanpoint_guard' state key); "
            "guard the original builder once"
        )
    for role, name in (("agent_node", agent), ("tools_node", tools)):
        if name not in builder.nodes:
            known = ", ".join(sorted(builder.nodes))
            raise ConfigurationError(
                f"guard_graph: {role}={name!r} is not a node of this graph (nodes: {known}); "
                f"pass {role}='<your node name>'"
            )
    if not is_typeddict(builder.state_schema):
        raise ConfigurationError(
            f"guard_graph supports TypedDict state schemas such as MessagesState; "
            f"{builder.state_schema.__name__} is not one"
        )
    if messages_key not in builder.channels:
        raise ConfigurationError(
            f"guard_graph: the state has no {messages_key!r} key; pass messages_key='<key>'"
        )


def with_guard_keys(schema: type) -> type:
    """A TypedDict extending ``schema`` with the guard's three state keys."""

    class Guarded(schema):  # type: ignore[misc, valid-type]
        spanpoint_guard: NotRequired[dict[str, Any] | None]
        guard_terminated: NotRequired[bool]
        guard_reason: NotRequired[str | None]

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{schema.__name__}"
    return Guarded


def _rebuild(builder: StateGraph, engine: GuardEngine, agent: str, messages_key: str):
    schema = with_guard_keys(builder.state_schema)
    new = StateGraph(
        schema,
        context_schema=builder.context_schema,
        input_schema=builder.input_schema,
        output_schema=schema if builder.output_schema is builder.state_schema else None,
    )
    if builder.output_schema is not builder.state_schema:
        new.output_schema = builder.output_schema
        new._add_schema(builder.output_schema, allow_managed=False)
    for name, spec in builder.nodes.items():
        if name == agent:
            node_schema = (
                schema
                if spec.input_schema is builder.state_schema
                else with_guard_keys(spec.input_schema)
            )
            spec = dataclasses.replace(
                spec,
                runnable=_wrap_agent(spec.runnable, engine, name, messages_key),
                input_schema=node_schema,
            )
        new.nodes[name] = spec
        # add_node() would register the node's input schema; copying the spec keeps every
        # node option (retry, cache, error handler, timeout) and needs the same registration.
        new._add_schema(spec.input_schema)
    new.add_node(START_NODE, _start_node(engine), input_schema=schema)
    new.edges = {(START_NODE if a == START else a, b) for a, b in builder.edges}
    new.waiting_edges = set(builder.waiting_edges)
    for source, branches in builder.branches.items():
        new.branches[START_NODE if source == START else source] = dict(branches)
        for branch in branches.values():
            if branch.input_schema is not None:
                new._add_schema(branch.input_schema)
    new.add_edge(START, START_NODE)
    return new


def _start_node(engine: GuardEngine) -> RunnableCallable:
    def start(state: dict[str, Any]) -> dict[str, Any]:
        return state_updates(engine.start_run(state.get(STATE_KEY)))

    async def astart(state: dict[str, Any]) -> dict[str, Any]:
        return start(state)

    return RunnableCallable(start, astart, name=START_NODE, trace=False)


def _wrap_agent(inner: Any, engine: GuardEngine, name: str, key: str) -> RunnableCallable:
    def agent(state: dict[str, Any], config: RunnableConfig) -> Any:
        before = engine.before_model(state.get(STATE_KEY), state[key])
        if before.stop:
            return {key: before.messages, **before.updates()}
        seen = _with_reflection(state, before, key)
        return _after(engine, inner.invoke(seen, config), before, seen[key], key)

    async def aagent(state: dict[str, Any], config: RunnableConfig) -> Any:
        before = engine.before_model(state.get(STATE_KEY), state[key])
        if before.stop:
            return {key: before.messages, **before.updates()}
        seen = _with_reflection(state, before, key)
        return _after(engine, await inner.ainvoke(seen, config), before, seen[key], key)

    return RunnableCallable(agent, aagent, name=name, trace=False)


def _with_reflection(state: dict[str, Any], before: Decision, key: str) -> dict[str, Any]:
    if not before.messages:
        return state
    return {**state, key: [*state[key], *before.messages]}


def _after(
    engine: GuardEngine, out: Any, before: Decision, prompt: Sequence[BaseMessage], key: str
) -> Any:
    update = out.update if isinstance(out, Command) else out
    if update is None:
        update = {}
    if not isinstance(update, dict):
        raise ConfigurationError(
            f"guard_graph: the agent node must return a dict or a Command with a dict update, "
            f"got {type(update).__name__} (for create_agent agents, use GuardMiddleware)"
        )
    given = update.get(key, [])
    produced = (
        given if isinstance(given, list) else list(given) if isinstance(given, tuple) else [given]
    )
    answer = None
    for message in reversed(produced):
        if isinstance(message, AIMessage):
            answer = message
            break
    after = (
        before if answer is None else engine.after_model(before.state, answer, prompt, owned=True)
    )
    extra = after.messages if answer is not None else []
    # Only a stop changes the flags; other steps write the guard state alone.
    merged = {**update, **(after.updates() if after.stop else {STATE_KEY: after.state})}
    if before.messages or extra or (key in update and given is not produced):
        merged[key] = [*before.messages, *produced, *extra]
    if not isinstance(out, Command):
        return merged
    goto = END if after.stop and out.goto else out.goto
    return dataclasses.replace(out, update=merged, goto=goto)
