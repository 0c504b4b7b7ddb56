"""Graph calls as boundaries: ``GraphRunner``, ``RunRequest`` and ``build_resume_request``.

``GraphRunner(graph, name="triage").invoke(input, thread_id="t-42")`` runs one LangGraph call
as a ``graph_call`` boundary: inside ``spanpoint.run(...)`` a call that completed in an earlier
attempt is replayed from the store (the graph does not run, its nodes and tools cause no side
effects), and a new call is committed when its span ends OK. LangGraph keeps owning the
thread: its checkpointer, super-steps and interrupts.

An interrupt is not an error: the call ends OK with ``status="interrupted"`` and is committed,
so replaying the run returns the same interrupt. ``build_resume_request(result, value)`` builds
the ``Command(resume=...)`` call on the same thread; that call is a boundary of its own.

``strategy="calls"`` runs the graph without the outer boundary; the model and tool calls
inside (``spanpoint.middleware.CheckpointMiddleware``) are the boundaries. Streams
(``stream``/``astream``) are never boundaries: each chunk is a span event, nothing commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.types import Command

from spanpoint import serde
from spanpoint.capture import CapturePolicy
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError, NotInterruptedError, UnfingerprintableInputError
from spanpoint.graph_results import InterruptInfo, RunResult

logger = logging.getLogger("spanpoint")

Strategy = Literal["graph_call", "calls"]


def _check_thread_id(thread_id: object) -> str:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise ConfigurationError(
            f"thread_id must be a non-empty string (the LangGraph thread to run on), not "
            f"{thread_id!r}; pass thread_id='...' or a RunRequest"
        )
    return thread_id


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One graph call: its input (or resume command) and the thread it runs on.

    Build it with :meth:`start` or :meth:`resume`. ``thread_id`` always wins over a
    ``thread_id`` in ``config["configurable"]``; the other keywords pass through to LangGraph.
    """

    input: Any
    thread_id: str
    checkpoint_ns: str | None = None
    context: Any = None
    configurable: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_thread_id(self.thread_id)
        for name in ("configurable", "config"):
            if not isinstance(getattr(self, name), Mapping):
                raise ConfigurationError(f"{name} must be a mapping (a dict), when given")

    @classmethod
    def start(
        cls,
        input: Any,
        *,
        thread_id: str,
        checkpoint_ns: str | None = None,
        context: Any = None,
        configurable: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> RunRequest:
        """A call that starts (or continues) the thread with ``input``."""
        return cls(input, thread_id, checkpoint_ns, context, configurable or {}, config or {})

    @classmethod
    def resume(
        cls,
        command_or_value: Any,
        *,
        thread_id: str,
        checkpoint_ns: str | None = None,
        context: Any = None,
        configurable: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> RunRequest:
        """A call that resumes an interrupted thread: a ``Command`` or the resume value."""
        command = (
            command_or_value
            if isinstance(command_or_value, Command)
            else Command(resume=command_or_value)
        )
        return cls(command, thread_id, checkpoint_ns, context, configurable or {}, config or {})

    @property
    def is_resume(self) -> bool:
        """Whether the input is a ``Command`` carrying a resume value."""
        return isinstance(self.input, Command) and self.input.resume is not None

    def graph_config(self) -> dict[str, Any]:
        """The ``config`` to pass to LangGraph, with the thread merged in."""
        config = dict(self.config)
        configurable = {**config.get("configurable", {}), **self.configurable}
        configurable["thread_id"] = self.thread_id
        if self.checkpoint_ns is not None:
            configurable["checkpoint_ns"] = self.checkpoint_ns
        config["configurable"] = configurable
        return config

    def state_config(self) -> dict[str, Any]:
        """The config that reads the thread's latest state (no pinned checkpoint id)."""
        configurable: dict[str, Any] = {"thread_id": self.thread_id}
        if self.checkpoint_ns is not None:
            configurable["checkpoint_ns"] = self.checkpoint_ns
        return {"configurable": configurable}


# serde.fingerprint's canonical JSON: sorted keys, compact, UTF-8.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _plain_identity_template() -> tuple[str, str, str]:
    """The canonical JSON of a plain call's identity, cut around its input and thread id.

    The four other parts are the same for every plain call, so their text is built once,
    here, by serde.canonical itself (two str marks stand for the input and the thread id).
    """
    marks = ("\x00input\x00", "\x00thread\x00")
    identity = {
        "checkpoint_ns": None,
        "configurable": {},
        "context": None,
        "input": marks[0],
        "kwargs": {},
        "thread_id": marks[1],
    }
    text = _CANONICAL_JSON.encode(serde.canonical(identity))
    head, rest = text.split(_CANONICAL_JSON.encode(marks[0]))
    middle, tail = rest.split(_CANONICAL_JSON.encode(marks[1]))
    return head, middle, tail


_HEAD, _MIDDLE, _TAIL = _plain_identity_template()


def request_fingerprint(req: RunRequest, kwargs: Mapping[str, Any]) -> str | None:
    """``serde.fingerprint`` of a call's identity, for the common call that has only an input
    and a thread (None otherwise): the same digest, with only the input and the thread id
    encoded per call. Keys stay those of the general path (tests/test_graph_runner.py checks
    that both agree)."""
    if req.checkpoint_ns is not None or req.context is not None or req.configurable or kwargs:
        return None
    try:
        view = serde.canonical(req.input)
    except UnfingerprintableInputError:
        return None  # the general path computes it again and the boundary reports it
    text = "".join(
        (_HEAD, _CANONICAL_JSON.encode(view), _MIDDLE, _CANONICAL_JSON.encode(req.thread_id), _TAIL)
    )
    return serde.text_digest(text)


def build_resume_request(
    result: RunResult, value: Any, *, interrupt_index: int | None = None
) -> RunRequest:
    """The request that answers ``result``'s interrupt(s) with ``value`` on the same thread.

    With one interrupt and no index the value is passed as ``Command(resume=value)``. With
    several interrupts, or an ``interrupt_index``, it is keyed by interrupt id
    (``Command(resume={id: value})``); with several and no index, ``value`` must already be
    a mapping from interrupt ids to values.
    """
    if not isinstance(result, RunResult):
        raise ConfigurationError(
            f"build_resume_request needs the RunResult of a graph call, not {type(result).__name__}"
        )
    if not result.interrupted:
        raise NotInterruptedError(
            f"the graph call on thread {result.thread_id!r} is {result.status}, not interrupted; "
            "there is nothing to resume (check result.status before resuming)"
        )
    interrupts = result.interrupts
    if not interrupts:  # a static breakpoint (interrupt_before/after): continue with no input
        if value is not None:
            raise NotInterruptedError(
                f"thread {result.thread_id!r} stopped at a breakpoint before "
                f"{list(result.next_nodes)}, which takes no resume value; pass None"
            )
        return RunRequest(None, result.thread_id)
    if interrupt_index is not None:
        return RunRequest.resume(
            Command(resume={pick_interrupt(interrupts, interrupt_index).id: value}),
            thread_id=result.thread_id,
        )
    if len(interrupts) == 1:
        return RunRequest.resume(Command(resume=value), thread_id=result.thread_id)
    ids = {i.id for i in interrupts}
    if not isinstance(value, Mapping) or not set(value) <= ids or not value:
        raise NotInterruptedError(
            f"thread {result.thread_id!r} has {len(interrupts)} interrupts "
            f"({', '.join(sorted(ids))}); pass interrupt_index=N to answer one, or a dict "
            "{interrupt_id: value}"
        )
    return RunRequest.resume(Command(resume=dict(value)), thread_id=result.thread_id)


def pick_interrupt(interrupts: tuple[InterruptInfo, ...], index: int) -> InterruptInfo:
    """``interrupts[index]``; :class:`NotInterruptedError` naming the valid range otherwise."""
    if not isinstance(index, int) or not 0 <= index < len(interrupts):
        raise NotInterruptedError(
            f"interrupt_index {index!r} is out of range: the result has {len(interrupts)} "
            f"interrupt(s), indexes 0..{len(interrupts) - 1}"
        )
    return interrupts[index]


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
        from spanpoint.graph_call import GraphCall
        from spanpoint.graph_info import inspect_graph

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
        self, request: RunRequest | Any, /, *, thread_id: str | None = None, **kwargs: Any
    ) -> RunResult:
        """Run one graph call (replayed inside a run when it completed before).

        ``request`` is a :class:`RunRequest`, or raw input with ``thread_id=``. Extra keyword
        arguments (``durability=``, ``interrupt_before=``, …) pass through to the graph. A
        failure re-raises the graph's exception unchanged.
        """
        return self._call.invoke(self._request(request, thread_id), kwargs)

    async def ainvoke(
        self, request: RunRequest | Any, /, *, thread_id: str | None = None, **kwargs: Any
    ) -> RunResult:
        """The async form of :meth:`invoke` (``graph.ainvoke``)."""
        return await self._call.ainvoke(self._request(request, thread_id), kwargs)

    def stream(
        self, request: RunRequest | Any, /, *, thread_id: str | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """Yield the graph's stream chunks as they come; each one is also a span event.

        A stream is never a boundary: it neither commits nor replays a checkpoint.
        """
        from spanpoint.graph_stream import stream_graph

        return stream_graph(self._call, self._request(request, thread_id), kwargs)

    def astream(
        self, request: RunRequest | Any, /, *, thread_id: str | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The async form of :meth:`stream` (``graph.astream``)."""
        from spanpoint.graph_stream import astream_graph

        return astream_graph(self._call, self._request(request, thread_id), kwargs)

    @staticmethod
    def _request(request: Any, thread_id: str | None) -> RunRequest:
        if isinstance(request, RunRequest):
            if thread_id is not None and thread_id != request.thread_id:
                raise ConfigurationError(
                    f"thread_id={thread_id!r} conflicts with the RunRequest's thread "
                    f"{request.thread_id!r}; pass one or the other"
                )
            return request
        if thread_id is None:
            raise ConfigurationError(
                "pass thread_id='...' with raw input (or a RunRequest): every graph call "
                "runs on a LangGraph thread"
            )
        if isinstance(request, Command):
            return RunRequest.resume(request, thread_id=thread_id)
        return RunRequest.start(request, thread_id=thread_id)


@dataclass(frozen=True, slots=True)
class DurabilityPolicy:
    """What a graph's checkpointer must provide.

    Args:
        require_checkpointer: raise :class:`~spanpoint.errors.MissingCheckpointerError`
            before the graph runs when it has no checkpointer that survives a restart.
        warn_in_process: warn when the checkpointer lives in the process (``InMemorySaver``):
            an interrupted thread is lost when the process ends.
    """

    require_checkpointer: bool = False
    warn_in_process: bool = True
