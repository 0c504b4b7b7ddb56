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
- the task keys of a LangGraph config's ``configurable`` (``CONFIG_KEY_RUNTIME``,
  ``CONFIG_KEY_CHECKPOINTER``, ``CONFIG_KEY_TASK_ID``, ``CONFIG_KEY_SEND``,
  ``CONFIG_KEY_READ``, from
  ``langgraph._internal._constants``) and the ``langgraph_step``/``langgraph_path`` metadata
  keys: checked on langgraph 1.2.24;
- :func:`injected_arg_keys`: ``BaseTool._injected_args_keys``, and the seams
  ``BaseChatModel._generate_with_cache``/``_agenerate_with_cache``: checked on
  langchain-core 1.8.3.

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
    "CONFIG_KEY_CHECKPOINTER",
    "CONFIG_KEY_READ",
    "CONFIG_KEY_RUNTIME",
    "CONFIG_KEY_SEND",
    "CONFIG_KEY_TASK_ID",
    "METADATA_PATH",
    "METADATA_STEP",
    "ChannelWrite",
    "ChannelWriteTupleEntry",
    "RunnableCallable",
    "gen_ai_attributes",
    "gen_ai_metrics",
    "injected_arg_keys",
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


#: LangGraph's private configurable keys (langgraph._internal._constants, langgraph 1.2.24).
CONFIG_KEY_RUNTIME = "__pregel_runtime"
CONFIG_KEY_CHECKPOINTER = "__pregel_checkpointer"
CONFIG_KEY_TASK_ID = "__pregel_task_id"
CONFIG_KEY_SEND = "__pregel_send"
CONFIG_KEY_READ = "__pregel_read"
METADATA_STEP = "langgraph_step"
METADATA_PATH = "langgraph_path"


def injected_arg_keys(tool: Any) -> frozenset[str]:
    """The argument names LangChain injects into ``tool`` (state, store, runtime, call id):
    never part of a call's identity. Empty when the private property is gone."""
    try:
        keys = tool._injected_args_keys
    except Exception:
        return frozenset()
    return keys if isinstance(keys, frozenset) else frozenset(keys or ())


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
