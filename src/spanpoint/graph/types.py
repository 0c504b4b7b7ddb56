"""The graph's frozen value types: what a graph call is asked (``RunRequest``) and requires.

The bottom of ``spanpoint.graph``, like ``langgraph/types.py``: every other module of the
package may import it, and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from langgraph.types import Command

from spanpoint.capture import CapturePolicy
from spanpoint.errors import ConfigurationError, SpanpointError

Strategy = Literal["graph_call", "calls"]


class StreamReplayError(SpanpointError):
    """A rerun's stream cannot give the chunks its mode asks for without running again.

    The graph call ended in an earlier attempt of the run (its thread's checkpoint says so):
    its state is known, not the chunks it streamed. Only ``stream_mode="values"`` is
    rebuilt from that state; any other mode raises this before anything executes, never
    by paying for the call twice. Stream the rerun with ``stream_mode="values"``, or read
    the result with ``GraphRunner.invoke``.
    """


def check_thread_id(thread_id: object) -> str:
    """``thread_id`` when it is a non-empty string; a ConfigurationError saying so otherwise."""
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
        check_thread_id(self.thread_id)
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


class CallOwner(Protocol):
    """What one graph call's machinery (``graph.call.GraphCall``) reads from its owner, the
    ``GraphRunner``: the graph, its stable name, the strategy, what inspection found, and the
    capture policy in force."""

    graph: Any
    name: str
    strategy: Strategy
    info: Any

    @property
    def policy(self) -> CapturePolicy:
        """The capture policy in force for this graph."""
        ...
