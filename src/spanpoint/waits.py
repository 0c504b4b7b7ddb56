"""Durable waits: a run that needs a person's input suspends instead of blocking a process.

``wait_for_input("approval")`` inside ``spanpoint.run(...)`` returns the value provided for
(run id, name), or stores the wait and ends the run with status ``waiting``. Provide the
value with ``spanpoint input RUN_ID approval --json true`` (or :func:`provide_input`) and run
the same run id again: every boundary before the wait replays, the wait returns the value,
and the run goes on.

A wait is not a boundary: it stands *between* boundaries, at the run's top level. Calling it
inside a boundary body (a step, a graph node, a tool) is an error, because that boundary
would be left half done; inside a LangGraph node use ``langgraph.types.interrupt`` and bridge
it with :func:`spanpoint.graph.resume.wait_for_interrupt`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spanpoint import semconv
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError, RunWaiting, WaitInsideBoundaryError
from spanpoint.run import current_frame, require_run, validate_run_id
from spanpoint.stores import open_store
from spanpoint.stores.base import CheckpointStore, WaitRecord

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def wait_for_input(
    name: str, *, schema: Mapping[str, Any] | None = None, question: str | None = None
) -> Any:
    """The value provided for this run's wait ``name``, or suspend the run until there is one.

    Args:
        name: the wait's stable name within the run (what ``spanpoint input`` names).
        schema: a JSON Schema the value must match (``type``, ``enum``, ``required`` and
            ``properties``), checked when the run reaches the wait and, once the wait is
            stored, also when the value is provided.
        question: what to ask, shown by ``spanpoint runs --waiting``.

    Raises:
        RunWaiting: no value yet; ``spanpoint.run`` catches it and ends with ``waiting``.
        ConfigurationError: the provided value does not match ``schema`` (provide another).
        WaitInsideBoundaryError: called inside a boundary body or a graph node.
    """
    scope = require_run("wait_for_input")
    _check_name(name)
    frame = current_frame()
    if frame is not scope.root or _inside_graph():
        where = frame.path if frame is not None and frame is not scope.root else "a graph node"
        raise WaitInsideBoundaryError(
            f"wait_for_input({name!r}) was called inside {where!r}; a wait suspends the whole "
            "run, so call it between boundaries at the run's top level (inside a graph node "
            "use langgraph.types.interrupt and spanpoint.wait_for_interrupt)"
        )
    expected = _schema_dict(schema)
    record = scope.store.record_wait(scope.run_id, name, question, expected)
    if record.value_json is None:
        raise RunWaiting(scope.run_id, name, question)
    value = json.loads(record.value_json)
    # Checked here, where the run takes it: a value may have been provided before the run
    # reached the wait, when there was no schema yet to check it against.
    problem = schema_problem(value, expected if expected is not None else record.schema or {})
    if problem:
        raise ConfigurationError(
            f"the value provided for wait {name!r} of run {scope.run_id!r} does not match its "
            f"schema: {problem}; provide a valid one (spanpoint input {scope.run_id} {name} "
            "--json VALUE) and run the run again"
        )
    if scope.span is not None:
        # For import time: events imports LangChain's callbacks, and `spanpoint input`
        # (provide_input, in this module) stays free of LangChain.
        from spanpoint.events import add_bounded_event

        add_bounded_event(semconv.EVENT_WAIT_RESOLVED, {semconv.WAIT_NAME: name}, span=scope.span)
    return value


def provide_input(
    run_id: str, name: str, value: Any, *, store: CheckpointStore | str | None = None
) -> WaitRecord:
    """Provide the value of wait ``name`` of ``run_id`` (then run the run again).

    The value must be JSON-serializable. It is checked against the wait's schema here when
    the run has reached the wait already, and always when the run reaches it.
    """
    validate_run_id(run_id)
    _check_name(name)
    target = _store(store)
    try:
        value_json = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"the value for wait {name!r} is not JSON: {exc}") from exc
    for wait in target.list_waits(pending_only=False):
        if wait.run_id == run_id and wait.name == name and wait.schema:
            problem = schema_problem(value, wait.schema)
            if problem:
                raise ConfigurationError(
                    f"the value for wait {name!r} of run {run_id!r} does not match its "
                    f"schema: {problem}"
                )
    return target.provide_input(run_id, name, value_json)


def list_waits(
    *, store: CheckpointStore | str | None = None, pending_only: bool = True
) -> list[WaitRecord]:
    """Stored waits (pending ones by default), oldest first."""
    return _store(store).list_waits(pending_only=pending_only)


def schema_problem(value: Any, schema: Mapping[str, Any], where: str = "value") -> str | None:
    """What is wrong with ``value`` under a small JSON Schema subset, or None when it fits."""
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        types = tuple(t for n in names for t in _JSON_TYPES.get(n, (object,)))
        is_bool = isinstance(value, bool)
        if not isinstance(value, types) or (is_bool and "boolean" not in names):
            return f"{where} must be of type {'/'.join(names)}, not {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']!r}"
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            return f"{where} is missing {', '.join(missing)}"
        for key, sub in (schema.get("properties") or {}).items():
            if key in value and isinstance(sub, Mapping):
                problem = schema_problem(value[key], sub, f"{where}.{key}")
                if problem:
                    return problem
    return None


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError("a wait needs a non-empty string name, such as 'approval'")


def _schema_dict(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise ConfigurationError(
            "schema must be a JSON Schema mapping, such as {'type': 'boolean'}"
        )
    return json.loads(json.dumps(dict(schema)))


def _inside_graph() -> bool:
    try:
        # For import time, and so waits runs without LangGraph: only a wait asks.
        from langgraph.config import get_config

        get_config()
    except (RuntimeError, ImportError):
        return False
    return True


def _store(store: CheckpointStore | str | None) -> CheckpointStore:
    if store is None:
        return settings().store
    return open_store(store) if isinstance(store, str) else store
