"""The store conformance suite: every CheckpointStore behaves the same (memory, SQLite, Postgres).

Each test runs against each store. What only some stores can do (survive a process, be shared
by several processes, hold a corrupted row, fail to open) is tested on those that can.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanpoint.errors import CorruptCheckpointError, StoreUnavailableError
from spanpoint.stores import MemoryStore, SqliteStore, open_store
from spanpoint.stores.base import BoundaryRecord, Checkpoint, CheckpointStore, new_owner_id

WRITER = Path(__file__).parent / "concurrent_writer.py"


class FakeClock:
    """The clock a store's leases expire by, moved by the test instead of by sleeping."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Subject:
    """A store under test, with what a test needs to reach around its API."""

    kind: str
    store: CheckpointStore
    address: str | None  # None: the store cannot be reopened (memory)
    sql: Callable[[str, tuple[object, ...]], None] | None = None  # raw write, for corruption

    def fake_clock(self) -> FakeClock | None:
        """Make the store's leases expire by a clock the test moves; None where the store
        reads the time elsewhere (PostgreSQL reads the server's)."""
        if self.kind == "postgres":
            return None
        clock = FakeClock()
        self.store.clock = clock  # type: ignore[attr-defined]
        return clock

    def reopen(self) -> CheckpointStore:
        assert self.address is not None
        return open_store(self.address)


def _sqlite_sql(path: Path) -> Callable[[str, tuple[object, ...]], None]:
    def run(query: str, params: tuple[object, ...]) -> None:
        import sqlite3

        with sqlite3.connect(path) as conn:
            conn.execute(
                query.replace("%s", "?").replace("spanpoint_checkpoints", "checkpoints"), params
            )

    return run


def _pg_sql(dsn: str) -> Callable[[str, tuple[object, ...]], None]:
    def run(query: str, params: tuple[object, ...]) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(query, params)  # type: ignore[arg-type]

    return run


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    kind = request.param
    if kind == "memory":
        yield Subject(kind, MemoryStore(), None)
        return
    if kind == "sqlite":
        path = tmp_path / "conformance.db"
        subject = Subject(kind, SqliteStore(path), str(path), _sqlite_sql(path))
    else:
        dsn = request.getfixturevalue("pg_dsn")
        subject = Subject(kind, open_store(dsn), dsn, _pg_sql(dsn))
    yield subject
    subject.store.close()


def durable(subject: Subject) -> None:
    if subject.address is None:
        pytest.skip(f"the {subject.kind} store lives in one process")


def cp(key: str, run_id: str = "run-1", output: bytes = b'"out"', **kw: object) -> Checkpoint:
    fields: dict[str, object] = {
        "key": key,
        "run_id": run_id,
        "path": "outer/step",
        "name": "step",
        "kind": "step",
        "ordinal": 0,
        "output_type": "json",
        "output": output,
        "trace_id": "ab" * 16,
        "span_id": "cd" * 8,
    }
    fields.update(kw)
    return Checkpoint(**fields)  # type: ignore[arg-type]


def record(run_id: str, attempt: int, key: str, status: str = "replayed") -> BoundaryRecord:
    return BoundaryRecord(run_id, attempt, key, "p", "n", "step", status, "ef" * 8, None, 1, 2)  # type: ignore[arg-type]


# --- runs ------------------------------------------------------------------------------------


def test_attempts_count_up_and_status_follows_the_last_attempt(subject: Subject) -> None:
    store = subject.store
    assert store.get_run("run-1") is None
    assert [store.start_run("run-1", "triage") for _ in range(3)] == [1, 2, 3]
    run = store.get_run("run-1")
    assert run is not None
    assert (run.name, run.attempts, run.status, run.committed) == ("triage", 3, "running", 0)
    store.start_run("run-1", None)  # a nameless attempt keeps the name
    store.finish_run("run-1", "failed")
    run = store.get_run("run-1")
    assert run is not None and (run.name, run.attempts, run.status) == ("triage", 4, "failed")
    assert run.created_at <= run.updated_at


