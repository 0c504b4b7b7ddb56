"""The durable run scope: ``spanpoint.run(run_id)``, and the frames its boundaries open.

A run is one durable execution with a stable id the user chooses (a ticket id, a job id).
Entering the same ``run_id`` again is how a run is replayed: every boundary it committed
before returns its stored output instead of executing.

Identity is positional and deterministic, as in Temporal: a boundary's key is
sha256(run_id, path, ordinal, input fingerprint), where *path* names the enclosing boundaries
and *ordinal* counts how many boundaries of the same name the parent already opened.
This module keeps the state those keys are made from (the scope, its frames, their ordinal
counters); ``spanpoint.boundary`` computes the path, the ordinal and the key of each call.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from dataclasses import KW_ONLY, dataclass, field
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, Status, StatusCode, TraceFlags

from spanpoint import processor, semconv, serde
from spanpoint.capture import record_failure, redact_text
from spanpoint.config import Settings, check_durability, settings
from spanpoint.errors import (
    ConfigurationError,
    InvalidRunIdError,
    NotInRunError,
    RunWaiting,
    StoreError,
)
from spanpoint.stores import open_store
from spanpoint.stores.base import (
    BoundaryRecord,
    Checkpoint,
    CheckpointStore,
    RunStatus,
    capabilities,
    process_owner_id,
)

logger = logging.getLogger("spanpoint")


@dataclass(slots=True, eq=False)
class Frame:
    """One level of the boundary tree: its path, its identity, and the ordinals its
    children were handed.

    A frame is state: the boundary that opens one states every field of it
    (``boundary._Call.start``) and counts its children's ordinals in ``ordinals``
    (``boundary.next_ordinal``); :meth:`at` makes a frame that is no boundary (a run's
    root, a framework task's frame).

    ``identity`` is the frame's position, free of the run id (``""`` for the run root): what
    its boundary's key would be in a run with no id. Children hash it into their keys, so two
    calls of the same parent never share their children's keys; the run id enters each key
    once, at the end (``serde.checkpoint_key``), which is what lets a fork compute every key
    of a run again for another run id. ``key`` is the boundary's own checkpoint key (the
    identity for a frame that is no boundary).

    ``portable`` is the identity the frame would have had if every framework task above it
    were keyed by where it stands (a task provider's choice, ``spanpoint.calls.tasks``),
    rather than by a thread's own task ids: equal to ``identity`` unless such a task is above
    it. A checkpoint keeps its portable identity, so a fork run on another thread, keyed by
    position, computes the same keys (forks.py).
    """

    path: str
    identity: str
    span_id: str | None
    _: KW_ONLY
    #: The boundary kind that opened this frame (None for a run root or a task frame).
    kind: str | None
    #: The token of the framework task execution this frame belongs to (see
    #: :func:`register_parent_provider`), None outside any task.
    task: object
    #: The identity that framework task frames opened beneath it anchor on: its own,
    #: unless it is a graph call (a resume is another graph call of the same tasks).
    anchor: str
    key: str
    portable: str
    #: What task frames opened beneath it anchor on off any thread (``portable``'s anchor).
    portable_anchor: str
    #: (child name, input fingerprint) -> the ordinals handed out so far.
    ordinals: dict[tuple[str, str], Iterator[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def at(
        cls,
        path: str,
        identity: str,
        span_id: str | None = None,
        *,
        task: object = None,
        portable: str | None = None,
    ) -> Frame:
        """A frame that is no boundary: keyed and anchored by its own identity."""
        portable = identity if portable is None else portable
        return cls(
            path,
            identity,
            span_id,
            kind=None,
            task=task,
            anchor=identity,
            key=identity,
            portable=portable,
            portable_anchor=portable,
        )


@dataclass
class RunScope:
    """The state of one attempt of a durable run, shared by every boundary inside it."""

    run_id: str
    name: str | None
    store: CheckpointStore
    attempt: int
    strict: bool
    lease_ttl_s: float
    lease_wait_timeout_s: float
    #: ``"async"``: checkpoints are written by the store's committer; the run flushes at end.
    durability: processor.Durability = "sync"
    owner: str = field(default_factory=process_owner_id)
    root: Frame = field(default_factory=lambda: Frame.at("", ""))
    journal: list[BoundaryRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    commit_failures: int = 0
    #: (boundary kind, outcome) -> how many, for the spanpoint.boundaries metric at run end.
    boundary_counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    status: RunStatus = "running"
    span: Span | None = None
    #: This attempt's model calls, (replayed, checkpoint), in the order they completed: what
    #: the run's cost totals are made of after each graph call, without reading the whole
    #: run from the store each time (calls.cost.attempt_cost).
    model_calls: list[tuple[bool, Checkpoint]] = field(default_factory=list)
    #: A fork (it has a fork record): framework tasks are keyed by where they stand, never
    #: by a thread's task ids, which a fork run on a new thread cannot have (forks.py).
    forked: bool = False
    #: Whether the scope keeps its journal, model calls and warnings. A run keeps them for its
    #: end (the journal it writes, the summary's cost and warnings); a thread's implicit scope
    #: never ends and has no summary, so it only counts and logs: what it keeps stays the
    #: same size however many calls its thread makes.
    keeps_records: bool = True
    #: Held while the journal, the warnings, the model calls or the counts change: the
    #: boundaries of parallel branches keep theirs at the same time.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def warn(self, message: str) -> None:
        """Log ``message`` and keep it for the run summary, credentials redacted (a warning
        often quotes an exception, and it goes to the logs and the run span)."""
        message = redact_text(message)
        logger.warning("spanpoint: %s", message)
        if self.keeps_records:
            with self.lock:
                self.warnings.append(message)

    def note_model_call(self, replayed: bool, checkpoint: Checkpoint) -> None:
        """Keep a model call's checkpoint, executed and committed (or queued) or replayed."""
        if checkpoint.kind == semconv.KIND_MODEL_CALL and self.keeps_records:
            with self.lock:
                self.model_calls.append((replayed, checkpoint))


_RUN: ContextVar[RunScope | None] = ContextVar("spanpoint_run", default=None)
_FRAME: ContextVar[Frame | None] = ContextVar("spanpoint_frame", default=None)

# How many runs are open in this process, in any context. A boundary that sees no run in its
# own context while this is positive was most likely called from a thread pool that did not
# copy the context (a plain ThreadPoolExecutor): see boundary._warn_outside_run.
_OPEN_RUNS = [0]
_OPEN_RUNS_LOCK = threading.Lock()


def _count_open(delta: int) -> None:
    with _OPEN_RUNS_LOCK:
        _OPEN_RUNS[0] += delta


def open_runs() -> int:
    """How many runs are open in this process, in any context."""
    return _OPEN_RUNS[0]


def current_run() -> RunScope | None:
    """The active run scope, or None outside ``spanpoint.run(...)``."""
    return _RUN.get()


def require_run(what: str) -> RunScope:
    """The active run scope; :class:`NotInRunError` naming ``what`` when there is none."""
    scope = _RUN.get()
    if scope is None:
        raise NotInRunError(f"{what} needs an active durable run: wrap it in spanpoint.run(...)")
    return scope


def current_frame() -> Frame | None:
    """The innermost open boundary (or the run's root frame), or None outside a run."""
    frame = _FRAME.get()
    if frame is not None:
        return frame
    scope = _RUN.get()
    return scope.root if scope is not None else None


#: (the active run or None, the innermost frame or None) -> (scope, parent frame) for a new
#: boundary, or None to keep the default (the active run and its innermost frame).
ParentProvider = Callable[[RunScope | None, Frame | None], tuple[RunScope, Frame] | None]
_PARENT_PROVIDER: list[ParentProvider | None] = [None]


#: Called with (scope, run span) right before a run that made model calls ends its span.
_RUN_END_HOOKS: list[Callable[[RunScope, Span], None]] = []


def on_run_end(hook: Callable[[RunScope, Span], None]) -> None:
    """Call ``hook(scope, span)`` when a run that made model calls ends (once per hook): the
    ``calls`` layer sets the run's cost totals on its span this way, whatever drove the
    calls (a ``GraphRunner``, zero-code, or an agent invoked by hand inside the run)."""
    if hook not in _RUN_END_HOOKS:
        _RUN_END_HOOKS.append(hook)


#: Called with the scope after every run's end has been recorded, whatever it made.
_RUN_CLOSED_HOOKS: list[Callable[[RunScope], None]] = []


def on_run_closed(hook: Callable[[RunScope], None]) -> None:
    """Call ``hook(scope)`` after every run ends (once per hook), to let go of what a layer
    kept for that attempt: ``spanpoint.calls.tasks`` drops its task frames this way, which
    otherwise kept every finished run's scope and LangGraph runtimes alive."""
    if hook not in _RUN_CLOSED_HOOKS:
        _RUN_CLOSED_HOOKS.append(hook)


def register_parent_provider(provider: ParentProvider | None) -> None:
    """Install the hook that gives a boundary its scope and parent frame (None removes it).

    The engine knows nothing of frameworks: ``spanpoint.calls.tasks`` registers a provider
    that anchors a boundary opened inside a LangGraph task on that task's own identity, so
    that a task LangGraph executes again (a resume, a retry) finds its calls again.
    """
    _PARENT_PROVIDER[0] = provider


def boundary_parent(scope: RunScope | None) -> tuple[RunScope | None, Frame | None]:
    """The scope and parent frame of a boundary opened now (hot path: one call per boundary)."""
    frame = _FRAME.get()
    if frame is None and scope is not None:
        frame = scope.root
    provider = _PARENT_PROVIDER[0]
    if provider is not None:
        found = provider(scope, frame)
        if found is not None:
            return found
    return scope, frame


def push_frame(frame: Frame) -> Token[Frame | None]:
    """Make ``frame`` the parent of boundaries opened until :func:`pop_frame` (hot path)."""
    return _FRAME.set(frame)


def pop_frame(token: Token[Frame | None]) -> None:
    """Undo the :func:`push_frame` that returned ``token``."""
    _FRAME.reset(token)


def validate_run_id(run_id: object) -> str:
    """Return ``run_id`` if usable; :class:`InvalidRunIdError` saying why otherwise."""
    if not isinstance(run_id, str):
        raise InvalidRunIdError(
            f"run_id must be a string (a ticket id, a job id), not {type(run_id).__name__}"
        )
    if not run_id.strip():
        raise InvalidRunIdError("run_id must be a non-empty string, such as a ticket or job id")
    if len(run_id) > 512:
        raise InvalidRunIdError(
            f"run_id is {len(run_id)} characters long, more than 512; use a shorter stable id "
            "(a ticket or job id, or a hash of a long one)"
        )
    # Every store must keep the id as given: PostgreSQL's text refuses NUL, and UTF-8 (every
    # store's encoding, and the checkpoint key's) has no lone surrogate.
    if "\x00" in run_id:
        at = run_id.index("\x00")
        raise InvalidRunIdError(
            f"run_id holds a NUL character (at index {at}), which not every store can keep; "
            "remove it (run ids are text such as a ticket or job id)"
        )
    try:
        run_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRunIdError(
            f"run_id holds a lone surrogate ({run_id[exc.start]!r} at index {exc.start}), "
            "which is no Unicode text and cannot be stored; decode the id it came from with "
            "the right encoding"
        ) from None
    return run_id


def run_span_name(workflow: str, attempt: int) -> str:
    """The root span's name: a GenAI workflow span named after the run, and the attempt
    when it is not the first, so that a trace list tells the attempts apart (design-notes)."""
    name = f"{semconv.OP_INVOKE_WORKFLOW} {workflow}"
    return name if attempt == 1 else f"{name}{semconv.RUN_ATTEMPT_NAME_SUFFIX.format(attempt)}"


class run:
    """A durable run scope, usable with ``with`` and ``async with``.

    >>> with spanpoint.run("ticket-42", name="triage"):   # doctest: +SKIP
    ...     report = write_report(load_ticket("42"))

    Opens the root span, a GenAI workflow span ``invoke_workflow {name}`` (``invoke_workflow
    spanpoint.run`` without a name; `` (attempt N)`` appended after the first attempt) with
    ``spanpoint.run.root=true``, ``spanpoint.run.id``, ``.name``, ``.attempt``, ``.status``.
    Boundaries inside replay what an earlier attempt with the same ``run_id`` committed.
    When a durable wait is not satisfied yet the block is left early, the run ends with status
    ``waiting`` and no exception reaches the caller; check :attr:`status`.

    ``durability`` (``"sync"`` or ``"async"``) overrides ``configure(durability=...)`` for this
    run; under ``"async"`` the run waits at its end for its queued commits and reports any
    that failed (warnings, ``spanpoint.run.commit_failures``).
    """

    def __init__(
        self,
        run_id: str,
        *,
        name: str | None = None,
        store: CheckpointStore | str | None = None,
        strict: bool | None = None,
        durability: processor.Durability | None = None,
    ) -> None:
        self.run_id = validate_run_id(run_id)
        if durability is not None:
            check_durability(durability, "spanpoint.run(durability=...)")
        self._durability = durability
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError("run name must be a non-empty string when given")
        self.name = name
        self._store_arg = store
        self._strict = strict
        self.scope: RunScope | None = None
        self._tokens: tuple[Token[RunScope | None], Token[Frame | None]] | None = None
        self._span_token: object = None
        self._fork: dict[str, Any] | None = None

    def __repr__(self) -> str:
        attempt = self.scope.attempt if self.scope else None
        return f"spanpoint.run({self.run_id!r}, attempt={attempt}, status={self.status!r})"

    @property
    def status(self) -> RunStatus | None:
        """``running`` inside the block; afterwards ``completed``, ``failed`` or ``waiting``."""
        return self.scope.status if self.scope else None

    @property
    def attempt(self) -> int | None:
        """Which attempt of this run_id this is (1 for the first)."""
        return self.scope.attempt if self.scope else None

    @property
    def warnings(self) -> list[str]:
        """Warnings raised during the run (failed commits, unserializable outputs, …)."""
        return list(self.scope.warnings) if self.scope else []

    def __enter__(self) -> run:
        if _RUN.get() is not None:
            raise ConfigurationError(
                f"spanpoint.run({self.run_id!r}) was opened inside run "
                f"{_RUN.get().run_id!r}; runs do not nest — use @spanpoint.step inside a run"  # type: ignore[union-attr]
            )
        cfg = settings()
        store = self._resolve_store(cfg)
        attempt, forked = _start_run(store, self.run_id, self.name)
        scope = RunScope(
            run_id=self.run_id,
            name=self.name,
            store=store,
            attempt=attempt,
            strict=cfg.strict if self._strict is None else self._strict,
            lease_ttl_s=cfg.lease_ttl_s,
            lease_wait_timeout_s=cfg.lease_wait_timeout_s,
            durability=self._durability or cfg.durability,
        )
        workflow = self.name or semconv.SPAN_RUN
        attrs: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW,
            semconv.GEN_AI_WORKFLOW_NAME: workflow,
            semconv.RUN_ROOT: True,
            semconv.RUN_ID: self.run_id,
            semconv.RUN_ATTEMPT: attempt,
        }
        if self.name:
            attrs[semconv.RUN_NAME] = self.name
        if scope.durability == "async":  # the default, "sync", is not repeated on every run
            attrs[semconv.RUN_DURABILITY] = "async"
        self._fork = fork_origin(store, self.run_id) if forked else None
        scope.forked = self._fork is not None
        links = _fork_links(self._fork, attrs) if self._fork else None
        # start_span and attach, what start_as_current_span does under its two generator
        # context managers: the run records its own failures (record_failure, redacted).
        scope.span = span = cfg.tracer.start_span(
            run_span_name(workflow, attempt),
            attributes=attrs,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span_token = otel_context.attach(trace.set_span_in_context(span))
        scope.root.span_id = format(scope.span.get_span_context().span_id, "016x")
        self.scope = scope
        self._tokens = (_RUN.set(scope), _FRAME.set(scope.root))
        _count_open(1)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        scope = self.scope
        assert scope is not None and self._tokens is not None
        _RUN.reset(self._tokens[0])
        _count_open(-1)
        _FRAME.reset(self._tokens[1])
        span = scope.span
        assert span is not None
        suppress = False
        commit_error: StoreError | None = None
        failed_commits = _settle_commits(scope, span)
        if failed_commits and scope.strict and exc is None:
            # strict: a lost commit fails the run, as a failed sync commit raises in the body.
            exc = commit_error = StoreError(
                f"{failed_commits} checkpoint(s) of run {scope.run_id!r} could not be committed "
                f'to {scope.store.description} (durability="async"); see the run\'s warnings'
            )
        if isinstance(exc, RunWaiting):
            scope.status, suppress = "waiting", True
            span.add_event(semconv.EVENT_WAITING, {"spanpoint.wait.name": exc.name})
            span.set_status(Status(StatusCode.OK))
        elif exc is not None:
            scope.status = "failed"
            record_failure(span, exc)  # message and stack trace redacted
        else:
            if scope.status == "running":
                scope.status = "completed"
            span.set_status(Status(StatusCode.OK))
        span.set_attribute(semconv.RUN_STATUS, scope.status)
        if self._fork and scope.status == "completed":
            _check_cut_reached(scope, self._fork)
        if scope.commit_failures:
            span.set_attribute(semconv.RUN_COMMIT_FAILURES, scope.commit_failures)
        if scope.warnings:
            span.set_attribute(semconv.WARNINGS, scope.warnings[:20])
        if scope.model_calls and span.is_recording():
            for hook in _RUN_END_HOOKS:  # best effort: observability never fails the run
                try:
                    hook(scope, span)
                except Exception as err:
                    scope.warn(f"a run-end hook failed for run {scope.run_id!r}: {err}")
        try:
            otel_context.detach(self._span_token)  # type: ignore[arg-type]
            span.end()
        except Exception as err:  # a raising span processor must not lose the run's end
            scope.warn(f"a span processor raised ending the span of run {scope.run_id!r}: {err}")
        try:
            scope.store.finish_run(scope.run_id, scope.status, scope.journal)
        except StoreError as err:
            scope.warn(f"could not record the end of run {scope.run_id!r}: {err}")
        _count_boundaries(scope)
        for closed in _RUN_CLOSED_HOOKS:
            try:
                closed(scope)
            except Exception as err:  # letting go of caches never fails the run
                scope.warn(f"a run-closed hook failed for run {scope.run_id!r}: {err}")
        if commit_error is not None:
            raise commit_error
        return suppress

    async def __aenter__(self) -> run:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self.__exit__(exc_type, exc, tb)

    def _resolve_store(self, cfg: Settings) -> CheckpointStore:
        if self._store_arg is None:
            return cfg.store
        if isinstance(self._store_arg, str):
            return open_store(self._store_arg)
        return self._store_arg


def _settle_commits(scope: RunScope, span: Span) -> int:
    """Under ``durability="async"``: wait for the run's queued commits, then report each one
    that failed as a failed sync commit is reported (a warning, ``commit_failures``, a
    ``spanpoint.checkpoint.commit_failed`` event on the run span). Returns how many failed."""
    if scope.durability != "async":
        return 0
    done, failed = processor.settle(scope.store, scope.run_id)
    for staged in failed:
        cp = staged.checkpoint
        scope.commit_failures += 1
        scope.warn(
            f'boundary {cp.path!r} executed but its commit (durability="async") failed: '
            f"{staged.error}; it will execute again when the run is replayed"
        )
        span.add_event(
            semconv.EVENT_CHECKPOINT_COMMIT_FAILED,
            {
                semconv.BOUNDARY_PATH: cp.path,
                semconv.CHECKPOINT_KEY: cp.key,
                semconv.STORE_ERROR: str(staged.error),
            },
        )
    if not done:  # settle() without a timeout waits for every write: kept for a bounded one
        scope.warn(f"commits of run {scope.run_id!r} were still pending at its end")
    return len(failed)


def _start_run(store: CheckpointStore, run_id: str, name: str | None) -> tuple[int, bool]:
    """The attempt a run starts, and whether it may be a fork (it has a fork record): asked
    of the store in the same statement when it can (``start_run_probing``, SQLite), which
    saves a replayed run one point read; else always "maybe", and the record is read."""
    if not capabilities(store).start_run_probing:
        return store.start_run(run_id, name), True
    attempt, found = store.start_run_probing(  # type: ignore[attr-defined]
        run_id, name, fork_origin_key(run_id)
    )
    return int(attempt), bool(found)


def fork_origin_key(run_id: str) -> str:
    """The key of a fork run's origin record (``spanpoint.forks``): no boundary can have it."""
    return serde.checkpoint_key(run_id, semconv.FORK_RECORD_PATH, 0, "")


def fork_origin(store: CheckpointStore, run_id: str) -> dict[str, Any] | None:
    """Where the run ``run_id`` was forked from (run, cut, original span), when it is a fork.

    One point read per run start. A failed or unreadable read costs the link, never the run.
    """
    try:
        record = store.get(fork_origin_key(run_id))
    except StoreError as exc:  # the run reports its store's failures where they matter
        logger.debug("spanpoint: no fork origin read for run %r: %s", run_id, exc)
        return None
    if record is None or record.kind != semconv.KIND_FORK:
        return None
    try:
        origin = serde.loads(record.output_type, record.output)
    except Exception as exc:  # a corrupted record: observability is best effort
        logger.warning("spanpoint: the fork origin of run %r is unreadable: %s", run_id, exc)
        return None
    return origin if isinstance(origin, dict) else None


def _fork_links(origin: dict[str, Any], attrs: dict[str, Any]) -> list[Link]:
    """The link from a fork's run span to the original run's span; the origin as attributes
    too, since most trace viewers drop links (docs/design-notes.md)."""
    attrs[semconv.FORK_ORIGIN_RUN_ID] = str(origin.get("run_id"))
    attrs[semconv.FORK_CUT] = str(origin.get("cut"))
    attrs[semconv.FORK_CUT_KIND] = str(origin.get("cut_kind"))
    attrs[semconv.FORK_CUT_KEY] = str(origin.get("cut_key"))
    try:
        trace_id, span_id = int(origin["trace_id"], 16), int(origin["span_id"], 16)
    except (KeyError, TypeError, ValueError):
        return []
    context = SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    if not context.is_valid:
        return []
    attrs[semconv.FORK_ORIGIN_TRACE_ID] = origin["trace_id"]
    attrs[semconv.FORK_ORIGIN_SPAN_ID] = origin["span_id"]
    return [Link(context, {"spanpoint.link": semconv.LINK_FORK_ORIGIN})]


def _check_cut_reached(scope: RunScope, origin: dict[str, Any]) -> None:
    """Warn when a fork's run completed without returning the override at its cut: the
    program took another way there, or computed other keys (docs: what a fork reuses)."""
    cut_key = origin.get("cut_key")
    if any(r.key == cut_key and r.status == "replayed" for r in scope.journal):
        return
    if origin.get("rerun"):  # no override: the cut executes again, and commits its key
        try:
            found = scope.store.get(str(cut_key))
        except StoreError:
            return  # the store reports its own failures; a fork's warning is best effort
        if found is not None and found.attempt == scope.attempt:
            return
    what = "executed again" if origin.get("rerun") else "the overridden output was not used"
    scope.warn(
        f"run {scope.run_id!r} is a fork of {origin.get('run_id')!r} at {origin.get('cut')!r}, "
        f"but it completed without reaching that call, so {what}: run the same program with "
        "the same input (on a new LangGraph thread when the original ran on one)"
    )


def _count_boundaries(scope: RunScope) -> None:
    # For import time: the metric instruments load with the first run that ends.
    from spanpoint.telemetry.metrics import count_boundaries

    try:
        count_boundaries(scope.boundary_counts)
    except Exception as exc:  # observability is best effort
        logger.debug("spanpoint: boundary metrics not recorded: %s", exc)
