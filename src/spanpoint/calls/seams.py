"""The model and tool seams: every chat-model and tool call a boundary wherever it runs.

Four methods every non-streamed LangChain call passes through exactly once:

- ``BaseChatModel._generate_with_cache`` / ``_agenerate_with_cache``: ``invoke``/``ainvoke``,
  ``batch``, ``bind_tools``, ``with_structured_output``, ``prompt | model`` and
  ``create_agent``'s model node. An explicit ``stream``/``astream`` never passes here:
  streams stay events (traced by the callbacks, never replayed);
- ``BaseTool.run`` / ``arun``: ``tool.invoke``/``ainvoke`` in a node, the prebuilt
  ``ToolNode``, handoff tools.

Inside a durable scope (a ``spanpoint.run``; a LangGraph thread with a checkpointer when the
durable scope is ``thread``) each call is a ``chat`` / ``execute_tool`` boundary, anchored on
the LangGraph task it runs in (``spanpoint.calls.tasks``). Elsewhere it is a plain span when
the zero-code instrumentor installed the seams, and untouched when only a ``GraphRunner``
did (for the duration of its call).

Never two boundaries for one call: a seam steps aside when the innermost spanpoint frame is a
boundary of the same kind opened in the same task execution (``CheckpointMiddleware``'s
boundary around this very call), or, outside a durable scope, when the current span is
spanpoint's span of the same operation. A sub-agent's calls run in other tasks and get
their own.

What is stored: for a model call, the generated messages with their ``generation_info`` and
the ``llm_output`` (never the ``ChatResult`` object: its ``message`` field is typed
``BaseMessage`` and a serializer round trip drops an ``AIMessage``'s tool calls); for a tool
call, its whole result (``spanpoint.calls.results``): what ``run`` returned (a
``ToolMessage``, a ``Command``, a value) and the channel writes it made, with its input
messages and call ids by position, re-bound to the current run's on replay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from spanpoint import _compat, semconv
from spanpoint._patches import PatchSet
from spanpoint.boundary import BoundarySpec, aspan_call, span_call
from spanpoint.calls import cost, results, tasks
from spanpoint.calls import identity as call_identity
from spanpoint.calls import inputs as call_inputs
from spanpoint.config import settings
from spanpoint.errors import UnfingerprintableInputError
from spanpoint.run import current_frame, current_run, on_run_end

# Distinguishes this seam's model-call fingerprints from CheckpointMiddleware's: the two
# store different encodings (ChatResult parts vs ModelResponse), so they never share a key.
_MODEL_SEAM = "chat_result"

# Every run that makes model calls through the seams ends with its cost totals on its span.
on_run_end(cost.set_run_totals)

# --- which seams are live ----------------------------------------------------------------

_LOCK = threading.Lock()
#: holder token -> whether that holder wants plain spans for calls outside a durable scope.
_HOLDERS: dict[object, bool] = {}
_STATE = {"trace": False, "live": False}


def _targets() -> list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.tools import BaseTool

    return [
        (BaseChatModel, "_generate_with_cache", _model_seam),
        (BaseChatModel, "_agenerate_with_cache", _amodel_seam),
        (BaseTool, "run", _tool_seam),
        (BaseTool, "arun", _atool_seam),
    ]


#: The four seams, in spanpoint's one patch registry.
PATCHES = PatchSet("calls.seams", _targets)


def install(holder: object, *, trace_calls: bool) -> None:
    """Install the seams for ``holder`` (idempotent per holder); ``trace_calls`` asks for plain
    spans on calls outside a durable scope (the zero-code instrumentor)."""
    with _LOCK:
        _HOLDERS[holder] = trace_calls
        _STATE["trace"] = any(_HOLDERS.values())
        PATCHES.hold(holder)
        _STATE["live"] = PATCHES.live


def uninstall(holder: object) -> None:
    """Remove ``holder``; the last one out restores the original methods (unless another
    library wrapped them after us: then ours stay, passing every call through)."""
    with _LOCK:
        _HOLDERS.pop(holder, None)
        _STATE["trace"] = any(_HOLDERS.values())
        PATCHES.release(holder)
        _STATE["live"] = PATCHES.live


def installed_by(holder: object) -> bool:
    """Whether ``holder`` currently holds the seams."""
    return PATCHES.held_by(holder)


@contextmanager
def installed(*, trace_calls: bool = False) -> Iterator[None]:
    """The seams for the duration of a block (a ``GraphRunner`` call). Each block holds them
    with its own token, even when they are live already: a concurrent call that installed
    them may end first, and must not take them away from this one."""
    token = object()
    install(token, trace_calls=trace_calls)
    try:
        yield
    finally:
        uninstall(token)


# --- never two boundaries for one call ---------------------------------------------------


def _covered(kind: str, operation: str, tool: str | None = None) -> bool:
    """Whether this call already has spanpoint's boundary or span around it."""
    frame = current_frame()
    if frame is not None and frame.kind == kind and frame.task == tasks.current_task_token():
        return True
    span = trace.get_current_span()
    attrs: Mapping[str, Any] | None = _compat.span_attribute_dict(span)
    if attrs is None:
        attrs = getattr(span, "attributes", None)
    if not attrs or semconv.BOUNDARY_KIND not in attrs:
        return False
    if attrs.get(semconv.GEN_AI_OPERATION_NAME) != operation:
        return False
    return tool is None or attrs.get(semconv.GEN_AI_TOOL_NAME) == tool


