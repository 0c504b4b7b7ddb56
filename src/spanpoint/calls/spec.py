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
  into it (:func:`injections`), read the way ``ToolNode`` injects them: an ``InjectedState``
  (the whole state or a field, messages by content), an ``InjectedToolCallId``, a
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

import contextlib
import dataclasses
import threading
import typing
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool, InjectedToolArg, InjectedToolCallId
from langchain_core.tools.base import get_all_basemodel_annotations
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from spanpoint import _compat, semconv
from spanpoint.boundary import BoundarySpec
from spanpoint.calls import cost
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


class NotCacheable(Exception):
    """An input of a call whose identity cannot be read faithfully (the message says which)."""


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
        encode=encode,
        decode=decode,
        on_staged=lambda cp: _keep_cost(cp, priced),
    )
    if not replay:
        return spec
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
    argument LangChain injects (:func:`injections`), by name, as the tool receives it.
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
    declared = injections(tool)
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
        injected = injected_identity(declared, call.injected)
        spec.fingerprint = call_identity.tool_call_fingerprint(
            name, args, tool if isinstance(tool, BaseTool) else None, injected
        )
    except (NotCacheable, UnfingerprintableInputError) as exc:
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


# --- injected arguments ------------------------------------------------------------------

#: What an injected argument receives: the graph state (field None: all of it), the store,
#: the ``ToolRuntime``, the call id, or a value of the caller's (another ``InjectedToolArg``).
STATE, STORE, RUNTIME, CALL_ID, OTHER = "state", "store", "runtime", "call_id", "other"


def injections(tool: Any) -> Mapping[str, tuple[str, str | None]]:
    """The arguments LangChain injects into ``tool``: name -> (what, state field).

    Read from the tool's function signature and its input schema as ``ToolNode`` reads them:
    ``Annotated[..., InjectedState]`` / ``InjectedState("field")``, ``InjectedStore()``,
    ``InjectedToolCallId``, a ``ToolRuntime`` (or an argument named ``runtime``), any other
    ``InjectedToolArg``. Memoized per tool object.
    """
    if not isinstance(tool, BaseTool):
        return _NONE
    key = (id(tool), id(tool.args_schema), id(getattr(tool, "func", None)))
    found = _INJECTIONS.get(key)
    if found is not None and found[0]() is tool:
        return found[1]
    declared = _read_injections(tool)
    try:
        ref = weakref.ref(tool)
    except TypeError:
        return declared
    with _INJECTIONS_LOCK:
        if len(_INJECTIONS) >= 1024:
            _INJECTIONS.clear()
        _INJECTIONS[key] = (ref, declared)
    return declared


_NONE: Mapping[str, tuple[str, str | None]] = {}
_INJECTIONS: dict[tuple[int, int, int], tuple[weakref.ref[Any], dict[str, Any]]] = {}
_INJECTIONS_LOCK = threading.Lock()


def _read_injections(tool: BaseTool) -> dict[str, tuple[str, str | None]]:
    hints: dict[str, Any] = {}
    func = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if func is not None:
        # Unresolvable annotations: the schema's are read below.
        with contextlib.suppress(Exception):
            hints.update(typing.get_type_hints(func, include_extras=True))
    # A tool without a pydantic schema injects nothing through it.
    with contextlib.suppress(Exception):
        hints.update(get_all_basemodel_annotations(tool.get_input_schema()))
    declared: dict[str, tuple[str, str | None]] = {}
    hints.pop("return", None)
    for name, hint in hints.items():
        what = _injection(name, hint)
        if what is not None:
            declared[name] = what
    return declared


def _injection(name: str, hint: Any) -> tuple[str, str | None] | None:
    from langgraph.prebuilt import InjectedState, InjectedStore, ToolRuntime

    found: tuple[str, str | None] | None = None
    parts = typing.get_args(hint)
    markers = parts[1:] if typing.get_origin(hint) is typing.Annotated else parts
    for marker in (*markers, hint):
        if _is(marker, InjectedState):
            field = marker.field if isinstance(marker, InjectedState) else None
            found = (STATE, field or None)
        elif _is(marker, InjectedStore):
            found = (STORE, None)
        elif _is(marker, InjectedToolCallId):
            found = (CALL_ID, None)
        elif _is(marker, ToolRuntime):
            return (RUNTIME, None)
        elif found is None and _is(marker, InjectedToolArg):
            found = (OTHER, None)
    base = typing.get_origin(parts[0]) or parts[0] if parts else None
    if name == "runtime" or (isinstance(base, type) and issubclass(base, ToolRuntime)):
        return (RUNTIME, None)
    return found


def _is(marker: Any, kind: type) -> bool:
    if isinstance(marker, kind):
        return True
    origin = typing.get_origin(marker) or marker
    return isinstance(origin, type) and issubclass(origin, kind)


