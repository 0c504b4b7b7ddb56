"""Opening a boundary: its span, the replay lookup, staging the output, links to originals.

Every kind of boundary (``step``, ``graph_call``, ``model_call``, ``tool_call``) goes through
:func:`call_boundary` / :func:`acall_boundary`. Inside a durable run the sequence is:

1. compute the checkpoint key from the run, the parent boundary, the name and the input;
2. ``store.claim(key)``: a committed checkpoint is *replayed* — a span with
   ``spanpoint.replayed=true`` and a link to the original span, the stored output returned,
   the body not called; a lease held by a live worker is waited for; otherwise
3. execute the body inside the boundary span; stage the serialized output; end the span OK.
   ``CheckpointSpanProcessor`` commits it, fenced by this execution's lease. An exception ends
   the span with ERROR: nothing is committed and the original exception propagates unchanged.
4. a commit the store refused (the lease was taken over while the body ran) returns the
   output another execution committed, with a warning and a span event, or raises
   :class:`~spanpoint.errors.LeaseLostError` when none did: never a value the store does not
   hold.

Outside a run, or with ``replay=False``, a boundary is a plain span that never touches a store.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from contextvars import Token
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from spanpoint import processor, semconv, serde, spans
from spanpoint.capture import exception_text, redact_text
from spanpoint.config import settings
from spanpoint.errors import (
    LeaseLostError,
    LeaseTimeoutError,
    NotReplayable,
    SerializationError,
    StoreError,
    StoreUnavailableError,
    UnfingerprintableInputError,
)
from spanpoint.run import (
    Frame,
    RunScope,
    boundary_parent,
    current_run,
    open_runs,
    pop_frame,
    push_frame,
)
from spanpoint.stores.base import (
    BoundaryRecord,
    Checkpoint,
    Claim,
    capabilities,
    execution_owner_id,
)

T = TypeVar("T")

logger = logging.getLogger("spanpoint")

_MISSING: Any = object()
_HELD: Any = object()
_ORIGINAL_LINK = {"spanpoint.link": "original_execution"}


@dataclass(slots=True)
class BoundarySpec:
    """What a boundary is: its kind, name, span shape and identity.

    Args:
        kind: one of ``semconv.BOUNDARY_KINDS``.
        name: the boundary's name in paths (a step's name, a model or tool name).
        span_name: the span's name (GenAI conventions: ``execute_tool lookup``, …).
        identity: the value whose fingerprint identifies the input (never stored).
        fingerprint: a precomputed fingerprint instead of ``identity``.
        attributes: span attributes set at start (they reach the sampler).
        replay: False makes the boundary a plain span even inside a run.
        view: a small redacted JSON-safe description kept with the checkpoint.
        input_view: makes the redacted description of the input kept with the checkpoint
            (``Checkpoint.input_view``, for diffs and forks); called once, at commit, so a
            call that replays never builds it. None: the redacted ``identity`` (a step's
            arguments), or no view when the input is known by its fingerprint alone.
        describe: attributes derived from the output, set on executed and replayed spans.
        describe_replay: instead of ``describe`` on a replayed span (what a replay must not
            claim, such as a paid cost, differs from what the execution showed).
        on_replay: called with the replay span and the stored output, to add what the
            execution would have added while running (lifecycle events, for example).
        encode / decode: map the output to and from what is serialized.
        on_staged: called with the checkpoint once it is staged for commit (the output is
            serialized): what a layer derived from the live output (a model call's cost) is
            kept for that checkpoint, so nothing decodes the stored bytes again to derive it.
    """

    kind: str
    name: str
    span_name: str
    identity: Any = None
    fingerprint: str | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    span_kind: SpanKind = SpanKind.INTERNAL
    replay: bool = True
    view: dict[str, Any] = field(default_factory=dict)
    input_view: Callable[[], dict[str, Any] | None] | None = None
    describe: Callable[[Any], Mapping[str, AttributeValue]] | None = None
    describe_replay: Callable[[Any], Mapping[str, AttributeValue]] | None = None
    on_replay: Callable[[trace.Span, Any], None] | None = None
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None
    on_staged: Callable[[Checkpoint], None] | None = None


#: What stands for the fingerprint in an uncacheable boundary's position (a real one is hex).
_UNCACHEABLE = "uncacheable"

#: A journal entry's status -> its outcome in the run's ``spanpoint.boundaries`` counts.
_OUTCOMES = {
    "ok": "executed",
    "replayed": "replayed",
    "error": "failed",
    "interrupted": "interrupted",
}


def next_ordinal(frame: Frame, name: str, fingerprint: str) -> int:
    """How many children with this name and input ``frame`` opened before (0, 1, …).

    Counting per (name, input) rather than per name keeps keys stable when parallel
    branches open differently-parameterized siblings in a different order on replay
    (see docs/design-notes.md).
    """
    # setdefault and next() on itertools.count are atomic under the GIL, so threads
    # opening siblings concurrently still get distinct ordinals.
    return next(frame.ordinals.setdefault((name, fingerprint), itertools.count()))


_WARNED_OUTSIDE: set[str] = set()


def _warn_outside_run(name: str) -> None:
    """Warn (once per boundary name) when a boundary opens with no run in its context while a
    run is open elsewhere in this process: it is then a plain span, not durable."""
    if not open_runs() or name in _WARNED_OUTSIDE:
        return
    _WARNED_OUTSIDE.add(name)
    logger.warning(
        "spanpoint: boundary %r opened outside any spanpoint.run while a run is open in this "
        "process, so it is not durable (no replay, no single-flight). A plain "
        "ThreadPoolExecutor does not carry the run's context into its threads: submit with "
        "pool.submit(contextvars.copy_context().run, fn, *args) to make it part of the run",
        name,
    )


class _Call:
    """One pass through one boundary. Not reused; not shared between threads."""

    __slots__ = (
        "claimed",
        "epoch",
        "fingerprint",
        "frame",
        "holder",
        "identity",
        "key",
        "ordinal",
        "owner",
        "parent",
        "path",
        "portable",
        "portable_position",
        "position",
        "scope",
        "spec",
        "tracer",
    )

    #: The boundary's frame, made by :meth:`start` when the body executes: a replay opens no
    #: frame, so it builds none.
    frame: Frame

    def __init__(self, spec: BoundarySpec) -> None:
        self.spec = spec
        self.tracer = settings().tracer
        self.claimed = False
        self.owner = ""  # this execution's lease owner, made at the first claim
        self.epoch: int | None = None  # the fencing epoch of its lease, once acquired
        self.holder: Claim | None = None
        self.key = ""
        self.fingerprint: str | None = None
        self.identity: str | None = None
        self.ordinal = 0
        self.position = ""
        #: The identity and position it would have with every task above it keyed by where
        #: it stands (run.Frame.portable); None when they are its own.
        self.portable: str | None = None
        self.portable_position: str | None = None
        name = spec.name
        attrs = spec.attributes
        attrs[semconv.BOUNDARY_KIND] = spec.kind
        attrs[semconv.BOUNDARY_NAME] = name
        scope: RunScope | None = None
        parent: Frame | None = None
        if spec.replay:
            # The run and its innermost frame, unless a registered provider anchors the
            # boundary elsewhere (on the framework task it runs in: run.boundary_parent).
            scope, parent = boundary_parent(current_run())
            if scope is None:
                _warn_outside_run(name)  # a run open elsewhere, not in this context?
                parent = None
        self.scope = scope
        self.parent = parent
        parent_path = parent.path if parent is not None else ""
        self.path = path = f"{parent_path}/{name}" if parent_path else name
        if scope is None or parent is None:
            return
        try:
            fp = spec.fingerprint or serde.fingerprint(spec.identity)
        except UnfingerprintableInputError as exc:
            # Not cacheable: executed every time, never keyed by a type name (a key
            # shared by different inputs would replay one input's output for another).
            message = f"boundary {path!r} is not cacheable, executing: {exc}"
            scope.warn(message)
            attrs[semconv.WARNINGS] = [message]
            self.scope = None
            # Its children are still boundaries: they hang under a position of its own (no
            # fingerprint is a bare word), never under the run root's empty identity, where
            # they would share keys with top-level calls of the same name and input.
            ordinal = next_ordinal(parent, name, _UNCACHEABLE)
            at = f"{parent.identity}/{name}"
            self.position = serde.checkpoint_key("", at, ordinal, _UNCACHEABLE)
            if parent.portable != parent.identity:
                at = f"{parent.portable}/{name}"
                self.portable_position = serde.checkpoint_key("", at, ordinal, _UNCACHEABLE)
            return
        self.ordinal = ordinal = next_ordinal(parent, name, fp)
        self.fingerprint = fp
        # Kept with the checkpoint: what a fork needs to key it for another run id.
        self.identity = identity = f"{parent.identity}/{name}"
        self.key = key = serde.checkpoint_key(scope.run_id, identity, ordinal, fp)
        # The frame's identity is the same key without the run id: what children hash
        # into theirs, so the run id enters every key once (run.Frame, forks.py).
        self.position = serde.checkpoint_key("", identity, ordinal, fp)
        if parent.portable != parent.identity:  # under a task keyed by its thread's ids
            self.portable = portable = f"{parent.portable}/{name}"
            self.portable_position = serde.checkpoint_key("", portable, ordinal, fp)
        attrs[semconv.RUN_ID] = scope.run_id
        attrs[semconv.BOUNDARY_PATH] = path
        attrs[semconv.BOUNDARY_ORDINAL] = ordinal
        attrs[semconv.CHECKPOINT_KEY] = key

    # --- lookup --------------------------------------------------------------------------

    def lookup(self) -> Any:
        """The replayed output; ``_MISSING`` when the body must execute; ``_HELD`` while
        another worker holds the lease (then :meth:`wait` for it)."""
        scope = self.scope
        if scope is None:
            return _MISSING
        # Read your writes (durability="async"): a checkpoint still queued for the store is
        # committed as far as this process is concerned; its lease stays held until the write
        # lands, so other workers wait for it. One dict test when nothing was ever queued.
        queued = processor.pending(scope.store, self.key)
        if queued is not None:
            return self._replay(scope, queued)
        try:
            # On a run's first attempt nothing is committed yet (unless a concurrent worker got
            # there first, which the claim still detects): the lease can come first.
            # The lease belongs to this execution, not to the process: another thread or task
            # of this process claiming the same key waits for this one's commit.
            owner = self.owner = self.owner or execution_owner_id()
            claim: Claim = scope.store.claim(
                self.key, owner, scope.lease_ttl_s, fresh=scope.attempt == 1
            )
        except StoreError as exc:  # invariant 5: a failed read means "execute"
            if isinstance(exc, StoreUnavailableError) and (
                scope.strict or capabilities(scope.store).fail_when_unreachable
            ):
                # An unreachable store can neither replay nor keep the boundary single-flight:
                # fail before the body's side effect, not after. A shared store
                # (PostgresStore) asks for this by default; see design-notes.md.
                raise
            scope.warn(f"checkpoint lookup for {self.path!r} failed, executing: {exc}")
            return _MISSING
        if claim.state == "committed" and claim.checkpoint is not None:
            return self._replay(scope, claim.checkpoint)
        if claim.state == "acquired":
            self.claimed = True
            self.epoch = claim.epoch
            if claim.error is not None:
                # A committed row failed its integrity check: execute again, never replay it.
                self.spec.attributes[semconv.CHECKPOINT_INTEGRITY_ERROR] = claim.error
                scope.warn(f"checkpoint of {self.path!r} is corrupted, executing: {claim.error}")
            return _MISSING
        self.holder = claim
        return _HELD

    def wait(self) -> Generator[float, None, Any]:
        """Yield delays to sleep while another worker holds the lease; return what
        :meth:`lookup` returns once it is committed or free."""
        scope = self.scope
        assert scope is not None
        deadline = time.monotonic() + scope.lease_wait_timeout_s
        delay = 0.01
        while True:
            if time.monotonic() >= deadline:
                held = self.holder
                raise LeaseTimeoutError(
                    f"boundary {self.path!r} of run {scope.run_id!r} is being executed by "
                    f"{held.owner} (lease until {held.expires_at or 0:.0f}) and was not "
                    f"committed within {scope.lease_wait_timeout_s:g}s on "
                    f"{scope.store.description}; raise lease_wait_timeout_s or check that worker"
                )
            yield delay
            delay = min(delay * 2, 0.5)
            found = self.lookup()
            if found is not _HELD:
                return found

    def _replay(self, scope: RunScope, cp: Checkpoint) -> Any:
        try:
            output = serde.loads(cp.output_type, cp.output)
            if self.spec.decode is not None:
                output = self.spec.decode(output)
        except NotReplayable as exc:  # a decode hook: the output no longer fits this call
            scope.warn(f"checkpoint of {self.path!r} cannot be replayed exactly here, executing "
                       f"again: {exc}")  # fmt: skip
            return _MISSING
        except Exception as exc:  # CorruptCheckpointError, or a decode hook that fails
            scope.warn(f"checkpoint of {self.path!r} is unreadable, executing again: {exc}")
            return _MISSING
        scope.note_model_call(True, cp)
        spec = self.spec
        attrs = spec.attributes
        attrs[semconv.REPLAYED] = True
        original = _original_link(cp)
        if original is None:
            # The ids are only for the link: a malformed one costs the link, never the replay.
            scope.warn(
                f"checkpoint of {self.path!r} has a malformed trace id {cp.trace_id!r} or span "
                f"id {cp.span_id!r}; replayed with no link to the original execution"
            )
            links: tuple[Link, ...] = ()
        else:  # as attributes too: most trace viewers drop links (docs/design-notes.md)
            link, trace_id, span_id = original
            attrs[semconv.REPLAY_ORIGINAL_TRACE_ID] = trace_id
            attrs[semconv.REPLAY_ORIGINAL_SPAN_ID] = span_id
            links = (link,)
        span = self.tracer.start_span(
            # The name is the one field every viewer's tree shows (docs/design-notes.md).
            spec.span_name + semconv.REPLAYED_NAME_SUFFIX,
            kind=spec.span_kind,
            attributes=attrs,
            links=links,
        )
        describe = spec.describe_replay or spec.describe
        if describe is None and spec.on_replay is None:
            # Nothing could have marked the span ERROR (a @step): OK without reading it back.
            span.set_status(spans.STATUS_OK)
        else:
            if describe is not None and span.is_recording():
                _describe_output(span, describe, output)
            if spec.on_replay is not None and span.is_recording():
                try:
                    spec.on_replay(span, output)
                except Exception as exc:  # observability is best effort
                    message = f"on_replay failed: {exception_text(exc)}"
                    span.set_attribute(semconv.WARNINGS, [message])
            _ok_unless_failed(span)
        raised = _end_span(span)
        if raised is not None:
            scope.warn(
                f"a span processor raised ending the replay of {self.path!r}: "
                f"{exception_text(raised)}"
            )
        self._journal(scope, span, "replayed", None)
        return output

    # --- execution -----------------------------------------------------------------------

    def start(self) -> _Execution:
        """Start the boundary span and make it, and the boundary's frame, current."""
        attrs = self.spec.attributes
        if self.scope is not None:
            attrs[semconv.REPLAYED] = False
        span = self.tracer.start_span(
            self.spec.span_name, kind=self.spec.span_kind, attributes=attrs
        )
        ctx = span.get_span_context()
        parent, position = self.parent, self.position
        portable = position if self.portable_position is None else self.portable_position
        # Task frames opened beneath it anchor on its own position, except under a graph
        # call: they anchor on its parent's anchor (a resume is another graph call of the
        # same tasks); an uncacheable graph call has no key to share.
        anchor, portable_anchor = position, portable
        graph_call = self.spec.kind == semconv.KIND_GRAPH_CALL
        if graph_call and parent is not None and self.scope is not None:
            anchor, portable_anchor = parent.anchor, parent.portable_anchor
        self.frame = Frame(
            self.path,
            position,
            format(ctx.span_id, "016x"),
            kind=self.spec.kind,
            task=parent.task if parent is not None else None,
            anchor=anchor,
            key=self.key,
            portable=portable,
            portable_anchor=portable_anchor,
        )
        return _Execution(self, span, ctx)

    def _describe(self, span: trace.Span, output: Any) -> None:
        if self.spec.describe is not None and span.is_recording():
            _describe_output(span, self.spec.describe, output)

    def _journal(self, scope: RunScope, span: trace.Span, status: Any, error: str | None) -> None:
        """Keep the journal entry of a boundary that replayed or failed (an executed one is
        recorded by its checkpoint) and count its outcome; the run writes its journal once,
        when it ends."""
        ctx = span.get_span_context()
        now = time.time_ns()
        entry = BoundaryRecord(
            run_id=scope.run_id,
            attempt=scope.attempt,
            key=self.key,
            path=self.path,
            name=self.spec.name,
            kind=self.spec.kind,
            status=status,
            span_id=format(ctx.span_id, "016x"),
            parent_span_id=self.parent.span_id if self.parent else None,
            started_at_ns=getattr(span, "start_time", None) or now,
            ended_at_ns=getattr(span, "end_time", None) or now,
            error=error,
        )
        with scope.lock:
            if scope.keeps_records:
                scope.journal.append(entry)
            scope.boundary_counts[(entry.kind, _OUTCOMES[status])] += 1


class _Execution:
    """The executing half of a boundary: finish with an output, or fail with an exception."""

    __slots__ = ("call", "ctx", "recording", "span", "staged", "tokens")

    def __init__(self, call: _Call, span: trace.Span, ctx: SpanContext) -> None:
        self.call = call
        self.span = span
        self.ctx = ctx
        # Recording at start, not recording later: someone other than spanpoint ended it.
        self.recording = span.is_recording()
        self.staged: processor.StagedOutput | None = None
        self.tokens: tuple[object, Token[Frame | None]] | None = (
            otel_context.attach(trace.set_span_in_context(span)),
            push_frame(call.frame),
        )

    def leave(self) -> None:
        """Make the enclosing span and frame current again (once)."""
        tokens, self.tokens = self.tokens, None
        if tokens is not None:
            pop_frame(tokens[1])
            otel_context.detach(tokens[0])  # type: ignore[arg-type]

    def finish(self, output: T) -> T:
        """Stage ``output`` for commit (inside a run) and mark the span OK."""
        call, span, scope = self.call, self.span, self.call.scope
        if self.recording and not span.is_recording():
            # The body ended the boundary span itself. Whatever status it left, spanpoint did
            # not set OK and end the span after a normal return: nothing is committed, and
            # end() frees the lease so that the next attempt executes it again.
            if scope is not None:
                scope.warn(
                    f"the body of {call.path!r} ended its own span; its output was not "
                    "committed and it will execute again (let spanpoint end boundary spans)"
                )
            return output
        call._describe(span, output)
        status = getattr(span, "status", None)
        if status is not None and status.status_code is StatusCode.ERROR:
            # The body marked its own span failed without raising: the span ends ERROR, so
            # by the processor's rule nothing is committed and a replay executes it again.
            return output
        if scope is not None:
            try:
                encoded = call.spec.encode(output) if call.spec.encode else output
                output_type, data = serde.dumps(encoded)
            except SerializationError as exc:
                span.set_attribute(semconv.SERIALIZATION_ERROR, redact_text(str(exc)))
                scope.warn(f"output of {call.path!r} was not committed: {exc}")
                if scope.strict:
                    raise
            else:
                ctx = self.ctx
                checkpoint = Checkpoint(
                    key=call.key,
                    run_id=scope.run_id,
                    path=call.path,
                    name=call.spec.name,
                    kind=call.spec.kind,
                    ordinal=call.ordinal,
                    output_type=output_type,
                    output=data,
                    trace_id=format(ctx.trace_id, "032x"),
                    span_id=format(ctx.span_id, "016x"),
                    parent_span_id=call.parent.span_id if call.parent else None,
                    attempt=scope.attempt,
                    # The body has just returned: its end is now, a few µs before span.end().
                    started_at_ns=getattr(span, "start_time", None) or time.time_ns(),
                    ended_at_ns=time.time_ns(),
                    view=call.spec.view,
                    fingerprint=call.fingerprint,
                    # Where it stands off any thread: what a fork keys it by (run.Frame).
                    identity=call.portable or call.identity,
                    input_view=_input_view(call.spec, scope),
                )
                owner, epoch = (call.owner, call.epoch) if call.claimed else (None, None)
                self.staged = processor.StagedOutput(
                    scope.store, checkpoint, owner, epoch, durability=scope.durability
                )
                processor.stage(ctx.trace_id, ctx.span_id, self.staged)
                if call.spec.on_staged is not None:
                    try:
                        call.spec.on_staged(checkpoint)
                    except Exception as exc:  # a derived value is best effort, never the commit
                        scope.warn(f"on_staged failed for {call.path!r}: {exception_text(exc)}")
        span.set_status(spans.STATUS_OK)
        return output

    def fail(self, exc: BaseException) -> None:
        """End the span with ERROR and the exception; commit nothing; free the lease.

        LangGraph's control-flow exceptions (``interrupt()``, a ``Command`` for the parent
        graph) are not failures: the span ends without ERROR — a pause is an event — and, as
        for any span that did not end OK, nothing is committed.
        """
        call, span, scope = self.call, self.span, self.call.scope
        if self.staged is not None:  # staged, then failed before the span ended (strict mode)
            ctx = self.ctx
            processor.unstage(ctx.trace_id, ctx.span_id)
        # spans.fail: a pause, a handoff (neither error nor pause) or an error, as on every path.
        control_flow = spans.fail(span, exc) != "error"
        raised = _end_span(span)  # a raising processor never replaces the body's exception
        if scope is None:
            return
        if raised is not None:
            scope.warn(
                f"a span processor raised ending the span of {call.path!r}: "
                f"{exception_text(raised)}"
            )
        if call.claimed:
            try:
                scope.store.release(call.key, call.owner)
            except StoreError as err:
                scope.warn(f"could not release the lease of {call.path!r}: {err}")
        if control_flow:
            call._journal(scope, span, "interrupted", None)
        else:
            call._journal(scope, span, "error", exception_text(exc))

    def end(self, output: T) -> T:
        """End the span; the processor commits. Return what the caller gets: ``output``, or
        the output another execution committed when this one's commit was refused.

        The body returned normally and :meth:`finish` set OK: only here is the staged output
        marked ``ending``, right before spanpoint ends the span, and the processor commits
        marked outputs only. A span processor that raises inside ``span.end()`` changes
        neither the result nor the commit.
        """
        call, span, staged, scope = self.call, self.span, self.staged, self.call.scope
        ended_early = self.recording and not span.is_recording()
        raised: Exception | None = None
        if not ended_early:
            if staged is not None:
                staged.ending = True
            raised = _end_span(span)
        if scope is not None:
            # An executed boundary is journalled by its checkpoint: here it is only counted.
            with scope.lock:
                scope.boundary_counts[(call.spec.kind, "executed")] += 1
            if raised is not None:
                scope.warn(
                    f"a span processor raised ending the span of {call.path!r}: "
                    f"{exception_text(raised)}"
                )
        if staged is None:
            self._release_unused_lease()
            return output
        ctx = self.ctx
        if ended_early:
            # Ended by someone else between finish() and here (an encode or describe hook).
            processor.unstage(ctx.trace_id, ctx.span_id)
            assert scope is not None
            scope.warn(
                f"the span of {call.path!r} was ended before spanpoint ended it; its output "
                "was not committed and it will execute again"
            )
        else:
            processor.commit_unseen(
                staged, span, ctx.trace_id, ctx.span_id, recording=self.recording, raised=raised
            )
        if scope is not None and (staged.committed or staged.queued):
            scope.note_model_call(False, staged.checkpoint)
        if staged.queued:
            # durability="async": the committer writes it and frees the lease then; the run
            # reports a failed write when it ends (run._settle_commits).
            return output
        if staged.superseded:
            return self._superseded(staged, output)  # type: ignore[no-any-return]
        if not staged.committed:
            self._release_unused_lease()  # whoever waits for this boundary executes it
        if staged.error is not None:
            self._report_commit_failure(staged)
        return output

    def _superseded(self, staged: processor.StagedOutput, output: Any) -> Any:
        """The store refused this execution's commit: the output another execution committed
        (with a warning and a ``spanpoint.lease.lost`` event), else :class:`LeaseLostError`
        when this execution held a lease and lost it: never an output the store does not hold.

        An execution that held no lease (its claim failed, or the committed row could not be
        replayed here, which is why it executed) keeps its own output when the store's
        cannot be replayed: that is the rule for any row that cannot be replayed faithfully.
        """
        call, scope = self.call, self.call.scope
        assert scope is not None
        cp = staged.checkpoint
        found: Any = _MISSING
        why = "no other execution has committed it"
        try:
            committed = scope.store.get(cp.key)
            if committed is not None:
                found = serde.loads(committed.output_type, committed.output)
                if call.spec.decode is not None:
                    found = call.spec.decode(found)
        except Exception as exc:  # unreadable: the caller cannot be given what the store holds
            found, why = _MISSING, f"what the store holds cannot be read ({exception_text(exc)})"
        if found is _MISSING and staged.owner is None:
            return output
        outcome = "failed" if found is _MISSING else "returned_committed"
        parent = trace.get_current_span()
        if parent.is_recording():
            parent.add_event(
                semconv.EVENT_LEASE_LOST,
                {
                    semconv.BOUNDARY_PATH: cp.path,
                    semconv.CHECKPOINT_KEY: cp.key,
                    semconv.LEASE_OUTCOME: outcome,
                },
            )
        lost = (
            f"boundary {cp.path!r} of run {cp.run_id!r} lost its lease on "
            f"{scope.store.description} while it executed (another execution took it over), "
            "so its output was not committed"
            if staged.owner is not None
            else f"boundary {cp.path!r} of run {cp.run_id!r} was committed by another "
            f"execution on {scope.store.description} while this one executed without a lease"
        )
        if found is _MISSING:
            raise LeaseLostError(
                f"{lost}, and {why}. Run it again to replay the other execution's output once "
                "it commits; raise lease_ttl_s above the longest pause of a worker"
            )
        scope.warn(f"{lost}; it returns the output the other execution committed")
        return found

    def _release_unused_lease(self) -> None:
        # An output that is not committed (unserializable, or a span the body marked ERROR) is
        # never put, and put is what frees a lease: free it here, or other workers would wait
        # for a commit that cannot come (a heartbeat-renewed lease would never expire).
        call, scope = self.call, self.call.scope
        if scope is None or not call.claimed:
            return
        try:
            scope.store.release(call.key, call.owner)
        except StoreError as err:
            scope.warn(f"could not release the lease of {call.path!r}: {err}")

    def _report_commit_failure(self, staged: processor.StagedOutput) -> None:
        scope = self.call.scope
        assert scope is not None
        scope.commit_failures += 1
        scope.warn(
            f"boundary {staged.checkpoint.path!r} executed but was not committed: {staged.error}"
        )
        parent = trace.get_current_span()
        if parent.is_recording():
            parent.add_event(
                semconv.EVENT_CHECKPOINT_COMMIT_FAILED,
                {
                    semconv.BOUNDARY_PATH: staged.checkpoint.path,
                    semconv.CHECKPOINT_KEY: staged.checkpoint.key,
                    semconv.STORE_ERROR: str(staged.error),
                },
            )
        if scope.strict:
            raise StoreError(f"commit of {staged.checkpoint.path!r} failed: {staged.error}")


def _input_view(spec: BoundarySpec, scope: RunScope) -> dict[str, Any] | None:
    """The redacted input view a checkpoint keeps; None when it cannot be made (it is a
    description for people: a failure costs the view, never the commit)."""
    try:
        if spec.input_view is not None:
            return spec.input_view()
        if spec.identity is None:
            return None
        return {"args": settings().capture.redact(spec.identity)}
    except Exception as exc:
        scope.warn(f"no input view for {spec.name!r}: {exception_text(exc)}")
        return None


def _end_span(span: trace.Span) -> Exception | None:
    """End ``span``; return what a span processor raised instead of raising it.

    The SDK calls every processor inside ``span.end()`` and lets their exceptions through:
    a buggy processor must not turn a boundary's result into its own exception.
    """
    try:
        span.end()
    except Exception as exc:
        return exc
    return None


_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _original_link(cp: Checkpoint) -> tuple[Link, str, str] | None:
    """The link from a replay to the span that executed ``cp``, with that span's trace and
    span ids as text; None when its ids are not the W3C form (32 and 16 lowercase hex
    digits, not all zero) spanpoint stores."""
    trace_id, span_id = str(cp.trace_id).lower(), str(cp.span_id).lower()
    if not (_TRACE_ID.fullmatch(trace_id) and _SPAN_ID.fullmatch(span_id)):
        return None
    trace_int, span_int = int(trace_id, 16), int(span_id, 16)
    if not (trace_int and span_int):  # an all-zero id is the W3C "invalid" id
        return None
    original = SpanContext(trace_int, span_int, is_remote=True, trace_flags=_SAMPLED)
    # The fullmatch texts are what format(id, "032x") / "016x" would print back.
    return Link(original, _ORIGINAL_LINK), trace_id, span_id


def call_boundary(spec: BoundarySpec, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` as the boundary ``spec`` (replaying it when committed)."""
    call = _Call(spec)
    found = call.lookup()
    if found is _HELD:
        found = _waited(call)
    if found is not _MISSING:
        return found  # type: ignore[no-any-return]
    execution = call.start()
    try:
        output = execution.finish(fn(*args, **kwargs))
    except BaseException as exc:
        _failed(execution, exc)
        raise
    return _returned(execution, output)


async def acall_boundary(
    spec: BoundarySpec, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
) -> T:
    """The async form of :func:`call_boundary`: ``await fn(*args, **kwargs)``.

    No store call runs on the event loop: the claim (and the replay it may find), the lease
    wait's lookups, and the span's end with its commit or release run in a worker thread
    (``asyncio.to_thread``, the context copied), so other tasks run while the store works.
    """
    call = _Call(spec)
    found = await _off_loop(call, call.lookup)
    if found is _HELD:
        found = await _awaited(call)
    if found is not _MISSING:
        return found  # type: ignore[no-any-return]
    execution = call.start()
    try:
        output = execution.finish(await fn(*args, **kwargs))
    except BaseException as exc:
        execution.leave()
        await _off_loop(call, execution.fail, exc)
        raise
    execution.leave()
    return await _off_loop(call, execution.end, output)  # type: ignore[no-any-return]


async def _off_loop(call: _Call, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread when it may touch the store (a boundary of a run),
    else inline: a plain span's start and end do no I/O."""
    if call.scope is None:
        return fn(*args)
    import asyncio  # for import time: only async boundaries need it

    return await asyncio.to_thread(fn, *args)


# What the sync and async drivers share: the lease wait's sleeps are theirs, its steps the
# sans-I/O _Call.wait; an execution leaves its frame before it ends or fails.


def _waited(call: _Call) -> Any:
    """What :meth:`_Call.wait` found once the lease's holder committed or let go (asleep)."""
    steps = call.wait()
    try:
        while True:
            time.sleep(next(steps))
    except StopIteration as stop:
        return stop.value


async def _awaited(call: _Call) -> Any:
    """The async form of :func:`_waited`: the sleeps let the event loop run, and each step
    (a lookup in the store) runs in a worker thread."""
    import asyncio  # for import time: only async boundaries need it

    steps = call.wait()
    while True:
        done, value = await asyncio.to_thread(_advance, steps)
        if done:
            return value
        await asyncio.sleep(value)


def _advance(steps: Generator[float, None, Any]) -> tuple[bool, Any]:
    """The next delay of a lease wait, ``(False, delay)``, or ``(True, found)`` at its end (a
    StopIteration cannot cross into a future)."""
    try:
        return False, next(steps)
    except StopIteration as stop:
        return True, stop.value


def _failed(execution: _Execution, exc: BaseException) -> None:
    execution.leave()
    execution.fail(exc)


def _returned(execution: _Execution, output: T) -> T:
    execution.leave()
    return execution.end(output)


# --- a boundary, or a plain span when replay=False -------------------------------------------


def start_span(spec: BoundarySpec) -> trace.Span:
    """Start the plain span of a span-only call (``spec.replay`` false): not a boundary."""
    attrs = spec.attributes
    attrs[semconv.BOUNDARY_KIND] = spec.kind
    attrs[semconv.BOUNDARY_NAME] = spec.name
    return settings().tracer.start_span(spec.span_name, kind=spec.span_kind, attributes=attrs)


def _describe_output(
    span: trace.Span, describe: Callable[[Any], Mapping[str, AttributeValue]], output: Any
) -> None:
    """Set ``describe(output)`` on ``span``. An output described with ``error.type`` is a
    failed call returned as a value (an error ``ToolMessage``): the span is marked ERROR, so
    by invariant 1 it commits nothing and a rerun executes it again."""
    try:
        attrs = dict(describe(output))
    except Exception as exc:  # observability is best effort
        span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])
        return
    span.set_attributes(attrs)
    error_type = attrs.get(semconv.ERROR_TYPE)
    if error_type:
        span.set_status(Status(StatusCode.ERROR, str(error_type)))


def _ok_unless_failed(span: trace.Span) -> None:
    """Mark ``span`` OK unless :func:`_describe_output` marked it ERROR."""
    status = getattr(span, "status", None)
    if status is None or status.status_code is not StatusCode.ERROR:
        span.set_status(spans.STATUS_OK)


def end_span(spec: BoundarySpec, span: trace.Span, output: Any) -> None:
    """End a span-only call's span OK (ERROR for a failure returned as a value), described by
    ``spec.describe(output)``."""
    if span.is_recording():
        if spec.describe is not None:
            _describe_output(span, spec.describe, output)
        _ok_unless_failed(span)
    span.end()


def span_call(spec: BoundarySpec, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as the boundary ``spec`` when it replays, else in a plain span
    where LangGraph's control-flow exceptions (interrupts) are not errors."""
    if spec.replay:
        return call_boundary(spec, fn, *args, **kwargs)
    span = start_span(spec)
    with spans.current(span):
        try:
            output = fn(*args, **kwargs)
        except BaseException as exc:
            spans.fail_span(span, exc)
            raise
    end_span(spec, span, output)
    return output


async def aspan_call(spec: BoundarySpec, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The async form of :func:`span_call`."""
    if spec.replay:
        return await acall_boundary(spec, fn, *args, **kwargs)
    span = start_span(spec)
    with spans.current(span):
        try:
            output = await fn(*args, **kwargs)
        except BaseException as exc:
            spans.fail_span(span, exc)
            raise
    end_span(spec, span, output)
    return output