def test_list_runs_newest_first_with_status_filter_and_limit(subject: Subject) -> None:
    store = subject.store
    for run_id in ("a", "b", "c"):
        store.start_run(run_id, None)
        time.sleep(0.01)
    store.finish_run("b", "completed")
    assert [r.run_id for r in store.list_runs()] == ["b", "c", "a"]
    assert [r.run_id for r in store.list_runs(status="running")] == ["c", "a"]
    assert [r.run_id for r in store.list_runs(status="completed")] == ["b"]
    assert len(store.list_runs(limit=2)) == 2


def test_committed_count_on_the_run_record(subject: Subject) -> None:
    store = subject.store
    store.start_run("run-1", None)
    store.put(cp("k1"))
    store.put(cp("k2"))
    store.put(cp("k2"))
    store.put(cp("other", run_id="run-2"))
    run = store.get_run("run-1")
    assert run is not None and run.committed == 2


# --- get / put -------------------------------------------------------------------------------


def test_put_then_get_round_trips_every_field(subject: Subject) -> None:
    store = subject.store
    original = cp(
        "k1",
        output=bytes(range(256)),
        parent_span_id="12" * 8,
        attempt=3,
        started_at_ns=1_700_000_000_123_456_789,
        ended_at_ns=1_700_000_000_987_654_321,
        view={"tool": "lookup", "args": ["a", 1], "nested": {"ok": True}},
        ordinal=7,
        fingerprint="fe" * 32,
        identity="ab" * 32 + "/lookup",
        input_view={"args": {"q": "ticket 42"}, "nested": [1, None, "x"]},
    )
    assert store.get("k1") is None
    assert store.put(original) is True
    assert store.get("k1") == original
    assert store.list_checkpoints("run-1") == [original]
    claim = store.claim("k1", "me", 60)
    assert claim.checkpoint == original


def test_a_checkpoint_without_input_identity_reads_none(subject: Subject) -> None:
    store = subject.store
    store.put(cp("k1"))
    got = store.get("k1")
    assert got is not None
    assert (got.fingerprint, got.identity, got.input_view) == (None, None, None)


def test_first_writer_wins(subject: Subject) -> None:
    store = subject.store
    assert store.put(cp("k1", output=b'"first"')) is True
    assert store.put(cp("k1", output=b'"second"')) is False
    got = store.get("k1")
    assert got is not None and got.output == b'"first"'


def test_list_checkpoints_is_the_runs_commit_order(subject: Subject) -> None:
    store = subject.store
    for key in ("z", "a", "m"):
        store.put(cp(key))
    store.put(cp("x", run_id="run-2"))
    assert [c.key for c in store.list_checkpoints("run-1")] == ["z", "a", "m"]
    assert [c.key for c in store.list_checkpoints("run-2")] == ["x"]
    assert store.list_checkpoints("nobody") == []


def test_checkpoints_survive_reopening(subject: Subject) -> None:
    durable(subject)
    subject.store.start_run("run-1", None)
    subject.store.put(cp("k1"))
    subject.store.close()
    subject.store = subject.reopen()
    assert subject.store.get("k1") == cp("k1")
    run = subject.store.get_run("run-1")
    assert run is not None and run.attempts == 1


# --- claims and leases -----------------------------------------------------------------------


def test_claim_acquires_a_fresh_key_and_holds_it_against_others(subject: Subject) -> None:
    store = subject.store
    first = store.claim("k1", "host-a:1:aaa", 30.0)
    assert first.state == "acquired" and first.owner == "host-a:1:aaa"
    assert first.expires_at is not None and first.expires_at > time.time() + 20
    second = store.claim("k1", "host-b:2:bbb", 30.0)
    assert second.state == "held" and second.owner == "host-a:1:aaa"
    assert second.checkpoint is None
    again = store.claim("k1", "host-a:1:aaa", 30.0)  # its own lease: re-entrant
    assert again.state == "acquired"