def injected_from_runtime(tool: Any, runtime: Any, args: Any, call_id: Any) -> dict[str, Any]:
    """Each injected argument's value as ``ToolNode`` will inject it from ``runtime`` (the
    ``ToolRuntime`` a middleware's ``ToolCallRequest`` carries: the middleware runs before
    the injection)."""
    declared = injections(tool)
    if not declared:
        return {}
    state = getattr(runtime, "state", None)
    if isinstance(state, list):
        state = {"messages": state}
    values: dict[str, Any] = {}
    for name, (what, field) in declared.items():
        if what == STATE:
            if field is None:
                values[name] = state
            elif isinstance(state, Mapping):
                values[name] = state.get(field)
            else:
                values[name] = getattr(state, field, None)
        elif what == STORE:
            values[name] = getattr(runtime, "store", None)
        elif what == RUNTIME:
            values[name] = runtime
        elif what == CALL_ID:
            values[name] = call_id
        else:
            values[name] = args.get(name) if isinstance(args, Mapping) else None
    return values


def injected_from_input(tool: Any, tool_input: Any, call_id: Any) -> dict[str, Any]:
    """Each injected argument's value as ``BaseTool.run`` was handed it (``ToolNode``
    injected it into the input already; the call id comes with the call)."""
    declared = injections(tool)
    if not declared:
        return {}
    given = tool_input if isinstance(tool_input, Mapping) else {}
    return {
        name: call_id if what == CALL_ID else given.get(name)
        for name, (what, _field) in declared.items()
    }


def injected_identity(
    declared: Mapping[str, tuple[str, str | None]], values: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The identity of each injected value, by argument name, or :class:`NotCacheable`
    naming the argument whose value cannot be read into a key."""
    if not declared:
        return None
    out: dict[str, Any] = {}
    for name, (what, _field) in declared.items():
        value = values.get(name)
        if what == STORE:
            if value is not None:
                raise NotCacheable(
                    f"the tool reads the store through argument {name!r}, whose contents "
                    "cannot be part of a key"
                )
            out[name] = None
        elif what == RUNTIME:
            out[name] = _runtime_identity(name, value)
        else:
            out[name] = _readable(name, value)
    return out


def _runtime_identity(name: str, runtime: Any) -> Any:
    """What a tool can read through its ``ToolRuntime``: the state, the context, the call
    id, the tools, the ``configurable`` values and the server's user. Never LangGraph's own
    per-attempt bookkeeping (checkpoint and task ids, the attempt number) nor the stream
    writer (an output)."""
    from langgraph.prebuilt import ToolRuntime

    if not isinstance(runtime, ToolRuntime):
        return _readable(name, runtime)
    if runtime.store is not None:
        raise NotCacheable(
            f"argument {name!r} is a ToolRuntime with a store, whose contents cannot be part "
            "of a key (compile the graph without a store, or mark the tool always_execute)"
        )
    config = runtime.config if isinstance(runtime.config, Mapping) else {}
    configurable = config.get("configurable") or {}
    return {
        "state": _readable(f"{name}.state", runtime.state),
        "context": _readable(f"{name}.context", runtime.context),
        "call_id": runtime.tool_call_id,
        "tools": [call_identity.tool_digest(t) for t in runtime.tools or ()],
        "configurable": _readable(
            f"{name}.config['configurable']",
            {k: v for k, v in configurable.items() if _readable_key(k)},
        ),
        "server": _readable(f"{name}.server_info", _server_view(runtime.server_info)),
    }


#: ``configurable`` entries LangGraph writes for itself, per checkpoint or per attempt.
_LANGGRAPH_KEYS = frozenset({"checkpoint_id", "checkpoint_ns", "checkpoint_map"})


def _readable_key(key: Any) -> bool:
    return not (isinstance(key, str) and (key.startswith("__") or key in _LANGGRAPH_KEYS))


def _server_view(info: Any) -> Any:
    if info is None:
        return None
    user = getattr(info, "user", None)
    return {
        "assistant_id": getattr(info, "assistant_id", None),
        "graph_id": getattr(info, "graph_id", None),
        "user": None
        if user is None
        else {
            "identity": getattr(user, "identity", None),
            "permissions": list(getattr(user, "permissions", None) or ()),
        },
    }


def _readable(where: str, value: Any) -> str | None:
    """The digest of one injected value, or :class:`NotCacheable` naming ``where``."""
    if value is None:
        return None
    try:
        return call_identity.digest(call_identity.state_identity(value))
    except (UnfingerprintableInputError, RecursionError) as exc:
        raise NotCacheable(f"injected argument {where!r} cannot be read into a key: {exc}") from exc
