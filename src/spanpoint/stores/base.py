"""The checkpoint store interface and its records.

A store keeps, per run: the run record (attempts, last status), one checkpoint per committed
boundary, a journal of the boundaries each attempt replayed or failed, durable waits, and
short leases that make a boundary single-flight across workers. Every implementation passes
``tests/stores/test_conformance.py``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from spanpoint._json import encoded_text, json_text
from spanpoint.errors import CorruptCheckpointError

RunStatus = Literal["running", "completed", "failed", "waiting", "interrupted", "stopped", "forked"]
BoundaryStatus = Literal["ok", "error", "replayed", "interrupted"]
ClaimState = Literal["committed", "acquired", "held"]
#: Where a page of ``list_runs`` ends: the last run's ``(updated_at, run_id)``
#: (:attr:`RunRecord.cursor`); the next page is the runs strictly after it, newest first.
RunCursor = tuple[float, str]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The committed output of one completed boundary.

    ``output_type``/``output`` are what :func:`spanpoint.serde.dumps` produced; ``view`` is a
    small, redacted, JSON-safe description for humans (never the raw input).

    What entered the key, for forks and diffs (None on rows committed before they existed):
    ``fingerprint`` is the input fingerprint and ``identity`` the parent-identity path (the
    second argument of :func:`spanpoint.serde.checkpoint_key`), so the key can be computed
    again for another run id (by position: under a task keyed by its thread's ids, the
    identity it has off that thread, ``spanpoint.run.Frame.portable``); ``input_view`` is a
    small redacted JSON-safe description of the input (messages, tools and settings of a
    model call, a tool call's arguments).
    """

    key: str
    run_id: str
    path: str
    name: str
    kind: str
    ordinal: int
    output_type: str
    output: bytes
    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    attempt: int = 1
    started_at_ns: int = 0
    ended_at_ns: int = 0
    view: dict[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    identity: str | None = None
    input_view: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return (
            f"Checkpoint(run_id={self.run_id!r}, path={self.path!r}, ordinal={self.ordinal}, "
            f"kind={self.kind!r}, key={self.key[:12]}…, {len(self.output)} bytes)"
        )


def checkpoint_digest(
    key: str, run_id: str, path: str, kind: str, ordinal: int, output_type: str, output: bytes
) -> str:
    """The sha256 (hex) a committed row carries over what a replay depends on.

    It covers the output and its type tag, and the identity columns a replay is looked up and
    named by (key, run id, path, ordinal, kind). Each text is prefixed with its length in
    characters, so no two different rows hash the same bytes. Stores hash bytes and strings
    only: they know nothing of the serializer. A digest detects corruption (a flipped bit, a
    torn write, a hand-edited row); it is no signature: whoever can write a row can also
    write its digest.
    """
    # One f-string and one update: this runs on every commit and every replay.
    head = (
        f"{len(key)}:{key}{len(run_id)}:{run_id}{len(path)}:{path}{len(kind)}:{kind}"
        f"{ordinal:d}:{len(output_type)}:{output_type}"
    )
    h = hashlib.sha256(head.encode("utf-8", "surrogatepass"))
    h.update(output)
    return h.hexdigest()


def digest_of(cp: Checkpoint) -> str:
    """:func:`checkpoint_digest` of a checkpoint about to be committed."""
    return checkpoint_digest(
        cp.key, cp.run_id, cp.path, cp.kind, cp.ordinal, cp.output_type, cp.output
    )


def verify_checkpoint(cp: Checkpoint, digest: str | None, store: str) -> Checkpoint:
    """``cp`` when its stored ``digest`` matches; :class:`CorruptCheckpointError` otherwise.

    A row without a digest was committed before digests existed (schema migration): it reads
    as before (docs/design-notes.md, "Integrity digests").
    """
    if digest is None:
        return cp
    try:
        actual = digest_of(cp)
    except (TypeError, ValueError, AttributeError) as exc:  # a column of the wrong type
        actual = f"<unhashable: {exc}>"
    if actual != digest:
        raise CorruptCheckpointError(
            f"{store}: checkpoint {str(cp.key)[:12]}… of {cp.path!r} failed its integrity "
            "check (its sha256 does not match the row's output, type tag or identity); the "
            "boundary executes again and re-commits it"
        )
    return cp


def checkpoint_from_row(
    row: Sequence[Any], read_json: Callable[[str], Any], description: str, fix: str
) -> Checkpoint:
    """The checkpoint a stored row holds, in ``CHECKPOINT_COLUMNS`` order; a row whose output
    is not a blob with a type tag, or whose views are not JSON, is a
    :class:`CorruptCheckpointError` naming ``description`` and the store's ``fix``."""
    try:
        *head, view, fingerprint, identity, input_view = row
        if not isinstance(head[7], bytes) or not isinstance(head[6], str):
            raise TypeError("output column is not a blob with a type tag")
        return Checkpoint(
            *head,
            view=read_json(view),
            fingerprint=fingerprint,
            identity=identity,
            input_view=None if input_view is None else read_json(input_view),
        )
    except (TypeError, ValueError) as exc:
        raise CorruptCheckpointError(
            f"{description}: checkpoint {str(row[0])[:12]}… is corrupted ({exc}); {fix}"
        ) from exc


def checkpoint_row(cp: Checkpoint) -> tuple[Any, ...]:
    """A checkpoint's column values in ``Checkpoint`` field order, ``view`` and
    ``input_view`` as JSON text (``input_view`` NULL when there is none)."""
    return (
        cp.key,
        cp.run_id,
        cp.path,
        cp.name,
        cp.kind,
        cp.ordinal,
        cp.output_type,
        cp.output,
        cp.trace_id,
        cp.span_id,
        cp.parent_span_id,
        cp.attempt,
        cp.started_at_ns,
        cp.ended_at_ns,
        json_text(cp.view),
        cp.fingerprint,
        cp.identity,
        None if cp.input_view is None else encoded_text(cp.input_view),
    )


@dataclass(frozen=True, slots=True)
class BoundaryRecord:
    """One boundary as one attempt saw it: executed ok, failed, replayed, or interrupted."""

    run_id: str
    attempt: int
    key: str
    path: str
    name: str
    kind: str
    status: BoundaryStatus
    span_id: str
    parent_span_id: str | None
    started_at_ns: int
    ended_at_ns: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A durable run as the store knows it."""

    run_id: str
    name: str | None
    attempts: int
    status: RunStatus
    created_at: float
    updated_at: float
    committed: int = 0

    @property
    def cursor(self) -> RunCursor:
        """Pass as ``list_runs(after=...)`` to list the runs after this one."""
        return (self.updated_at, self.run_id)


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """A durable wait: a named input a run needs before it can go on."""

    run_id: str
    name: str
    question: str | None
    schema: dict[str, Any] | None
    value_json: str | None
    created_at: float
    provided_at: float | None = None

    @property
    def provided(self) -> bool:
        """Whether a value has been provided for this wait."""
        return self.value_json is not None


def journal_row(r: BoundaryRecord) -> tuple[Any, ...]:
    """A journal entry's column values in ``BoundaryRecord`` field order."""
    return (
        r.run_id,
        r.attempt,
        r.key,
        r.path,
        r.name,
        r.kind,
        r.status,
        r.span_id,
        r.parent_span_id,
        r.started_at_ns,
        r.ended_at_ns,
        r.error,
    )


def json_or_none(value: dict[str, Any] | None) -> str | None:
    """A JSON text column for an optional mapping (keys sorted, so equal values compare)."""
    return None if value is None else json.dumps(value, sort_keys=True)


def wait_from_row(row: Sequence[Any]) -> WaitRecord:
    """A ``WaitRecord`` from its columns (``schema`` as JSON text)."""
    run_id, name, question, schema, value_json, created_at, provided_at = row
    return WaitRecord(
        run_id,
        name,
        question,
        None if schema is None else json.loads(schema),
        value_json,
        created_at,
        provided_at,
    )


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to :meth:`CheckpointStore.claim`.

    ``committed``: the boundary is done, ``checkpoint`` holds it. ``acquired``: this worker
    holds the lease and must execute. ``held``: another live worker holds it until
    ``expires_at`` (epoch seconds). ``error``: set with ``acquired`` when the committed row
    failed its integrity check; the store turned it back into a lease, so the boundary
    executes again and its commit replaces the corrupted row.

    ``epoch`` (with ``acquired``) is the lease's fencing token: it grows each time the lease
    passes to another owner, and the holder passes it back to :meth:`CheckpointStore.put`,
    which commits only while the same owner still holds the lease at that epoch.
    """

    state: ClaimState
    checkpoint: Checkpoint | None = None
    owner: str | None = None
    expires_at: float | None = None
    error: str | None = None
    epoch: int | None = None


OnceState = Literal["taken", "held", "spent"]


@dataclass(frozen=True, slots=True)
class OnceToken:
    """The answer to ``take_once``: a once-token (``spanpoint.stores.once``).

    ``taken``: the caller now holds the token until ``expires_at`` (epoch seconds) and must
    spend or release it. ``held``: another live owner (``owner``) holds it until
    ``expires_at``. ``spent``: it was spent already; it can never be taken again (until gc
    sweeps it).
    """

    state: OnceState
    owner: str | None = None
    expires_at: float | None = None


def _pid_namespace() -> str:
    """This process's pid namespace (an inode number), or "" where /proc cannot tell."""
    try:
        return os.readlink("/proc/self/ns/pid").rsplit("[", 1)[1].rstrip("]")
    except (OSError, IndexError):
        return ""


def _machine() -> str:
    """This machine's boot id (random, drawn by the kernel at every boot), or a random token
    of this process where the kernel does not tell.

    Host names and pid namespace numbers repeat across machines (every host's first pid
    namespace may carry the same number, and clones share host names): only the boot id
    tells two machines apart. Without one, this process's owners are never judged dead by
    another process, which is the safe side: their leases expire instead.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip().replace("-", "")
    except OSError:
        boot = ""
    return boot if len(boot) == 32 else f"p{uuid.uuid4().hex}"


#: ``host#pidns#machine``: everything a pid needs beside it to name one process.
_HOST = f"{socket.gethostname()}#{_pid_namespace()}#{_machine()}"


def new_owner_id() -> str:
    """A lease owner id, ``host#pidns#machine:pid:random``.

    ``host#pidns#machine`` says where the pid is meaningful: containers of one pod share a
    host name but not their process ids, and two machines may share a host name and a pid
    namespace number but never a boot id. The random part (128 bits) makes every id new,
    a reused pid included: an owner id is a token no other process or execution holds.
    """
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex}"


_PROCESS_OWNER: str | None = None


def _forget_process_owner() -> None:
    global _PROCESS_OWNER
    _PROCESS_OWNER = None


# A forked child is another owner. Forgotten at the fork rather than found by comparing
# os.getpid() on every call: a system call that every run and every boundary lookup made.
# Every fork that goes on running Python runs
# these hooks (os.fork, multiprocessing, and C code through PyOS_AfterFork_Child).
os.register_at_fork(after_in_child=_forget_process_owner)


def process_owner_id() -> str:
    """This process's owner id (a new one after a fork), the prefix of its executions' ids.

    A lease is held by one execution (:func:`execution_owner_id`); this id names the process
    those executions run in, so that a lease of a dead process can be taken at once.
    """
    global _PROCESS_OWNER
    owner = _PROCESS_OWNER
    if owner is None:
        owner = _PROCESS_OWNER = new_owner_id()
    return owner


_EXECUTIONS = itertools.count(1)


def execution_owner_id() -> str:
    """A lease owner id for one execution of one boundary: ``process_owner_id().N``.

    Leases belong to executions, not processes: two threads (or tasks, or pool workers) of
    one process that claim the same boundary are two owners, so the second waits for the
    first one's commit instead of being granted the lease again. The process part still lets
    another local process see that the owner died (:func:`owner_is_dead_here`).
    """
    # next() on itertools.count is atomic under the GIL: threads never share a number.
    return f"{process_owner_id()}.{next(_EXECUTIONS)}"


def owner_is_dead_here(owner: str) -> bool:
    """True when ``owner`` names a process of this machine and pid namespace that no longer
    exists (never for an owner id from elsewhere, or of another form).

    A lease of a dead local process can be taken at once instead of waiting for it to expire,
    which is what makes a killed-then-rerun process on one machine continue immediately.
    """
    try:
        host, pid_text, _ = owner.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != _HOST or pid == os.getpid():
        # Another machine, another pid namespace (a container), or an owner id without
        # both: its pids are not ours to look up, and only its lease's expiry frees it.
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class StoreCapabilities:
    """What a store can do beyond :class:`CheckpointStore`, declared rather than probed.

    Attributes:
        start_run_probing: ``start_run_probing(run_id, name, key)`` starts an attempt and
            tells whether ``key`` is committed, in one statement (a replayed run saves a read).
        create_run: ``create_run(run_id, name, status)`` records a run before any attempt
            (a fork is listed and collected before it runs); True when it was new.
        fail_when_unreachable: an unreachable store fails the boundary before its body runs
            rather than executing it unkeyed (a shared store: single-flight across workers).
    """

    start_run_probing: bool = False
    create_run: bool = False
    fail_when_unreachable: bool = False


#: What a store that declares nothing can do: the protocol only.
PROTOCOL_ONLY = StoreCapabilities()


def capabilities(store: object) -> StoreCapabilities:
    """What ``store`` declares it can do (:attr:`CheckpointStore.capabilities`); a store
    written to the protocol alone declares nothing, and gets :data:`PROTOCOL_ONLY`."""
    declared = getattr(store, "capabilities", PROTOCOL_ONLY)
    return declared if isinstance(declared, StoreCapabilities) else PROTOCOL_ONLY


class RunPages:
    """``list_runs`` as every spanpoint store offers it: its keywords and their defaults in
    one place (:meth:`CheckpointStore.list_runs`); a store answers :meth:`runs_page`."""

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 100,
        after: RunCursor | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first (see :meth:`CheckpointStore.list_runs`)."""
        return self.runs_page(status, limit, after)

    def runs_page(
        self, status: RunStatus | None, limit: int, after: RunCursor | None
    ) -> list[RunRecord]:
        """Up to ``limit`` runs, newest first (ties by run id, descending), only those with
        ``status`` unless it is None, and only those after the cursor ``after`` unless it is
        None: the store's own query behind :meth:`list_runs`."""
        raise NotImplementedError


@runtime_checkable
class CheckpointStore(Protocol):
    """Where checkpoints, run records, journals, waits and leases live.

    Every method raises :class:`spanpoint.errors.StoreError` (or a subclass) on failure, with
    a message naming the store. Writes are idempotent where stated.
    """

    #: A short human name for errors and ``spanpoint doctor`` (``sqlite:/path``, ``memory``).
    description: str

    # What a store can do beyond these methods is declared as a ``capabilities`` attribute
    # (a :class:`StoreCapabilities`); spanpoint reads it through :func:`capabilities`, so a
    # store without one (written to this protocol alone) still is a CheckpointStore.

    def start_run(self, run_id: str, name: str | None) -> int:
        """Record that ``run_id`` starts an attempt; return its 1-based attempt number."""
        ...

    def finish_run(
        self, run_id: str, status: RunStatus, journal: Sequence[BoundaryRecord] = ()
    ) -> None:
        """Set the run's last status and append the attempt's journal, in one write."""
        ...

    def get(self, key: str) -> Checkpoint | None:
        """The checkpoint committed under ``key``, or None."""
        ...

    def claim(self, key: str, owner: str, ttl_s: float, *, fresh: bool = False) -> Claim:
        """Look ``key`` up and, if it is not committed, try to take its lease, in one trip.

        ``fresh`` is a hint that nothing is likely committed under ``key`` (the run's first
        attempt): a store whose lookup and lease are separate statements may then try the
        lease first. The result must be the same either way.
        """
        ...

    def release(self, key: str, owner: str) -> None:
        """Drop ``owner``'s lease on ``key`` (no-op when it holds none)."""
        ...

    def put(
        self, checkpoint: Checkpoint, *, owner: str | None = None, epoch: int | None = None
    ) -> bool:
        """Commit ``checkpoint`` and end ``owner``'s lease in one write; True when committed.

        Fenced when ``owner`` is given: the write happens only if ``owner`` still holds the
        key's lease (at ``epoch``, the :attr:`Claim.epoch` it was acquired at, unless None),
        checked in the same statement or transaction as the write. A lease that expired but
        that nobody took is still held. A lease taken over (or released) means False and
        nothing written. Without ``owner`` (an execution that holds no lease, because its
        claim failed) the first commit of a key wins. Either way a key commits once: a later
        put changes nothing and returns False.
        """
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run record of ``run_id``, or None."""
        ...

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 100,
        after: RunCursor | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first (ties by run id, descending), optionally only those with
        ``status``; with ``after`` (a :attr:`RunRecord.cursor`), those after that run: the next
        page, found through an index rather than by skipping rows."""
        ...

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints in commit order."""
        ...

    def list_journal(self, run_id: str) -> list[BoundaryRecord]:
        """The run's journal (replayed and failed boundaries) in the order written."""
        ...

    def record_wait(
        self, run_id: str, name: str, question: str | None, schema: dict[str, Any] | None
    ) -> WaitRecord:
        """Store a wait (idempotent) and return it as stored, with any provided value."""
        ...

    def provide_input(self, run_id: str, name: str, value_json: str) -> WaitRecord:
        """Provide the value of a wait (creates the wait when the run has not reached it)."""
        ...

    def list_waits(self, *, pending_only: bool = True) -> list[WaitRecord]:
        """Stored waits, pending ones only by default."""
        ...

    def delete_runs_older_than(self, seconds: float) -> int:
        """Delete runs not updated for ``seconds`` with everything they own; return how many.

        Once-tokens spent (or whose lease expired) more than ``seconds`` ago go too.
        """
        ...

    # Once-tokens (spanpoint.stores.once): their own kind of row, not checkpoints.

    def take_once(self, kind: str, key: str, owner: str, ttl_s: float) -> OnceToken:
        """Take the once-token ``(kind, key)`` (see :class:`spanpoint.stores.once.OnceStore`)."""
        ...

    def spend_once(self, kind: str, key: str, owner: str) -> bool:
        """Spend ``owner``'s once-token for good; False when ``owner`` does not hold it."""
        ...

    def release_once(self, kind: str, key: str, owner: str) -> None:
        """Give back ``owner``'s unspent once-token (no-op when it holds none)."""
        ...

    # Notes: opaque text under an opaque key, for what spanpoint must find again about work
    # it does not own (a graph thread's checkpoints). The store gives neither any meaning.

    def put_note(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key``, replacing what was there."""
        ...

    def get_note(self, key: str) -> str | None:
        """The value last put under ``key``; None when there is none (or gc swept it)."""
        ...

    def close(self) -> None:
        """Release connections and file handles. The store is unusable afterwards."""
        ...
