"""Wrapper factory for LangChain's ``create_agent``.

``create_agent`` gets spanpoint's ``CheckpointMiddleware`` once (``calls`` strategy). Chat
models and tools called anywhere (``model.invoke`` in a node, the prebuilt ``ToolNode``, an
agent without the middleware) are covered by the model and tool seams
(``spanpoint.calls.seams``), which the instrumentor installs: spans, and boundaries in a
durable scope, never a second one for a call the middleware already made a boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
