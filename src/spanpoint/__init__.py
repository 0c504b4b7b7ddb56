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

from spanpoint._lazy import lazy_getattr
from spanpoint._version import __version__
from spanpoint.calls.policy import CallCheckpointPolicy
from spanpoint.capture import CapturePolicy
from spanpoint.config import Settings, configure, flush, settings
from spanpoint.errors import (
    CassetteMissError,
    ConfigurationError,
    CorruptCheckpointError,
    ForkError,
    GuardConcurrentResumeError,
    GuardError,
    GuardNotResumableError,
    GuardResumeArgumentError,
    GuardResumeError,
    GuardRunNotStoppedError,
    GuardStaleCheckpointError,
    GuardThreadStoppedError,
    GuardUnknownThreadError,
    InvalidRunIdError,
    LeaseLostError,
    LeaseTimeoutError,
    MissingCheckpointerError,
    NotInRunError,
    NotInterruptedError,
    RunWaiting,
    SerializationError,
    SpanpointError,
    StoreError,
    StoreUnavailableError,
    UnfingerprintableInputError,
    UntrustedCheckpointError,
    WaitInsideBoundaryError,
)
from spanpoint.processor import CheckpointSpanProcessor, DurableSampler
from spanpoint.run import current_run, run
from spanpoint.step import step
from spanpoint.stores import CheckpointStore, MemoryStore, SqliteStore, open_store

if TYPE_CHECKING:
    from spanpoint.calls.middleware import CheckpointMiddleware
    from spanpoint.cassettes import cassette
    from spanpoint.forks import fork
    from spanpoint.graph.results import InterruptInfo, RunResult
    from spanpoint.graph.resume import build_resume_request, wait_for_interrupt
    from spanpoint.graph.runner import GraphRunner
    from spanpoint.graph.types import DurabilityPolicy, RunRequest
    from spanpoint.guard import (
        Guard,
        GuardConfig,
        GuardedGraph,
        GuardMiddleware,
        GuardReport,
        compile_guarded_graph,
        guard_graph,
    )
    from spanpoint.waits import provide_input, wait_for_input

__all__ = [
    "CallCheckpointPolicy",
    "CapturePolicy",
    "CassetteMissError",
    "CheckpointMiddleware",
    "CheckpointSpanProcessor",
    "CheckpointStore",
    "ConfigurationError",
    "CorruptCheckpointError",
    "DurabilityPolicy",
    "DurableSampler",
    "ForkError",
    "GraphRunner",
    "Guard",
    "GuardConcurrentResumeError",
    "GuardConfig",
    "GuardError",
    "GuardMiddleware",
    "GuardNotResumableError",
    "GuardReport",
    "GuardResumeArgumentError",
    "GuardResumeError",
    "GuardRunNotStoppedError",
    "GuardStaleCheckpointError",
    "GuardThreadStoppedError",
    "GuardUnknownThreadError",
    "GuardedGraph",
    "InterruptInfo",
    "InvalidRunIdError",
    "LeaseLostError",
    "LeaseTimeoutError",
    "MemoryStore",
    "MissingCheckpointerError",
    "NotInRunError",
    "NotInterruptedError",
    "RunRequest",
    "RunResult",
    "RunWaiting",
    "SerializationError",
    "Settings",
    "SpanpointError",
    "SqliteStore",
    "StoreError",
    "StoreUnavailableError",
    "UnfingerprintableInputError",
    "UntrustedCheckpointError",
    "WaitInsideBoundaryError",
    "__version__",
    "build_resume_request",
    "cassette",
    "compile_guarded_graph",
    "configure",
    "current_run",
    "flush",
    "fork",
    "guard_graph",
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
    "build_resume_request": "spanpoint.graph.resume",
    "wait_for_interrupt": "spanpoint.graph.resume",
    "InterruptInfo": "spanpoint.graph.results",
    "RunResult": "spanpoint.graph.results",
    "provide_input": "spanpoint.waits",
    "wait_for_input": "spanpoint.waits",
    "Guard": "spanpoint.guard",
    "GuardConfig": "spanpoint.guard",
    "GuardMiddleware": "spanpoint.guard",
    "GuardReport": "spanpoint.guard",
    "GuardedGraph": "spanpoint.guard",
    "compile_guarded_graph": "spanpoint.guard",
    "guard_graph": "spanpoint.guard",
    # CheckpointMiddleware imports langchain.agents (over a second).
    "CheckpointMiddleware": "spanpoint.calls.middleware",
    # cassette imports LangChain's callbacks (issue 16).
    "cassette": "spanpoint.cassettes",
    # fork imports LangChain's message types and the calls' result encoding (issue 16).
    "fork": "spanpoint.forks",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