def _wanted() -> bool | None:
    """True: a durable boundary; False: a plain span; None: leave the call alone."""
    if not _STATE["live"]:
        return None
    if tasks.durable_here():
        return True
    return False if _STATE["trace"] else None


# --- model calls -------------------------------------------------------------------------


def model_spec(
    model: Any, messages: list[Any], stop: Any, kwargs: Mapping[str, Any]
) -> BoundarySpec | None:
    """The ``chat {model}`` boundary of one ``_generate_with_cache`` call, or None to pass."""
    durable = _wanted()
    if durable is None or _covered(semconv.KIND_MODEL_CALL, semconv.OP_CHAT):
        return None
    # For import time: the GenAI attributes load langchain.agents, paid by the first call.
    from spanpoint.calls import attributes

    capture = settings().capture
    provider, model_name, ls_params = attributes.model_info(model)
    attrs = attributes.model_call_attributes(provider, model_name, ls_params, capture, messages)
    spec = BoundarySpec(
        kind=semconv.KIND_MODEL_CALL,
        name=model_name,
        span_name=f"{semconv.OP_CHAT} {model_name}",
        attributes=attrs,
        span_kind=SpanKind.CLIENT,
        replay=durable,
        describe=lambda result: attributes.describe_model_response(
            _first_message(result), model_name, capture
        ),
        encode=encode_chat_result,
        decode=decode_chat_result,
    )
    if not durable:
        return spec
    call_settings = {"seam": _MODEL_SEAM, "stop": stop, **kwargs}
    try:
        spec.fingerprint = call_identity.model_call_fingerprint(
            model,
            ls_params,
            settings=call_settings,
            tool_choice=None,
            response_format=None,
            tools=(),
            system_message=None,
            messages=messages,
        )
    except UnfingerprintableInputError as exc:
        return _not_cacheable(spec, exc)
    spec.view = {
        "operation": semconv.OP_CHAT,
        "model": model_name,
        "provider": provider,
        "messages": len(messages),
        "last_message": capture.message_view(messages[-1]) if messages else None,
    }
    spec.input_view = lambda: call_inputs.model_input_view(
        messages,
        capture,
        tools=kwargs.get("tools") or (),
        settings={"stop": stop, **{k: v for k, v in kwargs.items() if k != "tools"}},
    )
    return spec


def _first_message(result: Any) -> Any:
    generations = getattr(result, "generations", None)
    return generations[0].message if generations else result


def encode_chat_result(result: Any) -> Any:
    """A ``ChatResult`` as its messages, generation infos and ``llm_output``."""
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


