"""Wrapper factories for LangChain: ``create_agent``, chat models and tools.

``create_agent`` gets spanpoint's ``CheckpointMiddleware`` once (``calls`` strategy). Chat
models and tools called directly in graph nodes (``model.invoke`` in a node, the prebuilt
``ToolNode``, a ``create_agent`` agent without the middleware) get
``chat {model}`` / ``execute_tool {tool}`` spans — spans only, never boundaries (replay
boundaries stay where the middleware stands), and never a second span for a call the
middleware already traces: its span is current when the model or tool runs.

The attributes come from ``spanpoint.calls.attributes``, which the middleware uses too (one place
builds GenAI call attributes); these patches are installed where ``spanpoint.calls.middleware``
imports (langchain is installed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from spanpoint import semconv
from spanpoint._compat import span_attribute_dict
from spanpoint.boundary import BoundarySpec, aspan_call, span_call
from spanpoint.config import settings
from spanpoint.instrumentation.pregel import Wrapper

# --- create_agent ----------------------------------------------------------------------------


def create_agent(middleware_factory: Callable[[], Any], middleware_type: type) -> Wrapper:
    """``langchain.agents.create_agent``: add spanpoint's middleware, once."""

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        given = list(kwargs.get("middleware") or ())
        if not any(isinstance(m, middleware_type) for m in given):
            # Last in the list wraps the model and the tools directly: other middleware
            # (retries, fallbacks, human review) stays outside the boundary and runs on replay.
            kwargs = {**kwargs, "middleware": [*given, middleware_factory()]}
        return wrapped(*args, **kwargs)

    return traced


# --- chat models and tools called directly inside nodes ---------------------------------------


def _current_operation() -> tuple[str | None, Mapping[str, Any]]:
    """The GenAI operation of the current span when it is one of spanpoint's."""
    span = trace.get_current_span()
    # The SDK span's own dict, not the mappingproxy over its pure-Python BoundedAttributes
    # (``in`` and ``get`` through it are two Python calls each, on every model and tool call).
    attrs: Mapping[str, Any] | None = span_attribute_dict(span)
    if attrs is None:
        attrs = getattr(span, "attributes", None)
    if not attrs or semconv.BOUNDARY_KIND not in attrs:
        return None, {}
    return attrs.get(semconv.GEN_AI_OPERATION_NAME), attrs


def model_call_spec(model: Any, model_input: Any) -> BoundarySpec:
    """A span-only ``chat {model}`` description of a direct chat-model call."""
    from langchain_core.messages import BaseMessage

    # For import time: the GenAI attributes load langchain.agents, paid by the first call.
    from spanpoint.calls import attributes

    capture = settings().capture
    provider, model_name, ls_params = attributes.model_info(model)
    messages = None
    if capture.content_on_spans and isinstance(model_input, list):
        messages = [m for m in model_input if isinstance(m, BaseMessage)]
    return BoundarySpec(
        kind=semconv.KIND_MODEL_CALL,
        name=model_name,
        span_name=f"{semconv.OP_CHAT} {model_name}",
        attributes=attributes.model_call_attributes(
            provider, model_name, ls_params, capture, messages
        ),
        span_kind=SpanKind.CLIENT,
        replay=False,
        describe=lambda out: attributes.describe_model_response(out, model_name, capture),
    )


def tool_call_spec(tool: Any, tool_input: Any) -> BoundarySpec:
    """A span-only ``execute_tool {tool}`` description of a direct tool call."""
    # For import time: the GenAI attributes load langchain.agents, paid by the first call.
    from spanpoint.calls import attributes

    capture = settings().capture
    name = str(getattr(tool, "name", None) or type(tool).__name__)
    args, call_id = tool_input, None
    if isinstance(tool_input, Mapping) and tool_input.get("type") == "tool_call":
        args, call_id = tool_input.get("args"), tool_input.get("id")
    description = getattr(tool, "description", None)
    return BoundarySpec(
        kind=semconv.KIND_TOOL_CALL,
        name=name,
        span_name=f"{semconv.OP_EXECUTE_TOOL} {name}",
        attributes=attributes.tool_call_attributes(
            name, call_id, description if isinstance(description, str) else None, args, capture
        ),
        replay=False,
        describe=lambda result: attributes.describe_tool_result(result, capture),
    )


def _model_spec_unless_traced(instance: Any, args: Any, kwargs: Any) -> BoundarySpec | None:
    op, _ = _current_operation()
    if op == semconv.OP_CHAT:  # the middleware's span for this very call
        return None
    return model_call_spec(instance, args[0] if args else kwargs.get("input"))


def _tool_spec_unless_traced(instance: Any, args: Any, kwargs: Any) -> BoundarySpec | None:
    op, attrs = _current_operation()
    name = getattr(instance, "name", None) or type(instance).__name__
    if op == semconv.OP_EXECUTE_TOOL and attrs.get(semconv.GEN_AI_TOOL_NAME) == name:
        return None  # the middleware's span, or StructuredTool.ainvoke running invoke
    return tool_call_spec(instance, args[0] if args else kwargs.get("input"))


def _span_only(spec_for: Callable[[Any, Any, Any], BoundarySpec | None], is_async: bool) -> Wrapper:
    if is_async:

        async def atraced(
            wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
        ) -> Any:
            spec = spec_for(instance, args, kwargs)
            if spec is None:
                return await wrapped(*args, **kwargs)
            return await aspan_call(spec, wrapped, *args, **kwargs)

        return atraced

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        spec = spec_for(instance, args, kwargs)
        if spec is None:
            return wrapped(*args, **kwargs)
        return span_call(spec, wrapped, *args, **kwargs)

    return traced


def chat_model_invoke(is_async: bool) -> Wrapper:
    """``BaseChatModel.invoke``/``ainvoke``: a ``chat`` span unless one is already current."""
    return _span_only(_model_spec_unless_traced, is_async)


def tool_invoke(is_async: bool) -> Wrapper:
    """``BaseTool.invoke``/``ainvoke``: an ``execute_tool`` span unless this call has one."""
    return _span_only(_tool_spec_unless_traced, is_async)
