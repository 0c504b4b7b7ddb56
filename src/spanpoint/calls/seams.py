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
the zero-code instrumentor holds the seams, and untouched when only a ``GraphRunner``
turned them on (in the context of its call). The seams are applied once, the first time
either needs them (``spanpoint._patches``); outside those they call what they replaced.

Never two boundaries for one call: a seam steps aside when the innermost spanpoint frame is a
boundary of the same kind opened in the same task execution (``CheckpointMiddleware``'s
boundary around this very call), or, outside a durable scope, when the current span is
spanpoint's span of the same operation. A sub-agent's calls run in other tasks and get
their own.

What is keyed and stored is ``spanpoint.calls.spec``'s, shared with ``CheckpointMiddleware``:
for a model call, the ``ChatResult``'s generated messages with their ``generation_info`` and
the ``llm_output``; for a tool call, its whole result (``spanpoint.calls.results``): what
``run`` returned (a ``ToolMessage``, a ``Command``, a value) and the channel writes it made,
with its input messages and call ids by position, re-bound to the current run's on replay.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import trace

from spanpoint import _compat, semconv
from spanpoint._patches import PatchSet
from spanpoint.boundary import BoundarySpec, aspan_call, span_call
from spanpoint.calls import cost, injected, results, tasks
from spanpoint.calls import spec as call_spec
from spanpoint.config import settings
from spanpoint.run import current_frame, on_run_end

# Every run that makes model calls through the seams ends with its cost totals on its span.
on_run_end(cost.set_run_totals)

# --- where the seams are on --------------------------------------------------------------

_LOCK = threading.Lock()
#: holder token -> whether that holder wants plain spans for calls outside a durable scope.
_HOLDERS: dict[object, bool] = {}
_STATE = {"trace": False}


def _targets() -> list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.tools import BaseTool

    return [
        (BaseChatModel, "_generate_with_cache", _model_seam),
        (BaseChatModel, "_agenerate_with_cache", _amodel_seam),
        (BaseTool, "run", _tool_seam),
        (BaseTool, "arun", _atool_seam),
    ]


#: The four seams, in spanpoint's one patch registry: applied once, on where enabled or held.
PATCHES = PatchSet("calls.seams", _targets)


def install(holder: object, *, trace_calls: bool) -> None:
    """Turn the seams on everywhere for ``holder`` (idempotent per holder); ``trace_calls``
    asks for plain spans on calls outside a durable scope (the zero-code instrumentor)."""
    with _LOCK:
        _HOLDERS[holder] = trace_calls
        _STATE["trace"] = any(_HOLDERS.values())
        PATCHES.hold(holder)


def uninstall(holder: object) -> None:
    """Remove ``holder``; with no holder left the seams pass every call through, except in
    the context of an :func:`enabled` block."""
    with _LOCK:
        _HOLDERS.pop(holder, None)
        _STATE["trace"] = any(_HOLDERS.values())
        PATCHES.release(holder)


def installed_by(holder: object) -> bool:
    """Whether ``holder`` currently holds the seams."""
    return PATCHES.held_by(holder)


def enabled() -> AbstractContextManager[None]:
    """The seams on in this context for the duration of a block (a ``GraphRunner`` call):
    calls made in it, and in the threads and tasks it starts, are seen; a concurrent block
    elsewhere has its own."""
    return PATCHES.enabled()


def installed(*, trace_calls: bool = False) -> AbstractContextManager[None]:
    """Deprecated: :func:`enabled` (the seams are applied once; a block turns them on)."""
    warnings.warn(
        "spanpoint.calls.seams.installed() is deprecated: use seams.enabled()",
        DeprecationWarning,
        stacklevel=2,
    )
    return _held(trace_calls) if trace_calls else enabled()


@contextmanager
def _held(trace_calls: bool) -> Iterator[None]:
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


def model_call_traced(*, reaches_seam: bool) -> bool:
    """Whether a model call starting here has spanpoint's ``chat`` span: one around it (the
    middleware's boundary), or, for a call that passes the model seam next (``reaches_seam``),
    the one the seam will open, decided from this same context."""
    if _covered(semconv.KIND_MODEL_CALL, semconv.OP_CHAT):
        return True
    return reaches_seam and _wanted() is not None


def tool_call_traced(name: str) -> bool:
    """Whether the current span is spanpoint's ``execute_tool`` span of tool ``name`` (a tool
    call's callbacks fire inside the seam's or the middleware's span)."""
    span = trace.get_current_span()
    attrs: Mapping[str, Any] | None = _compat.span_attribute_dict(span)
    if attrs is None:
        attrs = getattr(span, "attributes", None)
    return bool(
        attrs
        and semconv.BOUNDARY_KIND in attrs
        and attrs.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL
        and attrs.get(semconv.GEN_AI_TOOL_NAME) == name
    )


def _wanted() -> bool | None:
    """True: a durable boundary; False: a plain span; None: leave the call alone."""
    if not PATCHES.live:
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
    # The provider gets the bound tools and every other keyword argument as they are.
    call = call_spec.ModelCall(
        model=model,
        messages=messages,
        stored_as=call_spec.CHAT_RESULT,
        tools=kwargs.get("tools") or (),
        settings={"stop": stop, **{k: v for k, v in kwargs.items() if k != "tools"}},
    )
    return call_spec.model_call_spec(call, settings().capture, replay=durable)


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


def tool_spec(tool: Any, tool_input: Any, call_id: Any, config: Any = None) -> BoundarySpec | None:
    """The ``execute_tool {tool}`` boundary of one ``BaseTool.run`` call, or None to pass."""
    durable = _wanted()
    name = str(getattr(tool, "name", None) or type(tool).__name__)
    if durable is None or _covered(semconv.KIND_TOOL_CALL, semconv.OP_EXECUTE_TOOL, name):
        return None
    call = call_spec.ToolCall(
        tool=tool,
        name=name,
        args=tool_input,
        call_id=call_id,
        # ToolNode injected the state, store and runtime into the input already; a
        # RunnableConfig parameter gets the config run() is given, else the caller's.
        injected=injected.injected_from_input(
            tool,
            tool_input,
            call_id,
            config if config is not None else var_child_runnable_config.get(),
        ),
    )
    return call_spec.tool_call_spec(call, settings().capture, replay=durable)


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
        spec = tool_spec(self, tool_input, kwargs.get("tool_call_id"), kwargs.get("config"))
        if spec is None:
            return original(self, tool_input, *args, **kwargs)
        if spec.replay:
            kwargs = _whole_result(spec, tool_input, kwargs)
        return span_call(spec, original, self, tool_input, *args, **kwargs)

    return run


def _atool_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    async def arun(self: Any, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        spec = tool_spec(self, tool_input, kwargs.get("tool_call_id"), kwargs.get("config"))
        if spec is None:
            return await original(self, tool_input, *args, **kwargs)
        if spec.replay:
            kwargs = _whole_result(spec, tool_input, kwargs)
        return await aspan_call(spec, original, self, tool_input, *args, **kwargs)

    return arun
