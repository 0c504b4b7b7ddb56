"""Where checkpoints are committed: ``CheckpointSpanProcessor`` and the durable sampler.

A boundary *stages* its serialized output for its span after the body returned, then marks it
``ending`` right before spanpoint itself calls ``span.end()``. When the span ends, the processor
takes the staged output and commits it to the store only if it was so marked and the span's
status is OK. An exception (status ERROR), a body that ended its own span, or a process killed
before ``span.end()`` commits nothing. The commit is fenced: it lands only while the execution
still holds the boundary's lease, checked by the store in the same statement as the write; an
execution whose lease was taken over commits nothing and is told so (``superseded``). That is
the whole durability contract, and this module is the only place that commits: when no span
processor could see the span (a non-SDK tracer provider, or a processor ahead of ours that
raised), :func:`commit_unseen` applies the same rule after the span ended.

With ``durability="async"`` the commit leaves the hot path: the processor hands the staged
output to its store's background committer (``spanpoint.committer``) and the write lands a
little later, in order, the lease held until it does.

``DurableSampler`` wraps any sampler so that a boundary span the wrapped sampler would DROP is
still RECORD_ONLY: the processor sees it (durability holds) while exporters, which only take
sampled spans, see nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from spanpoint import committer, semconv
from spanpoint.errors import LeaseLostError
from spanpoint.stores.base import Checkpoint, CheckpointStore

logger = logging.getLogger("spanpoint")

#: When a boundary's checkpoint is written, in LangGraph's words: ``"sync"``, before the
#: boundary returns; ``"async"``, by a background committer while the run goes on.
Durability = Literal["sync", "async"]
DURABILITIES: tuple[Durability, ...] = ("sync", "async")


@dataclass(slots=True)
class StagedOutput:
    """A boundary's complete checkpoint waiting for its span to end OK."""

    store: CheckpointStore
    checkpoint: Checkpoint
    owner: str | None
    #: The fencing epoch of ``owner``'s lease (``Claim.epoch``); None when not known.
    epoch: int | None = None
    committed: bool = False
    #: The store refused the write: another execution took the lease over (or committed
    #: first). The boundary then returns what the store holds, or raises ``LeaseLostError``.
    superseded: bool = False
    error: Exception | None = None
    #: Set only by the boundary, right before *it* ends the span: a span ended by anyone else
    #: (the body, a hook) never carries it, so its output is never committed.
    ending: bool = False
    #: ``"async"``: :func:`commit` queues it for the store's committer instead of writing.
    durability: Durability = "sync"
    #: Set when it was handed to a committer: ``committed`` and ``error`` are then set later,
    #: by the committer's thread, and failures are reported when the run ends.
    queued: bool = False


# (trace_id, span_id) -> staged output. Entries live from just before span.end() until the
# processor takes them inside span.end(), so the table stays as small as the open boundaries.
_STAGED: dict[tuple[int, int], StagedOutput] = {}


def stage(trace_id: int, span_id: int, staged: StagedOutput) -> None:
    """Stage ``staged`` for the span ``(trace_id, span_id)``."""
    _STAGED[(trace_id, span_id)] = staged


def unstage(trace_id: int, span_id: int) -> StagedOutput | None:
    """Take back what was staged for a span (used when no processor will see it)."""
    return _STAGED.pop((trace_id, span_id), None)


def commit(staged: StagedOutput) -> bool:
    """Commit ``staged``: write it now (``"sync"``, return whether it committed) or queue it
    for its store's committer (``"async"``, return False: it is ``queued``, not committed yet).
    Never raises: a failure is kept on ``staged.error``."""
    if staged.durability == "async":
        staged.queued = True  # before submit: the committer may finish before submit returns
        try:
            committer.committer_for(staged.store, write).submit(staged)
            return False
        except RuntimeError:  # no thread can start (interpreter shutdown): write it now
            staged.queued = False
    return write(staged)


