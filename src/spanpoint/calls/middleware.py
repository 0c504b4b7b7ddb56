"""``CheckpointMiddleware``: each model call and each tool call of a LangChain agent as a boundary.

This is the ``calls`` strategy. LangChain hands a middleware ``handler(request)`` for every
model call and every tool call of a ``create_agent`` agent; spanpoint stands exactly there.
Inside ``spanpoint.run(...)`` each call is a replay boundary — ``chat {model}`` and
``execute_tool {tool}`` spans in the GenAI conventions — whose output is committed when its
span ends OK and returned instead of calling again when the run is replayed. Outside a run
each call is only traced. Sync (``invoke``) and async (``ainvoke``) agents get the same
guarantees.

Identity (never stored, only hashed) is ``spanpoint.calls.spec``'s, shared with the seams:

- a model call: the model's identity and settings, every message field a provider is sent
  (never the ids LangChain assigns at run time), the tool definitions, the system prompt and
  the response format;
- a tool call: the tool name, its arguments and every value LangChain injects into it (state,
  context, call id, ``configurable``); a tool that can read a store is not cacheable. Repeated
  identical calls get ordinals 0, 1, … (per parent and input), so each replays its own
  recording in order.

What is stored for humans (``Checkpoint.view``) is structural and redacted: message counts,
message types and sizes, tool names, tool arguments after the capture policy's redaction.

Place the middleware *last* in ``middleware=[...]`` so that it wraps the model and the tools
directly: middleware outside it (retries, fallbacks, human review) still runs on replay, and
a ``Command`` that an inner middleware adds to a model call would not be replayed.

What is replayed, and what is not:

- a tool call replays its whole result (``spanpoint.calls.results``): the ``ToolMessage``
  with its artifact, or the ``Command`` with its update, ``goto`` and graph, *and* the channel
  writes the tool made while it ran (Deep Agents' files). Input messages inside it are
  re-bound by position to the current run's, and its ``ToolMessage`` to the current call id,
  so a replayed handoff appends nothing twice; a result that cannot be re-bound exactly is
  not committed (or not replayed): a warning, and the tool executes again;
- a call whose span ended OK is replayed, including a tool error that LangChain turned into
  an error ``ToolMessage`` (the model already read it; the replay feeds it the same);
- a call that raised, or was killed before its span ended, executes again — so a tool is
  exactly-once only if its effect and the commit cannot be split by a crash (make the effect
  idempotent, or key it on the tool-call id);
- a tool that calls ``interrupt()`` commits nothing until it completes; once committed, a
  replay returns its output without interrupting again (the answer is part of it);
- parallel calls that are identical *including* their call id are told apart by the order in
  which they start: deterministic for async agents, thread-scheduling order for sync ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv
from spanpoint._hooks import sign_hooks
from spanpoint.boundary import BoundarySpec, aspan_call, span_call
from spanpoint.calls import cost, injected, official, results, tasks
from spanpoint.calls import spec as call_spec
from spanpoint.calls.policy import CallCheckpointPolicy, CallMode
from spanpoint.capture import CapturePolicy
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError
from spanpoint.run import current_frame, current_run, on_run_end

ToolResult = ToolMessage | Command[Any]


# Every run whose model calls go through the middleware ends with its cost totals on its span.
on_run_end(cost.set_run_totals)
# The official LangChain instrumentation starts no second span for a call the middleware
# traces (spanpoint.calls.official).
official.watch()


class CheckpointMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Makes every model call and tool call of a ``create_agent`` agent a replay boundary.

    >>> agent = create_agent(model, tools, middleware=[CheckpointMiddleware()])  # doctest: +SKIP
    >>> with spanpoint.run("ticket-42"):                                         # doctest: +SKIP
    ...     agent.invoke({"messages": [("user", "Refund ticket 42")]})

    Args:
        policy: which calls are boundaries (default: every model and tool call).
        capture: what goes into spans and stored views (default: ``configure``'s policy).
    """

    def __init__(
        self,
        policy: CallCheckpointPolicy | None = None,
        *,
        capture: CapturePolicy | None = None,
    ) -> None:
        super().__init__()
        if policy is not None and not isinstance(policy, CallCheckpointPolicy):
            raise ConfigurationError(
                f"policy must be a CallCheckpointPolicy, not {type(policy).__name__}; build "
                "one with spanpoint.CallCheckpointPolicy(...)"
            )
        if capture is not None and not isinstance(capture, CapturePolicy):
            raise ConfigurationError(
                f"capture must be a spanpoint.capture.CapturePolicy, not {type(capture).__name__}"
            )
        self.policy = policy or CallCheckpointPolicy()
        self._capture = capture
        self.tools: Sequence[BaseTool] = ()
        # LangChain's LangSmith wrapper inspects each hook's signature on every call, a large
        # share of a call's overhead: hand it signed plain functions (spanpoint._hooks).
        sign_hooks(self)

    def __repr__(self) -> str:
        return f"CheckpointMiddleware({self.policy!r})"

    # --- the four seams ------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse]
    ) -> ModelResponse:
        """Run the model call as a ``chat`` boundary (replayed when committed)."""
        spec = self._model_spec(request)
        if spec is None:
            return handler(request)
        return span_call(spec, handler, request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """The async form of :meth:`wrap_model_call`, with the same replay guarantees."""
        spec = self._model_spec(request)
        if spec is None:
            return await handler(request)
        return await aspan_call(spec, handler, request)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        """Run the tool call as an ``execute_tool`` boundary (replayed when committed).

        What is committed is the whole result (``spanpoint.calls.results``): the returned
        ``ToolMessage`` or ``Command`` and the channel writes the tool made while it ran.
        """
        writes: list[results.Write] = []
        spec = self._tool_spec(request, writes)
        if spec is None:
            return handler(request)
        if not spec.replay:
            return span_call(spec, handler, request)  # type: ignore[no-any-return]

        def execute(request: ToolCallRequest) -> ToolResult:
            with results.recording_writes(_tool_config(request)) as recorded:
                try:
                    return handler(request)
                finally:
                    writes.extend(recorded)

        return span_call(spec, execute, request)  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """The async form of :meth:`wrap_tool_call`, with the same replay guarantees."""
        writes: list[results.Write] = []
        spec = self._tool_spec(request, writes)
        if spec is None:
            return await handler(request)
        if not spec.replay:
            return await aspan_call(spec, handler, request)  # type: ignore[no-any-return]

        async def execute(request: ToolCallRequest) -> ToolResult:
            with results.recording_writes(_tool_config(request)) as recorded:
                try:
                    return await handler(request)
                finally:
                    writes.extend(recorded)

        return await aspan_call(spec, execute, request)  # type: ignore[no-any-return]

    # --- specs ---------------------------------------------------------------------------

    @property
    def capture(self) -> CapturePolicy:
        """The capture policy in effect (the middleware's own, else ``configure``'s)."""
        return self._capture or settings().capture

    def _mode(self, mode: CallMode) -> tuple[CallMode, str | None]:
        """The effective mode and the id of the active durable run, if any."""
        scope = current_run()
        if scope is None:
            return mode, None
        nested = current_frame() is not scope.root  # inside another boundary
        if mode == "checkpoint" and self.policy.nested == "trace" and nested:
            return "always_execute", scope.run_id
        return mode, scope.run_id

    @staticmethod
    def _not_replayed(attrs: dict[str, AttributeValue], mode: CallMode, run_id: str | None) -> None:
        """Mark a call that executes every time, and tie it to its run for correlation."""
        if mode == "always_execute":
            attrs[semconv.CALL_MODE] = mode
        if run_id is not None:
            attrs[semconv.RUN_ID] = run_id

    def _model_spec(self, request: ModelRequest[Any]) -> BoundarySpec | None:
        mode, run_id = self._mode(self.policy.model_mode())
        if mode == "off":
            return None
        # In a run; or, with SPANPOINT_DURABLE=thread, in a task on a thread with a
        # checkpointer (the boundary's scope is then the thread: spanpoint.calls.tasks).
        checkpoint = mode == "checkpoint" and (run_id is not None or tasks.durable_here())
        call = call_spec.ModelCall(
            model=request.model,
            messages=request.messages,
            stored_as=call_spec.MODEL_RESPONSE,
            system_message=request.system_message,
            tools=request.tools,
            settings=request.model_settings,
            tool_choice=request.tool_choice,
            response_format=request.response_format,
        )
        built = call_spec.model_call_spec(call, self.capture, replay=checkpoint)
        if not checkpoint:
            self._not_replayed(built.attributes, mode, run_id)
        return built

    def _tool_spec(
        self, request: ToolCallRequest, writes: list[results.Write]
    ) -> BoundarySpec | None:
        tool_call = request.tool_call
        name = str(tool_call.get("name") or "tool")
        mode, run_id = self._mode(self.policy.tool_mode(name))
        if mode == "off":
            return None
        call_id = tool_call.get("id")
        args = tool_call.get("args")
        # In a run; or, with SPANPOINT_DURABLE=thread, in a task on a thread with a
        # checkpointer (the boundary's scope is then the thread: spanpoint.calls.tasks).
        checkpoint = mode == "checkpoint" and (run_id is not None or tasks.durable_here())
        call = call_spec.ToolCall(
            tool=request.tool,
            name=name,
            args=args,
            call_id=call_id,
            # The middleware runs before ToolNode injects: read what it will inject.
            injected=injected.injected_from_runtime(request.tool, request.runtime, args, call_id),
        )
        built = call_spec.tool_call_spec(call, self.capture, replay=checkpoint)
        if not checkpoint:
            self._not_replayed(built.attributes, mode, run_id)
        if built.replay:
            # The whole result, its input messages by position (spanpoint.calls.results).
            inputs = results.input_messages_of(request.state)
            built.encode = lambda output: results.encode_tool_result(
                output, writes, inputs, tool_call_id=call_id
            )
            built.decode = lambda stored: results.replay_tool_result(
                stored,
                input_messages=inputs,
                tool_call_id=call_id,
                config=_tool_config(request),
            )
        return built


def _tool_config(request: ToolCallRequest) -> dict[str, Any] | None:
    """The per-call config ToolNode invokes the tool with (its runtime's), if any."""
    config = getattr(request.runtime, "config", None)
    return config if isinstance(config, dict) else None
