"""spanpoint's exceptions: one class per failure, each message says what to do.

Catch :class:`SpanpointError` for everything spanpoint raises on its own behalf. Exceptions
raised by user code inside a boundary are never wrapped: they propagate unchanged.
:class:`RunWaiting` is no error and stands outside that tree (a ``BaseException``).
"""

from __future__ import annotations


class SpanpointError(Exception):
    """Base class of every error spanpoint raises itself."""


class ConfigurationError(SpanpointError, ValueError):
    """A setting, argument or environment variable has a value spanpoint cannot use."""


class InvalidRunIdError(ConfigurationError):
    """A run id spanpoint cannot store the same way on every store: not a string, empty,
    longer than 512 characters, or holding a NUL or a lone surrogate."""


class UnsafePathError(SpanpointError, PermissionError):
    """A file or folder spanpoint would write is a symlink, belongs to another user, or is
    hard-linked elsewhere, so writing it could reach someone else's file. Nothing was written;
    the message names the path and the fix."""


class NotInRunError(SpanpointError):
    """An operation needs an active ``spanpoint.run(...)`` scope and none is open."""


class UnknownRunError(SpanpointError, LookupError):
    """The store holds no run with this id (``spanpoint diff``, forks): see ``spanpoint runs``."""


class SerializationError(SpanpointError):
    """A boundary output cannot be serialized (raised only with ``strict=True``)."""


class NotReplayable(SerializationError):
    """A call's result cannot be replayed exactly, so it is not committed (or not replayed).

    Raised by ``spanpoint.calls.results`` when a tool's result embeds messages whose ids
    cannot be re-bound to the current run's, or a stored result no longer matches the
    current input. The boundary then warns and executes again: never a lossy replay.
    """


class StoreError(SpanpointError):
    """The checkpoint store failed. The message names the store and the operation."""


class StoreUnavailableError(StoreError):
    """The checkpoint store cannot be opened or reached."""


class CorruptCheckpointError(StoreError):
    """A stored checkpoint cannot be decoded. The boundary executes instead of replaying."""


class UntrustedCheckpointError(CorruptCheckpointError):
    """A stored checkpoint names a type (or format) that is not allowed, so it was refused
    before anything was imported or called. The boundary executes instead of replaying.

    Allow your own types with ``spanpoint.configure(allowed_types=[MyType, ...])``.
    """


class UnfingerprintableInputError(SerializationError):
    """A boundary input has no state spanpoint can read faithfully, so the boundary is not
    cacheable: it executes every time (with a warning naming the argument)."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason
        #: Where the value sits in the input, outermost first ("'ticket'", "[0]", ".lock").
        self.path: list[str] = []
        super().__init__(type_name, reason)

    def __str__(self) -> str:
        where = "".join(self.path) or "the input"
        return (
            f"{where} is a {self.type_name}, which {self.reason}, so the boundary cannot be "
            "fingerprinted and is not cacheable; make it a dataclass, a pydantic model or an "
            "object with readable attributes, or mark the boundary replay=False"
        )


class LeaseTimeoutError(StoreError):
    """Another worker holds a live lease on a boundary and did not commit it in time."""


class LeaseLostError(StoreError):
    """A boundary executed, but its lease was taken over before it could commit, and no
    other execution has committed it either.

    Its output is not committed (the store kept the new holder's claim), so returning it
    could hand the caller a value the store never holds. The message names the boundary,
    the run and the store. A worker loses its lease when it stops renewing it for longer
    than ``lease_ttl_s`` (a suspended process, a stalled host): raise ``lease_ttl_s`` above
    the longest pause, and run the boundary again to replay the winner's output.
    """


class MissingCheckpointerError(ConfigurationError):
    """A graph that must survive restarts has no checkpointer, or only an in-process one."""


class NotInterruptedError(SpanpointError, ValueError):
    """A resume was requested for a graph result that is not waiting for one."""


class WaitInsideBoundaryError(SpanpointError):
    """``wait_for_input`` was called inside a boundary body (a step, a graph node, a tool)."""


class RunWaiting(BaseException):
    """Raised inside a run by ``wait_for_input`` when the input has not been provided yet.

    ``spanpoint.run(...)`` catches it: the run ends with status ``waiting`` and the wait is
    stored. Provide the value (``spanpoint input RUN_ID NAME --json VALUE``) and run again.

    A control-flow signal, not an error: it derives from ``BaseException`` (as Temporal's
    ``ContinueAsNewError`` and ``asyncio.CancelledError`` do), so neither ``except
    SpanpointError`` nor ``except Exception`` in the run's code swallows a durable wait.
    """

    def __init__(self, run_id: str, name: str, question: str | None = None) -> None:
        self.run_id = run_id
        self.name = name
        self.question = question
        super().__init__(
            f"run {run_id!r} is waiting for input {name!r}"
            + (f" ({question})" if question else "")
            + f"; provide it with `spanpoint input {run_id} {name} --json VALUE` and run again"
        )


class GuardError(SpanpointError):
    """Base class of the loop guard's errors."""


class GuardResumeError(GuardError):
    """A guarded thread cannot be invoked or resumed as asked. Nothing was changed."""


class GuardUnknownThreadError(GuardResumeError, LookupError):
    """The thread has no checkpoint: it never ran, or under another checkpointer."""


class GuardThreadStoppedError(GuardResumeError):
    """A plain invoke would silently continue a thread the guard stopped.

    Resume it with ``resume(config, correction=...)`` (detector stops), or start a new
    thread (budget stops are final).
    """


class GuardRunNotStoppedError(GuardResumeError):
    """Resume was asked for a run the guard did not stop (it completed, or is running)."""


class GuardNotResumableError(GuardResumeError):
    """The run hit a hard budget; a budget stop is final and cannot be resumed."""


class GuardStaleCheckpointError(GuardResumeError):
    """The thread's checkpoint changed since the guard stopped it; look at it again."""


class GuardConcurrentResumeError(GuardResumeError):
    """Another continuation of this thread is already running; exactly one may win."""


class GuardResumeArgumentError(GuardResumeError, ValueError):
    """A resume argument is unusable: an empty correction or a grant that is not 1, 2, …"""


class CassetteMissError(SpanpointError):
    """A call inside ``spanpoint.cassette`` is not in the cassette, and the mode replays only.

    The message names the call, the nearest recorded call, and what changed (which message,
    tool definition or model setting); record again (mode ``new_episodes`` or ``all``) when
    the change is intended.
    """


class ForkError(SpanpointError, ValueError):
    """``spanpoint.fork`` cannot fork as asked: an unknown run or boundary, an output the
    boundary cannot return, a run recorded before checkpoints kept their input identity, or
    a new run id that is taken. The message names the fix; nothing was written.
    """