def write(staged: StagedOutput) -> bool:
    """Write ``staged`` to its store now, fenced by its lease. Never raises: a failure is kept
    on ``staged.error``; a write the store refused sets ``staged.superseded``."""
    cp = staged.checkpoint
    try:
        staged.committed = staged.store.put(cp, owner=staged.owner, epoch=staged.epoch)
        if not staged.committed:
            staged.superseded = True
            if staged.queued:
                # durability="async": the boundary has returned its output already; the run
                # reports at its end that the store holds another execution's (or none).
                staged.error = LeaseLostError(
                    f"boundary {cp.path!r} of run {cp.run_id!r} lost its lease on "
                    f"{staged.store.description} before its queued commit landed; another "
                    "execution's output (or none) is what the store holds"
                )
    except Exception as exc:  # invariant 5: a failed commit is reported, never raised here
        staged.error = exc
        if staged.owner is not None:
            # Free the boundary for the next attempt; the lease would expire anyway.
            with contextlib.suppress(Exception):
                staged.store.release(cp.key, staged.owner)
        logger.warning(
            "spanpoint: could not commit boundary %r of run %r to %s: %s; it will execute "
            "again when the run is replayed",
            cp.path,
            cp.run_id,
            staged.store.description,
            exc,
        )
    return staged.committed


def commit_unseen(
    staged: StagedOutput,
    span: object,
    trace_id: int,
    span_id: int,
    *,
    recording: bool,
    raised: Exception | None,
) -> None:
    """The commit rule for a boundary span spanpoint has just ended OK after a normal return,
    whose staged output no span processor took: commit it here, or say why not.

    No SDK processor saw a span that never recorded (a non-SDK tracer provider): durability
    never depends on tracing being enabled, so commit. A processor registered ahead of this
    one raised and the SDK stopped there: commit if the span did end OK. Otherwise no
    :class:`CheckpointSpanProcessor` is registered, which ``staged.error`` says.
    """
    if unstage(trace_id, span_id) is None:
        return  # the processor took it: committed, superseded, or not ended OK
    if not recording:
        commit(staged)
    elif raised is not None:
        if _ended_ok(span):
            commit(staged)
        else:
            staged.error = RuntimeError(f"the span did not end OK ({raised})")
    else:
        staged.error = RuntimeError(
            "no CheckpointSpanProcessor is registered on the tracer provider; call "
            "spanpoint.configure(tracer_provider=...)"
        )


def _ended_ok(span: object) -> bool:
    status = getattr(span, "status", None)
    return (
        getattr(span, "end_time", None) is not None
        and status is not None
        and status.status_code is StatusCode.OK
    )


def pending(store: CheckpointStore, key: str) -> Checkpoint | None:
    """The checkpoint of ``key`` queued for ``store`` and not written yet, else None: what a
    lookup in this process must see before it asks the store (read your writes)."""
    return committer.pending_checkpoint(store, key)


def settle(
    store: CheckpointStore, run_id: str, timeout_s: float | None = None
) -> tuple[bool, list[StagedOutput]]:
    """At a run's end: wait for what is queued for ``store``; return whether everything queued
    was written within ``timeout_s`` and the run's queued commits that failed."""
    found = committer.existing(store)
    if found is None:
        return True, []
    done = found.flush(timeout_s, run_id=run_id)
    return done, found.take_failures(run_id)


class CheckpointSpanProcessor(SpanProcessor):
    """Commits a boundary's staged output when its span ends with status OK, and never otherwise.

    Register it on the SDK ``TracerProvider`` (``spanpoint.configure()`` does). It keeps no
    state of its own and does no I/O for spans that are not boundaries.
    """

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Commit the span's staged output if spanpoint ended it OK; drop it otherwise."""
        if not _STAGED:  # most spans: nothing is waiting for any span to end
            return
        ctx = span.context
        if ctx is None:
            return
        staged = _STAGED.pop((ctx.trace_id, ctx.span_id), None)
        if staged is None or not staged.ending or span.status.status_code is not StatusCode.OK:
            return
        commit(staged)

    def shutdown(self) -> None:
        """Write the checkpoints still queued under ``durability="async"`` (bounded)."""
        committer.flush_all(committer.EXIT_TIMEOUT_S)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait for the checkpoints queued under ``durability="async"``; False on timeout.
        Under ``"sync"`` nothing is ever pending."""
        return committer.flush_all(timeout_millis / 1000)


class DurableSampler(Sampler):
    """Wraps a sampler; a spanpoint run or boundary span it would DROP becomes RECORD_ONLY."""

    def __init__(self, delegate: Sampler) -> None:
        self.delegate = delegate

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        """Delegate, then upgrade DROP to RECORD_ONLY for spanpoint's durable spans."""
        result = self.delegate.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if (
            result.decision is Decision.DROP
            and attributes
            and (semconv.BOUNDARY_KIND in attributes or semconv.RUN_ID in attributes)
        ):
            return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        """``DurableSampler{<delegate>}``."""
        return f"DurableSampler{{{self.delegate.get_description()}}}"
