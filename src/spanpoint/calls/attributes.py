"""GenAI attributes of ``chat`` and ``execute_tool`` spans, in one place.

The middleware (``spanpoint.calls.middleware``) and the zero-code patches build their spans from
these functions, so a model call or a tool call looks the same however it was traced: the
request attributes when the span starts, the response attributes (also on a replayed span)
when it ends, and message content only when the capture policy opts in.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages
from langchain_core.tools import BaseTool
from langgraph.types import Command
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv
from spanpoint.calls.cost import CallCost, message_cost, priced_attributes, saved_attributes
from spanpoint.calls.identity import FieldMemo
from spanpoint.capture import CapturePolicy, redact_text, truncate

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


def model_info(model: Any) -> tuple[str, str, Mapping[str, Any]]:
    """``(provider, model name, LangSmith params)`` of a chat model, best effort.

    Memoized per model object while its fields are unchanged (see ``FieldMemo``): the
    returned params are shared, not to be modified.
    """
    return _MODEL_INFO.get(model, _model_info)


def _model_info(model: Any) -> tuple[str, str, Mapping[str, Any]]:
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


_MODEL_INFO: FieldMemo[tuple[str, str, Mapping[str, Any]]] = FieldMemo()


#: Where a chat model keeps its endpoint, first found wins: ChatOpenAI (``base_url``),
#: ChatAnthropic, Azure OpenAI, and the ``base_url`` / ``endpoint`` most other clients have.
_URL_FIELDS = ("openai_api_base", "anthropic_api_url", "azure_endpoint", "base_url", "endpoint")
_DEFAULT_PORTS = {"https": 443, "http": 80}

#: Request settings read from the model object, by field name, beside its LangSmith params
#: (``ls_temperature``, ``ls_max_tokens``, ``ls_stop``), which win where both say.
_SETTINGS = (
    (("ls_temperature", "temperature"), semconv.GEN_AI_REQUEST_TEMPERATURE),
    (("ls_max_tokens", "max_tokens", "max_output_tokens"), semconv.GEN_AI_REQUEST_MAX_TOKENS),
    (("top_p",), semconv.GEN_AI_REQUEST_TOP_P),
    (("top_k",), semconv.GEN_AI_REQUEST_TOP_K),
    (("seed",), semconv.GEN_AI_REQUEST_SEED),
    (("frequency_penalty",), semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
    (("presence_penalty",), semconv.GEN_AI_REQUEST_PRESENCE_PENALTY),
)


def model_settings_attributes(model: Any, ls_params: Mapping[str, Any]) -> dict[str, Any]:
    """``server.address`` / ``server.port`` from the model's endpoint and the
    ``gen_ai.request.*`` settings it holds, memoized per model object like :func:`model_info`."""
    global _LAST_SETTINGS
    if model is None:
        return _settings(None, ls_params)
    last_params, found = _LAST_SETTINGS
    # model_info's params are one object per model while its fields hold (a new object when
    # they change): the last call's object means the last call's settings, without taking a
    # snapshot of the fields again. The model itself is not held.
    if last_params is ls_params:
        return found
    found = _MODEL_SETTINGS.get(model, lambda m: _settings(m, ls_params))
    _LAST_SETTINGS = (ls_params, found)
    return found


def _settings(model: Any, ls_params: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for names, attr in _SETTINGS:
        for name in names:
            value = ls_params.get(name) if name.startswith("ls_") else getattr(model, name, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[attr] = value
                break
    stop = ls_params.get("ls_stop") or getattr(model, "stop", None)
    stop = stop or getattr(model, "stop_sequences", None)
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, list | tuple) and stop and all(isinstance(s, str) for s in stop):
        attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stop)
    attrs.update(server_attributes(_endpoint(model)))
    return attrs


def _endpoint(model: Any) -> Any:
    for name in _URL_FIELDS:
        url = getattr(model, name, None)
        if url:
            return url
    # ChatOpenAI without a base_url: its OpenAI client knows the default endpoint.
    client = getattr(model, "root_client", None) or getattr(model, "client", None)
    return getattr(client, "base_url", None)


def server_attributes(url: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of an endpoint URL (the scheme's default port
    when it names none); nothing for a value that is not an absolute URL."""
    if not url:
        return {}
    try:
        parts = urlsplit(str(url))
        host, port = parts.hostname, parts.port
    except ValueError:  # not a URL (a port out of range): no address rather than a wrong one
        return {}
    if not host:
        return {}
    port = port or _DEFAULT_PORTS.get(parts.scheme.lower())
    attrs: dict[str, Any] = {semconv.SERVER_ADDRESS: host}
    if port:
        attrs[semconv.SERVER_PORT] = port
    return attrs


