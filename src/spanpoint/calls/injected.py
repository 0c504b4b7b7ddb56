"""The values LangChain injects into a tool, read the way ``ToolNode`` injects them, and
their identity in the tool call's key.

A tool declares an injected argument with ``Annotated[..., InjectedState]`` (the whole graph
state) or ``InjectedState("field")``, ``InjectedStore()``, ``InjectedToolCallId``, a
``ToolRuntime`` (or an argument named ``runtime``), a ``RunnableConfig`` (LangChain hands the
tool its run's config: ``configurable``, ``metadata``, ``tags``), or another
``InjectedToolArg`` (:func:`injections`). ``CheckpointMiddleware`` runs before ``ToolNode``
injects, so it reads the values from the request's ``ToolRuntime``
(:func:`injected_from_runtime`); the tool seam finds them in the tool input and the config
``run`` is given (:func:`injected_from_input`). :func:`identity` turns them into
the part of the key ``spanpoint.calls.spec`` adds, or raises :class:`NotCacheable` naming the
argument whose value cannot be read: a store (its contents are not read), a value with no
readable state.
"""

from __future__ import annotations

import contextlib
import threading
import typing
import weakref
from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool, InjectedToolArg, InjectedToolCallId, StructuredTool, Tool
from langchain_core.tools.base import get_all_basemodel_annotations

from spanpoint.calls import identity as call_identity
from spanpoint.errors import UnfingerprintableInputError


class NotCacheable(Exception):
    """An input of a call whose identity cannot be read faithfully (the message says which)."""


#: What an injected argument receives: the graph state (field None: all of it), the store,
#: the ``ToolRuntime``, the call id, the run's ``RunnableConfig``, or a value of the caller's
#: (another ``InjectedToolArg``).
STATE, STORE, RUNTIME, CALL_ID, CONFIG, OTHER = (
    "state", "store", "runtime", "call_id", "config", "other"
)  # fmt: skip


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
    declared: dict[str, tuple[str, str | None]] = {}
    func = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if func is not None:
        # Unresolvable annotations: the schema's are read below.
        with contextlib.suppress(Exception):
            hints.update(typing.get_type_hints(func, include_extras=True))
    # BaseTool.run hands the run's config to a parameter annotated RunnableConfig, of the
    # function a tool wraps or of a subclass's own _run/_arun (StructuredTool's and Tool's
    # take one only to hand it on to the function).
    bodies = [func, getattr(tool, "coroutine", None)]
    if not isinstance(tool, StructuredTool | Tool):
        bodies += [tool._run, tool._arun]
    for body in bodies:
        for name in _config_parameters(body):
            declared[name] = (CONFIG, None)
    # A tool without a pydantic schema injects nothing through it.
    with contextlib.suppress(Exception):
        hints.update(get_all_basemodel_annotations(tool.get_input_schema()))
    hints.pop("return", None)
    for name, hint in hints.items():
        if name in declared:
            continue
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


def _config_parameters(func: Any) -> list[str]:
    """The parameters of ``func`` annotated ``RunnableConfig`` (LangChain's test: the very
    type, whatever the name)."""
    if func is None:
        return []
    from langchain_core.runnables import RunnableConfig

    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable annotations: nothing LangChain would inject either
        return []
    return [name for name, hint in hints.items() if hint is RunnableConfig and name != "return"]


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
        elif what == CONFIG:
            values[name] = getattr(runtime, "config", None)
        else:
            values[name] = args.get(name) if isinstance(args, Mapping) else None
    return values


def injected_from_input(
    tool: Any, tool_input: Any, call_id: Any, config: Any = None
) -> dict[str, Any]:
    """Each injected argument's value as ``BaseTool.run`` was handed it (``ToolNode``
    injected it into the input already; the call id comes with the call, and ``config`` is
    the one ``run`` hands a ``RunnableConfig`` parameter)."""
    declared = injections(tool)
    if not declared:
        return {}
    given = tool_input if isinstance(tool_input, Mapping) else {}
    return {
        name: call_id if what == CALL_ID else config if what == CONFIG else given.get(name)
        for name, (what, _field) in declared.items()
    }


def identity(
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
        elif what == CONFIG:
            out[name] = _config_identity(name, value)
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
    return {
        "state": _readable(f"{name}.state", runtime.state),
        "context": _readable(f"{name}.context", runtime.context),
        "call_id": runtime.tool_call_id,
        "tools": [call_identity.tool_digest(t) for t in runtime.tools or ()],
        **_config_identity(f"{name}.config", runtime.config),
        "server": _readable(f"{name}.server_info", _server_view(runtime.server_info)),
    }


def _config_identity(where: str, config: Any) -> dict[str, Any]:
    """What a tool can read of its run's config: the ``configurable`` values, the
    ``metadata`` and the ``tags`` its caller gave. Never what LangGraph and LangChain write
    there for themselves per step or per attempt (checkpoint and task ids, the step, the
    node, tracing names), which would make every attempt another key."""
    config = config if isinstance(config, Mapping) else {}
    configurable = config.get("configurable") or {}
    given = caller_config(config)
    return {
        "configurable": _readable(
            f"{where}['configurable']",
            {k: v for k, v in configurable.items() if _readable_key(k)},
        ),
        "metadata": _readable(f"{where}['metadata']", given.get("metadata")),
        "tags": given.get("tags", []),
    }


def caller_config(config: Any) -> dict[str, Any]:
    """The ``metadata`` and ``tags`` a caller put in a run's config, without what LangGraph
    and LangChain add there for themselves; only the ones that are not empty. A node or a
    tool can read them (``config["metadata"]["user"]``), so a graph call's and a tool call's
    key hold them."""
    if not isinstance(config, Mapping):
        return {}
    found: dict[str, Any] = {}
    metadata = config.get("metadata")
    if isinstance(metadata, Mapping):
        kept = {k: v for k, v in metadata.items() if _readable_metadata_key(k)}
        if kept:
            found["metadata"] = kept
    tags = config.get("tags")
    if isinstance(tags, list | tuple):
        kept_tags = sorted({str(t) for t in tags if not str(t).startswith(_LANGGRAPH_TAG_PREFIXES)})
        if kept_tags:
            found["tags"] = kept_tags
    return found


#: ``configurable`` entries LangGraph writes for itself, per checkpoint or per attempt.
_LANGGRAPH_KEYS = frozenset({"checkpoint_id", "checkpoint_ns", "checkpoint_map"})
#: ``metadata`` entries LangGraph and LangChain write for themselves (the step, the node, its
#: triggers and path, the task's namespace, the thread they copy from ``configurable``).
_LANGGRAPH_METADATA = frozenset({"checkpoint_ns", "checkpoint_id", "thread_id", "run_attempt"})
_LANGGRAPH_METADATA_PREFIXES = ("langgraph_", "ls_", "__", "lc_")
#: Tags LangGraph adds to each step's runs.
_LANGGRAPH_TAG_PREFIXES = ("seq:step:", "graph:step:", "langsmith:")


def _readable_key(key: Any) -> bool:
    return not (isinstance(key, str) and (key.startswith("__") or key in _LANGGRAPH_KEYS))


def _readable_metadata_key(key: Any) -> bool:
    return not (
        isinstance(key, str)
        and (key in _LANGGRAPH_METADATA or key.startswith(_LANGGRAPH_METADATA_PREFIXES))
    )


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
