"""The typed result of a run diff (:func:`spanpoint.diffs.diff_runs`): frozen dataclasses,
and the stable JSON shape ``spanpoint diff --json`` prints (docs/cli.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from spanpoint.calls.cost import RunCost

#: The version of :meth:`RunDiff.to_dict`'s shape; raised on any change a reader would notice.
SCHEMA_VERSION = 1
SCHEMA = "spanpoint.diff"

Change = Literal["changed", "added", "removed"]
Reason = Literal["input", "output", "only_in_a", "only_in_b"]


@dataclass(frozen=True, slots=True)
class RunSide:
    """One run of a diff: its record, how many boundaries it went through, and what it cost.

    ``status`` is ``"not run yet"`` (and ``attempts`` 0) for a fork no attempt ran yet: it
    has checkpoints but no run record. ``duration_ms`` is the time the run spent running: per
    attempt, from its first boundary's start to its last boundary's end, summed over attempts
    (the gaps between attempts left out). ``cost`` holds the totals ``spanpoint show``
    prints (executed and replayed model calls, what replay saved).
    """

    run_id: str
    name: str | None
    status: str
    attempts: int
    boundaries: int
    duration_ms: float
    cost: RunCost

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "status": self.status,
            "attempts": self.attempts,
            "boundaries": self.boundaries,
            "duration_ms": round(self.duration_ms, 3),
            "cost": self.cost.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class MessageChange:
    """One message of a model call's input that differs: ``index`` counts from 0 in run A's
    conversation for a changed or removed message, in run B's for an added one."""

    index: int
    change: Change
    role_a: str | None
    role_b: str | None
    #: The texts as the input views kept them: redacted and cut, None when content capture
    #: was off (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``); ``chars`` is the
    #: full length, kept either way.
    text_a: str | None
    text_b: str | None
    chars_a: int | None = None
    chars_b: int | None = None
    tool_calls_a: Any = None
    tool_calls_b: Any = None


@dataclass(frozen=True, slots=True)
class ValueChange:
    """A named part of an input that differs: a tool definition (its name; digests are not
    shown), a model setting, another field of the input view (a tool call's ``args``)."""

    name: str
    change: Change
    a: Any = None
    b: Any = None


@dataclass(frozen=True, slots=True)
class InputDiff:
    """How a boundary's input differs between the runs.

    ``changed`` is None when a run has no input data for it (a row committed before input
    data existed). ``messages``, ``tools``, ``settings`` and ``fields`` come from the input
    views; ``viewed`` is False when a run kept none (a graph call keeps only the fingerprint
    of its input, thread and config). All empty while ``changed`` is True and ``viewed``
    means the difference is outside what a view shows (which tool result answers which call).
    """

    changed: bool | None
    fingerprint_a: str | None
    fingerprint_b: str | None
    messages: tuple[MessageChange, ...] = ()
    tools: tuple[ValueChange, ...] = ()
    settings: tuple[ValueChange, ...] = ()
    fields: tuple[ValueChange, ...] = ()
    viewed: bool = True


@dataclass(frozen=True, slots=True)
class OutputDiff:
    """A boundary's output in each run: type tag, view, and its text (:func:`output_texts`:
    the messages it holds, else its redacted value; decoded through the allow list; None for
    None or when it could not be decoded, ``error`` then says why). None on a side for a
    boundary that run does not have."""

    changed: bool
    type_a: str | None
    type_b: str | None
    view_a: Mapping[str, Any] | None
    view_b: Mapping[str, Any] | None
    text_a: tuple[str, ...] | None
    text_b: tuple[str, ...] | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Divergence:
    """A boundary where the runs differ, and how.

    ``position`` is 1-based in the walk (commit order); ``boundary`` its label, the form
    ``spanpoint fork --at`` takes. ``input`` is None for a boundary in one run only.
    """

    position: int
    boundary: str
    kind: str
    reason: Reason
    input: InputDiff | None
    output: OutputDiff


@dataclass(frozen=True, slots=True)
class RunDiff:
    """The result of :func:`diff_runs`.

    ``divergence`` is the first divergent boundary (None: the runs are equal), ``then`` the
    next one (what the first changed next: after a tool's other output, the next model
    call's input), ``same`` how many boundaries before the first are equal, ``notes`` what
    could not be compared fully (missing input data, undecodable outputs).
    """

    a: RunSide
    b: RunSide
    same: int
    divergence: Divergence | None
    then: Divergence | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def equal(self) -> bool:
        """Whether no boundary diverges."""
        return self.divergence is None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``spanpoint diff --json`` (docs/cli.md): the dataclasses'
        fields by name, tuples as lists, with ``schema`` and ``version``."""
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "equal": self.equal,
            "runs": {"a": self.a.to_dict(), "b": self.b.to_dict()},
            "same": self.same,
            "divergence": None if self.divergence is None else asdict(self.divergence),
            "then": None if self.then is None else asdict(self.then),
            "notes": list(self.notes),
        }
