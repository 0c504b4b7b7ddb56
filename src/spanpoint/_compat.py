"""Every private upstream name spanpoint uses, in one place, with the version it was checked on.

Each of these may change in any upgrade of its package, with no deprecation: when one moves,
this module is the one place to fix, and docs/compatibility.md the place to note it. Public
but underscored upstream paths (``opentelemetry._logs``, the logs API while it is
experimental) are not listed here.

- :func:`sampler_from_env`: ``opentelemetry.sdk.trace.sampling._get_from_env_or_default``
  (the SDK's ``OTEL_TRACES_SAMPLER`` reader), checked on opentelemetry-sdk 1.45.2;
- ``gen_ai_attributes``, ``gen_ai_metrics``: ``opentelemetry.semconv._incubating``, checked on
  opentelemetry-semantic-conventions 0.66b2;
- :func:`span_attribute_dict`: ``Span._attributes._dict`` (the SDK's ``BoundedAttributes``),
  checked on opentelemetry-sdk 1.45.2;
- ``RunnableCallable`` (``langgraph._internal._runnable``), ``ChannelWrite`` and
  ``ChannelWriteTupleEntry`` (``langgraph.pregel._write``): checked on langgraph 1.2.24.

The LangGraph names are loaded on first use (PEP 562): only the guard's graph adapter needs
them, and LangGraph's runtime costs import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.sampling import _get_from_env_or_default as sampler_from_env
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

if TYPE_CHECKING:
    from langgraph._internal._runnable import RunnableCallable
    from langgraph.pregel._write import ChannelWrite, ChannelWriteTupleEntry

__all__ = [
    "ChannelWrite",
    "ChannelWriteTupleEntry",
    "RunnableCallable",
    "gen_ai_attributes",
    "gen_ai_metrics",
    "sampler_from_env",
    "span_attribute_dict",
]


def span_attribute_dict(span: Any) -> dict[str, Any] | None:
    """The SDK span's own attribute dict, or None when the span has none.

    ``ReadableSpan.attributes`` wraps the SDK's ``BoundedAttributes`` (a pure-Python mapping)
    in a mappingproxy, so each ``in`` or ``get`` is two Python calls; read-only callers on the
    hot path (every model and tool call, every ended span) read the dict directly.
    """
    found = getattr(getattr(span, "_attributes", None), "_dict", None)
    return found if type(found) is dict else None


_LANGGRAPH = {
    "RunnableCallable": "langgraph._internal._runnable",
    "ChannelWrite": "langgraph.pregel._write",
    "ChannelWriteTupleEntry": "langgraph.pregel._write",
}


def __getattr__(name: str) -> Any:
    module = _LANGGRAPH.get(name)
    if module is None:
        raise AttributeError(f"module 'spanpoint._compat' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
