"""What identifies a graph call: the one rule ``GraphRunner`` and the zero-code patches key by.

A graph call's key covers everything its result can depend on: the input, the thread
(``thread_id``, ``checkpoint_ns``), LangGraph's runtime ``context``, every value of
``config["configurable"]`` except the ones LangGraph and spanpoint manage (the ``__pregel_*``
internals, ``checkpoint_map``), and every keyword argument of the call except the ones that only
print (``debug``, ``print_mode``), and the ``metadata`` and ``tags`` the caller gave (a node or
a tool reads ``config["metadata"]["user"]``; what LangGraph adds there per step is left out).
The rest of the config (callbacks, run name) names or observes a call without changing a
result it returns.

A graph that can reach a LangGraph store (compiled with ``store=``, in a sub-graph, or given
through the config's runtime) is never cached as a graph call: a store's contents change
between calls, so no fingerprint of the call's arguments vouches for its result. Its identity
holds a :class:`~spanpoint.serde.Uncacheable` under ``"store"``: the boundary executes, with
one warning naming the store. A value of the other parts that cannot be read faithfully is
not cacheable the same way (serde's rule, with a warning naming the argument).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from spanpoint import serde
from spanpoint.calls.injected import caller_config
from spanpoint.run import RunScope, current_frame

#: Keys of ``config["configurable"]`` that are no input of the call: LangGraph's internals
#: (every ``__pregel_*`` key too) and the thread, which the identity holds on its own.
_MANAGED_CONFIGURABLE = frozenset({"thread_id", "checkpoint_ns", "checkpoint_map"})
_INTERNAL_PREFIX = "__pregel_"
_RUNTIME = "__pregel_runtime"

#: Keyword arguments of ``invoke``/``stream`` that change what is printed, never the result.
_NEUTRAL_KWARGS = frozenset({"debug", "print_mode"})

# graph -> the store one of its sub-graphs reaches (None: none). Sub-graphs are found once
# per graph: walking its nodes on every call would cost each replay a scan of the graph.
_SUBGRAPH_STORES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def graph_call_identity(
    graph: Any,
    graph_input: Any,
    *,
    thread_id: Any,
    checkpoint_ns: Any,
    context: Any,
    configurable: Mapping[str, Any] | None,
    kwargs: Mapping[str, Any],
    durable: bool = True,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The identity of one graph call (fingerprinted, never stored).

    ``configurable`` may hold the thread (it is left out: ``thread_id`` and ``checkpoint_ns``
    stand on their own). ``config``: the call's whole config, for its caller's metadata and
    tags. ``context`` wins over a ``context`` keyword. ``durable``: the call is
    a boundary whose output replays, so a reachable store makes it not cacheable; a rerun
    key (``durable=False``, recognising a thread's progress) does not depend on a store.
    """
    kw = {k: v for k, v in kwargs.items() if k not in _NEUTRAL_KWARGS}
    given = kw.pop("context", None)
    if context is None:
        context = given
    values: dict[str, Any] = {}
    runtime = None
    for key, value in (configurable or {}).items():
        if key == _RUNTIME:
            runtime = value
        elif key not in _MANAGED_CONFIGURABLE and not key.startswith(_INTERNAL_PREFIX):
            values[key] = value
    if context is None and runtime is not None:
        # LangGraph adopts a runtime's context given in the config when the call has none.
        context = getattr(runtime, "context", None)
    identity = {
        "input": graph_input,
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "context": context,
        "configurable": values,
        "kwargs": kw,
    }
    given = caller_config(config)
    if given:  # absent when empty: a call without them keeps the key it had
        identity["caller"] = given
    if durable:
        store = getattr(runtime, "store", None) or reachable_store(graph)
        if store is not None:
            identity["store"] = serde.Uncacheable(
                f"{type(store).__module__}.{type(store).__qualname__}",
                "changes between calls (a LangGraph store the graph reads and writes)",
            )
    return identity


def keyed_frame_identity(scope: RunScope) -> str:
    """The identity of the current graph-call boundary's frame, by which a rerun recognises the
    call on its thread (spanpoint.graph.rerun); "" when the call is not cacheable.

    A boundary that is not cacheable has no key (its frame's key is empty; its position is
    shared by every input at that place that spanpoint cannot read, or
    by every call of a graph that reaches a store): recognising it would hand one call's
    thread state to another. It starts as asked instead, like any call that executes.
    """
    frame = current_frame()
    if frame is None or frame is scope.root or not frame.key:
        return ""
    return frame.identity


def reachable_store(graph: Any) -> Any:
    """The LangGraph store ``graph`` or one of its sub-graphs was compiled with; None."""
    store = getattr(graph, "store", None)
    if store is not None:
        return store
    try:
        return _SUBGRAPH_STORES[graph]
    except KeyError:
        pass
    except TypeError:  # not weakly referenceable: walked every call
        return _subgraph_store(graph)
    found = _SUBGRAPH_STORES[graph] = _subgraph_store(graph)
    return found


def _subgraph_store(graph: Any) -> Any:
    subgraphs = getattr(graph, "get_subgraphs", None)
    if subgraphs is None:
        return None
    try:
        for _, sub in subgraphs(recurse=True):
            if getattr(sub, "store", None) is not None:
                return sub.store
    except Exception:  # an exotic node LangGraph cannot walk: no sub-graph store seen
        return None
    return None