def test_claim_of_a_committed_key_returns_the_checkpoint(subject: Subject) -> None:
    store = subject.store
    store.claim("k1", "host-a:1:aaa", 30.0)
    assert store.put(cp("k1"), owner="host-a:1:aaa") is True
    claim = store.claim("k1", "host-b:2:bbb", 30.0)
    assert claim.state == "committed" and claim.checkpoint == cp("k1")


def test_a_put_by_an_owner_that_does_not_hold_the_lease_commits_nothing(
    subject: Subject,
) -> None:
    store = subject.store
    held = store.claim("k1", "host-a:1:aaa", 30.0)
    assert held.epoch is not None
    assert store.put(cp("k1", output=b'"b"'), owner="host-b:2:bbb") is False
    assert store.put(cp("k1", output=b'"a"'), owner="host-a:1:aaa", epoch=held.epoch + 1) is False
    assert store.get("k1") is None
    assert store.claim("k1", "host-c:3:ccc", 30.0).state == "held"  # a's lease is intact
    assert store.put(cp("k1", output=b'"a"'), owner="host-a:1:aaa", epoch=held.epoch) is True
    assert store.put(cp("k1", output=b'"x"')) is False  # committed: nobody writes it again
    claim = store.claim("k1", "host-c:3:ccc", 30.0)
    assert claim.state == "committed" and claim.checkpoint is not None
    assert claim.checkpoint.output == b'"a"'


def test_a_lease_taken_over_fences_its_old_holder_out(subject: Subject) -> None:
    store = subject.store
    clock = subject.fake_clock()
    holder = subject.reopen() if subject.address and clock is None else store
    first = holder.claim("k1", "host-a:1:aaa", 1.0)
    if holder is not store:
        holder.close()  # a stalled worker renews nothing (PostgreSQL: the server's clock)
    if clock is None:
        time.sleep(1.3)
    else:
        clock.advance(1.3)
    second = store.claim("k1", "host-b:2:bbb", 30.0)
    assert second.state == "acquired" and second.owner == "host-b:2:bbb"
    assert first.epoch is not None and second.epoch is not None and second.epoch > first.epoch
    # The old holder wakes up and commits: refused, whatever epoch it names.
    for epoch in (first.epoch, second.epoch, None):
        assert store.put(cp("k1", output=b'"a"'), owner="host-a:1:aaa", epoch=epoch) is False
    assert store.get("k1") is None
    assert store.put(cp("k1", output=b'"b"'), owner="host-b:2:bbb", epoch=second.epoch)
    got = store.get("k1")
    assert got is not None and got.output == b'"b"'


def test_a_live_holder_keeps_its_lease_past_its_ttl(subject: Subject) -> None:
    """The store renews the leases it holds (every third of the TTL) while a body runs."""
    store = subject.store
    held = store.claim("k1", "host-a:1:aaa", 0.6)
    time.sleep(2.0)  # more than three TTLs: only renewals keep it
    assert store.claim("k1", "host-b:2:bbb", 30.0).state == "held"
    assert store.put(cp("k1"), owner="host-a:1:aaa", epoch=held.epoch) is True


def test_an_expired_lease_nobody_took_is_still_its_holders(subject: Subject) -> None:
    store = subject.store
    clock = subject.fake_clock()
    if clock is None:
        pytest.skip("moving PostgreSQL's clock is not possible; the takeover test covers it")
    first = store.claim("k1", "host-a:1:aaa", 1.0)
    clock.advance(5.0)
    assert store.put(cp("k1"), owner="host-a:1:aaa", epoch=first.epoch) is True


