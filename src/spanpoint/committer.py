"""Commits off the hot path: the background committer of ``durability="async"``.

Under ``durability="sync"`` (the default) a boundary's checkpoint is written inside
``span.end()``, before the boundary returns: LangGraph's ``"sync"``, changes persisted before
the next step starts. Under ``"async"`` (LangGraph's ``"async"``: persisted while the next step
executes) :class:`~spanpoint.processor.CheckpointSpanProcessor` hands the checkpoint to its
store's :class:`Committer` instead and the boundary returns at once.

One committer per store: one daemon thread drains a bounded FIFO queue, so

- what is committed is always a prefix of what was handed over, in the order the spans ended
  (a child before its parent, a step before the next one);
- at most ``capacity`` checkpoints wait at any time: a boundary whose commit finds the queue
  full waits for a free slot (backpressure), so a crash loses at most ``capacity`` commits of
  boundaries that had returned (docs/concepts.md, "Durability: sync and async commits");
- a checkpoint waiting here is visible to this process's lookups (:meth:`Committer.pending`:
  read your writes), and its lease stays held in the store until its write lands, so other
  workers see the boundary ``held``, never free.

Nothing here knows runs or spans: a job is anything with ``checkpoint.key`` and
``checkpoint.run_id``, written by the ``write`` function the processor gives.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from spanpoint.stores.base import Checkpoint

logger = logging.getLogger("spanpoint")

#: How many checkpoints may wait per store unless ``configure(commit_queue=...)`` says.
DEFAULT_CAPACITY = 32
#: How long the exit hook waits for pending commits before giving up on them (seconds).
EXIT_TIMEOUT_S = 30.0
#: How long a committer's thread waits for work before it ends (the next commit starts one).
IDLE_S = 5.0


class Job(Protocol):
    """What the committer writes: a staged output (``spanpoint.processor.StagedOutput``)."""

    checkpoint: Checkpoint
    error: Exception | None


class Committer:
    """One store's background writer: a bounded FIFO queue and one daemon thread.

    Args:
        description: the store's description, for the thread's name and messages.
        write: writes one job; returns True when it committed. It never raises (a failure
            is kept on ``job.error``); an exception it lets through counts as a failure.
        capacity: the most jobs that may wait; :meth:`submit` blocks while it is reached.
    """

    def __init__(self, description: str, write: Callable[[Any], bool], capacity: int) -> None:
        self.description = description
        self.capacity = capacity
        self._write = write
        self._cond = threading.Condition(threading.Lock())
        # Jobs not yet written, oldest first. The one being written stays at the head until
        # its write returns, so it counts against the capacity and stays readable.
        self._queue: deque[Any] = deque()
        self._pending: dict[str, Any] = {}
        #: run id -> how many of its jobs are not written yet (a run's end waits for its own).
        self._by_run: dict[str, int] = {}
        self._submitted = 0
        self._done = 0
        self._failed: list[Any] = []
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Committer({self.description}, {len(self._queue)}/{self.capacity} pending)"

    # --- the hot path -----------------------------------------------------------------------

    def submit(self, job: Any) -> None:
        """Queue ``job``; wait first while ``capacity`` jobs are pending (backpressure)."""
        with self._cond:
            while len(self._queue) >= self.capacity:
                self._cond.wait()
            self._queue.append(job)
            self._pending[job.checkpoint.key] = job
            run_id = job.checkpoint.run_id
            self._by_run[run_id] = self._by_run.get(run_id, 0) + 1
            self._submitted += 1
            if self._thread is None:
                thread = threading.Thread(
                    target=self._drain, name=f"spanpoint-committer {self.description}", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:  # interpreter shutdown: no new threads; the caller writes
                    self._queue.pop()
                    del self._pending[job.checkpoint.key]
                    self._forget(job)
                    raise
                self._thread = thread
            self._cond.notify_all()

    def pending(self, key: str) -> Checkpoint | None:
        """The checkpoint of ``key`` when it waits here (not written yet), else None."""
        job = self._pending.get(key)  # a dict read is atomic: no lock on the lookup path
        return job.checkpoint if job is not None else None

    # --- the thread -------------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._cond.wait(IDLE_S)
                    if not self._queue:  # idle: end; submit() starts another thread
                        self._thread = None
                        return
                job = self._queue[0]
            try:
                ok = self._write(job)
            except Exception as exc:  # write() never raises; if it does, the job failed
                job.error = exc
                ok = False
                logger.warning("spanpoint: commit to %s failed: %s", self.description, exc)
            with self._cond:
                self._queue.popleft()
                if self._pending.get(job.checkpoint.key) is job:
                    del self._pending[job.checkpoint.key]
                if not ok and job.error is not None:
                    self._failed.append(job)
                self._forget(job)
                self._cond.notify_all()

    def _forget(self, job: Any) -> None:
        """Count ``job`` as done (written, failed or handed back); the caller holds the lock."""
        run_id = job.checkpoint.run_id
        left = self._by_run[run_id] - 1
        if left:
            self._by_run[run_id] = left
        else:
            del self._by_run[run_id]
        self._done += 1

    # --- the end of a run, and of the process -------------------------------------------------

    def flush(self, timeout_s: float | None = None, *, run_id: str | None = None) -> bool:
        """Wait until every job submitted before this call is written (with ``run_id``: every
        job of that run, whoever else's wait in the queue); False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            target = self._submitted

            def waiting() -> bool:
                if run_id is not None:
                    return run_id in self._by_run
                return self._done < target

            while waiting():
                if deadline is None:
                    self._cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def take_failures(self, run_id: str) -> list[Any]:
        """The failed jobs of ``run_id`` (written and failed), removed from the list."""
        with self._cond:
            mine = [job for job in self._failed if job.checkpoint.run_id == run_id]
            if mine:
                self._failed = [job for job in self._failed if job.checkpoint.run_id != run_id]
        return mine

    def backlog(self) -> int:
        """How many jobs wait (the one being written included)."""
        return len(self._queue)


# One committer per store object, for the life of the process (a store is long-lived; its
# thread ends when idle). Never dropped while the process runs: two committers of one store
# would break the order of its commits and hide one's queue from lookups.
_COMMITTERS: dict[int, tuple[Any, Committer]] = {}
_LOCK = threading.Lock()
_CAPACITY = [DEFAULT_CAPACITY]


def set_capacity(capacity: int) -> None:
    """How many checkpoints may wait per store from now on (``configure(commit_queue=)``)."""
    _CAPACITY[0] = capacity
    with _LOCK:
        for _store, committer in _COMMITTERS.values():
            with committer._cond:
                committer.capacity = capacity
                committer._cond.notify_all()


def committer_for(store: Any, write: Callable[[Any], bool]) -> Committer:
    """The committer of ``store``, made (with ``write``) on first use."""
    found = _COMMITTERS.get(id(store))
    if found is not None and found[0] is store:
        return found[1]
    with _LOCK:
        found = _COMMITTERS.get(id(store))
        if found is None or found[0] is not store:
            found = (store, Committer(store.description, write, _CAPACITY[0]))
            _COMMITTERS[id(store)] = found
        return found[1]


def existing(store: Any) -> Committer | None:
    """The committer of ``store`` if one was made, else None (no committer is made)."""
    found = _COMMITTERS.get(id(store))
    return found[1] if found is not None and found[0] is store else None


def pending_checkpoint(store: Any, key: str) -> Checkpoint | None:
    """The checkpoint of ``key`` still waiting in ``store``'s committer (hot path: one dict
    test when no committer exists, as under ``durability="sync"``)."""
    if not _COMMITTERS:
        return None
    found = _COMMITTERS.get(id(store))
    if found is None or found[0] is not store:
        return None
    return found[1].pending(key)


def flush_all(timeout_s: float | None = None) -> bool:
    """Wait for every committer's pending checkpoints; False when one timed out."""
    with _LOCK:
        committers = [committer for _store, committer in _COMMITTERS.values()]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    done = True
    for committer in committers:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done = committer.flush(left) and done
    return done


def _flush_at_exit() -> None:
    # A normal exit writes what waits (bounded: a hung store must not hang the exit); SIGKILL
    # writes nothing, which is the documented bound of durability="async".
    if not _COMMITTERS:
        return
    if not flush_all(EXIT_TIMEOUT_S):
        left = sum(c.backlog() for _s, c in list(_COMMITTERS.values()))
        logger.warning(
            "spanpoint: %d checkpoint(s) were still pending at exit after %gs and are lost; "
            "their boundaries will execute again when their runs are replayed",
            left,
            EXIT_TIMEOUT_S,
        )


def _forget_after_fork() -> None:
    # A forked child has none of its parent's threads: its own commits get a committer of
    # their own (the parent's queue, and a lock its thread may have held, stay the parent's).
    global _LOCK
    _LOCK = threading.Lock()
    _COMMITTERS.clear()


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_forget_after_fork)