_MODEL_SETTINGS: FieldMemo[dict[str, Any]] = FieldMemo()
_LAST_SETTINGS: tuple[Any, dict[str, Any]] = (None, {})


def model_call_attributes(
    provider: str,
    model_name: str,
    ls_params: Mapping[str, Any],
    capture: CapturePolicy,
    messages: Sequence[BaseMessage] | None = None,
    system_message: BaseMessage | None = None,
    tools: Sequence[Any] | None = None,
    *,
    model: Any = None,
    response_format: Any = None,
) -> dict[str, AttributeValue]:
    """The start attributes of a ``chat {model}`` span (the middleware's and the zero-code
    patches' alike): GenAI request attributes (the endpoint and settings of ``model`` when
    given), and the messages, system instructions and tool definitions only when capture
    opts in."""
    attrs: dict[str, AttributeValue] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
        semconv.GEN_AI_PROVIDER_NAME: provider,
        semconv.GEN_AI_REQUEST_MODEL: model_name,
        # A chat model answers text; JSON when the request asks for a response format.
        semconv.GEN_AI_OUTPUT_TYPE: "json" if response_format else "text",
    }
    attrs.update(model_settings_attributes(model, ls_params))
    if capture.content_on_spans:
        if messages is not None:
            attrs[semconv.GEN_AI_INPUT_MESSAGES] = messages_json(
                genai_messages(messages, capture), capture
            )
        if system_message is not None:
            attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = messages_json(
                content_parts(system_message.content, capture), capture
            )
        if tools:
            attrs[semconv.GEN_AI_TOOL_DEFINITIONS] = messages_json(
                tool_definitions(tools, capture), capture
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
        attrs[semconv.GEN_AI_TOOL_DESCRIPTION] = _bounded_text(description, capture.max_bytes)
    if capture.content_on_spans:
        attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = capture.to_json(args)
    return attrs


@functools.lru_cache(maxsize=512)
def _bounded_text(text: str, max_bytes: int) -> str:
    """Redacted and cut text that does not change between calls (a tool's description)."""
    return truncate(redact_text(text), max_bytes)


def tool_name(tool: BaseTool | dict[str, Any]) -> str:
    """The name of a tool or of a provider tool definition."""
    if isinstance(tool, BaseTool):
        return tool.name
    function = tool.get("function")
    if not tool.get("name") and isinstance(function, Mapping) and function.get("name"):
        return str(function["name"])  # an OpenAI-format definition: {"type": "function", ...}
    return str(tool.get("name") or tool.get("type") or "tool")


# --- responses ---------------------------------------------------------------------------


def _last_ai(response: Any) -> AIMessage | None:
    messages = response.result if _is_model_response(response) else [response]
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def _is_model_response(response: Any) -> bool:
    """Whether ``response`` is a middleware's ``ModelResponse`` (never without langchain,
    an optional extra: the seams describe ``ChatResult`` messages)."""
    if not _MODEL_RESPONSE:
        try:
            # For import time: langchain.agents (about 0.1 s) loads with the first model
            # response described, not with GraphRunner.
            from langchain.agents.middleware.types import ModelResponse
        except ImportError:
            return False
        _MODEL_RESPONSE.append(ModelResponse)
    return isinstance(response, _MODEL_RESPONSE[0])


#: ``ModelResponse`` once imported (an import statement runs at every call it is in).
_MODEL_RESPONSE: list[type] = []


def describe_model_response(
    response: Any,
    request_model: str,
    capture: CapturePolicy,
    priced: list[tuple[AIMessage, CallCost | None]] | None = None,
    *,
    replayed: bool = False,
) -> dict[str, AttributeValue]:
    """GenAI response attributes: response id and model, finish reasons, token usage, cost.

    ``priced``: gets ``(the reply, its cost)`` appended when a reply was described (its cost
    None without usage), so the caller can keep the cost for the reply's checkpoint.
    ``replayed``: the reply was replayed, not paid for: its tokens and cost go under
    ``spanpoint.replay.saved.*`` and no ``gen_ai.usage.*`` is set, so a backend that sums
    (or prices) usage across spans counts each paid call once.
    """
    attrs: dict[str, AttributeValue] = {}
    ai = _last_ai(response)
    if ai is None:
        return attrs
    meta = ai.response_metadata or {}
    attrs[semconv.GEN_AI_RESPONSE_MODEL] = str(
        meta.get("model_name") or meta.get("model") or request_model
    )
    response_id = response_id_of(ai)
    if response_id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response_id
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    if reason:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [str(reason)]
    usage = ai.usage_metadata
    cost: CallCost | None = None
    if usage:
        inp, out = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
        cost = message_cost(ai)  # priced by genai-prices, else unpriced
        if replayed:
            attrs[semconv.REPLAY_SAVED_INPUT_TOKENS] = inp
            attrs[semconv.REPLAY_SAVED_OUTPUT_TOKENS] = out
            attrs.update(saved_attributes(cost))
        else:
            attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = inp
            attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = out
            details = usage.get("input_token_details") or {}
            cached, written = details.get("cache_read"), details.get("cache_creation")
            if isinstance(cached, int) and cached:
                attrs[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
            if isinstance(written, int) and written:
                for name in semconv.gen_ai_names(semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS):
                    attrs[name] = written
            attrs.update(priced_attributes(cost))
    if priced is not None:
        priced.append((ai, cost))
    if capture.content_on_spans:
        (message,) = genai_messages([ai], capture)
        # Required by the output-messages schema: without it viewers (Phoenix) reject the
        # whole list. The provider's own word stays in gen_ai.response.finish_reasons.
        message["finish_reason"] = finish_reason(reason, ai)
        attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = messages_json([message], capture)
    return attrs


#: LangChain's own message ids (a run id), which name no provider response.
_LANGCHAIN_IDS = ("run-", "lc_run-", "lc_")


def response_id_of(message: AIMessage) -> str | None:
    """The provider's id of the response a reply came in (``gen_ai.response.id``): its
    ``response_metadata["id"]`` (OpenAI, Anthropic), else the message id when the provider
    set it (a streamed ChatOpenAI reply keeps the completion id there only)."""
    meta = message.response_metadata or {}
    found = meta.get("id")
    if isinstance(found, str) and found:
        return found
    own = message.id
    if isinstance(own, str) and own and not own.startswith(_LANGCHAIN_IDS):
        return own
    return None


def describe_tool_result(result: Any, capture: CapturePolicy) -> dict[str, AttributeValue]:
    """Tool span attributes from its result: an error status, the result when opted in."""
    attrs: dict[str, AttributeValue] = {}
    if isinstance(result, ToolMessage):
        if result.status == "error":
            # LangChain turned the tool's exception into a message the model will read. The
            # call failed all the same: error.type marks the span ERROR (boundary), so by
            # invariant 1 nothing is committed and a rerun calls the tool again, which is
            # what a transient failure needs (docs/concepts.md, "Tool errors").
            attrs[semconv.ERROR_TYPE] = "tool_error"
        if capture.content_on_spans:
            attrs[semconv.GEN_AI_TOOL_CALL_RESULT] = capture.to_json(result.content)
    elif isinstance(result, Command):
        attrs[semconv.TOOL_RESULT_TYPE] = "command"
    return attrs


#: Provider finish reasons mapped to the GenAI ``FinishReason`` values (OpenAI, Anthropic,
#: Gemini, Bedrock spellings); anything else is kept as the provider said it.
_FINISH_REASONS = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "complete": "stop",
    "length": "length",
    "max_tokens": "length",
    "tool_calls": "tool_call",
    "tool_use": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
    "safety": "content_filter",
    "error": "error",
}


def finish_reason(reason: Any, message: AIMessage) -> str:
    """The GenAI finish reason of a reply: the provider's mapped to the conventions' values,
    else what the reply shows (tool calls asked for, or text that ended)."""
    if reason:
        text = str(reason)
        return _FINISH_REASONS.get(text.lower(), text)
    return "tool_call" if message.tool_calls else "stop"


def genai_messages(messages: Sequence[BaseMessage], capture: CapturePolicy) -> list[dict[str, Any]]:
    """Messages in the GenAI conventions' JSON shape (role and typed parts), for opt-in
    capture: each text redacted and bounded on its own, so the list stays valid JSON."""
    out: list[dict[str, Any]] = []
    for message in messages:
        parts: list[dict[str, Any]]
        if isinstance(message, ToolMessage):
            parts = [
                {
                    "type": "tool_call_response",
                    "id": str(message.tool_call_id),
                    "response": capture.redact(message.content),
                }
            ]
        else:
            parts = content_parts(message.content, capture)
        for call in getattr(message, "tool_calls", None) or ():
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": str(call.get("name") or "tool"),
                    "arguments": capture.redact(call.get("args")),
                }
            )
        out.append({"role": _ROLES.get(message.type, message.type), "parts": parts})
    return out