def test_release_frees_the_lease_only_for_its_owner(subject: Subject) -> None:
    store = subject.store
    store.claim("k1", "host-a:1:aaa", 30.0)
    store.release("k1", "host-b:2:bbb")  # not the owner: nothing happens
    assert store.claim("k1", "host-b:2:bbb", 30.0).state == "held"
    store.release("k1", "host-a:1:aaa")
    assert store.claim("k1", "host-b:2:bbb", 30.0).state == "acquired"
    store.release("never-claimed", "host-a:1:aaa")


def test_an_expired_lease_can_be_taken(subject: Subject) -> None:
    store = subject.store
    # The holder is another handle, closed as a crashed worker's would be: a live store
    # renews the leases it holds (see test_postgres_store.py).
    clock = subject.fake_clock()
    holder = subject.reopen() if subject.address and clock is None else store
    holder.claim("k1", "host-a:1:aaa", 1.0)
    assert store.claim("k1", "host-b:2:bbb", 30.0).state == "held"
    if holder is not store:
        holder.close()
    if clock is None:
        time.sleep(1.3)
    else:
        clock.advance(1.3)
    taken = store.claim("k1", "host-b:2:bbb", 30.0)
    assert taken.state == "acquired" and taken.owner == "host-b:2:bbb"
    assert store.claim("k1", "host-a:1:aaa", 30.0).state == "held"


#: This process's ``host#pidns#machine``: where its pids are meaningful.
HERE = new_owner_id().rsplit(":", 2)[0]


def _dead_local_owner() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{HERE}:{child.pid}:deadbeef0000"


def test_a_dead_local_owner_loses_its_lease_at_once(subject: Subject) -> None:
    store = subject.store
    store.claim("k1", _dead_local_owner(), 300.0)
    taken = store.claim("k1", "host-b:2:bbb", 30.0)
    assert taken.state == "acquired" and taken.owner == "host-b:2:bbb"


def test_a_live_or_remote_owner_keeps_its_lease(subject: Subject) -> None:
    store = subject.store
    live = f"{HERE}:{os.getppid()}:alive0000000"
    store.claim("k1", live, 300.0)
    assert store.claim("k1", "host-b:2:bbb", 30.0).state == "held"
    dead_pid = _dead_local_owner().split(":")[1]
    store.claim("k2", f"another-host:{dead_pid}:x", 300.0)
    assert store.claim("k2", "host-b:2:bbb", 30.0).state == "held"
    # Another machine of the same host name and pid namespace number: its pids are its own.
    host, namespace, _machine = HERE.split("#")
    twin = f"{host}#{namespace}#{'0' * 32}:{dead_pid}:x"
    store.claim("k3", twin, 300.0)
    assert store.claim("k3", "host-b:2:bbb", 30.0).state == "held"


# --- once-tokens (spanpoint.stores.once) -----------------------------------------------------

RESUME = "guard_resume"


def test_a_once_token_is_taken_by_one_owner_then_spent_for_everyone(subject: Subject) -> None:
    store = subject.store
    first = store.take_once(RESUME, "t1", "host-a:1:aaa", 30.0)
    assert (first.state, first.owner) == ("taken", "host-a:1:aaa")
    held = store.take_once(RESUME, "t1", "host-b:2:bbb", 30.0)
    assert (held.state, held.owner) == ("held", "host-a:1:aaa")
    assert store.take_once("another_kind", "t1", "host-b:2:bbb", 30.0).state == "taken"
    assert store.spend_once(RESUME, "t1", "host-b:2:bbb") is False  # not the holder
    assert store.spend_once(RESUME, "t1", "host-a:1:aaa") is True
    assert store.spend_once(RESUME, "t1", "host-a:1:aaa") is False  # spent already
    for owner in ("host-a:1:aaa", "host-b:2:bbb"):
        assert store.take_once(RESUME, "t1", owner, 30.0).state == "spent"
    store.release_once(RESUME, "t1", "host-a:1:aaa")  # a spent token stays spent
    assert store.take_once(RESUME, "t1", "host-c:3:ccc", 30.0).state == "spent"
    # Its own kind: no run, no checkpoint.
    assert store.get("t1") is None and store.list_runs() == []
    if subject.address is not None:
        reopened = subject.reopen()
        try:
            assert reopened.take_once(RESUME, "t1", "host-c:3:ccc", 30.0).state == "spent"
        finally:
            reopened.close()


