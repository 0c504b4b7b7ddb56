"""The embedded default store: one SQLite file, WAL mode, safe for several local processes.

The file is created with mode 0600 (checkpoints hold agent outputs). Writes use
``BEGIN IMMEDIATE`` so concurrent processes serialize on SQLite's lock and wait on
``busy_timeout`` rather than fail. ``synchronous=NORMAL`` with WAL survives a killed process
(what replay needs); it may lose the last commits on power loss, which only means those
boundaries execute again.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from spanpoint._files import claim, claim_regular, private_folder
from spanpoint.errors import (
    CorruptCheckpointError,
    StoreError,
    StoreUnavailableError,
    UnsafePathError,
)
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
    checkpoint_from_row,
    checkpoint_row,
    digest_of,
    journal_row,
    json_or_none,
    owner_is_dead_here,
    verify_checkpoint,
    wait_from_row,
)
from spanpoint.stores.heartbeat import Held, LeaseHeartbeat

T = TypeVar("T")

logger = logging.getLogger("spanpoint")

SCHEMA_VERSION = 9


def _statements(script: str) -> list[str]:
    """The statements of a script without triggers (whose bodies hold semicolons)."""
    return [statement for statement in script.split(";") if statement.strip()]


# Each migration is a list of statements, run in one transaction by _migrate.
_MIGRATIONS: dict[int, list[str]] = {
    1: _statements(
        """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        name TEXT,
        attempts INTEGER NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE checkpoints (
        key TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        path TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        output_type TEXT NOT NULL,
        output BLOB NOT NULL,
        trace_id TEXT NOT NULL,
        span_id TEXT NOT NULL,
        parent_span_id TEXT,
        attempt INTEGER NOT NULL,
        started_at_ns INTEGER NOT NULL,
        ended_at_ns INTEGER NOT NULL,
        view TEXT NOT NULL,
        seq INTEGER NOT NULL
    );
    CREATE INDEX checkpoints_run ON checkpoints (run_id, seq);
    CREATE TABLE journal (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        key TEXT NOT NULL,
        path TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        span_id TEXT NOT NULL,
        parent_span_id TEXT,
        started_at_ns INTEGER NOT NULL,
        ended_at_ns INTEGER NOT NULL,
        error TEXT
    );
    CREATE INDEX journal_run ON journal (run_id, seq);
    CREATE TABLE waits (
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        question TEXT,
        schema TEXT,
        value_json TEXT,
        created_at REAL NOT NULL,
        provided_at REAL,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE leases (
        key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL
    );
    """
    ),
    # A committed checkpoint ends its boundary's lease: one statement commits and releases.
    2: [
        "CREATE TRIGGER checkpoint_ends_lease AFTER INSERT ON checkpoints "
        "BEGIN DELETE FROM leases WHERE key = NEW.key; END"
    ],
    # The lease lives on the checkpoint's own row (output NULL until committed), as in the
    # PostgreSQL store: a claim inserts one row, a commit fills it in. Each is one write of
    # fewer B-tree pages than a leases table plus a trigger (bench/README.md has the
    # figures). A run's checkpoints are ordered by when they ended.
    3: _statements(
        """
    CREATE TABLE checkpoints_v3 (
        key TEXT PRIMARY KEY,
        run_id TEXT,
        path TEXT,
        name TEXT,
        kind TEXT,
        ordinal INTEGER,
        output_type TEXT,
        output BLOB,
        trace_id TEXT,
        span_id TEXT,
        parent_span_id TEXT,
        attempt INTEGER,
        started_at_ns INTEGER,
        ended_at_ns INTEGER,
        view TEXT,
        lease_owner TEXT,
        lease_expires_at REAL
    );
    INSERT INTO checkpoints_v3 (key, run_id, path, name, kind, ordinal, output_type, output,
        trace_id, span_id, parent_span_id, attempt, started_at_ns, ended_at_ns, view)
        SELECT key, run_id, path, name, kind, ordinal, output_type, output, trace_id, span_id,
        parent_span_id, attempt, started_at_ns, ended_at_ns, view
        FROM checkpoints ORDER BY run_id, seq;
    INSERT INTO checkpoints_v3 (key, lease_owner, lease_expires_at)
        SELECT key, owner, expires_at FROM leases
        WHERE key NOT IN (SELECT key FROM checkpoints);
    DROP TABLE checkpoints;
    DROP TABLE leases;
    ALTER TABLE checkpoints_v3 RENAME TO checkpoints;
    CREATE INDEX checkpoints_run ON checkpoints (run_id, ended_at_ns) WHERE output IS NOT NULL
    """
    ),
    # Each committed row carries the sha256 of its output, type tag and identity, checked on
    # every read that can replay it. Rows committed before keep a NULL digest and read as
    # before (docs/design-notes.md, "Integrity digests").
    4: ["ALTER TABLE checkpoints ADD COLUMN digest TEXT"],
    # Runs newest first without a sort of the whole table: `list_runs` pages walk this index
    # (keyset pagination on updated_at, run_id) and gc finds old runs through it. One index
    # write per run start and end, none per boundary.
    5: ["CREATE INDEX runs_updated ON runs (updated_at, run_id)"],
    # Once-tokens (spanpoint.stores.once): their own table, no run owns them; gc sweeps a
    # token by when it was spent, or when its lease expired.
    6: [
        "CREATE TABLE once_tokens (kind TEXT NOT NULL, key TEXT NOT NULL, owner TEXT NOT NULL, "
        "expires_at REAL NOT NULL, spent_at REAL, PRIMARY KEY (kind, key))"
    ],
    # What entered each key, for forks and diffs: the input fingerprint, the
    # parent-identity path and a redacted view of the input. Rows committed before read None.
    7: [
        "ALTER TABLE checkpoints ADD COLUMN fingerprint TEXT",
        "ALTER TABLE checkpoints ADD COLUMN identity TEXT",
        "ALTER TABLE checkpoints ADD COLUMN input_view TEXT",
    ],
    # Fenced leases: each lease carries an epoch that grows when it passes to another owner,
    # and a commit names the owner and epoch it holds. Leases taken before read epoch NULL.
    8: ["ALTER TABLE checkpoints ADD COLUMN lease_epoch INTEGER"],
    # Notes (put_note/get_note): opaque text under an opaque key; gc sweeps them by age.
    9: [
        "CREATE TABLE notes (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at REAL NOT NULL)",
        "CREATE INDEX notes_updated ON notes (updated_at)",
    ],
}

#: Runs deleted per write transaction by gc: each transaction holds the write lock for a few
#: milliseconds, so concurrent writers wait that long at most, never for the whole gc.
GC_BATCH_RUNS = 100

_CHECKPOINT_COLUMNS = (
    "key, run_id, path, name, kind, ordinal, output_type, output, trace_id, span_id, "
    "parent_span_id, attempt, started_at_ns, ended_at_ns, view, fingerprint, identity, "
    "input_view"
)
_PUT_COLUMNS = _CHECKPOINT_COLUMNS + ", digest"
_PUT_MARKS = ", ".join("?" * len(_PUT_COLUMNS.split(", ")))

_SCAN_JSON = json.JSONDecoder().scan_once


def _json_value(text: Any) -> Any:
    """``json.loads(text)``, the compact texts spanpoint writes read by the C scanner itself:
    json.loads adds three Python calls and two regex matches to every checkpoint read (a
    replay reads two texts: its view and its input view). Anything else (whitespace around
    the value, text after it, bytes, not a text) goes to json.loads, which says what is wrong
    exactly as before."""
    try:
        value, end = _SCAN_JSON(text, 0)
    except (StopIteration, TypeError):
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def _switch_to_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, waiting up to ``timeout_s`` for other openers.

    Processes opening one new store at once race to switch its journal mode, and SQLite
    answers the loser "database is locked" at once, without its busy handler (2 of 90 opens
    by six processes at once failed so): the switch is tried again until the timeout.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class SqliteStore(RunPages):
    """A checkpoint store in one SQLite file (default ``.spanpoint/checkpoints.db``)."""

    #: The clock leases expire by (epoch seconds): ``clock=`` (a test moves its own).
    #: Every process sharing the file must read the same clock: one machine's.
    clock: Callable[[], float] = staticmethod(time.time)

    #: A fork's run recorded before it runs; a run's start probes its fork record.
    capabilities = StoreCapabilities(start_run_probing=True, create_run=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if clock is not None:
            self.clock = clock  # type: ignore[method-assign]
        self.path = Path(path).expanduser()
        self.description = f"sqlite:{self.path}"
        self._lock = threading.RLock()
        self._busy_timeout_s = busy_timeout_s
        #: (st_dev, st_ino) of the file the connection has open: a path that later names
        #: another file, or none, means the store was deleted or replaced under this process.
        self._identity: tuple[int, int] | None = None
        self._heartbeat = LeaseHeartbeat(self._renew, name=f"spanpoint-lease-heartbeat {path}")
        self._conn = self._open(busy_timeout_s)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    # --- connection and schema ---------------------------------------------------------

    def _open(self, busy_timeout_s: float) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            # Never through a symlink nor into another user's file: the database, its folder
            # and the -wal/-shm files SQLite opens by name are claimed or checked first,
            # without a descriptor whose close would drop SQLite's locks (spanpoint._files).
            private_folder(self.path.parent)
            info = claim(self.path)
            if info is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(self.path))
            if not stat.S_ISREG(info.st_mode):
                raise StoreUnavailableError(
                    f"cannot open the checkpoint store {self.description}: it is not a regular "
                    "file (a device, a pipe or a folder). Point SPANPOINT_STORE at a file path, "
                    "such as .spanpoint/checkpoints.db"
                )
            for companion in (Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                claim_regular(companion)
            if stat.S_IMODE(info.st_mode) & 0o077:  # claim made it 0600
                logger.warning(
                    "spanpoint: %s was readable by group or others (mode %o); it holds agent "
                    "outputs, so it is now private (0600)",
                    self.path,
                    stat.S_IMODE(info.st_mode),
                )
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            now = os.lstat(self.path)
            if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
                raise UnsafePathError(
                    f"{self.path} was replaced while spanpoint opened it; check who else "
                    "writes to its folder, and run again"
                )
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            _switch_to_wal(conn, busy_timeout_s)
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
            self._identity = (info.st_dev, info.st_ino)
            return conn
        except (StoreError, UnsafePathError):
            if conn is not None:
                conn.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()
            raise StoreUnavailableError(
                f"cannot open the checkpoint store {self.description}: {self._explain(exc)}"
            ) from exc

    def _explain(self, exc: BaseException) -> str:
        """What happened, in words, and what to do about it: each cause has its own fix."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        where = self.description
        if primary == sqlite3.SQLITE_FULL:
            return (
                f"the disk holding {self.path} is full ({exc}). Nothing was written, so the "
                "boundary executes again next time; free disk space, or point SPANPOINT_STORE "
                "at a file on another disk"
            )
        if primary == sqlite3.SQLITE_READONLY or (
            primary == sqlite3.SQLITE_CANTOPEN and self._read_only_place()
        ):
            return (
                f"{where} is read-only ({exc}): its file, its folder or its file system cannot "
                "be written. Make them writable by this user (SQLite also writes "
                f"{self.path.name}-wal and -shm beside it), or point SPANPOINT_STORE at a "
                "writable path"
            )
        if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return (
                f"{where} is locked by another connection ({exc}) for longer than the busy "
                f"timeout ({self._busy_timeout_s:g}s). Wait for the process that holds it "
                f"(fuser {self.path}) or raise SqliteStore(busy_timeout_s=...); the file is "
                "fine, do not remove it"
            )
        if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return (
                f"{where} is corrupted or is not a SQLite database ({exc}). Restore it from a "
                "backup, or move it aside to start empty (its boundaries then execute again), "
                "or point SPANPOINT_STORE at another file"
            )
        if primary == sqlite3.SQLITE_CANTOPEN:
            return (
                f"cannot open {self.path} ({exc}): check that its folder exists and that this "
                "user can create files in it, or point SPANPOINT_STORE at another file"
            )
        if primary == sqlite3.SQLITE_IOERR:
            return (
                f"an I/O error on {self.path} ({exc}): the disk failed, or the path is not a "
                "regular file on a local file system (network file systems are not "
                "supported); point SPANPOINT_STORE at a file on a local disk"
            )
        if isinstance(exc, PermissionError):
            return (
                f"permission denied ({exc}): make {self.path.parent} and the file writable by "
                "this user, or point SPANPOINT_STORE at another file"
            )
        return (
            f"{exc}. Check that the path is a readable, writable SQLite file, or point "
            "SPANPOINT_STORE at another file"
        )

    def _read_only_place(self) -> bool:
        """Whether the store's file or folder is on a read-only file system or not writable."""
        try:
            if os.statvfs(self.path.parent).f_flag & os.ST_RDONLY:
                return True
        except OSError:
            return False
        target = self.path if self.path.exists() else self.path.parent
        return not os.access(target, os.W_OK)

    def _check_identity(self) -> None:
        """Raise when the path no longer names the file this connection has open.

        A deleted or replaced store file keeps working for the open connection, but every
        commit then goes to a file no one will ever read again: say so at the next boundary.
        """
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            raise StoreUnavailableError(
                f"{self.description} was deleted while this process had it open: checkpoints "
                "committed to it since are lost, and nothing more is committed. Restore the "
                "file, or restart the process to start a new store"
            ) from None
        except OSError:
            return  # cannot tell: the next statement reports what is wrong
        if (info.st_dev, info.st_ino) != self._identity:
            raise StoreUnavailableError(
                f"{self.description} was replaced by another file while this process had it "
                "open: checkpoints committed since went to the old file, and nothing more is "
                "committed. Restart the process to use the new file, or put the old one back"
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS spanpoint_meta (k TEXT PRIMARY KEY, v TEXT)")
            row = conn.execute("SELECT v FROM spanpoint_meta WHERE k='schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"{self.description} has schema version {version}, newer than this "
                    f"spanpoint understands ({SCHEMA_VERSION}); upgrade spanpoint"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target]:
                    conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO spanpoint_meta VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _run(self, operation: str, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        """Run ``fn`` under the connection lock; ``write`` wraps it in BEGIN IMMEDIATE.

        A single statement needs no explicit transaction: in autocommit mode SQLite runs it
        atomically, so one-statement writes pass ``write=False`` and save two round trips.
        """
        with self._lock:
            try:
                if not write:
                    return fn(self._conn)
                with self._transaction() as conn:
                    return fn(conn)
            except StoreError:
                raise
            except sqlite3.Error as exc:
                raise StoreError(
                    f"{self.description}: {operation} failed: {self._explain(exc)}"
                ) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            _rollback(self._conn)
            raise

    # --- runs ----------------------------------------------------------------------------

    # The attempt, and whether a checkpoint is committed under the key ?4, in one statement
    # (atomic on its own, so no BEGIN/COMMIT around it: two more round trips per run start).
    _START_RUN = (
        "INSERT INTO runs VALUES (?1, ?2, 1, 'running', ?3, ?3) ON CONFLICT(run_id) DO UPDATE "
        "SET attempts = attempts + 1, status = 'running', updated_at = excluded.updated_at,"
        " name = COALESCE(excluded.name, runs.name) RETURNING attempts, "
        "EXISTS (SELECT 1 FROM checkpoints WHERE key = ?4 AND output IS NOT NULL)"
    )

    def start_run(self, run_id: str, name: str | None) -> int:
        return self._start_run(run_id, name, "")[0]  # no checkpoint has the key ""

    def start_run_probing(self, run_id: str, name: str | None, key: str) -> tuple[int, bool]:
        """:meth:`start_run`, and whether a checkpoint is committed under ``key``, in the
        same statement: a run start reads its fork record (``run.fork_origin``) only when
        there is one, rather than with one more point read at every run start."""
        if type(self).start_run is not SqliteStore.start_run:
            return self.start_run(run_id, name), True  # a subclass's own start_run
        return self._start_run(run_id, name, key)

    def _start_run(self, run_id: str, name: str | None, key: str) -> tuple[int, bool]:
        self._check_identity()
        row = self._run(
            "start_run",
            lambda c: c.execute(self._START_RUN, (run_id, name, time.time(), key)).fetchone(),
            write=False,
        )
        return int(row[0]), bool(row[1])

    def create_run(self, run_id: str, name: str | None, status: RunStatus) -> bool:
        """Record ``run_id`` with no attempt yet (a fork not yet run); False if it exists."""
        self._check_identity()
        now = time.time()
        cursor = self._run(
            "create_run",
            lambda c: c.execute(
                "INSERT INTO runs VALUES (?, ?, 0, ?, ?, ?) ON CONFLICT(run_id) DO NOTHING",
                (run_id, name, status, now, now),
            ),
            write=False,
        )
        return bool(cursor.rowcount)

    def finish_run(
        self, run_id: str, status: RunStatus, journal: Sequence[BoundaryRecord] = ()
    ) -> None:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ?",
                (status, time.time(), run_id),
            )
            conn.executemany(
                "INSERT INTO journal (run_id, attempt, key, path, name, kind, status, span_id, "
                "parent_span_id, started_at_ns, ended_at_ns, error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [journal_row(r) for r in journal],
            )

        self._run("finish_run", op, write=True)

    def get_run(self, run_id: str) -> RunRecord | None:
        runs = self._select_runs("WHERE r.run_id = ?", (run_id,), 1)
        return runs[0] if runs else None

    def runs_page(
        self, status: RunStatus | None, limit: int, after: RunCursor | None
    ) -> list[RunRecord]:
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("r.status = ?")
            params.append(status)
        if after is not None:
            # Keyset pagination: the next page starts in the runs_updated index right after
            # the cursor's row, so page 1,000 costs what page 1 costs.
            clauses.append("(r.updated_at, r.run_id) < (?, ?)")
            params.extend(after)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._select_runs(where, tuple(params), limit)

    def _select_runs(self, where: str, params: tuple[Any, ...], limit: int) -> list[RunRecord]:
        sql = (
            "SELECT r.run_id, r.name, r.attempts, r.status, r.created_at, r.updated_at, "
            "(SELECT COUNT(*) FROM checkpoints c WHERE c.run_id = r.run_id "
            "AND c.output IS NOT NULL) "
            f"FROM runs r {where} ORDER BY r.updated_at DESC, r.run_id DESC LIMIT ?"
        )
        rows = self._run(
            "list_runs", lambda c: c.execute(sql, (*params, limit)).fetchall(), write=False
        )
        return [RunRecord(*row) for row in rows]

    # --- checkpoints and leases ----------------------------------------------------------

    _GET = f"SELECT {_PUT_COLUMNS} FROM checkpoints WHERE key = ? AND output IS NOT NULL"

    def get(self, key: str) -> Checkpoint | None:
        row = self._run("get", lambda c: c.execute(self._GET, (key,)).fetchone(), write=False)
        return None if row is None else self._verified(row)

    def _verified(self, row: tuple[Any, ...]) -> Checkpoint:
        """The checkpoint of a ``_GET`` row (its columns and its digest), integrity checked."""
        return verify_checkpoint(self._checkpoint(row[:-1]), row[-1], self.description)

    # Take the lease unless the boundary is committed or another owner's lease is live: one
    # statement, so checking and taking are atomic without an explicit transaction. The epoch
    # grows when the lease passes to another owner; its own lease again keeps it.
    _TAKE_LEASE = (
        "INSERT INTO checkpoints (key, lease_owner, lease_expires_at, lease_epoch) "
        "VALUES (?1, ?2, ?3, 1) "
        "ON CONFLICT(key) DO UPDATE SET lease_owner = excluded.lease_owner, "
        "lease_expires_at = excluded.lease_expires_at, lease_epoch = CASE "
        "WHEN checkpoints.lease_owner = excluded.lease_owner THEN checkpoints.lease_epoch "
        "ELSE COALESCE(checkpoints.lease_epoch, 0) + 1 END WHERE checkpoints.output IS NULL "
        "AND (checkpoints.lease_owner = excluded.lease_owner "
        "OR checkpoints.lease_expires_at <= ?4 OR checkpoints.lease_owner IS NULL "
        "OR checkpoints.lease_expires_at IS NULL) RETURNING lease_expires_at, lease_epoch"
    )

    def claim(self, key: str, owner: str, ttl_s: float, *, fresh: bool = False) -> Claim:
        if not fresh:
            # A committed checkpoint is final, so a replay needs one read and no write lock.
            row = self._run("claim", lambda c: c.execute(self._GET, (key,)).fetchone(), write=False)
            if row is not None:
                try:
                    return Claim("committed", checkpoint=self._verified(row))
                except CorruptCheckpointError:
                    # Checked again, and taken over, under the write lock.
                    return self._claim_contended(key, owner, ttl_s)
        now = self.clock()
        taken = self._run(
            "claim",
            lambda c: c.execute(self._TAKE_LEASE, (key, owner, now + ttl_s, now)).fetchone(),
            write=False,
        )
        if taken is None:
            return self._claim_contended(key, owner, ttl_s)
        self._heartbeat.hold(key, owner, ttl_s)
        return Claim("acquired", owner=owner, expires_at=taken[0], epoch=taken[1])

    def _claim_contended(self, key: str, owner: str, ttl_s: float) -> Claim:
        """The rare path: committed already, or leased by someone else (maybe dead)."""

        def op(conn: sqlite3.Connection) -> Claim:
            row = conn.execute(self._GET, (key,)).fetchone()
            now = self.clock()
            held = conn.execute(
                "SELECT lease_owner, lease_expires_at, lease_epoch FROM checkpoints WHERE key = ?",
                (key,),
            ).fetchone()
            epoch = (held[2] or 0) + 1 if held else 1
            if row is not None:
                try:
                    return Claim("committed", checkpoint=self._verified(row))
                except CorruptCheckpointError as exc:
                    # Never a replay: the row becomes this owner's lease, so the boundary
                    # executes again and its commit replaces the corrupted row.
                    conn.execute(
                        "UPDATE checkpoints SET output = NULL, output_type = NULL, digest = NULL,"
                        " lease_owner = ?, lease_expires_at = ?, lease_epoch = ? WHERE key = ?",
                        (owner, now + ttl_s, epoch, key),
                    )
                    return Claim(
                        "acquired", owner=owner, expires_at=now + ttl_s, error=str(exc), epoch=epoch
                    )
            # A row with no output and no lease (a damaged row) is free, like no row at all.
            if (
                held
                and held[0] is not None
                and held[0] != owner
                and (held[1] or 0.0) > now
                and not owner_is_dead_here(held[0])
            ):
                return Claim("held", owner=held[0], expires_at=held[1])
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints (key, lease_owner, lease_expires_at, "
                "lease_epoch) VALUES (?, ?, ?, ?)",
                (key, owner, now + ttl_s, epoch),
            )
            return Claim("acquired", owner=owner, expires_at=now + ttl_s, epoch=epoch)

        claim = self._run("claim", op, write=True)
        if claim.state == "acquired":
            self._heartbeat.hold(key, owner, ttl_s)
        return claim

    def release(self, key: str, owner: str) -> None:
        self._heartbeat.drop(key, owner)
        self._run(
            "release",
            lambda c: c.execute(
                "DELETE FROM checkpoints WHERE key = ? AND lease_owner = ? AND output IS NULL",
                (key, owner),
            ),
            write=False,  # one statement: atomic on its own
        )

    def _renew(self, held: Held) -> set[tuple[str, str]]:
        """Push each held lease's expiry its TTL ahead; return those still held."""

        def op(conn: sqlite3.Connection) -> set[tuple[str, str]]:
            now = self.clock()
            alive: set[tuple[str, str]] = set()
            for (key, owner), ttl_s in held.items():
                cur = conn.execute(
                    "UPDATE checkpoints SET lease_expires_at = ? WHERE key = ? "
                    "AND lease_owner = ? AND output IS NULL",
                    (now + ttl_s, key, owner),
                )
                if cur.rowcount == 1:
                    alive.add((key, owner))
            return alive

        return self._run("renew_leases", op, write=True)

    # --- once-tokens -----------------------------------------------------------------------

    def take_once(self, kind: str, key: str, owner: str, ttl_s: float) -> OnceToken:
        def op(conn: sqlite3.Connection) -> OnceToken:
            now = time.time()
            row = conn.execute(
                "SELECT owner, expires_at, spent_at FROM once_tokens WHERE kind = ? AND key = ?",
                (kind, key),
            ).fetchone()
            if row is not None:
                if row[2] is not None:
                    return OnceToken("spent", owner=row[0])
                if row[0] != owner and row[1] > now and not owner_is_dead_here(row[0]):
                    return OnceToken("held", owner=row[0], expires_at=row[1])
            conn.execute(
                "INSERT OR REPLACE INTO once_tokens (kind, key, owner, expires_at, spent_at) "
                "VALUES (?, ?, ?, ?, NULL)",
                (kind, key, owner, now + ttl_s),
            )
            return OnceToken("taken", owner=owner, expires_at=now + ttl_s)

        return self._run("take_once", op, write=True)

    def spend_once(self, kind: str, key: str, owner: str) -> bool:
        cur = self._run(
            "spend_once",
            lambda c: c.execute(
                "UPDATE once_tokens SET spent_at = ? WHERE kind = ? AND key = ? AND owner = ? "
                "AND spent_at IS NULL",
                (time.time(), kind, key, owner),
            ),
            write=False,  # one statement: atomic on its own
        )
        return cur.rowcount == 1

    def release_once(self, kind: str, key: str, owner: str) -> None:
        self._run(
            "release_once",
            lambda c: c.execute(
                "DELETE FROM once_tokens WHERE kind = ? AND key = ? AND owner = ? "
                "AND spent_at IS NULL",
                (kind, key, owner),
            ),
            write=False,
        )

    # --- notes -------------------------------------------------------------------------------

    def put_note(self, key: str, value: str) -> None:
        self._run(
            "put_note",
            lambda c: c.execute(
                "INSERT OR REPLACE INTO notes (key, value, updated_at) VALUES (?, ?, ?)",
                (key, value, time.time()),
            ),
            write=False,  # one statement: atomic on its own
        )

    def get_note(self, key: str) -> str | None:
        row = self._run(
            "get_note",
            lambda c: c.execute("SELECT value FROM notes WHERE key = ?", (key,)).fetchone(),
            write=False,
        )
        return None if row is None else str(row[0])

    # One statement fills in the leased row (or inserts one when nobody claimed the key) and
    # ends the lease, whoever held it: a committed boundary needs no lease. The first commit
    # of a key wins; the WHERE makes any later one a no-op.
    _PUT = (
        f"INSERT INTO checkpoints ({_PUT_COLUMNS}) "
        f"VALUES ({_PUT_MARKS}) ON CONFLICT(key) DO UPDATE SET "
        + ", ".join(f"{column} = excluded.{column}" for column in _PUT_COLUMNS.split(", ")[1:])
        + ", lease_owner = NULL, lease_expires_at = NULL WHERE checkpoints.output IS NULL"
    )

    # A fenced commit: one statement fills in the row of the lease ``owner`` holds at
    # ``epoch`` and ends it, so the check and the write are one atomic step. No row changes
    # when the lease was taken over, released or committed: the caller learns it lost.
    _FENCED_PUT = (
        "UPDATE checkpoints SET "
        + ", ".join(f"{column} = ?" for column in _PUT_COLUMNS.split(", ")[1:])
        + ", lease_owner = NULL, lease_expires_at = NULL WHERE key = ? AND output IS NULL "
        "AND lease_owner = ? AND (? IS NULL OR lease_epoch = ?)"
    )

    def put(
        self, checkpoint: Checkpoint, *, owner: str | None = None, epoch: int | None = None
    ) -> bool:
        # A commit into a deleted file would be lost in silence. Checked at commits (and run
        # starts), not at replays: a replay reads the open file, whatever its path names now.
        self._check_identity()
        row = (*checkpoint_row(checkpoint), digest_of(checkpoint))
        if owner is None:
            return self._run("put", lambda c: c.execute(self._PUT, row).rowcount == 1, write=False)
        self._heartbeat.drop(checkpoint.key, owner)
        params = (*row[1:], row[0], owner, epoch, epoch)
        return self._run(
            "put", lambda c: c.execute(self._FENCED_PUT, params).rowcount == 1, write=False
        )

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]:
        sql = (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? "
            "AND output IS NOT NULL ORDER BY ended_at_ns, rowid"
        )
        rows = self._run(
            "list_checkpoints", lambda c: c.execute(sql, (run_id,)).fetchall(), write=False
        )
        return [self._checkpoint(row) for row in rows]

    def list_journal(self, run_id: str) -> list[BoundaryRecord]:
        sql = (
            "SELECT run_id, attempt, key, path, name, kind, status, span_id, parent_span_id, "
            "started_at_ns, ended_at_ns, error FROM journal WHERE run_id = ? ORDER BY seq"
        )
        rows = self._run(
            "list_journal", lambda c: c.execute(sql, (run_id,)).fetchall(), write=False
        )
        return [BoundaryRecord(*row) for row in rows]

    def _checkpoint(self, row: tuple[Any, ...]) -> Checkpoint:
        return checkpoint_from_row(
            row,
            _json_value,
            self.description,
            "it will execute again and be re-committed under a fresh store",
        )

    # --- waits ---------------------------------------------------------------------------

    def record_wait(
        self, run_id: str, name: str, question: str | None, schema: dict[str, Any] | None
    ) -> WaitRecord:
        def op(conn: sqlite3.Connection) -> WaitRecord:
            conn.execute(
                "INSERT INTO waits (run_id, name, question, schema, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(run_id, name) DO UPDATE SET "
                "question = COALESCE(waits.question, excluded.question), "
                "schema = COALESCE(waits.schema, excluded.schema)",
                (run_id, name, question, json_or_none(schema), time.time()),
            )
            return self._wait(conn, run_id, name)

        return self._run("record_wait", op, write=True)

    def provide_input(self, run_id: str, name: str, value_json: str) -> WaitRecord:
        def op(conn: sqlite3.Connection) -> WaitRecord:
            now = time.time()
            conn.execute(
                "INSERT INTO waits (run_id, name, value_json, created_at, provided_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(run_id, name) DO UPDATE SET "
                "value_json = excluded.value_json, provided_at = excluded.provided_at",
                (run_id, name, value_json, now, now),
            )
            return self._wait(conn, run_id, name)

        return self._run("provide_input", op, write=True)

    def list_waits(self, *, pending_only: bool = True) -> list[WaitRecord]:
        where = "WHERE value_json IS NULL" if pending_only else ""
        sql = (
            "SELECT run_id, name, question, schema, value_json, created_at, provided_at "
            f"FROM waits {where} ORDER BY created_at"
        )
        rows = self._run("list_waits", lambda c: c.execute(sql).fetchall(), write=False)
        return [wait_from_row(row) for row in rows]

    def _wait(self, conn: sqlite3.Connection, run_id: str, name: str) -> WaitRecord:
        row = conn.execute(
            "SELECT run_id, name, question, schema, value_json, created_at, provided_at "
            "FROM waits WHERE run_id = ? AND name = ?",
            (run_id, name),
        ).fetchone()
        return wait_from_row(row)

    # --- retention -----------------------------------------------------------------------

    def delete_runs_older_than(self, seconds: float) -> int:
        # Candidates are read outside any write transaction (WAL: a read blocks no writer);
        # then each batch is deleted in its own short transaction, every statement on an index,
        # and a run is deleted only if it is still old then (a run restarted meanwhile stays).
        # One transaction for everything held writers for the whole gc, and a DELETE by run_id
        # off the partial index scanned the table once per run (bench/README.md, scale).
        cutoff = time.time() - seconds
        candidates = self._run(
            "delete_runs_older_than",
            lambda c: [
                r[0] for r in c.execute("SELECT run_id FROM runs WHERE updated_at < ?", (cutoff,))
            ],
            write=False,
        )
        deleted = 0
        for start in range(0, len(candidates), GC_BATCH_RUNS):
            batch = candidates[start : start + GC_BATCH_RUNS]
            deleted += self._run(
                "delete_runs_older_than",
                lambda c, batch=batch: self._delete_runs(c, batch, cutoff),  # type: ignore[misc]
                write=True,
            )
        # Leases of workers that died and whose boundary never ran again: no run owns them.
        # Found by one read (no index serves them: one would cost every boundary a write),
        # deleted by key, each checked again under the write lock.
        stale = self._run(
            "delete_runs_older_than",
            lambda c: [
                (r[0], cutoff)
                for r in c.execute(
                    "SELECT key FROM checkpoints WHERE output IS NULL AND lease_expires_at < ?",
                    (cutoff,),
                )
            ],
            write=False,
        )
        for start in range(0, len(stale), GC_BATCH_RUNS * 10):
            rows = stale[start : start + GC_BATCH_RUNS * 10]
            self._run(
                "delete_runs_older_than",
                lambda c, rows=rows: c.executemany(  # type: ignore[misc]
                    "DELETE FROM checkpoints WHERE key = ? AND output IS NULL "
                    "AND lease_expires_at < ?",
                    rows,
                ),
                write=True,
            )
        # Once-tokens spent, or whose lease expired, before the cutoff (a small table).
        self._run(
            "delete_runs_older_than",
            lambda c: c.execute(
                "DELETE FROM once_tokens WHERE COALESCE(spent_at, expires_at) < ?", (cutoff,)
            ),
            write=False,
        )
        self._run(
            "delete_runs_older_than",
            lambda c: c.execute("DELETE FROM notes WHERE updated_at < ?", (cutoff,)),
            write=False,
        )
        return deleted

    @staticmethod
    def _delete_runs(conn: sqlite3.Connection, run_ids: list[str], cutoff: float) -> int:
        """Delete the runs of ``run_ids`` still not updated since ``cutoff``, with their rows."""
        marks = ", ".join("?" * len(run_ids))
        old = [
            (r[0],)
            for r in conn.execute(
                f"SELECT run_id FROM runs WHERE run_id IN ({marks}) AND updated_at < ?",
                (*run_ids, cutoff),
            )
        ]
        # `output IS NOT NULL` lets the delete use the partial checkpoints_run index; a row of
        # the run without output is a lease (a boundary under way, or a corrupted row taken
        # over), which the stale-lease pass removes once it expires.
        conn.executemany("DELETE FROM checkpoints WHERE run_id = ? AND output IS NOT NULL", old)
        for table in ("journal", "waits", "runs"):
            conn.executemany(f"DELETE FROM {table} WHERE run_id = ?", old)
        return len(old)

    def close(self) -> None:
        self._heartbeat.stop()
        with self._lock:
            self._conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open. SQLite has already rolled back on some errors
    (a full disk, an I/O error): a second ROLLBACK would raise "no transaction is active" and
    hide the error that matters."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            logger.debug("spanpoint: rollback failed after an error: %s", exc)
