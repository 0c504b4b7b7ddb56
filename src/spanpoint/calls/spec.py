"""The one spec builder for model and tool calls: one key rule, one "not cacheable" rule.

Both interception routes gather what a call was given and hand it here:
``CheckpointMiddleware`` (``wrap_model_call`` / ``wrap_tool_call``) and the seams
(``BaseChatModel._generate_with_cache``, ``BaseTool.run``; zero-code and ``GraphRunner``).
This module builds the call's :class:`~spanpoint.boundary.BoundarySpec`: its span, its
attributes, its key, the views kept with its checkpoint and the form its output is stored in.

The key rule: a key covers every input that can change the call's result, or the call is not
cached.

- A model call: the model's identity and settings, every message field a provider is sent
  (``identity.message_content``: type and ``ChatMessage.role``, content parts, name, status,
  ``additional_kwargs``, tool calls; tool-call ids by position), the system prompt, the tool
  definitions, the tool choice and the response format. Never a message id.
- A tool call: its name, its arguments, its definition, and every value LangChain injects
  into it (``spanpoint.calls.injected``), read the way ``ToolNode`` injects them: an
  ``InjectedState`` (the whole state or a field, messages by content), an
  ``InjectedToolCallId``, a
  ``ToolRuntime`` (its state, context, call id, tools, the ``configurable`` values a tool can
  read, the server's user). An ``InjectedStore``, or a ``ToolRuntime`` with a store, is not
  cacheable: a store's contents cannot be read into a key.

The "not cacheable" rule (:func:`not_cacheable`): a call whose identity cannot be read
faithfully executes every time, uncached, with one warning naming what could not be read.

Stored forms. A model call's output is what its route returns: a ``ModelResponse`` through
the middleware (after the agent's inner middleware), a ``ChatResult`` through the seam (with
each generation's info and the ``llm_output``). One cannot be rebuilt from the other, so the
form is part of the key (``stored_as``) and each is encoded here, once
(:data:`STORED_FORMS`). A tool call's output is stored whole by ``spanpoint.calls.results``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from spanpoint import _compat, semconv
from spanpoint.boundary import BoundarySpec
from spanpoint.calls import cost, injected
from spanpoint.calls import identity as call_identity
from spanpoint.calls import inputs as call_inputs
from spanpoint.capture import CapturePolicy
from spanpoint.errors import UnfingerprintableInputError
from spanpoint.run import current_run
from spanpoint.stores.base import Checkpoint

#: The stored form of a model call through ``CheckpointMiddleware``: its ``ModelResponse``.
MODEL_RESPONSE = "model_response"
#: The stored form of a model call through the seam: its ``ChatResult``.
CHAT_RESULT = "chat_result"


def not_cacheable(spec: BoundarySpec, reason: BaseException | str) -> BoundarySpec:
    """Make ``spec`` execute every time, uncached, with one warning saying why.

    A call is never keyed by what could be read of an input that was not read whole: that
    key would match another call's input and replay its result.
    """
    spec.replay = False
    spec.fingerprint = None
    message = f"{spec.span_name!r} is not cacheable, executing: {reason}"
    spec.attributes[semconv.WARNINGS] = [message]
    scope = current_run()
    if scope is not None:
        scope.warn(message)
    return spec


# --- model calls -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCall:
    """What one model call was given, as its route found it.

    ``tools``: the tool definitions offered (``BaseTool`` objects or provider dicts);
    ``settings``: every other argument the provider gets (``stop``, bound kwargs, the
    agent's model settings); ``stored_as``: :data:`MODEL_RESPONSE` or :data:`CHAT_RESULT`.
    """

    model: Any
    messages: Sequence[BaseMessage]
    stored_as: str
    system_message: BaseMessage | None = None
    tools: Sequence[Any] = ()
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tool_choice: Any = None
    response_format: Any = None


def model_call_spec(call: ModelCall, capture: CapturePolicy, *, replay: bool) -> BoundarySpec:
    """The ``chat {model}`` boundary of one model call; keyed when ``replay``."""
    # For import time: the GenAI attributes load langchain.agents, paid by the first call.
    from spanpoint.calls import attributes

    encode, decode = STORED_FORMS[call.stored_as]
    provider, model_name, ls_params = attributes.model_info(call.model)
    attrs = attributes.model_call_attributes(
        provider,
        model_name,
        ls_params,
        capture,
        call.messages,
        call.system_message,
        call.tools,
        model=call.model,
        response_format=call.response_format
        if call.response_format is not None
        else call.settings.get("response_format"),
    )
    # (response, its reply, the reply's cost) as the span's description priced it.
    priced: list[tuple[Any, AIMessage, cost.CallCost | None]] = []

    def describe(response: Any) -> dict[str, AttributeValue]:
        replies: list[tuple[AIMessage, cost.CallCost | None]] = []
        described = attributes.describe_model_response(
            _reply_of(response), model_name, capture, replies
        )
        priced.extend((response, ai, found) for ai, found in replies)
        return described

    spec = BoundarySpec(
        kind=semconv.KIND_MODEL_CALL,
        name=model_name,
        span_name=f"{semconv.OP_CHAT} {model_name}",
        attributes=attrs,
        span_kind=SpanKind.CLIENT,
        replay=replay,
        describe=describe,
        describe_replay=lambda response: attributes.describe_model_response(
            _reply_of(response), model_name, capture, replayed=True
        ),
        encode=encode,
        decode=decode,
        on_staged=lambda cp: _keep_cost(cp, priced),
    )
    if not replay:
        return spec
    # Each message's bytes as the key read them: the input view shows the digests it covered.
    snapshots: list[bytes] = []
    try:
        spec.fingerprint = call_identity.model_call_fingerprint(
            call.model,
            ls_params,
            settings=call.settings,
            tool_choice=call.tool_choice,
            response_format=call.response_format,
            tools=call.tools,
            system_message=call.system_message,
            messages=call.messages,
            stored_as=call.stored_as,
            snapshots=snapshots,
        )
    except UnfingerprintableInputError as exc:
        return not_cacheable(spec, exc)
    messages = call.messages
    spec.view = {
        "operation": semconv.OP_CHAT,
        "model": model_name,
        "provider": provider,
        "messages": len(messages),
        "tools": [_tool_label(t) for t in call.tools],
        "last_message": capture.message_view(messages[-1]) if messages else None,
    }
    spec.input_view = lambda: call_inputs.model_input_view(
        messages,
        capture,
        system_message=call.system_message,
        tools=call.tools,
        settings=call.settings,
        snapshots=snapshots or None,
    )
    return spec


def _tool_label(tool: Any) -> str:
    """A tool definition's name: a ``BaseTool``'s, a provider dict's, or what was bound."""
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and function.get("name"):
            return str(function["name"])
        return str(tool.get("name") or tool.get("type") or "tool")
    return str(tool)


def _reply_of(response: Any) -> Any:
    """What a response's description reads: a ``ModelResponse`` as it is, a ``ChatResult``'s
    first generation's message."""
    generations = getattr(response, "generations", None)
    return generations[0].message if generations else response


def _keep_cost(cp: Checkpoint, priced: list[tuple[Any, AIMessage, cost.CallCost | None]]) -> None:
    """Keep the cost the span's description computed as the checkpoint's (the run's totals
    read it: ``cost.scope_cost``), instead of decoding the stored output again to price it.

    Only where the stored form prices the same, field for field (``cost.output_cost`` of the
    stored output): a ``ModelResponse`` of plain ``AIMessage`` objects and nothing else (the
    stored walk reads every AIMessage in it and keeps the last, as the description does), no
    structured response, and str / int usage fields, which LangGraph's serializer stores as
    they are. Anything else is priced from its stored bytes.
    """
    if len(priced) != 1:
        return
    from langchain.agents.middleware.types import ModelResponse  # loaded by the middleware

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
    from langchain.agents.middleware.types import ModelResponse  # loaded by the middleware

    if isinstance(response, ModelResponse):
        return {"result": response.result, "structured_response": response.structured_response}
    return {"value": response}


def decode_model_response(data: Any) -> Any:
    """The ``ModelResponse`` that :func:`encode_model_response` encoded."""
    from langchain.agents.middleware.types import ModelResponse  # loaded by the middleware

    if isinstance(data, dict) and "result" in data:
        return ModelResponse(
            result=list(data["result"]), structured_response=data.get("structured_response")
        )
    return data["value"]


def encode_chat_result(result: Any) -> Any:
    """A ``ChatResult`` as its messages, generation infos and ``llm_output`` (never the
    ``ChatResult`` object: its ``message`` field is typed ``BaseMessage`` and a serializer
    round trip drops an ``AIMessage``'s tool calls)."""
    from langchain_core.outputs import ChatResult

    if not isinstance(result, ChatResult):
        return {"value": result}
    return {
        "generations": [[g.message, g.generation_info] for g in result.generations],
        "llm_output": result.llm_output,
    }


def decode_chat_result(data: Any) -> Any:
    """The ``ChatResult`` that :func:`encode_chat_result` encoded."""
    from langchain_core.outputs import ChatGeneration, ChatResult

    if "generations" not in data:
        return data["value"]
    return ChatResult(
        generations=[
            ChatGeneration(message=message, generation_info=info)
            for message, info in data["generations"]
        ],
        llm_output=data.get("llm_output"),
    )


#: Each stored form of a model call's output: (encode, decode).
STORED_FORMS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    MODEL_RESPONSE: (encode_model_response, decode_model_response),
    CHAT_RESULT: (encode_chat_result, decode_chat_result),
}