def _model_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    def _generate_with_cache(
        self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        spec = model_spec(self, messages, stop, kwargs)
        if spec is None:
            return original(self, messages, stop, run_manager, **kwargs)
        return span_call(spec, original, self, messages, stop, run_manager, **kwargs)

    return _generate_with_cache


def _amodel_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _agenerate_with_cache(
        self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        spec = model_spec(self, messages, stop, kwargs)
        if spec is None:
            return await original(self, messages, stop, run_manager, **kwargs)
        return await aspan_call(spec, original, self, messages, stop, run_manager, **kwargs)

    return _agenerate_with_cache


# --- tool calls --------------------------------------------------------------------------


def tool_spec(tool: Any, tool_input: Any, call_id: Any) -> BoundarySpec | None:
    """The ``execute_tool {tool}`` boundary of one ``BaseTool.run`` call, or None to pass."""
    durable = _wanted()
    name = str(getattr(tool, "name", None) or type(tool).__name__)
    if durable is None or _covered(semconv.KIND_TOOL_CALL, semconv.OP_EXECUTE_TOOL, name):
        return None
    # For import time: the GenAI attributes load langchain.agents, paid by the first call.
    from spanpoint.calls import attributes

    capture = settings().capture
    args = tool_input
    if isinstance(tool_input, Mapping):
        # Injected state, store, runtime and call id are LangGraph's, not the call's input.
        injected = _compat.injected_arg_keys(tool)
        args = {k: v for k, v in tool_input.items() if k not in injected}
    description = getattr(tool, "description", None)
    spec = BoundarySpec(
        kind=semconv.KIND_TOOL_CALL,
        name=name,
        span_name=f"{semconv.OP_EXECUTE_TOOL} {name}",
        attributes=attributes.tool_call_attributes(
            name, call_id, description if isinstance(description, str) else None, args, capture
        ),
        replay=durable,
        describe=lambda result: attributes.describe_tool_result(result, capture),
    )
    if not durable:
        return spec
    try:
        spec.fingerprint = call_identity.tool_call_fingerprint(name, args, tool)
    except UnfingerprintableInputError as exc:
        return _not_cacheable(spec, exc)
    redacted = capture.redact(args)  # once, for the view and the input view alike
    spec.view = {
        "operation": semconv.OP_EXECUTE_TOOL,
        "tool": name,
        "call_id": call_id,
        "args": redacted,
    }
    spec.input_view = lambda: {"args": redacted}
    return spec


def _whole_result(spec: BoundarySpec, tool_input: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Make ``spec`` commit and replay the call's whole result (``spanpoint.calls.results``):
    its output re-bound by position to the current input, and the channel writes it made
    (Deep Agents' files). Returns the keyword arguments the body runs with: a config whose
    task ``send`` records those writes."""
    call_id = kwargs.get("tool_call_id")
    config = kwargs.get("config")
    if config is None:  # a direct call: the tool runs in the caller's (the task's) config
        config = var_child_runnable_config.get()
    recording, writes = results.capture_writes(config)
    inputs = results.input_messages_of(None, tool_input, config)
    spec.encode = lambda output: results.encode_tool_result(
        output, writes, inputs, tool_call_id=call_id
    )
    spec.decode = lambda stored: results.replay_tool_result(
        stored, input_messages=inputs, tool_call_id=call_id, config=config
    )
    if recording is config:
        return kwargs
    return {**kwargs, "config": recording}


def _tool_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        spec = tool_spec(self, tool_input, kwargs.get("tool_call_id"))
        if spec is None:
            return original(self, tool_input, *args, **kwargs)
        if spec.replay:
            kwargs = _whole_result(spec, tool_input, kwargs)
        return span_call(spec, original, self, tool_input, *args, **kwargs)

    return run


def _atool_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    async def arun(self: Any, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        spec = tool_spec(self, tool_input, kwargs.get("tool_call_id"))
        if spec is None:
            return await original(self, tool_input, *args, **kwargs)
        if spec.replay:
            kwargs = _whole_result(spec, tool_input, kwargs)
        return await aspan_call(spec, original, self, tool_input, *args, **kwargs)

    return arun


def _not_cacheable(spec: BoundarySpec, exc: UnfingerprintableInputError) -> BoundarySpec:
    """A call whose identity cannot be read executes every time, with a warning."""
    spec.replay = False
    message = f"{spec.span_name!r} is not cacheable, executing: {exc}"
    spec.attributes[semconv.WARNINGS] = [message]
    scope = current_run()
    if scope is not None:
        scope.warn(message)
    return spec
