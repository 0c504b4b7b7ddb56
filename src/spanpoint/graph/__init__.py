"""The ``graph_call`` strategy: ``GraphRunner`` and what a graph call returns.

``GraphRunner(graph, name="triage").invoke(input, thread_id="t-42")`` runs one LangGraph call
as a ``graph_call`` boundary (``runner``); ``RunRequest`` and ``DurabilityPolicy`` are its
frozen value types (``types``), ``RunResult`` and ``InterruptInfo`` what it returns
(``results``), ``build_resume_request`` and ``wait_for_interrupt`` how an interrupted call is
resumed (``resume``). Inside the package the order is one way::

    types ← results ← inspect ← invoke ← summary ← call ← stream ← resume ← runner

This face keeps ``from spanpoint.graph import GraphRunner, RunRequest, ...`` working. Its
names load on first use, so importing one module of the package (``spanpoint.graph.types``)
does not load the runner and what it imports.
"""

from typing import TYPE_CHECKING

from spanpoint._lazy import lazy_getattr

if TYPE_CHECKING:
    from spanpoint.graph.call import request_fingerprint
    from spanpoint.graph.results import InterruptInfo, RunResult
    from spanpoint.graph.resume import build_resume_request, pick_interrupt, wait_for_interrupt
    from spanpoint.graph.runner import GraphRunner
    from spanpoint.graph.types import DurabilityPolicy, RunRequest, Strategy

__all__ = [
    "DurabilityPolicy",
    "GraphRunner",
    "InterruptInfo",
    "RunRequest",
    "RunResult",
    "Strategy",
    "build_resume_request",
    "pick_interrupt",
    "request_fingerprint",
    "wait_for_interrupt",
]

_LAZY = {
    "DurabilityPolicy": "spanpoint.graph.types",
    "RunRequest": "spanpoint.graph.types",
    "Strategy": "spanpoint.graph.types",
    "InterruptInfo": "spanpoint.graph.results",
    "RunResult": "spanpoint.graph.results",
    "request_fingerprint": "spanpoint.graph.call",
    "build_resume_request": "spanpoint.graph.resume",
    "pick_interrupt": "spanpoint.graph.resume",
    "wait_for_interrupt": "spanpoint.graph.resume",
    "GraphRunner": "spanpoint.graph.runner",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