# --- tool calls --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """What one tool call was given, as its route found it.

    ``args``: the arguments (the model's, or the caller's); ``injected``: the value of each
    argument LangChain injects (``calls.injected``), by name, as the tool receives it.
    """

    tool: Any
    name: str
    args: Any
    call_id: Any
    injected: Mapping[str, Any]


def tool_call_spec(call: ToolCall, capture: CapturePolicy, *, replay: bool) -> BoundarySpec:
    """The ``execute_tool {tool}`` boundary of one tool call; keyed when ``replay``.

    The caller adds how the whole result is stored and replayed (``calls.results``): each
    route records the call's writes its own way.
    """
    # For import time: the GenAI attributes load langchain.agents, paid by the first call.
    from spanpoint.calls import attributes

    name, tool = call.name, call.tool
    args = call.args
    declared = injected.injections(tool)
    if isinstance(args, Mapping) and (declared or isinstance(tool, BaseTool)):
        # The model's own arguments: ToolNode drops what it names for an injected argument.
        hidden = declared.keys() | _compat.injected_arg_keys(tool)
        if hidden:
            args = {k: v for k, v in args.items() if k not in hidden}
    description = getattr(tool, "description", None)
    spec = BoundarySpec(
        kind=semconv.KIND_TOOL_CALL,
        name=name,
        span_name=f"{semconv.OP_EXECUTE_TOOL} {name}",
        attributes=attributes.tool_call_attributes(
            name,
            call.call_id,
            description if isinstance(description, str) else None,
            args,
            capture,
        ),
        replay=replay,
        describe=lambda result: attributes.describe_tool_result(result, capture),
    )
    if not replay:
        return spec
    try:
        values = injected.identity(declared, call.injected)
        spec.fingerprint = call_identity.tool_call_fingerprint(
            name, args, tool if isinstance(tool, BaseTool) else None, values
        )
    except (injected.NotCacheable, UnfingerprintableInputError) as exc:
        return not_cacheable(spec, exc)
    redacted = capture.redact(args)  # once, for the view and the input view alike
    spec.view = {
        "operation": semconv.OP_EXECUTE_TOOL,
        "tool": name,
        "call_id": call.call_id,
        "args": redacted,
    }
    spec.input_view = lambda: {"args": redacted}
    return spec
