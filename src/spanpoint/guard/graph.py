"""``guard_graph``: the guard for hand-built agent ⇄ tools ``StateGraph``s.

It also guards a ``create_agent`` agent at its model node (``agent_node="model"``), without
the per-call cost LangChain charges any middleware.

The graph is rebuilt with the same nodes, edges and options, and three changes:

* the state schema gains the guard's keys (``spanpoint_guard``, ``guard_terminated``,
  ``guard_reason``), so they exist even with a plain ``MessagesState``;
* every invocation with new input opens a new guarded run (fresh counters, the clock
  starts) in the graph's own input step: the compiled graph's ``START`` writes a
  :func:`~spanpoint.guard.engine.run_start` value that the ``spanpoint_guard`` channel turns
  into the new run's state. Opening a run costs no super-step of its own;
* the agent node is wrapped (sync and async): the guard checks before it, hands it the
  reflection along with the history, and analyses the AI message it returns. The node's own
  update (a dict, a ``Command``, or a list of them) is extended, never duplicated, so
  reducer channels see each message once.

An output schema of the graph's own gains the guard's keys too. Every node and conditional
edge reads the state it read before; only the agent node also reads ``spanpoint_guard``.
Only TypedDict state schemas (``MessagesState`` and friends) are supported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.channels import LastValue
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from opentelemetry.metrics import MeterProvider
from typing_extensions import is_typeddict

from spanpoint._compat import ChannelWrite, ChannelWriteTupleEntry, RunnableCallable
from spanpoint.errors import ConfigurationError
from spanpoint.guard.config import GuardConfig
from spanpoint.guard.engine import Decision, GuardEngine, opened, run_start
from spanpoint.guard.state import REASON_KEY, RUN_START, STATE_KEY, TERMINATED_KEY
from spanpoint.guard.telemetry import GuardTelemetry


class GuardStateChannel(LastValue):
    """The ``spanpoint_guard`` channel: the last state written, or a new run's state.

    A :func:`~spanpoint.guard.engine.run_start` value written by the graph's input step
    becomes the state of a new run, numbered after the run it replaces.
    """

    __slots__ = ()

    def update(self, values: Sequence[Any]) -> bool:
        if not values:  # every super-step notifies every channel: keep that cheap
            return False
        if len(values) == 1 and type(value := values[0]) is dict and RUN_START in value:
            values = (opened(self.get() if self.is_available() else None, value),)
        return super().update(values)


GuardState = Annotated[dict[str, Any] | None, GuardStateChannel]


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
    ``tools_node`` must exist: it is where a resumed run continues from. For a
    ``create_agent`` agent (built without ``GuardMiddleware``), pass ``agent_node="model"``.
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
            fix = f"pass {role}='<your node name>'"
            if role == "agent_node" and "model" in builder.nodes:
                fix += " (a create_agent agent's is 'model')"
            raise ConfigurationError(
                f"guard_graph: {role}={name!r} is not a node of this graph (nodes: {known}); " + fix
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
        spanpoint_guard: NotRequired[GuardState]
        guard_terminated: NotRequired[bool]
        guard_reason: NotRequired[str | None]

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{schema.__name__}"
    return Guarded


def with_guard_state(schema: type) -> type:
    """A TypedDict extending ``schema`` with the guard state alone: the agent node's input."""

    class GuardInput(schema):  # type: ignore[misc, valid-type]
        spanpoint_guard: NotRequired[GuardState]

    GuardInput.__name__ = GuardInput.__qualname__ = f"GuardInput{schema.__name__}"
    return GuardInput


class GuardedStateGraph(StateGraph):
    """A ``StateGraph`` whose compiled graphs open a new guarded run in their input step."""

    _guard_start: ChannelWrite

    def compile(self, *args: Any, **kwargs: Any) -> CompiledStateGraph:
        compiled = super().compile(*args, **kwargs)
        start = compiled.nodes[START]
        compiled.nodes[START] = start.copy({"writers": [*start.writers, self._guard_start]})
        return compiled


def _start_writes(mode: str) -> ChannelWrite:
    """The input step's writes: a new run, and the flags of a run that has not stopped."""

    def writes(_input: Any) -> list[tuple[str, Any]]:
        return [(STATE_KEY, run_start(mode)), (TERMINATED_KEY, False), (REASON_KEY, None)]

    return ChannelWrite((ChannelWriteTupleEntry(mapper=writes),))


def _rebuild(builder: StateGraph, engine: GuardEngine, agent: str, messages_key: str):
    schema = with_guard_keys(builder.state_schema)
    new = GuardedStateGraph(
        schema,
        context_schema=builder.context_schema,
        input_schema=builder.input_schema,
        output_schema=schema if builder.output_schema is builder.state_schema else None,
    )
    new._guard_start = _start_writes(engine.config.mode)
    if builder.output_schema is not builder.state_schema:
        # An output schema of its own (create_agent's, or the user's) gets the guard's keys.
        output = builder.output_schema
        new.output_schema = with_guard_keys(output) if is_typeddict(output) else output
        new._add_schema(new.output_schema, allow_managed=False)
    new._add_schema(builder.state_schema)
    for name, spec in builder.nodes.items():
        if name == agent:
            spec = dataclasses.replace(
                spec,
                runnable=_wrap_agent(spec.runnable, engine, name, messages_key),
                input_schema=with_guard_state(spec.input_schema),
            )
        new.nodes[name] = spec
        # add_node() would register the node's input schema; copying the spec keeps every
        # node option (retry, cache, error handler, timeout) and needs the same registration.
        new._add_schema(spec.input_schema)
    new.edges = set(builder.edges)
    new.waiting_edges = set(builder.waiting_edges)
    for source, branches in builder.branches.items():
        # A branch without a schema reads its source node's input, or the state after
        # START: name the original one, so that it reads what it read before.
        node = builder.nodes.get(source)
        default = node.input_schema if node is not None else builder.state_schema
        new.branches[source] = {
            key: branch._replace(input_schema=branch.input_schema or default)
            for key, branch in branches.items()
        }
        for branch in new.branches[source].values():
            new._add_schema(branch.input_schema)
    return new