def test_a_released_or_expired_once_token_can_be_taken(subject: Subject) -> None:
    store = subject.store
    store.take_once(RESUME, "t1", "host-a:1:aaa", 30.0)
    store.release_once(RESUME, "t1", "host-b:2:bbb")  # not the holder: nothing happens
    assert store.take_once(RESUME, "t1", "host-b:2:bbb", 30.0).state == "held"
    store.release_once(RESUME, "t1", "host-a:1:aaa")
    assert store.take_once(RESUME, "t1", "host-b:2:bbb", 30.0).state == "taken"
    store.take_once(RESUME, "t2", "host-a:1:aaa", 1.0)
    time.sleep(1.3)
    taken = store.take_once(RESUME, "t2", "host-b:2:bbb", 30.0)
    assert (taken.state, taken.owner) == ("taken", "host-b:2:bbb")
    assert store.spend_once(RESUME, "t2", "host-a:1:aaa") is False  # it lost the token
    assert store.spend_once(RESUME, "t2", "host-b:2:bbb") is True


def test_gc_sweeps_old_once_tokens_and_keeps_recent_ones(subject: Subject) -> None:
    store = subject.store
    store.take_once(RESUME, "old-spent", "host-a:1:aaa", 30.0)
    assert store.spend_once(RESUME, "old-spent", "host-a:1:aaa")
    store.take_once(RESUME, "old-lease", "host-a:1:aaa", 0.1)  # a crashed resumer's lease
    time.sleep(1.5)
    store.take_once(RESUME, "new-spent", "host-a:1:aaa", 30.0)
    assert store.spend_once(RESUME, "new-spent", "host-a:1:aaa")
    assert store.delete_runs_older_than(3600) == 0
    assert store.take_once(RESUME, "old-spent", "host-b:2:bbb", 30.0).state == "spent"
    store.release_once(RESUME, "old-spent", "host-b:2:bbb")
    assert store.delete_runs_older_than(0.75) == 0  # margins for a loaded machine; no runs
    # Swept: the old tokens are free again, the recent one is still spent.
    assert store.take_once(RESUME, "old-spent", "host-b:2:bbb", 30.0).state == "taken"
    assert store.take_once(RESUME, "old-lease", "host-b:2:bbb", 30.0).state == "taken"
    assert store.take_once(RESUME, "new-spent", "host-b:2:bbb", 30.0).state == "spent"


# --- notes -----------------------------------------------------------------------------------

# Any text a store can keep: no NUL (PostgreSQL's text refuses it), no lone surrogate (no UTF-8).
NOTE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=40,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(notes=st.dictionaries(NOTE_TEXT, st.lists(NOTE_TEXT, min_size=1, max_size=3), max_size=6))
def test_a_note_reads_back_the_last_value_put_under_its_key(
    subject: Subject, notes: dict[str, list[str]]
) -> None:
    store = subject.store
    prefix = uuid.uuid4().hex  # the examples share one store: each its own keys
    for key, values in notes.items():
        for value in values:
            store.put_note(prefix + key, value)
    for key, values in notes.items():
        assert store.get_note(prefix + key) == values[-1]
    assert store.get_note(prefix + "never put") is None
    # Notes are no runs and no checkpoints.
    assert store.list_runs() == [] and all(store.get(prefix + k) is None for k in notes)
    if subject.address is not None and notes:
        reopened = subject.reopen()
        try:
            assert {k: reopened.get_note(prefix + k) for k in notes} == {
                k: v[-1] for k, v in notes.items()
            }
        finally:
            reopened.close()


