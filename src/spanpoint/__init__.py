"""spanpoint — OpenTelemetry-native tracing and durable replay for LangGraph agents.

A checkpoint is a span: every replay boundary (a graph call, a model call, a tool call, a
``@step``) is an OpenTelemetry span, and its output is committed when the span ends OK.
Running the same durable run again returns committed outputs instead of executing again.

>>> import spanpoint                                    # doctest: +SKIP
>>> @spanpoint.step
... def write_report(ticket): ...
>>> with spanpoint.run("ticket-42"):
...     write_report(load_ticket("42"))
"""

from typing import TYPE_CHECKING

from spanpoint._lazy import callable_module, lazy_getattr
from spanpoint._version import __version__
from spanpoint.calls.policy import CallCheckpointPolicy
from spanpoint.capture import CapturePolicy
from spanpoint.config import Settings, configure, flush, settings
from spanpoint.errors import ConfigurationError, RunWaiting, SpanpointError, StoreError
from spanpoint.processor import CheckpointSpanProcessor, DurableSampler
from spanpoint.run import current_run
from spanpoint.stores import CheckpointStore, MemoryStore, SqliteStore, open_store

if TYPE_CHECKING:
    from spanpoint.calls.middleware import CheckpointMiddleware
    from spanpoint.cassettes import cassette
    from spanpoint.forks import fork
    from spanpoint.graph.results import InterruptInfo, RunResult
    from spanpoint.graph.resume import wait_for_interrupt
    from spanpoint.graph.runner import GraphRunner
    from spanpoint.graph.types import DurabilityPolicy, RunRequest
    from spanpoint.run import run
    from spanpoint.step import step
    from spanpoint.waits import provide_input, wait_for_input
else:
    # The modules, callable as their namesakes: ``spanpoint.run("ticket-42")`` opens a run,
    # ``import spanpoint.run`` is the module (docs/api.md, "run and step").
    from spanpoint import run, step

    callable_module(run)
    callable_module(step)

__all__ = [
    "CallCheckpointPolicy",
    "CapturePolicy",
    "CheckpointMiddleware",
    "CheckpointSpanProcessor",
    "CheckpointStore",
    "ConfigurationError",
    "DurabilityPolicy",
    "DurableSampler",
    "GraphRunner",
    "InterruptInfo",
    "MemoryStore",
    "RunRequest",
    "RunResult",
    "RunWaiting",
    "Settings",
    "SpanpointError",
    "SqliteStore",
    "StoreError",
    "__version__",
    "cassette",
    "configure",
    "current_run",
    "flush",
    "fork",
    "open_store",
    "provide_input",
    "run",
    "settings",
    "step",
    "wait_for_input",
    "wait_for_interrupt",
]

# Graph names import LangGraph and the OTel log/metric SDKs: load them on first use.
_LAZY = {
    "DurabilityPolicy": "spanpoint.graph.types",
    "RunRequest": "spanpoint.graph.types",
    "GraphRunner": "spanpoint.graph.runner",
    "wait_for_interrupt": "spanpoint.graph.resume",
    "InterruptInfo": "spanpoint.graph.results",
    "RunResult": "spanpoint.graph.results",
    "provide_input": "spanpoint.waits",
    "wait_for_input": "spanpoint.waits",
    # CheckpointMiddleware imports langchain.agents (over a second).
    "CheckpointMiddleware": "spanpoint.calls.middleware",
    # cassette imports LangChain's callbacks.
    "cassette": "spanpoint.cassettes",
    # fork imports LangChain's message types and the calls' result encoding.
    "fork": "spanpoint.forks",
    # The subpackages the face points to: ``spanpoint.guard.GuardConfig`` after
    # ``import spanpoint``.
    "graph": "spanpoint.graph",
    "guard": "spanpoint.guard",
}

#: Names that left the face, by their home now: importable from here, with a warning, for one
#: release (tests/test_exported_members.py).
_GUARD_NAMES = (
    "Guard",
    "GuardConfig",
    "GuardMiddleware",
    "GuardReport",
    "GuardedGraph",
    "compile_guarded_graph",
    "guard_graph",
)
_SPECIFIC_ERRORS = (
    "CassetteMissError",
    "CorruptCheckpointError",
    "ForkError",
    "GuardConcurrentResumeError",
    "GuardError",
    "GuardNotResumableError",
    "GuardResumeArgumentError",
    "GuardResumeError",
    "GuardRunNotStoppedError",
    "GuardStaleCheckpointError",
    "GuardThreadStoppedError",
    "GuardUnknownThreadError",
    "InvalidRunIdError",
    "LeaseTimeoutError",
    "MissingCheckpointerError",
    "NotInRunError",
    "NotInterruptedError",
    "SerializationError",
    "StoreUnavailableError",
    "UnfingerprintableInputError",
    "UntrustedCheckpointError",
    "WaitInsideBoundaryError",
)
_MOVED = {
    **dict.fromkeys(_GUARD_NAMES, "spanpoint.guard"),
    **dict.fromkeys(_SPECIFIC_ERRORS, "spanpoint.errors"),
    # result.resume_request(value) is the face's way; the function stays in spanpoint.graph.
    "build_resume_request": "spanpoint.graph",
}

__getattr__ = lazy_getattr(__name__, _LAZY, _MOVED)
