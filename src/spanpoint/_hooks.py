"""Middleware hooks that LangChain's per-call LangSmith wrapper can read cheaply.

``create_agent`` wraps every middleware's ``wrap_*`` hook in LangSmith's ``traceable``, and
that wrapper calls ``inspect.signature(hook)`` on every model and tool call, traced or not,
which is slow for a bound method. A plain function that carries its signature as
``__signature__`` makes that an attribute lookup. The signature is the bound method's own
(``request, handler``), so traced inputs keep their names.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

#: The hooks LangChain wraps per call.
WRAP_HOOKS = ("wrap_model_call", "awrap_model_call", "wrap_tool_call", "awrap_tool_call")


def sign_hooks(middleware: Any, names: tuple[str, ...] = WRAP_HOOKS) -> None:
    """Replace ``middleware``'s bound ``names`` by signed plain functions (same behaviour)."""
    for name in names:
        setattr(middleware, name, signed(getattr(middleware, name)))


def signed(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a plain function whose ``__signature__`` is precomputed."""
    if inspect.iscoroutinefunction(method):

        async def hook(request: Any, handler: Any) -> Any:
            return await method(request, handler)

    else:

        def hook(request: Any, handler: Any) -> Any:
            return method(request, handler)

    hook = functools.wraps(method)(hook)
    hook.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return hook
