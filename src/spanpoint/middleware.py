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
- a tool call: the tool name, its arguments and its call id; repeated identical calls get
  ordinals 0, 1, … (per parent and input), so each replays its own recording in order.

What is stored for humans (``Checkpoint.view``) is structural and redacted: message counts,
message types and sizes, tool names, tool arguments after the capture policy's redaction.

Place the middleware *last* in ``middleware=[...]`` so that it wraps the model and the tools
directly: middleware outside it (retries, fallbacks, human review) still runs on replay, and
a ``Command`` that an inner middleware adds to a model call would not be replayed.

What is replayed, and what is not:

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

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from spanpoint import call_identity, semconv
from spanpoint._spans import aspan_call, span_call
from spanpoint.boundary import BoundarySpec
from spanpoint.capture import CapturePolicy, redact_text, truncate
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError
from spanpoint.policy import CallCheckpointPolicy, CallMode
from spanpoint.run import current_frame, current_run

ToolResult = ToolMessage | Command[Any]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}

#: LangChain provider ids whose GenAI ``gen_ai.provider.name`` well-known value differs.
_PROVIDERS = {
    "amazon_bedrock": "aws.bedrock",
    "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock",
    "google_genai": "gcp.gen_ai",
    "google_vertexai": "gcp.vertex_ai",
    "google_anthropic_vertex": "gcp.vertex_ai",
    "azure": "azure.ai.openai",
    "azure_openai": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "mistral": "mistral_ai",
    "mistralai": "mistral_ai",
    "xai": "x_ai",
    "ibm": "ibm.watsonx.ai",
}


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
        """Run the tool call as an ``execute_tool`` boundary (replayed when committed)."""
        spec = self._tool_spec(request)
        if spec is None:
            return handler(request)
        return span_call(spec, handler, request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """The async form of :meth:`wrap_tool_call`, with the same replay guarantees."""
        spec = self._tool_spec(request)
        if spec is None:
            return await handler(request)
        return await aspan_call(spec, handler, request)

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
            provider, model_name, ls_params, capture, request.messages, request.system_message
        )
        checkpoint = run_id is not None and mode == "checkpoint"
        if not checkpoint:
            self._not_replayed(attrs, mode, run_id)
        spec = BoundarySpec(
            kind=semconv.KIND_MODEL_CALL,
            name=model_name,
            span_name=f"{semconv.OP_CHAT} {model_name}",
            attributes=attrs,
            span_kind=SpanKind.CLIENT,
            replay=checkpoint,
            describe=lambda response: describe_model_response(response, model_name, capture),
            encode=encode_model_response,
            decode=decode_model_response,
        )
        if checkpoint:
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
        return spec

    def _tool_spec(self, request: ToolCallRequest) -> BoundarySpec | None:
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
        checkpoint = run_id is not None and mode == "checkpoint"
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
            spec.fingerprint = call_identity.tool_call_fingerprint(name, args, call_id)
            spec.view = {
                "operation": semconv.OP_EXECUTE_TOOL,
                "tool": name,
                "call_id": call_id,
                "args": capture.redact(args),
            }
        return spec


# --- model and tool names ----------------------------------------------------------------


def model_info(model: Any) -> tuple[str, str, Mapping[str, Any]]:
    """``(provider, model name, LangSmith params)`` of a chat model, best effort."""
    try:
        ls_params: Mapping[str, Any] = model._get_ls_params()
    except Exception:  # a model without LangSmith params still gets a span
        ls_params = {}
    provider = ls_params.get("ls_provider") or type(model).__name__.lower()
    provider = _PROVIDERS.get(provider, provider)
    name = (
        ls_params.get("ls_model_name")
        or getattr(model, "model_name", None)
        or getattr(model, "model", None)
        or type(model).__name__
    )
    return str(provider), str(name), ls_params