def _wrap_agent(inner: Any, engine: GuardEngine, name: str, key: str) -> RunnableCallable:
    call, acall, accepts = _agent_calls(inner)

    def agent(state: dict[str, Any], config: RunnableConfig, **injected: Any) -> Any:
        before = engine.before_model(state.get(STATE_KEY), state[key])
        if before.stop:
            return {key: before.messages, **before.updates()}
        seen = _with_reflection(state, before, key)
        return _after(engine, call(seen, config, injected), before, seen[key], key)

    async def aagent(state: dict[str, Any], config: RunnableConfig, **injected: Any) -> Any:
        before = engine.before_model(state.get(STATE_KEY), state[key])
        if before.stop:
            return {key: before.messages, **before.updates()}
        seen = _with_reflection(state, before, key)
        return _after(engine, await acall(seen, config, injected), before, seen[key], key)

    wrapper = RunnableCallable(agent, aagent, name=name, trace=False)
    # The wrapper is handed the config (RunnableCallable saw it in its signature) and what
    # the agent's own function asks for besides (store, runtime, ...).
    wrapper.func_accepts = {**accepts, **wrapper.func_accepts}
    return wrapper


def _agent_calls(inner: Any) -> tuple[Any, Any, dict[str, Any]]:
    """Calls of the agent node's own code, and the arguments it takes besides the state.

    A plain function node (what ``add_node`` makes of a function) is called directly, with
    the arguments LangGraph would inject; that spares a second ``RunnableCallable`` layer
    per step. Anything else (a traced runnable, a chain) is invoked as a runnable.
    """
    if type(inner) is not RunnableCallable or inner.trace or inner.explode_args or inner.kwargs:

        def invoke(state: Any, config: RunnableConfig, injected: dict[str, Any]) -> Any:
            return inner.invoke(state, config)

        async def ainvoke(state: Any, config: RunnableConfig, injected: dict[str, Any]) -> Any:
            return await inner.ainvoke(state, config)

        return invoke, ainvoke, {}
    func, afunc, recurse = inner.func, inner.afunc, inner.recurse
    with_config = "config" in inner.func_accepts

    def call(state: Any, config: RunnableConfig, injected: dict[str, Any]) -> Any:
        if func is None:  # async-only: LangGraph's own error
            return inner.invoke(state, config)
        out = func(state, config=config, **injected) if with_config else func(state, **injected)
        return out.invoke(state, config) if recurse and isinstance(out, Runnable) else out

    async def acall(state: Any, config: RunnableConfig, injected: dict[str, Any]) -> Any:
        if afunc is None:  # sync-only: run in the loop, as RunnableCallable does
            return call(state, config, injected)
        out = await (
            afunc(state, config=config, **injected) if with_config else afunc(state, **injected)
        )
        return await out.ainvoke(state, config) if recurse and isinstance(out, Runnable) else out

    return call, acall, inner.func_accepts


def _with_reflection(state: dict[str, Any], before: Decision, key: str) -> dict[str, Any]:
    if not before.messages:
        return state
    return {**state, key: [*state[key], *before.messages]}


def _after(
    engine: GuardEngine, out: Any, before: Decision, prompt: Sequence[BaseMessage], key: str
) -> Any:
    """The agent node's output with the guard's analysis of its answer folded in."""
    if type(out) is dict:
        update, command = out, None
    elif isinstance(out, Command):
        update, command = out.update, out
    elif isinstance(out, list | tuple):  # several updates (create_agent's model node: Commands)
        return _after_each(engine, out, before, prompt, key)
    else:
        update, command = out, None
    if update is None:
        update = {}
    elif not isinstance(update, dict):
        raise ConfigurationError(
            f"guard_graph: the agent node must return a dict, a Command with a dict update, "
            f"or a list of them; got {type(update).__name__}"
        )
    given = update.get(key, ())
    if type(given) is list:
        produced = given
    else:
        produced = list(given) if isinstance(given, tuple) else [given]
    answer = None
    for message in reversed(produced):
        if type(message) is AIMessage or isinstance(message, AIMessage):
            answer = message
            break
    if answer is None:
        after, extra = before, []
    else:
        after = engine.after_model(before.state, answer, prompt, owned=True)
        extra = after.messages
    # Only a stop changes the flags; other steps write the guard state alone.
    merged = {**update, **after.updates()} if after.stop else {**update, STATE_KEY: after.state}
    if before.messages or extra or (key in update and given is not produced):
        merged[key] = [*before.messages, *produced, *extra]
    if command is None:
        return merged
    # Command(...) rather than dataclasses.replace: a third of the guard's glue otherwise.
    return Command(
        graph=command.graph,
        update=merged,
        resume=command.resume,
        goto=END if after.stop and command.goto else command.goto,
    )


def _after_each(
    engine: GuardEngine, out: list[Any] | tuple[Any, ...], before: Decision, prompt: Any, key: str
) -> list[Any]:
    """A list of updates: the guard extends the last one that carries the messages."""
    for at in range(len(out) - 1, -1, -1):
        part = out[at]
        update = part.update if isinstance(part, Command) else part
        if isinstance(update, dict) and key in update:
            return [*out[:at], _after(engine, part, before, prompt, key), *out[at + 1 :]]
    return [*out, _after(engine, {}, before, prompt, key)]
