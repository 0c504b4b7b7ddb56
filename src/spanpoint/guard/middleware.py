"""``GuardMiddleware``: the guard for ``langchain.agents.create_agent`` agents.

It adds no graph nodes to the agent loop: the checks run inside the model node through
``wrap_model_call`` (``before_agent`` only marks the start of a run), so the per-step cost
is a function call, not an extra super-step. Guard state is written to graph state with the
model's own update; nothing about a run is kept on the middleware object, which may be
shared by any number of threads and processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    OmitFromInput,
)
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from langgraph.types import Command
from opentelemetry.metrics import MeterProvider

from spanpoint._hooks import sign_hooks
from spanpoint.guard.config import GuardConfig
from spanpoint.guard.engine import Decision, GuardEngine, state_updates
from spanpoint.guard.state import STATE_KEY
from spanpoint.guard.telemetry import GuardTelemetry


class GuardAgentState(AgentState[Any]):
    """Agent state with the guard's keys: its run record and whether/why it stopped."""

    spanpoint_guard: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]
    guard_terminated: NotRequired[Annotated[bool, OmitFromInput]]
    guard_reason: NotRequired[Annotated[str | None, OmitFromInput]]


class GuardMiddleware(AgentMiddleware[GuardAgentState, Any, Any]):
    """Loop detection, budgets, reflection and clean termination for ``create_agent``.

    >>> agent = create_agent(model, tools, middleware=[GuardMiddleware(GuardConfig())])
    ... # doctest: +SKIP

    Put it first in the middleware list so that it sees the model's final answer and its
    stop short-circuits every inner middleware. To resume a stopped thread with a
    correction, wrap the compiled agent in :class:`spanpoint.guard.GuardedGraph`.
    """

    state_schema = GuardAgentState

    def __init__(
        self, config: GuardConfig | None = None, *, meter_provider: MeterProvider | None = None
    ) -> None:
        super().__init__()
        self.config = config or GuardConfig()
        self._engine = GuardEngine(self.config, GuardTelemetry(meter_provider))
        self.tools = []
        # LangSmith's per-call signature inspection would cost a large share of the guard's
        # budget per step: hand it signed plain functions (see spanpoint._hooks).
        sign_hooks(self, ("wrap_model_call", "awrap_model_call"))

    def __repr__(self) -> str:
        return f"GuardMiddleware(mode={self.config.mode!r})"

    def before_agent(self, state: GuardAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """New input on the thread: a new run with fresh counters."""
        return state_updates(self._engine.start_run(state.get(STATE_KEY)))

    async def abefore_agent(self, state: GuardAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """Async form of :meth:`before_agent`."""
        return self.before_agent(state, runtime)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse]
    ) -> ModelResponse | ExtendedModelResponse:
        """Check before the call, call the model unless stopped, analyse its answer."""
        before, request = self._before(request)
        if before.stop:
            return _stopped(before)
        return self._after(request, handler(request), before)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelResponse | ExtendedModelResponse:
        """Async form of :meth:`wrap_model_call`."""
        before, request = self._before(request)
        if before.stop:
            return _stopped(before)
        return self._after(request, await handler(request), before)

    def _before(self, request: ModelRequest[Any]) -> tuple[Decision, ModelRequest[Any]]:
        """The guard's check before a model call, and the request with any reflection it
        adds (the request as given when it adds none)."""
        state = request.state
        before = self._engine.before_model(state.get(STATE_KEY), state["messages"])
        if before.messages:
            request = request.override(messages=[*request.messages, *before.messages])
        return before, request

    def _after(
        self, request: ModelRequest[Any], response: ModelResponse, before: Decision
    ) -> ExtendedModelResponse:
        answer = _last_answer(response.result)
        if answer is None:
            after = before
            added = []
        else:
            after = self._engine.after_model(before.state, answer, request.messages, owned=True)
            added = after.messages
        if before.messages or added or after.stop:
            # The reflection is persisted just before the answer it led to; a stop appends
            # the skipped tool results and the explanation after it.
            response = ModelResponse(
                result=[*before.messages, *response.result, *added],
                structured_response=None if after.stop else response.structured_response,
            )
        # Only a stop changes the flags; other steps write the guard state alone.
        update = after.updates() if after.stop else {STATE_KEY: after.state}
        return ExtendedModelResponse(response, Command(update=update))


def _last_answer(messages: list[Any]) -> AIMessage | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def _stopped(decision: Decision) -> ExtendedModelResponse:
    return ExtendedModelResponse(
        ModelResponse(result=list(decision.messages)), Command(update=decision.updates())
    )
