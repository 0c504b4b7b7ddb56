"""Graph calls as boundaries: ``GraphRunner`` and ``RunRequest``.

``GraphRunner(graph, name="triage").invoke(input, thread_id="t-42")`` runs one LangGraph call
as a ``graph_call`` boundary: inside ``spanpoint.run(...)`` a call that completed in an earlier
attempt is replayed from the store (the graph does not run, its nodes and tools cause no side
effects), and a new call is committed when its span ends OK. LangGraph keeps owning the
thread: its checkpointer, super-steps and interrupts.

An interrupt is not an error: the call ends OK with ``status="interrupted"`` and is committed,
so replaying the run returns the same interrupt. ``result.resume_request(value)`` builds
the ``Command(resume=...)`` call on the same thread; that call is a boundary of its own.

``strategy="calls"`` runs the graph without the outer boundary; the model and tool calls
inside (``spanpoint.calls.middleware.CheckpointMiddleware``) are the boundaries. Streams
(``stream``/``astream``) are never boundaries: each chunk is a span event, nothing commits.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Literal

from langgraph.types import Command

from spanpoint.capture import CapturePolicy
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError
from spanpoint.graph.results import RunResult
from spanpoint.graph.types import DurabilityPolicy, RunRequest, Strategy

logger = logging.getLogger("spanpoint")


class GraphRunner:
    """Runs a LangGraph graph (or any object with ``invoke``/``ainvoke``) as spanpoint calls.

    Args:
        graph: a compiled graph, a ``create_agent`` agent, or any object with ``invoke``.
        name: a stable, non-empty name: it names the span and the boundary's checkpoint path,
            so renaming it makes earlier runs miss their checkpoints.
        strategy: ``graph_call`` (one boundary per call) or ``calls`` (the middleware's model
            and tool calls are the boundaries; the call itself is only traced).
        capture: the capture policy for this graph (default: ``settings().capture``).
        durability: checkpointer requirements (default: warn without a durable one).
        kind: ``agent`` or ``workflow`` for the span name; detected when omitted
            (``create_agent`` graphs are agents).
    """

    def __init__(
        self,
        graph: Any,
        *,
        name: str,
        strategy: Strategy = "graph_call",
        capture: CapturePolicy | None = None,
        durability: DurabilityPolicy | None = None,
        kind: Literal["agent", "workflow"] | None = None,
    ) -> None:
        # For import time: the call machinery (LangGraph's checkpointers, the GenAI attributes,
        # the run summary) loads with the first runner, not with `from spanpoint.graph import`.
        from spanpoint.graph.call import GraphCall
        from spanpoint.graph.inspect import inspect_graph

        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(
                "GraphRunner needs a stable non-empty name=, e.g. GraphRunner(graph, name="
                "'triage'): it names the span and the checkpoint path"
            )
        if strategy not in ("graph_call", "calls"):
            raise ConfigurationError(f"strategy must be 'graph_call' or 'calls', not {strategy!r}")
        if not callable(getattr(graph, "invoke", None)):
            raise ConfigurationError(
                f"GraphRunner needs a compiled LangGraph graph or an object with invoke(), "
                f"not {type(graph).__name__}"
            )
        if kind not in (None, "agent", "workflow"):
            raise ConfigurationError(f"kind must be 'agent', 'workflow' or None, not {kind!r}")
        self.graph = graph
        self.name = name
        self.strategy: Strategy = strategy
        self.capture = capture
        self.durability = durability or DurabilityPolicy()
        self.info = inspect_graph(graph, strategy, self.durability, kind)
        for warning in self.info.warnings:
            logger.warning("spanpoint: graph %r: %s", name, warning)
        # Nested graph calls (sub-agents, members, sub-graphs) get their spans inside each
        # call that executes the graph (GraphCall's runner scope: spanpoint.graph.nested),
        # with or without the zero-code instrumentor.
        self._call = GraphCall(self)

    def __repr__(self) -> str:
        return (
            f"GraphRunner(name={self.name!r}, strategy={self.strategy!r}, "
            f"checkpointer={self.info.checkpointer_type})"
        )

    @property
    def policy(self) -> CapturePolicy:
        """The capture policy in force for this graph."""
        return self.capture or settings().capture

    def invoke(
        self,
        input: RunRequest | Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """Run one graph call (replayed inside a run when it completed before).

        The arguments mirror ``graph.invoke``: ``input`` (or a :class:`RunRequest`), then
        LangGraph's ``config``. The thread comes from ``config["configurable"]["thread_id"]``
        or from ``thread_id=``. Extra keyword arguments (``context=``, ``durability=``,
        ``interrupt_before=``, …) pass through to the graph. A failure re-raises the graph's
        exception unchanged.
        """
        return self._call.invoke(self._request(input, config, thread_id), kwargs)

    async def ainvoke(
        self,
        input: RunRequest | Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """The async form of :meth:`invoke` (``graph.ainvoke``)."""
        return await self._call.ainvoke(self._request(input, config, thread_id), kwargs)

    def stream(
        self,
        input: RunRequest | Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """Yield the graph's stream chunks as they come; each one is also a span event.

        Arguments as :meth:`invoke` (and ``graph.stream``: ``stream_mode=``,
        ``subgraphs=``, …). Inside a run, a stream is a durable graph call like
        :meth:`invoke`: a rerun continues the thread and never submits the input again
        (docs/concepts.md, "Streams").
        """
        from spanpoint.graph.nested import scoped_stream  # for import time (see __init__)
        from spanpoint.graph.stream import stream_graph

        chunks = stream_graph(self._call, self._request(input, config, thread_id), kwargs)
        return scoped_stream(self.graph, self.strategy, chunks)

    def astream(
        self,
        input: RunRequest | Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """The async form of :meth:`stream` (``graph.astream``)."""
        from spanpoint.graph.nested import ascoped_stream  # for import time (see __init__)
        from spanpoint.graph.stream import astream_graph

        chunks = astream_graph(self._call, self._request(input, config, thread_id), kwargs)
        return ascoped_stream(self.graph, self.strategy, chunks)

    @staticmethod
    def _request(
        request: Any, config: Mapping[str, Any] | None, thread_id: str | None
    ) -> RunRequest:
        if config is not None and not isinstance(config, Mapping):
            raise ConfigurationError(
                f"config must be a LangGraph config (a dict such as "
                f"{{'configurable': {{'thread_id': 't-1'}}}}), not {type(config).__name__}"
            )
        if isinstance(request, RunRequest):
            if config is not None:
                raise ConfigurationError(
                    "pass config= inside the RunRequest (RunRequest.start(..., config=...)), "
                    "not beside it"
                )
            if thread_id is not None and thread_id != request.thread_id:
                raise ConfigurationError(
                    f"thread_id={thread_id!r} conflicts with the RunRequest's thread "
                    f"{request.thread_id!r}; pass one or the other"
                )
            return request
        rest = dict(config or {})
        configurable = dict(rest.pop("configurable", None) or {})
        in_config = configurable.pop("thread_id", None)
        checkpoint_ns = configurable.pop("checkpoint_ns", None)
        if thread_id is not None and in_config is not None and str(in_config) != thread_id:
            raise ConfigurationError(
                f"thread_id={thread_id!r} conflicts with config['configurable']['thread_id']"
                f"={in_config!r}; pass the thread once, in one place"
            )
        thread = thread_id if thread_id is not None else in_config
        if thread is not None and not isinstance(thread, str):
            thread = str(thread)  # LangGraph keeps thread ids as text
        if thread is None:
            raise ConfigurationError(
                "pass thread_id='...' or config={'configurable': {'thread_id': '...'}} with "
                "raw input (or a RunRequest): every graph call runs on a LangGraph thread"
            )
        build = RunRequest.resume if isinstance(request, Command) else RunRequest.start
        return build(
            request,
            thread_id=thread,
            checkpoint_ns=checkpoint_ns,
            configurable=configurable,
            config=rest,
        )
