"""``CheckpointMiddleware``: each model call and each tool call of a LangChain agent as a boundary.

This is the ``calls`` strategy. LangChain hands a middleware ``handler(request)`` for every
model call and every tool call of a ``create_agent`` agent; spanpoint stands exactly there.
Inside ``spanpoint.run(...)`` each call is a replay boundary — ``chat {model}`` and
``execute_tool {tool}`` spans in the GenAI conventions — whose output is committed when its
span ends OK and returned instead of calling again when the run is replayed. Outside a run
each call is only traced. Sync (``invoke``) and async (``ainvoke``) agents get the same
guarantees.

Identity (never stored, only hashed):

- a model call: the model's identity and settings, the messages (without the ids LangChain
  assigns at run time), the tool definitions, the system prompt and the response format;
- a tool call: the tool name and its arguments, never its call id (a provider mints a new
  one on every real call); repeated identical calls get ordinals 0, 1, … (per parent and
  input), so each replays its own recording in order.

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
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv
from spanpoint._hooks import sign_hooks
from spanpoint.boundary import BoundarySpec, aspan_call, span_call
from spanpoint.calls import cost, results, tasks
from spanpoint.calls import identity as call_identity
from spanpoint.calls import inputs as call_inputs
from spanpoint.calls.attributes import (
    describe_model_response,
    describe_tool_result,
    model_call_attributes,
    model_info,
    tool_call_attributes,
    tool_name,
)
from spanpoint.calls.policy import CallCheckpointPolicy, CallMode
from spanpoint.capture import CapturePolicy
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError, UnfingerprintableInputError
from spanpoint.run import current_frame, current_run, on_run_end
from spanpoint.stores.base import Checkpoint

ToolResult = ToolMessage | Command[Any]


# Every run whose model calls go through the middleware ends with its cost totals on its span.
on_run_end(cost.set_run_totals)


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
        # LangChain's LangSmith wrapper inspects each hook's signature on every call (22 µs
        # of a call's overhead, measured): hand it signed plain functions (spanpoint._hooks).
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
        capture = self.capture
        provider, model_name, ls_params = model_info(request.model)
        attrs = model_call_attributes(
            provider,
            model_name,
            ls_params,
            capture,
            request.messages,
            request.system_message,
            request.tools,
            model=request.model,
            response_format=request.response_format,
        )
        # In a run; or, with SPANPOINT_DURABLE=thread, in a task on a thread with a
        # checkpointer (the boundary's scope is then the thread: spanpoint.calls.tasks).
        checkpoint = mode == "checkpoint" and (run_id is not None or tasks.durable_here())
        if not checkpoint:
            self._not_replayed(attrs, mode, run_id)
        # (response, its reply, the reply's cost) as the span's description priced it.
        priced: list[tuple[Any, AIMessage, cost.CallCost | None]] = []

        def describe(response: Any) -> dict[str, AttributeValue]:
            replies: list[tuple[AIMessage, cost.CallCost | None]] = []
            described = describe_model_response(response, model_name, capture, replies)
            priced.extend((response, ai, found) for ai, found in replies)
            return described

        spec = BoundarySpec(
            kind=semconv.KIND_MODEL_CALL,
            name=model_name,
            span_name=f"{semconv.OP_CHAT} {model_name}",
            attributes=attrs,
            span_kind=SpanKind.CLIENT,
            replay=checkpoint,
            describe=describe,
            describe_replay=lambda response: describe_model_response(
                response, model_name, capture, replayed=True
            ),
            encode=encode_model_response,
            decode=decode_model_response,
            on_staged=lambda cp: _keep_cost(cp, priced),
        )
        if checkpoint:
            try:
                spec.fingerprint = call_identity.model_call_fingerprint(
                    request.model,
                    ls_params,
                    settings=request.model_settings,
                    tool_choice=request.tool_choice,
                    response_format=request.response_format,
                    tools=request.tools,
                    system_message=request.system_message,
                    messages=request.messages,
                )
            except UnfingerprintableInputError as exc:
                return _not_cacheable(spec, exc)
            spec.view = {
                "operation": semconv.OP_CHAT,
                "model": model_name,
                "provider": provider,
                "messages": len(request.messages),
                "tools": [tool_name(t) for t in request.tools],
                "last_message": capture.message_view(request.messages[-1])
                if request.messages
                else None,
            }
            spec.input_view = lambda: call_inputs.model_input_view(
                request.messages,
                capture,
                system_message=request.system_message,
                tools=request.tools,
                settings=request.model_settings,
            )
        return spec

    def _tool_spec(
        self, request: ToolCallRequest, writes: list[results.Write]
    ) -> BoundarySpec | None:
        call = request.tool_call
        name = str(call.get("name") or "tool")
        mode, run_id = self._mode(self.policy.tool_mode(name))
        if mode == "off":
            return None
        capture = self.capture
        call_id = call.get("id")
        args = call.get("args")
        description = request.tool.description if request.tool is not None else None
        attrs = tool_call_attributes(name, call_id, description, args, capture)
        # In a run; or, with SPANPOINT_DURABLE=thread, in a task on a thread with a
        # checkpointer (the boundary's scope is then the thread: spanpoint.calls.tasks).
        checkpoint = mode == "checkpoint" and (run_id is not None or tasks.durable_here())
        if not checkpoint:
            self._not_replayed(attrs, mode, run_id)
        spec = BoundarySpec(
            kind=semconv.KIND_TOOL_CALL,
            name=name,
            span_name=f"{semconv.OP_EXECUTE_TOOL} {name}",
            attributes=attrs,
            replay=checkpoint,
            describe=lambda result: describe_tool_result(result, capture),
        )
        if checkpoint:
            try:
                spec.fingerprint = call_identity.tool_call_fingerprint(name, args, request.tool)
            except UnfingerprintableInputError as exc:
                return _not_cacheable(spec, exc)
            # The whole result, its input messages by position (spanpoint.calls.results).
            inputs = results.input_messages_of(request.state)
            spec.encode = lambda output: results.encode_tool_result(
                output, writes, inputs, tool_call_id=call_id
            )
            spec.decode = lambda stored: results.replay_tool_result(
                stored,
                input_messages=inputs,
                tool_call_id=call_id,
                config=_tool_config(request),
            )
            # Redacted once: the view and the input view show the same arguments (as the
            # call was given them, before the tool ran).
            redacted = capture.redact(args)
            spec.view = {
                "operation": semconv.OP_EXECUTE_TOOL,
                "tool": name,
                "call_id": call_id,
                "args": redacted,
            }
            spec.input_view = lambda: {"args": redacted}
        return spec


# --- outputs: serialization --------------------------------------------------------------


def _tool_config(request: ToolCallRequest) -> dict[str, Any] | None:
    """The per-call config ToolNode invokes the tool with (its runtime's), if any."""
    config = getattr(request.runtime, "config", None)
    return config if isinstance(config, dict) else None


def _not_cacheable(spec: BoundarySpec, exc: UnfingerprintableInputError) -> BoundarySpec:
    """A call whose identity has no readable state executes, uncached, with a warning; it is
    never keyed by a type name (serde.fingerprint's rule)."""
    spec.replay = False
    message = f"{spec.span_name!r} is not cacheable, executing: {exc}"
    spec.attributes[semconv.WARNINGS] = [message]
    scope = current_run()
    if scope is not None:
        scope.warn(message)
    return spec


def _keep_cost(cp: Checkpoint, priced: list[tuple[Any, AIMessage, cost.CallCost | None]]) -> None:
    """Keep the cost the span's description computed as the checkpoint's (the run's totals
    read it: ``cost.scope_cost``), instead of decoding the stored output again to price it.

    Only where the stored form prices the same, field for field (``cost.output_cost`` of the
    stored output): a ``ModelResponse`` of plain ``AIMessage`` objects and nothing else (the
    stored walk reads every AIMessage in it and keeps the last, as the description does), no
    structured response, and str / int usage fields, which LangGraph's serializer stores as
    they are. Anything else is priced from its stored bytes, as before.
    """
    if len(priced) != 1:
        return
    response, ai, found = priced[0]
    if type(response) is not ModelResponse or response.structured_response is not None:
        return
    result = response.result
    if not result or result[-1] is not ai or not _plain_usage(ai):
        return
    for message in result:  # a loop, not all(genexpr): this runs for every model call
        if type(message) is not AIMessage:
            return
    cost.remember(cp, found)


def _plain_usage(ai: AIMessage) -> bool:
    """Whether the fields ``cost.message_cost`` reads are plain str and int values."""
    fields = ai.__dict__
    meta = fields.get("response_metadata") or {}
    if not isinstance(meta, dict):
        return False
    for key in ("model_name", "model", "model_provider"):
        value = meta.get(key)
        if value is not None and type(value) is not str:
            return False
    usage = fields.get("usage_metadata") or {}
    if not isinstance(usage, dict):
        return False
    details = usage.get("input_token_details") or {}
    if not isinstance(details, dict):
        return False
    for value in (usage.get("input_tokens"), usage.get("output_tokens"), details.get("cache_read")):
        if value is not None and type(value) is not int:
            return False
    return True


def encode_model_response(response: Any) -> Any:
    """A ``ModelResponse`` as plain data LangGraph's serializer round-trips."""
    if isinstance(response, ModelResponse):
        return {"result": response.result, "structured_response": response.structured_response}
    return {"value": response}


def decode_model_response(data: Any) -> Any:
    """The ``ModelResponse`` that :func:`encode_model_response` encoded."""
    if isinstance(data, dict) and "result" in data:
        return ModelResponse(
            result=list(data["result"]), structured_response=data.get("structured_response")
        )
    return data["value"]