def content_parts(content: Any, capture: CapturePolicy) -> list[dict[str, Any]]:
    """A message's content (text, or LangChain's list of content blocks) as GenAI parts."""
    if isinstance(content, str):
        return [_text_part(content, capture)] if content else []
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, str):
            parts.append(_text_part(block, capture))
            continue
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            parts.append(_text_part(str(block.get("text", "")), capture))
        elif kind in ("reasoning", "thinking"):
            text = block.get("reasoning") or block.get("thinking") or block.get("text") or ""
            parts.append({"type": "reasoning", "content": _bounded(str(text), capture)})
        elif kind in ("tool_use", "tool_call", "function_call"):
            continue  # the message's tool_calls carry these as tool_call parts
        else:  # images, files, provider blocks: named, not captured
            name = kind or type(block).__name__
            parts.append(_text_part(f"[{name} content not captured]", capture))
    return parts


def _text_part(text: str, capture: CapturePolicy) -> dict[str, Any]:
    return {"type": "text", "content": _bounded(text, capture)}


def _bounded(text: str, capture: CapturePolicy) -> str:
    return truncate(redact_text(text), capture.max_bytes)


def tool_definitions(tools: Sequence[Any], capture: CapturePolicy) -> list[dict[str, Any]]:
    """The tools offered to the model, in the shape of ``gen_ai.tool.definitions``."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, BaseTool):
            definition: dict[str, Any] = {"type": "function", "name": tool.name}
            if tool.description:
                definition["description"] = _bounded_text(tool.description, capture.max_bytes)
            # A tool without a pydantic schema is still named, without its parameters.
            with contextlib.suppress(Exception):
                schema = tool.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
                definition["parameters"] = capture.redact(schema)
            out.append(definition)
        elif isinstance(tool, Mapping):
            out.append({"type": str(tool.get("type") or "function"), "name": tool_name(dict(tool))})
    return out


def messages_json(items: list[dict[str, Any]], capture: CapturePolicy) -> str:
    """``items`` as compact JSON within ``capture.max_bytes`` that still parses.

    Cutting the JSON text (``CapturePolicy.to_json``) would leave an invalid document that
    viewers reject whole; instead the oldest items go first (the latest turn matters most),
    then the texts are shortened.
    """
    text = _dumps(items)
    while len(text.encode()) > capture.max_bytes and len(items) > 1:
        items = items[1:]
        text = _dumps(items)
    budget = capture.max_bytes // 2
    while len(text.encode()) > capture.max_bytes and budget >= 32:
        text = _dumps([_shorten(item, budget) for item in items])
        budget //= 2
    return text


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


_CONTENT_KEYS = frozenset({"content", "response", "arguments", "description", "parameters"})


def _shorten(value: Any, budget: int, inside: bool = False) -> Any:
    """``value`` with every string under a content key cut to ``budget`` bytes."""
    if isinstance(value, str):
        return truncate(value, budget) if inside else value
    if isinstance(value, Mapping):
        return {k: _shorten(v, budget, inside or k in _CONTENT_KEYS) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, budget, inside) for v in value]
    return value


# --- interrupts: pause and resume (semantic-conventions-genai #445) ------------------------


# --- graph calls and runs: what went in, what came out ------------------------------------


def graph_input_attributes(value: Any, capture: CapturePolicy) -> dict[str, AttributeValue]:
    """``gen_ai.input.messages`` of a graph call (and of its run) whose input has messages,
    when capture opts in: what Phoenix and Langfuse show as an agent's input."""
    messages = _state_messages(value) if capture.content_on_spans else None
    if not messages:
        return {}
    text = messages_json(genai_messages(messages, capture), capture)
    return {semconv.GEN_AI_INPUT_MESSAGES: text}


def graph_output_attributes(value: Any, capture: CapturePolicy) -> dict[str, AttributeValue]:
    """``gen_ai.output.messages`` of a graph call: its last model reply, when capture opts in."""
    messages = _state_messages(value) if capture.content_on_spans else None
    reply = next((m for m in reversed(messages or ()) if isinstance(m, AIMessage)), None)
    if reply is None:
        return {}
    meta = reply.response_metadata or {}
    (message,) = genai_messages([reply], capture)
    message["finish_reason"] = finish_reason(
        meta.get("finish_reason") or meta.get("stop_reason"), reply
    )
    return {semconv.GEN_AI_OUTPUT_MESSAGES: messages_json([message], capture)}


def _state_messages(value: Any) -> list[BaseMessage] | None:
    """The messages of a graph's input or output state (``{"messages": [...]}``), if any."""
    value = getattr(value, "value", value)  # invoke(version="v2") returns a GraphOutput
    raw = value.get("messages") if isinstance(value, Mapping) else None
    if not raw or not isinstance(raw, list):
        return None
    try:
        return convert_to_messages(raw)
    except Exception:  # not chat messages: nothing to show as a conversation
        return None