def model_call_attributes(
    provider: str,
    model_name: str,
    ls_params: Mapping[str, Any],
    capture: CapturePolicy,
    messages: Sequence[BaseMessage] | None = None,
    system_message: BaseMessage | None = None,
) -> dict[str, AttributeValue]:
    """The start attributes of a ``chat {model}`` span (the middleware's and the zero-code
    patches' alike): GenAI request attributes, and the messages only when capture opts in."""
    attrs: dict[str, AttributeValue] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
        semconv.GEN_AI_PROVIDER_NAME: provider,
        semconv.GEN_AI_REQUEST_MODEL: model_name,
    }
    for key, attr in (
        ("ls_temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
        ("ls_max_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ):
        if isinstance(ls_params.get(key), int | float):
            attrs[attr] = ls_params[key]
    if capture.content_on_spans and messages is not None:
        attrs[semconv.GEN_AI_INPUT_MESSAGES] = capture.to_json(genai_messages(messages))
        if system_message is not None:
            attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = capture.to_json(
                [{"type": "text", "content": system_message.content}]
            )
    return attrs


def tool_call_attributes(
    name: str, call_id: Any, description: str | None, args: Any, capture: CapturePolicy
) -> dict[str, AttributeValue]:
    """The start attributes of an ``execute_tool {tool}`` span (middleware and patches)."""
    attrs: dict[str, AttributeValue] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: name,
        semconv.GEN_AI_TOOL_TYPE: "function",
    }
    if call_id:
        attrs[semconv.GEN_AI_TOOL_CALL_ID] = call_id
    if description:
        attrs[semconv.GEN_AI_TOOL_DESCRIPTION] = truncate(
            redact_text(description), capture.max_bytes
        )
    if capture.content_on_spans:
        attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = capture.to_json(args)
    return attrs


def tool_name(tool: BaseTool | dict[str, Any]) -> str:
    """The name of a tool or of a provider tool definition."""
    if isinstance(tool, BaseTool):
        return tool.name
    return str(tool.get("name") or tool.get("type") or "tool")


# --- outputs: serialization and span attributes ------------------------------------------


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


def _last_ai(response: Any) -> AIMessage | None:
    messages = response.result if isinstance(response, ModelResponse) else [response]
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def describe_model_response(
    response: Any, request_model: str, capture: CapturePolicy
) -> dict[str, AttributeValue]:
    """GenAI response attributes: response model, finish reasons, token usage."""
    attrs: dict[str, AttributeValue] = {}
    ai = _last_ai(response)
    if ai is None:
        return attrs
    meta = ai.response_metadata or {}
    attrs[semconv.GEN_AI_RESPONSE_MODEL] = str(
        meta.get("model_name") or meta.get("model") or request_model
    )
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    if reason:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [str(reason)]
    usage = ai.usage_metadata
    if usage:
        attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = int(usage.get("input_tokens", 0))
        attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = int(usage.get("output_tokens", 0))
    if capture.content_on_spans:
        attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = capture.to_json(genai_messages([ai]))
    return attrs


def describe_tool_result(result: Any, capture: CapturePolicy) -> dict[str, AttributeValue]:
    """Tool span attributes from its result: an error status, the result when opted in."""
    attrs: dict[str, AttributeValue] = {}
    if isinstance(result, ToolMessage):
        if result.status == "error":
            # LangChain turned the tool's exception into a message the model will read;
            # the call is committed like any result so a replay feeds the model the same.
            attrs[semconv.ERROR_TYPE] = "tool_error"
        if capture.content_on_spans:
            attrs[semconv.GEN_AI_TOOL_CALL_RESULT] = capture.to_json(result.content)
    elif isinstance(result, Command):
        attrs[semconv.TOOL_RESULT_TYPE] = "command"
    return attrs


def genai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Messages in the GenAI conventions' JSON shape (role and parts), for opt-in capture."""
    out: list[dict[str, Any]] = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if isinstance(message, ToolMessage):
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": message.tool_call_id,
                    "response": message.content,
                }
            )
        elif message.content:
            parts.append({"type": "text", "content": message.content})
        for call in getattr(message, "tool_calls", None) or ():
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": call.get("args"),
                }
            )
        out.append({"role": _ROLES.get(message.type, message.type), "parts": parts})
    return out