def test_gc_sweeps_old_notes_and_keeps_recent_ones(subject: Subject) -> None:
    store = subject.store
    store.put_note("old", "a")
    store.put_note("renewed", "b")
    time.sleep(1.5)
    store.put_note("renewed", "c")
    store.put_note("new", "d")
    assert store.delete_runs_older_than(3600) == 0
    assert store.get_note("old") == "a"
    assert store.delete_runs_older_than(0.75) == 0  # margins for a loaded machine; no runs
    assert (store.get_note("old"), store.get_note("renewed"), store.get_note("new")) == (
        None, "c", "d",
    )  # fmt: skip


# --- journal ---------------------------------------------------------------------------------


def test_journal_is_appended_per_attempt_in_order(subject: Subject) -> None:
    store = subject.store
    store.start_run("run-1", None)
    first = [record("run-1", 1, "k1"), record("run-1", 1, "k2", "error")]
    store.finish_run("run-1", "failed", first)
    store.start_run("run-1", None)
    second = [record("run-1", 2, "k2")]
    store.finish_run("run-1", "completed", second)
    store.finish_run("run-2", "completed", [record("run-2", 1, "x")])
    assert store.list_journal("run-1") == first + second
    assert store.list_journal("nobody") == []
    err = BoundaryRecord("run-1", 3, "k", "p", "n", "tool_call", "error", "1", "2", 5, 6, "Boom")
    store.finish_run("run-1", "failed", [err])
    assert store.list_journal("run-1")[-1] == err


# --- waits -----------------------------------------------------------------------------------


def test_wait_is_recorded_once_then_provided(subject: Subject) -> None:
    store = subject.store
    wait = store.record_wait("run-1", "approval", "Ship it?", {"type": "boolean"})
    assert (wait.question, wait.schema, wait.provided) == ("Ship it?", {"type": "boolean"}, False)
    again = store.record_wait("run-1", "approval", "Other question?", None)
    assert again.question == "Ship it?" and again.created_at == wait.created_at
    assert [w.name for w in store.list_waits()] == ["approval"]
    provided = store.provide_input("run-1", "approval", "true")
    assert provided.provided and provided.value_json == "true"
    assert provided.provided_at is not None and provided.question == "Ship it?"
    assert store.list_waits() == []
    assert [w.value_json for w in store.list_waits(pending_only=False)] == ["true"]
    assert store.record_wait("run-1", "approval", None, None).value_json == "true"


def test_input_provided_before_the_run_reaches_the_wait(subject: Subject) -> None:
    store = subject.store
    early = store.provide_input("run-1", "budget", "12")
    assert early.provided and early.question is None
    later = store.record_wait("run-1", "budget", "How much?", {"type": "integer"})
    assert later.value_json == "12" and later.question == "How much?"


def test_list_runs_pages_with_a_cursor_through_every_run_once(subject: Subject) -> None:
    store = subject.store
    for i in range(7):
        store.start_run(f"run-{i}", None)
        time.sleep(0.002)
    store.finish_run("run-2", "completed")
    newest_first = [r.run_id for r in store.list_runs()]
    assert newest_first[0] == "run-2" and len(newest_first) == 7
    pages: list[list[str]] = []
    after = None
    while page := store.list_runs(limit=3, after=after):
        pages.append([r.run_id for r in page])
        after = page[-1].cursor
    assert pages == [newest_first[:3], newest_first[3:6], newest_first[6:]]
    running = store.list_runs(status="running", limit=2)
    rest = store.list_runs(status="running", after=running[-1].cursor)
    assert [r.run_id for r in running + rest] == [i for i in newest_first if i != "run-2"]


# --- retention -------------------------------------------------------------------------------


