"""Zero-code instrumentation: ``opentelemetry-instrument python agent.py`` and nothing else.

>>> from spanpoint.instrumentation import SpanpointInstrumentor   # doctest: +SKIP
>>> SpanpointInstrumentor().instrument()                        # doctest: +SKIP
>>> graph.invoke({"messages": [...]})   # an ``invoke_workflow LangGraph`` span

Installed under the ``opentelemetry_instrumentor`` entry point as ``spanpoint_langgraph`` (the
LangChain instrumentations of OpenInference and OpenLLMetry use ``langchain``), so
``opentelemetry-instrument`` loads it with every other instrumentation. It patches:

- ``Pregel.invoke`` / ``ainvoke`` / ``stream`` / ``astream`` (every compiled graph, agents
  included): graph-call spans; inside ``spanpoint.run`` with the ``graph_call`` strategy the
  outermost graph call is a durable boundary;
- the model and tool seams (``spanpoint.calls.seams``: ``BaseChatModel._generate_with_cache``
  and its async form, ``BaseTool.run`` / ``arun``): ``chat`` and ``execute_tool`` spans for
  every model and tool call, wherever it runs (hand-built nodes, the prebuilt ``ToolNode``,
  sub-agents), and inside a durable scope a boundary keyed by the LangGraph task it runs in;
  never a second one for a call the middleware already made a boundary.

Configuration comes from the environment (see the README): ``SPANPOINT_STRATEGY``
(``graph_call`` or ``calls``), ``SPANPOINT_DURABLE`` (``run``, the default: calls are durable
inside ``spanpoint.run``; ``thread``: also on a LangGraph thread with a checkpointer outside
any run; ``off``: traced only), ``SPANPOINT_STORE``, ``SPANPOINT_CAPTURE_*`` and
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. ``instrument(tracer_provider=...)``
wires spanpoint to that provider; without one, spanpoint uses the global provider when the
first instrumented call happens (the one ``opentelemetry-instrument`` configured), or sets up
its own from the ``OTEL_*`` variables.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from spanpoint.config import configure
from spanpoint.errors import ConfigurationError
from spanpoint.instrumentation import pregel, pregel_stream
from spanpoint.instrumentation.package import instruments

logger = logging.getLogger("spanpoint")

STRATEGY_ENV = "SPANPOINT_STRATEGY"
DURABLE_ENV = "SPANPOINT_DURABLE"

_PREGEL = "langgraph.pregel.main"


def strategy_from_env(value: str | None = None) -> str:
    """The strategy asked for (argument, else ``$SPANPOINT_STRATEGY``, else ``graph_call``)."""
    raw = value if value is not None else os.environ.get(STRATEGY_ENV, "graph_call")
    strategy = raw.strip().lower() or "graph_call"
    if strategy not in pregel.STRATEGIES:
        raise ConfigurationError(
            f"{STRATEGY_ENV}={raw!r} is not a strategy: use 'graph_call' (one boundary per "
            "graph call) or 'calls' (a boundary per model and tool call)"
        )
    return strategy


def durable_from_env(value: str | None = None) -> str:
    """The durable scope of model and tool calls (argument, else ``$SPANPOINT_DURABLE``, else
    ``run``): ``off``, ``run`` (inside ``spanpoint.run``) or ``thread`` (also on a LangGraph
    thread with a checkpointer outside any run)."""
    raw = value if value is not None else os.environ.get(DURABLE_ENV, "run")
    scope = raw.strip().lower() or "run"
    if scope not in ("off", "run", "thread"):
        raise ConfigurationError(
            f"{DURABLE_ENV}={raw!r} is not a durable scope: use 'run' (model and tool calls "
            "are durable inside spanpoint.run), 'thread' (also on a LangGraph thread with a "
            "checkpointer, with no code change) or 'off' (traced only)"
        )
    return scope


class SpanpointInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """OpenTelemetry instrumentor for LangGraph graphs and LangChain agents.

    ``instrument()`` twice is a no-op (``BaseInstrumentor`` keeps one instance and one state);
    ``uninstrument()`` removes every patch, after which graph calls produce no spans.

    Keyword arguments of ``instrument``: ``tracer_provider`` (wired with spanpoint's
    checkpoint processor), ``meter_provider`` and ``logger_provider`` (metrics, run summaries
    and guard records), all three handed to ``spanpoint.configure``; ``strategy`` (overrides
    ``$SPANPOINT_STRATEGY``), ``store``.
    """

    _patched: list[tuple[Any, str, Callable[..., Any]]]
    _switch: _Switch

    def instrumentation_dependencies(self) -> Collection[str]:
        """The packages that must be installed for :meth:`instrument` to apply."""
        return instruments

    def _instrument(self, **kwargs: Any) -> None:
        options = pregel.PatchOptions(strategy=strategy_from_env(kwargs.get("strategy")))
        # All three providers (BaseInstrumentor's tracer_provider, meter_provider and
        # logger_provider kwargs) and the store reach configure: run summaries, metrics and
        # guard records go where the application asked, not only the spans.
        wiring = {
            name: kwargs.get(name)
            for name in ("tracer_provider", "meter_provider", "logger_provider", "store")
        }
        if any(value is not None for value in wiring.values()):
            configure(**wiring)
        self._patched = []
        self._switch = _Switch()
        langgraph_pregel = importlib.import_module(_PREGEL)
        # For import time: loaded with LangGraph above. These patches trace nested graph
        # calls, under a GraphRunner too: the runner's own tracing of them steps aside.
        from spanpoint.graph import nested

        nested.claim(self)
        for method, factory in (
            ("invoke", pregel.graph_invoke),
            ("ainvoke", pregel.graph_ainvoke),
            ("stream", pregel_stream.graph_stream),
            ("astream", pregel_stream.graph_astream),
        ):
            # The graph wrappers run on every graph call: they check the switch themselves
            # rather than through a _Switchable frame.
            wrapper = factory(options, self._switch)
            owner = langgraph_pregel.Pregel
            self._wrap(_PREGEL, f"Pregel.{method}", wrapper, owner=owner, guard=False)
        if _langchain_core_available():
            self._instrument_calls()

    def _instrument_calls(self) -> None:
        # For import time: the seams load langchain-core's chat models and tools.
        from spanpoint.calls import official, seams, tasks

        # The model and tool seams: a boundary in a durable scope, a plain span elsewhere
        # ($SPANPOINT_DURABLE=off: spans only), under either strategy. Nothing else: an
        # injected middleware would make LangChain build another agent.
        tasks.set_durable_scope(durable_from_env())
        seams.install(self, trace_calls=True)
        official.watch()  # one chat / execute_tool span per call beside the official one
        tasks.record_positions(self)  # a subgraph's tasks learn their callers' positions

    def _wrap(
        self, module: str, name: str, wrapper: Callable[..., Any], *, owner: Any, guard: bool = True
    ) -> None:
        attribute = name.rsplit(".", 1)[-1]
        guarded = _Switchable(wrapper, self._switch) if guard else wrapper
        wrap_function_wrapper(module, name, guarded)
        self._patched.append((owner, attribute, guarded))

    def _uninstrument(self, **kwargs: Any) -> None:
        # Wrappers stack: another instrumentation may have wrapped the same method after us
        # (OpenLLMetry wraps Pregel.stream) and not unwrapped it. Unwrapping blindly would then
        # remove *its* wrapper and leave ours; so only our own top-level wrapper is removed,
        # and every wrapper of this instrumentation is switched off in any case.
        self._switch.active = False
        if "spanpoint.graph.nested" in sys.modules:
            sys.modules["spanpoint.graph.nested"].release(self)
        if "spanpoint.calls.seams" in sys.modules:
            sys.modules["spanpoint.calls.seams"].uninstall(self)
        if "spanpoint.calls.tasks" in sys.modules:
            sys.modules["spanpoint.calls.tasks"].stop_recording_positions(self)
        for owner, attribute, guarded in reversed(getattr(self, "_patched", [])):
            current = vars(owner).get(attribute) if isinstance(owner, type) else None
            if current is None:
                current = getattr(owner, attribute, None)
            if getattr(current, "_self_wrapper", None) is guarded:
                unwrap(owner, attribute)
            else:
                logger.debug(
                    "spanpoint: %s.%s is wrapped again by another library; ours is off",
                    getattr(owner, "__name__", owner),
                    attribute,
                )
        self._patched = []


class _Switch:
    """Whether one application of the instrumentor is live."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = True


class _Switchable:
    """A wrapper that steps aside once its instrumentor was uninstrumented."""

    __slots__ = ("switch", "wrapper")

    def __init__(self, wrapper: Callable[..., Any], switch: _Switch) -> None:
        self.wrapper = wrapper
        self.switch = switch

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if self.switch.active:
            return self.wrapper(wrapped, instance, args, kwargs)
        return wrapped(*args, **kwargs)


def _langchain_core_available() -> bool:
    """Whether langchain-core (chat models and tools, so the seams) can be imported."""
    try:
        importlib.import_module("langchain_core.language_models.chat_models")
    except ImportError as exc:
        logger.debug("spanpoint: model/tool seams off, langchain-core unavailable: %s", exc)
        return False
    return True
