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

from spanpoint.config import Settings, configure, settings
from spanpoint.errors import (
    ConfigurationError,
    CorruptCheckpointError,
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
    LeaseTimeoutError,
    NotInRunError,
    RunWaiting,
    SerializationError,
    SpanpointError,
    StoreError,
    StoreUnavailableError,
    UnfingerprintableInputError,
    UntrustedCheckpointError,
)
from spanpoint.policy import CallCheckpointPolicy
from spanpoint.processor import CheckpointSpanProcessor, DurableSampler
from spanpoint.run import current_run, run
from spanpoint.step import step
from spanpoint.stores import CheckpointStore, MemoryStore, SqliteStore, open_store

if TYPE_CHECKING:
    from spanpoint.graph import DurabilityPolicy, GraphRunner, RunRequest, build_resume_request
    from spanpoint.graph_results import InterruptInfo, RunResult
    from spanpoint.guard import (
        Guard,
        GuardConfig,
        GuardedGraph,
        GuardMiddleware,
        GuardReport,
        compile_guarded_graph,
        guard_graph,
    )
    from spanpoint.middleware import CheckpointMiddleware
    from spanpoint.waits import provide_input, wait_for_input, wait_for_interrupt

__version__ = "0.1.0"

__all__ = [
    "CallCheckpointPolicy",
    "CheckpointMiddleware",
    "CheckpointSpanProcessor",
    "CheckpointStore",
    "ConfigurationError",
    "CorruptCheckpointError",
    "DurabilityPolicy",
    "DurableSampler",
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
    "LeaseTimeoutError",
    "MemoryStore",
    "NotInRunError",
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
    "__version__",
    "build_resume_request",
    "compile_guarded_graph",
    "configure",
    "current_run",
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
    "DurabilityPolicy": "spanpoint.graph",
    "GraphRunner": "spanpoint.graph",
    "RunRequest": "spanpoint.graph",
    "build_resume_request": "spanpoint.graph",
    "InterruptInfo": "spanpoint.graph_results",
    "RunResult": "spanpoint.graph_results",
    "provide_input": "spanpoint.waits",
    "wait_for_input": "spanpoint.waits",
    "wait_for_interrupt": "spanpoint.waits",
    "Guard": "spanpoint.guard",
    "GuardConfig": "spanpoint.guard",
    "GuardMiddleware": "spanpoint.guard",
    "GuardReport": "spanpoint.guard",
    "GuardedGraph": "spanpoint.guard",
    "compile_guarded_graph": "spanpoint.guard",
    "guard_graph": "spanpoint.guard",
}


def __getattr__(name: str) -> object:
    # CheckpointMiddleware imports langchain.agents (over a second): load it on first use.
    if name == "CheckpointMiddleware":
        from spanpoint.middleware import CheckpointMiddleware

        return CheckpointMiddleware
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spanpoint' has no attribute {name!r}")
