"""An in-process checkpoint store: for tests and for runs that need no restart durability."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from spanpoint.errors import CorruptCheckpointError
from spanpoint.stores.base import (
    BoundaryRecord,
    Checkpoint,
    Claim,
    OnceToken,
    RunCursor,
    RunPages,
    RunRecord,
    RunStatus,
    StoreCapabilities,
    WaitRecord,
    digest_of,
    owner_is_dead_here,
    verify_checkpoint,
)
from spanpoint.stores.heartbeat import Held, LeaseHeartbeat


class MemoryStore(RunPages):
    """A thread-safe store kept in this process's memory. Nothing survives the process."""

    description = "memory"
    #: The clock leases expire by (epoch seconds): ``clock=`` (a test moves its own).
    clock: Callable[[], float] = staticmethod(time.time)

    #: A fork's run recorded before it runs.
    capabilities = StoreCapabilities(create_run=True)

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        if clock is not None:
            self.clock = clock  # type: ignore[method-assign]
        self._lock = threading.Lock()
        self._runs: dict[str, RunRecord] = {}
        self._checkpoints: dict[str, Checkpoint] = {}
        # The digest each checkpoint had when committed, checked on every read that replays:
        # the same contract as the stores on disk, where a row can rot.
        self._digests: dict[str, str] = {}
        self._journal: dict[str, list[BoundaryRecord]] = {}
        self._waits: dict[tuple[str, str], WaitRecord] = {}
        # key -> (owner, expires at, epoch): a boundary's lease while it executes.
        self._leases: dict[str, tuple[str, float, int]] = {}
        self._heartbeat = LeaseHeartbeat(self._renew, name="spanpoint-lease-heartbeat memory")
        # Once-tokens: (kind, key) -> (owner, lease expiry, spent at or None).
        self._once: dict[tuple[str, str], tuple[str, float, float | None]] = {}
        # Notes: key -> (value, when put).
        self._notes: dict[str, tuple[str, float]] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(runs={len(self._runs)}, checkpoints={len(self._checkpoints)})"

    def start_run(self, run_id: str, name: str | None) -> int:
        now = time.time()
        with self._lock:
            old = self._runs.get(run_id)
            if old is None:
                rec = RunRecord(run_id, name, 1, "running", now, now)
            else:
                rec = replace(
                    old,
                    attempts=old.attempts + 1,
                    status="running",
                    updated_at=now,
                    name=name or old.name,
                )
            self._runs[run_id] = rec
            return rec.attempts

    def create_run(self, run_id: str, name: str | None, status: RunStatus) -> bool:
        """Record ``run_id`` with no attempt yet (a fork not yet run); False if it exists."""
        now = time.time()
        with self._lock:
            if run_id in self._runs:
                return False
            self._runs[run_id] = RunRecord(run_id, name, 0, status, now, now)
            return True

    def finish_run(
        self, run_id: str, status: RunStatus, journal: Sequence[BoundaryRecord] = ()
    ) -> None:
        with self._lock:
            old = self._runs.get(run_id)
            if old is not None:
                self._runs[run_id] = replace(old, status=status, updated_at=time.time())
            self._journal.setdefault(run_id, []).extend(journal)

    def get(self, key: str) -> Checkpoint | None:
        done = self._checkpoints.get(key)
        return None if done is None else verify_checkpoint(done, self._digests.get(key), "memory")

    def claim(self, key: str, owner: str, ttl_s: float, *, fresh: bool = False) -> Claim:
        now = self.clock()
        with self._lock:
            done = self._checkpoints.get(key)
            held = self._leases.get(key)
            epoch = held[2] + 1 if held else 1
            if done is not None:
                try:
                    verify_checkpoint(done, self._digests.get(key), "memory")
                except CorruptCheckpointError as exc:
                    # Never a replay: drop the row and take the lease, so the boundary executes
                    # again and its commit replaces it.
                    self._drop(key)
                    self._leases[key] = (owner, now + ttl_s, epoch)
                    self._heartbeat.hold(key, owner, ttl_s)
                    return Claim(
                        "acquired", owner=owner, expires_at=now + ttl_s, error=str(exc), epoch=epoch
                    )
                return Claim("committed", checkpoint=done)
            if held and held[0] == owner:
                epoch = held[2]  # its own lease again: the same epoch
            elif held and held[1] > now and not owner_is_dead_here(held[0]):
                return Claim("held", owner=held[0], expires_at=held[1])
            self._leases[key] = (owner, now + ttl_s, epoch)
        self._heartbeat.hold(key, owner, ttl_s)
        return Claim("acquired", owner=owner, expires_at=now + ttl_s, epoch=epoch)

    def release(self, key: str, owner: str) -> None:
        self._heartbeat.drop(key, owner)
        with self._lock:
            if self._leases.get(key, ("",))[0] == owner:
                del self._leases[key]

    def _renew(self, held: Held) -> set[tuple[str, str]]:
        now = self.clock()
        alive: set[tuple[str, str]] = set()
        with self._lock:
            for (key, owner), ttl_s in held.items():
                lease = self._leases.get(key)
                if lease is not None and lease[0] == owner and key not in self._checkpoints:
                    self._leases[key] = (owner, now + ttl_s, lease[2])
                    alive.add((key, owner))
        return alive

    def take_once(self, kind: str, key: str, owner: str, ttl_s: float) -> OnceToken:
        now = time.time()
        with self._lock:
            held = self._once.get((kind, key))
            if held is not None:
                if held[2] is not None:
                    return OnceToken("spent", owner=held[0])
                if held[0] != owner and held[1] > now and not owner_is_dead_here(held[0]):
                    return OnceToken("held", owner=held[0], expires_at=held[1])
            self._once[(kind, key)] = (owner, now + ttl_s, None)
            return OnceToken("taken", owner=owner, expires_at=now + ttl_s)

    def spend_once(self, kind: str, key: str, owner: str) -> bool:
        with self._lock:
            held = self._once.get((kind, key))
            if held is None or held[0] != owner or held[2] is not None:
                return False
            self._once[(kind, key)] = (owner, held[1], time.time())
            return True

    def release_once(self, kind: str, key: str, owner: str) -> None:
        with self._lock:
            held = self._once.get((kind, key))
            if held is not None and held[0] == owner and held[2] is None:
                del self._once[(kind, key)]

    def put_note(self, key: str, value: str) -> None:
        with self._lock:
            self._notes[key] = (value, time.time())

    def get_note(self, key: str) -> str | None:
        with self._lock:
            found = self._notes.get(key)
        return None if found is None else found[0]

    def put(
        self, checkpoint: Checkpoint, *, owner: str | None = None, epoch: int | None = None
    ) -> bool:
        key = checkpoint.key
        if owner is not None:
            self._heartbeat.drop(key, owner)
        with self._lock:
            if key in self._checkpoints:
                return False
            if owner is not None:
                # Fenced: only the lease's holder commits, checked under the same lock.
                lease = self._leases.get(key)
                if lease is None or lease[0] != owner or epoch not in (None, lease[2]):
                    return False
            self._leases.pop(key, None)
            self._checkpoints[checkpoint.key] = checkpoint
            self._digests[checkpoint.key] = digest_of(checkpoint)
            run = self._runs.get(checkpoint.run_id)
            if run is not None:
                self._runs[checkpoint.run_id] = replace(run, committed=run.committed + 1)
            return True

    def _drop(self, key: str) -> None:
        """Forget a committed checkpoint (lock held)."""
        cp = self._checkpoints.pop(key)
        self._digests.pop(key, None)
        run = self._runs.get(cp.run_id)
        if run is not None:
            self._runs[cp.run_id] = replace(run, committed=max(0, run.committed - 1))

    def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    def runs_page(
        self, status: RunStatus | None, limit: int, after: RunCursor | None
    ) -> list[RunRecord]:
        with self._lock:
            runs = [
                r
                for r in self._runs.values()
                if (status is None or r.status == status) and (after is None or r.cursor < after)
            ]
        return sorted(runs, key=lambda r: r.cursor, reverse=True)[:limit]

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]:
        with self._lock:
            return [c for c in self._checkpoints.values() if c.run_id == run_id]

    def list_journal(self, run_id: str) -> list[BoundaryRecord]:
        with self._lock:
            return list(self._journal.get(run_id, ()))

    def record_wait(
        self, run_id: str, name: str, question: str | None, schema: dict[str, Any] | None
    ) -> WaitRecord:
        with self._lock:
            rec = self._waits.get((run_id, name))
            if rec is None:
                rec = WaitRecord(run_id, name, question, schema, None, time.time())
                self._waits[(run_id, name)] = rec
            elif rec.question is None and rec.schema is None:
                rec = replace(rec, question=question, schema=schema)
                self._waits[(run_id, name)] = rec
            return rec

    def provide_input(self, run_id: str, name: str, value_json: str) -> WaitRecord:
        now = time.time()
        with self._lock:
            old = self._waits.get((run_id, name))
            rec = (
                WaitRecord(run_id, name, None, None, value_json, now, now)
                if old is None
                else replace(old, value_json=value_json, provided_at=now)
            )
            self._waits[(run_id, name)] = rec
            return rec

    def list_waits(self, *, pending_only: bool = True) -> list[WaitRecord]:
        with self._lock:
            waits = list(self._waits.values())
        return [w for w in waits if not (pending_only and w.provided)]

    def delete_runs_older_than(self, seconds: float) -> int:
        cutoff = time.time() - seconds
        with self._lock:
            old = {r for r, rec in self._runs.items() if rec.updated_at < cutoff}
            for run_id in old:
                del self._runs[run_id]
                self._journal.pop(run_id, None)
            self._checkpoints = {k: c for k, c in self._checkpoints.items() if c.run_id not in old}
            self._digests = {k: d for k, d in self._digests.items() if k in self._checkpoints}
            self._waits = {k: w for k, w in self._waits.items() if k[0] not in old}
            # Leases of workers that died and whose boundary never ran again: no run owns them.
            self._leases = {k: v for k, v in self._leases.items() if v[1] >= cutoff}
            # Once-tokens spent, or whose lease expired, before the cutoff.
            self._once = {
                k: v for k, v in self._once.items() if (v[1] if v[2] is None else v[2]) >= cutoff
            }
            self._notes = {k: v for k, v in self._notes.items() if v[1] >= cutoff}
            return len(old)

    def close(self) -> None:
        """Stop renewing leases; the data stays readable."""
        self._heartbeat.stop()