def test_gc_deletes_old_runs_with_everything_they_own(subject: Subject) -> None:
    store = subject.store
    store.start_run("old", None)
    store.put(cp("old-k", run_id="old"))
    store.finish_run("old", "completed", [record("old", 1, "old-k")])
    store.record_wait("old", "w", None, None)
    time.sleep(1.5)
    store.start_run("new", None)
    store.put(cp("new-k", run_id="new"))
    store.record_wait("new", "w", None, None)
    assert store.delete_runs_older_than(3600) == 0
    assert store.delete_runs_older_than(0.75) == 1  # margins for a loaded machine
    assert store.get_run("old") is None and store.get("old-k") is None
    assert store.list_journal("old") == [] and store.list_checkpoints("old") == []
    assert [w.run_id for w in store.list_waits()] == ["new"]
    assert store.get("new-k") is not None and store.get_run("new") is not None


# --- damaged and unreachable stores ----------------------------------------------------------


def test_a_corrupted_row_is_an_error_naming_the_store_never_a_wrong_replay(
    subject: Subject,
) -> None:
    if subject.sql is None:
        pytest.skip("a memory store cannot hold a corrupted row")
    store = subject.store
    store.put(cp("k1"))
    store.put(cp("k2"))
    subject.sql("UPDATE spanpoint_checkpoints SET view = %s WHERE key = %s", ("{broken", "k1"))
    # An output that is not bytes: a text value in SQLite, a type tag gone in PostgreSQL.
    if subject.kind == "sqlite":
        subject.sql("UPDATE spanpoint_checkpoints SET output = 'text' WHERE key = %s", ("k2",))
    else:
        subject.sql("UPDATE spanpoint_checkpoints SET output_type = NULL WHERE key = %s", ("k2",))
    for key in ("k1", "k2"):
        with pytest.raises(CorruptCheckpointError, match=store.description.split(":")[0]):
            store.get(key)
        # A claim never replays it: the row becomes the claimer's lease, with the reason.
        claim = store.claim(key, "host-a:1:aaa", 30.0)
        assert (claim.state, claim.checkpoint, claim.owner) == ("acquired", None, "host-a:1:aaa")
        assert claim.error and "corrupt" in claim.error
        assert store.claim(key, "host-b:2:bbb", 30.0).state == "held"
        # ...and the re-execution's commit replaces the corrupted row.
        assert store.put(cp(key, output=b'"again"'), owner="host-a:1:aaa") is True
        assert store.get(key) == cp(key, output=b'"again"')
    store.put(cp("k3"))
    assert store.get("k3") == cp("k3")


def test_an_unreadable_store_fails_to_open_with_a_clear_error(
    subject: Subject, tmp_path: Path
) -> None:
    if subject.kind == "memory":
        pytest.skip("a memory store has nothing to read")
    if subject.kind == "sqlite":
        bad = tmp_path / "not-a-db.db"
        bad.write_bytes(b"this is not a SQLite database at all" * 100)
        address, expected = str(bad), "not-a-db.db"
    else:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        address = f"postgresql://someone:hunter2@127.0.0.1:{port}/nowhere?connect_timeout=2"
        expected = f"127.0.0.1:{port}/nowhere"
    with pytest.raises(StoreUnavailableError, match=expected) as info:
        open_store(address)
    assert "hunter2" not in str(info.value)


def test_a_store_written_by_a_newer_spanpoint_is_refused(subject: Subject) -> None:
    durable(subject)
    assert subject.sql is not None
    subject.store.close()
    if subject.kind == "sqlite":
        subject.sql("UPDATE spanpoint_meta SET v = '999' WHERE k = 'schema_version'", ())
    else:
        subject.sql("INSERT INTO spanpoint_migrations (version) VALUES (999)", ())
    with pytest.raises(StoreUnavailableError, match="upgrade spanpoint"):
        subject.store = subject.reopen()
    subject.store = MemoryStore()


# --- several processes -----------------------------------------------------------------------


