"""``@spanpoint.step``: a replay boundary around any function, sync or async.

Use it for the work around an agent — "load ticket", "write report", "notify customer" —
so that a run that failed at step 3 replays steps 1 and 2 from the store and executes only
what had not completed. Outside a run a step is a plain span and never touches a store.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from spanpoint import semconv
from spanpoint.boundary import BoundarySpec, acall_boundary, call_boundary
from spanpoint.errors import ConfigurationError

P = ParamSpec("P")
R = TypeVar("R")


@overload
def step(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def step(
    *, name: str | None = None, replay: bool = True
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def step(
    fn: Callable[P, R] | None = None, /, *, name: str | None = None, replay: bool = True
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Make ``fn`` a replay boundary: ``@step`` or ``@step(name="notify", replay=True)``.

    Args:
        name: the step's stable name in checkpoint paths (default: the function's qualname,
            without ``<locals>`` markers).
            Renaming a step makes earlier runs miss its checkpoints, so pin it if you rename.
        replay: False records a span but never commits or replays (for steps that must run
            every time, such as reading the clock).

    The input identity is a fingerprint of the bound arguments (``self``/``cls`` excluded);
    the arguments themselves are never stored. The output must be serializable by LangGraph's
    serializer (JSON-like data, LangChain messages, pydantic models, dataclasses).
    """
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigurationError("step name must be a non-empty string")
    if fn is None:
        return lambda f: _wrap(f, name, replay)
    return _wrap(fn, name, replay)


def _wrap(fn: Callable[P, R], name: str | None, replay: bool) -> Callable[P, R]:
    if not callable(fn):
        raise ConfigurationError(f"@step decorates functions, not {type(fn).__name__}")
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise ConfigurationError(
            f"{fn.__qualname__} is a generator: streams are never replay boundaries. Collect "
            "the items in a step that returns a list, or trace the stream without @step"
        )
    # A qualname is stable across processes and tells apart same-named methods of two
    # classes; the "<locals>" markers of nested functions add nothing to that.
    step_name = name or fn.__qualname__.replace("<locals>.", "")
    span_name = f"step {name or fn.__name__}"
    signature = inspect.signature(fn)
    params = list(signature.parameters)
    skip_first = bool(params) and params[0] in ("self", "cls")
    # With plain parameters all passed by position, binding is a zip: the same mapping
    # signature.bind builds, without its cost on every call.
    plain = all(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in signature.parameters.values()
    )

    def spec(args: tuple[Any, ...], kwargs: dict[str, Any]) -> BoundarySpec:
        if plain and not kwargs and len(args) == len(params):
            arguments = dict(zip(params, args, strict=True))
        else:
            try:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
            except TypeError:  # let the call itself raise the real TypeError
                arguments = {"args": args, "kwargs": kwargs}
        if skip_first:
            arguments.pop(params[0], None)
        return BoundarySpec(
            kind=semconv.KIND_STEP,
            name=step_name,
            span_name=span_name,
            identity=arguments,
            replay=replay,
            view={"step": step_name},
        )

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await acall_boundary(spec(args, kwargs), fn, *args, **kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return call_boundary(spec(args, kwargs), fn, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