def test_four_processes_writing_at_once(subject: Subject) -> None:
    durable(subject)
    assert subject.address is not None
    keys = 40
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), subject.address, str(i), str(keys)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    store = subject.store
    run = store.get_run("shared")
    assert run is not None and run.attempts == 4 and run.status == "completed"
    assert sorted(r["attempt"] for r in reports) == [1, 2, 3, 4]
    winners = Counter(key for r in reports for key in r["acquired"])
    assert winners == Counter({f"shared-{i}": 1 for i in range(keys)})
    for r in reports:
        for key in r["acquired"]:
            got = store.get(key)
            assert got is not None and json.loads(got.output) == {"worker": r["worker"]}
    assert run.committed == keys + 4 * keys
    assert len(store.list_journal("shared")) == 4 * keys


# --- fencing, as a rule over generated histories ---------------------------------------------

OWNERS = ("host-a:1:aaa", "host-b:2:bbb", "host-c:3:ccc")
_ops = st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(OWNERS), st.sampled_from([1000.0, 3000.0])),
    st.tuples(st.just("advance"), st.sampled_from([500.0, 1500.0, 4000.0])),
    st.tuples(st.just("put"), st.sampled_from(OWNERS), st.sampled_from([0, -1, 1])),
    st.tuples(st.just("put_unfenced")),
    st.tuples(st.just("release"), st.sampled_from(OWNERS)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=st.lists(_ops, max_size=14))
def test_a_put_commits_exactly_when_its_owner_holds_the_lease_at_its_epoch(
    subject: Subject, history: list[tuple[object, ...]]
) -> None:
    """Against a model of one key's lease: claims take a free, expired or own lease (the epoch
    grows when the lease passes to another owner); a fenced put commits iff its owner holds
    the lease at the epoch it names, whether or not the lease expired meanwhile; a committed
    key never changes. PostgreSQL reads the server's clock, which a test cannot move: its
    takeovers are covered by the tests above and the subprocess tests."""
    found = getattr(subject.store, "clock", None)
    clock = found if isinstance(found, FakeClock) else subject.fake_clock()
    if clock is None:
        pytest.skip("PostgreSQL's clock cannot be moved")
    store, key = subject.store, f"k-{uuid.uuid4().hex}"
    lease: tuple[str, float, int] | None = None  # owner, expires at, epoch
    committed: bytes | None = None
    epochs: dict[str, int] = {}  # the epoch each owner last acquired
    for n, op in enumerate(history):
        if op[0] == "advance":
            clock.advance(float(op[1]))  # type: ignore[arg-type]
        elif op[0] == "claim":
            owner, ttl = str(op[1]), float(op[2])  # type: ignore[arg-type]
            claim = store.claim(key, owner, ttl)
            if committed is not None:
                assert claim.state == "committed"
            elif lease and lease[0] != owner and lease[1] > clock.now:
                assert (claim.state, claim.owner) == ("held", lease[0])
            else:
                epoch = 1 if lease is None else lease[2] + (lease[0] != owner)
                assert (claim.state, claim.epoch) == ("acquired", epoch)
                lease, epochs[owner] = (owner, clock.now + ttl, epoch), epoch
        elif op[0] == "put":
            owner, shift = str(op[1]), int(op[2])  # type: ignore[call-overload]
            epoch = epochs.get(owner, 1) + shift
            output = f'"{n}"'.encode()
            expected = committed is None and lease is not None and lease[0::2] == (owner, epoch)
            assert store.put(cp(key, output=output), owner=owner, epoch=epoch) is expected
            if expected:
                committed, lease = output, None
        elif op[0] == "put_unfenced":
            output = f'"{n}"'.encode()
            assert store.put(cp(key, output=output)) is (committed is None)
            if committed is None:
                committed, lease = output, None
        else:
            owner = str(op[1])
            store.release(key, owner)
            if committed is None and lease is not None and lease[0] == owner:
                lease = None
        got = store.get(key)
        assert (got.output if got else None) == committed
