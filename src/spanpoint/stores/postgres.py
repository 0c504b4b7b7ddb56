"""The shared store: PostgreSQL, for many workers on many machines (``spanpoint[postgres]``).

Select it with ``SPANPOINT_STORE=postgresql://user@host/db`` or ``configure(store=...)``.
Tables are named ``spanpoint_*`` and created in the connection's current schema (pick one with
``?options=-csearch_path%3Dmyschema``) by versioned migrations, applied under an advisory lock so
pods starting together migrate once.

A boundary's lease lives on its checkpoint row: a *pending* row (no output yet) carries the
owner and the expiry, taken from the server's clock so pods' clocks never matter. ``claim`` is
one statement that either sees the committed output, takes the lease (new, expired, or its
own), or reports the live holder; ``put`` is one statement that fills the row, first writer
wins. A store keeps the leases it holds alive with a heartbeat thread, so a body may run longer
than the TTL; when the process dies the heartbeat stops and the lease expires ``ttl_s`` later.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from spanpoint.errors import CorruptCheckpointError, StoreError, StoreUnavailableError
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
from spanpoint.stores.postgres_sql import (
    CLAIM,
    COLS,
    EPOCH,
    FENCED_PUT,
    FINISH_RUN,
    JOURNAL_COLUMNS,
    MIGRATIONS,
    ONCE_STATE,
    PUT,
    READ_COLS,
    RUN_SELECT,
    SCHEMA_VERSION,
    TAKE_CORRUPT,
    TAKE_ONCE,
    WAIT_COLS,
)

T = TypeVar("T")

#: Seconds a pooled connection above ``min_connections`` may sit unused before it is closed.
MAX_IDLE_S = 60.0
TUPLES_OK = pq.ExecStatus.TUPLES_OK


class PostgresStore(RunPages):
    """A checkpoint store in PostgreSQL, shared by every worker that points at it.

    Args:
        dsn: a libpq URL or key=value string. Its ``connect_timeout`` (seconds) also bounds how
            long an operation waits for a pooled connection (default 10).
        min_connections / max_connections: the connection pool's size. A worker runs one
            boundary statement at a time per thread, plus the lease heartbeat.
        fail_when_unreachable: when the server cannot be reached at a boundary's lookup, fail
            the run (default) instead of executing the body without replay or single-flight.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_connections: int = 1,
        max_connections: int = 4,
        fail_when_unreachable: bool = True,
    ) -> None:
        self.description = _describe(dsn)
        # A shared store that cannot be reached can neither replay nor keep a boundary
        # single-flight across workers: by default the run fails before the next body runs.
        self.fail_when_unreachable = fail_when_unreachable
        self.capabilities = StoreCapabilities(
            create_run=True, fail_when_unreachable=fail_when_unreachable
        )
        self._heartbeat = LeaseHeartbeat(self._renew, name="spanpoint-lease-heartbeat")
        try:
            timeout = float(conninfo_to_dict(dsn).get("connect_timeout") or 0) or 10.0
        except (psycopg.Error, ValueError) as exc:
            raise StoreUnavailableError(f"{self.description} is not a valid DSN: {exc}") from exc
        self._prepare(dsn, timeout)
        self._pool = ConnectionPool(
            dsn,
            min_size=min_connections,
            max_size=max(min_connections, max_connections),
            kwargs={"autocommit": True},
            timeout=timeout,
            # A connection a burst added (parallel branches, the heartbeat beside a commit)
            # goes back after a minute unused, not psycopg's ten: 32 pods idle at min_size.
            max_idle=MAX_IDLE_S,
            open=False,
            name="spanpoint",
        )
        # Wait for the first connection here (the server was just reached in _prepare): a
        # first operation that found the pool still connecting would make it grow, and a
        # worker running one boundary at a time then held two connections for ten minutes.
        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailableError(
                f"cannot reach the checkpoint store {self.description}: no connection within "
                f"{timeout:g} s ({exc}). Check that the server accepts connections "
                "(max_connections), or raise connect_timeout in the URL"
            ) from exc

    def __repr__(self) -> str:
        return f"PostgresStore({self.description!r})"

    # --- connections and schema ----------------------------------------------------------

    def _prepare(self, dsn: str, timeout: float) -> None:
        """Connect once, directly, and migrate: a wrong URL or a missing grant fails here at
        once with the server's own reason, not after a pool's retries."""
        try:
            # libpq reads 0 as "wait forever" and rounds anything below 2 s up to 2 s.
            wait = max(2, round(timeout))
            with psycopg.connect(dsn, autocommit=True, connect_timeout=wait) as conn:
                self._migrate(conn)
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(
                f"cannot reach the checkpoint store {self.description}: {exc}. Check that the "
                "server is running and the URL (host, port, database, user) is right, or point "
                "SPANPOINT_STORE at another store"
            ) from exc
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"cannot prepare the schema of the checkpoint store {self.description}: {exc}. "
                "The user needs CREATE on the schema for the first start (see "
                "docs/deployment.md), or pick a schema with ?options=-csearch_path%3D..."
            ) from exc

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('spanpoint.migrate'))")
            # Only DDL when needed: once migrated, a user with DML grants alone may open it.
            if conn.execute("SELECT to_regclass('spanpoint_migrations')").fetchone() == (None,):
                conn.execute(
                    "CREATE TABLE spanpoint_migrations (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())"
                )
            row = conn.execute("SELECT max(version) FROM spanpoint_migrations").fetchone()
            version = (row[0] if row else None) or 0
            if version > SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"{self.description} has schema version {version}, newer than this "
                    f"spanpoint understands ({SCHEMA_VERSION}); upgrade spanpoint"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                conn.execute(sql.SQL(MIGRATIONS[target - 1]))  # type: ignore[arg-type]
                conn.execute("INSERT INTO spanpoint_migrations (version) VALUES (%s)", (target,))

    def _run(self, operation: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        try:
            with self._pool.connection() as conn:
                return fn(conn)
        except StoreError:
            raise
        except psycopg.OperationalError as exc:
            # A dead server leaves dead connections in the pool: drop them now rather than
            # fail once per pooled connection after it comes back.
            threading.Thread(target=self._drop_dead_connections, daemon=True).start()
            raise StoreUnavailableError(
                f"{self.description}: {operation} failed, the store is unreachable: {exc}"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self.description}: {operation} failed: {exc}") from exc

    def _drop_dead_connections(self) -> None:
        # The pool may be closed meanwhile, or the server still away: nothing to do then.
        with contextlib.suppress(psycopg.Error):
            self._pool.check()

    def _fetchall(
        self, operation: str, query: str, params: Sequence[Any] | dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        def op(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            cur = conn.execute(query, params)  # type: ignore[arg-type]
            # The result's status, not `cur.description`: that builds a Column object per
            # result column (22 for a claim), a measurable share of a worker's CPU per boundary.
            result = cur.pgresult
            return cur.fetchall() if result is not None and result.status == TUPLES_OK else []

        return self._run(operation, op)

    # --- runs ----------------------------------------------------------------------------

    def start_run(self, run_id: str, name: str | None) -> int:
        rows = self._fetchall(
            "start_run",
            "INSERT INTO spanpoint_runs AS r (run_id, name, attempts, status) "
            "VALUES (%s, %s, 1, 'running') ON CONFLICT (run_id) DO UPDATE SET "
            "attempts = r.attempts + 1, status = 'running', updated_at = now(), "
            "name = COALESCE(excluded.name, r.name) RETURNING attempts",
            (run_id, name),
        )
        return int(rows[0][0])

    def create_run(self, run_id: str, name: str | None, status: RunStatus) -> bool:
        """Record ``run_id`` with no attempt yet (a fork not yet run); False if it exists."""
        rows = self._fetchall(
            "create_run",
            "INSERT INTO spanpoint_runs (run_id, name, attempts, status) "
            "VALUES (%s, %s, 0, %s) ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
            (run_id, name, status),
        )
        return bool(rows)

    def finish_run(
        self, run_id: str, status: RunStatus, journal: Sequence[BoundaryRecord] = ()
    ) -> None:
        # One statement (FINISH_RUN): a transaction of an UPDATE and an executemany cost
        # four round trips per run.
        rows = [journal_row(r) for r in journal]
        columns = [list(c) for c in zip(*rows, strict=True)] or [[]] * len(JOURNAL_COLUMNS)
        self._fetchall("finish_run", FINISH_RUN, (status, run_id, *columns))

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._fetchall("get_run", RUN_SELECT + "WHERE r.run_id = %s", (run_id,))
        return RunRecord(*rows[0]) if rows else None

    def runs_page(
        self, status: RunStatus | None, limit: int, after: RunCursor | None
    ) -> list[RunRecord]:
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("r.status = %s")
            params.append(status)
        if after is not None:
            # Keyset pagination: `updated_at <= x` is the range the spanpoint_runs_updated
            # index walks backwards from; the rest breaks ties by run id. to_timestamp gives
            # back the exact microsecond the epoch float was read from.
            clauses.append(
                "r.updated_at <= to_timestamp(%s) AND (r.updated_at < to_timestamp(%s) "
                "OR r.run_id < %s)"
            )
            params.extend((after[0], after[0], after[1]))
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        query = RUN_SELECT + where + "ORDER BY r.updated_at DESC, r.run_id DESC LIMIT %s"
        rows = self._fetchall("list_runs", query, (*params, limit))
        return [RunRecord(*row) for row in rows]

    # --- checkpoints and leases ----------------------------------------------------------

    def get(self, key: str) -> Checkpoint | None:
        rows = self._fetchall(
            "get",
            f"SELECT {READ_COLS} FROM spanpoint_checkpoints WHERE key = %s AND output IS NOT NULL",
            (key,),
        )
        return self._verified(rows[0]) if rows else None

    def _verified(self, row: Sequence[Any]) -> Checkpoint:
        """The checkpoint of a ``READ_COLS`` row (columns, then digest), integrity checked."""
        return verify_checkpoint(self._checkpoint(row[:-1]), row[-1], self.description)

    def claim(self, key: str, owner: str, ttl_s: float, *, fresh: bool = False) -> Claim:
        # One statement whose lease does not wait for the WAL flush (CLAIM says how): one
        # fsync fewer per boundary on a disk that syncs.
        rows = self._fetchall("claim", CLAIM, {"key": key, "owner": owner, "ttl": ttl_s})
        if not rows:  # the row appeared after this statement's snapshot: ask again soon
            return Claim("held", owner=None, expires_at=0.0)
        state, holder, expires_at, epoch, *cols = rows[0]
        if state == "committed":
            try:
                return Claim("committed", checkpoint=self._verified(cols))
            except CorruptCheckpointError as exc:
                return self._take_corrupt(key, owner, ttl_s, cols, exc)
        if state == "held" and holder and owner_is_dead_here(holder):
            rows = self._fetchall(
                "claim",
                "UPDATE spanpoint_checkpoints SET lease_owner = %s, "
                "lease_expires_at = now() + make_interval(secs => %s), "
                "lease_epoch = COALESCE(lease_epoch, 0) + 1 WHERE key = %s "
                "AND output IS NULL AND lease_owner = %s "
                f"RETURNING {EPOCH.format('lease_expires_at')}, lease_epoch",
                (owner, ttl_s, key, holder),
            )
            if not rows:
                return Claim("held", owner=holder, expires_at=expires_at)
            state, holder, (expires_at, epoch) = "acquired", owner, rows[0]
        if state == "acquired":
            self._heartbeat.hold(key, owner, ttl_s)
            return Claim(state, owner=holder, expires_at=expires_at, epoch=epoch)
        return Claim(state, owner=holder, expires_at=expires_at)

    def _take_corrupt(
        self, key: str, owner: str, ttl_s: float, cols: Sequence[Any], exc: Exception
    ) -> Claim:
        """Turn a committed row that failed its integrity check into ``owner``'s lease."""
        params = {"key": key, "owner": owner, "ttl": ttl_s}
        params.update(output=cols[7], output_type=cols[6], digest=cols[-1])
        rows = self._fetchall("claim", TAKE_CORRUPT, params)
        if not rows:  # another worker took it over first: ask again
            return Claim("held", owner=None, expires_at=0.0)
        self._heartbeat.hold(key, owner, ttl_s)
        expires_at, epoch = rows[0]
        return Claim("acquired", owner=owner, expires_at=expires_at, error=str(exc), epoch=epoch)

    def release(self, key: str, owner: str) -> None:
        self._heartbeat.drop(key, owner)
        self._run(
            "release",
            lambda c: c.execute(
                "DELETE FROM spanpoint_checkpoints WHERE key = %s AND lease_owner = %s "
                "AND output IS NULL",
                (key, owner),
            ),
        )

    # --- once-tokens -----------------------------------------------------------------------

    def take_once(self, kind: str, key: str, owner: str, ttl_s: float) -> OnceToken:
        params = {"kind": kind, "key": key, "owner": owner, "ttl": ttl_s}

        def op(conn: psycopg.Connection[Any]) -> OnceToken:
            with conn.transaction():
                taken = conn.execute(TAKE_ONCE, params).fetchall()
                if taken:
                    return OnceToken("taken", owner=owner, expires_at=taken[0][0])
                row = conn.execute(ONCE_STATE, params).fetchone()
            if row is not None and row[2]:
                return OnceToken("spent", owner=row[0])
            # Held by a live owner (no row: released meanwhile; the caller may ask again).
            if row is None:
                return OnceToken("held")
            return OnceToken("held", owner=row[0], expires_at=row[1])

        return self._run("take_once", op)

    def spend_once(self, kind: str, key: str, owner: str) -> bool:
        rows = self._fetchall(
            "spend_once",
            "UPDATE spanpoint_once SET spent_at = now() WHERE kind = %s AND key = %s "
            "AND owner = %s AND spent_at IS NULL RETURNING 1",
            (kind, key, owner),
        )
        return bool(rows)

    def release_once(self, kind: str, key: str, owner: str) -> None:
        self._fetchall(
            "release_once",
            "DELETE FROM spanpoint_once WHERE kind = %s AND key = %s AND owner = %s "
            "AND spent_at IS NULL",
            (kind, key, owner),
        )

    # --- notes -------------------------------------------------------------------------------

    def put_note(self, key: str, value: str) -> None:
        self._fetchall(
            "put_note",
            "INSERT INTO spanpoint_notes (key, value) VALUES (%s, %s) ON CONFLICT (key) "
            "DO UPDATE SET value = EXCLUDED.value, updated_at = now() RETURNING 1",
            (key, value),
        )

    def get_note(self, key: str) -> str | None:
        rows = self._fetchall(
            "get_note", "SELECT value FROM spanpoint_notes WHERE key = %s", (key,)
        )
        return str(rows[0][0]) if rows else None

    def put(
        self, checkpoint: Checkpoint, *, owner: str | None = None, epoch: int | None = None
    ) -> bool:
        cp = checkpoint
        row = (*checkpoint_row(cp), digest_of(cp))
        if owner is None:
            return bool(self._fetchall("put", PUT, row))
        self._heartbeat.drop(cp.key, owner)
        params = (*row[1:], row[0], owner, epoch, epoch)  # FENCED_PUT's order
        return bool(self._fetchall("put", FENCED_PUT, params))

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]:
        rows = self._fetchall(
            "list_checkpoints",
            f"SELECT {COLS} FROM spanpoint_checkpoints WHERE run_id = %s "
            "AND output IS NOT NULL ORDER BY seq",
            (run_id,),
        )
        return [self._checkpoint(row) for row in rows]

    def list_journal(self, run_id: str) -> list[BoundaryRecord]:
        rows = self._fetchall(
            "list_journal",
            "SELECT run_id, attempt, key, path, name, kind, status, span_id, parent_span_id, "
            "started_at_ns, ended_at_ns, error FROM spanpoint_journal WHERE run_id = %s "
            "ORDER BY seq",
            (run_id,),
        )
        return [BoundaryRecord(*row) for row in rows]

    def _checkpoint(self, row: Sequence[Any]) -> Checkpoint:
        return checkpoint_from_row(
            row,
            json.loads,
            self.description,
            "the boundary executes instead of replaying. Delete the row to re-commit it",
        )

    # --- lease heartbeat -----------------------------------------------------------------

    def renew_leases(self, held: Held) -> int:
        """Push the expiry of the given (key, owner) leases ``ttl_s`` ahead; return how many
        were still held (not committed, released or taken over)."""
        return len(self._renew(held))

    def _renew(self, held: Held) -> set[tuple[str, str]]:
        keys, owners, ttls = zip(*((k, o, t) for (k, o), t in held.items()), strict=True)
        rows = self._fetchall(
            "renew_leases",
            "UPDATE spanpoint_checkpoints c SET lease_expires_at = now() "
            "+ make_interval(secs => h.ttl) FROM unnest(%s::text[], %s::text[], %s::float8[]) "
            "AS h(key, owner, ttl) WHERE c.key = h.key AND c.lease_owner = h.owner "
            "AND c.output IS NULL RETURNING c.key, c.lease_owner",
            (list(keys), list(owners), list(ttls)),
        )
        return {(k, o) for k, o in rows}

    # --- waits ---------------------------------------------------------------------------

    def record_wait(
        self, run_id: str, name: str, question: str | None, schema: dict[str, Any] | None
    ) -> WaitRecord:
        rows = self._fetchall(
            "record_wait",
            "INSERT INTO spanpoint_waits AS w (run_id, name, question, schema) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (run_id, name) DO UPDATE SET "
            "question = COALESCE(w.question, excluded.question), "
            "schema = COALESCE(w.schema, excluded.schema) "
            f"RETURNING {WAIT_COLS}",
            (run_id, name, question, json_or_none(schema)),
        )
        return wait_from_row(rows[0])

    def provide_input(self, run_id: str, name: str, value_json: str) -> WaitRecord:
        rows = self._fetchall(
            "provide_input",
            "INSERT INTO spanpoint_waits AS w (run_id, name, value_json, provided_at) "
            "VALUES (%s, %s, %s, now()) ON CONFLICT (run_id, name) DO UPDATE SET "
            "value_json = excluded.value_json, provided_at = excluded.provided_at "
            f"RETURNING {WAIT_COLS}",
            (run_id, name, value_json),
        )
        return wait_from_row(rows[0])

    def list_waits(self, *, pending_only: bool = True) -> list[WaitRecord]:
        where = "WHERE value_json IS NULL " if pending_only else ""
        query = f"SELECT {WAIT_COLS} FROM spanpoint_waits {where}ORDER BY created_at"
        rows = self._fetchall("list_waits", query, ())
        return [wait_from_row(row) for row in rows]

    # --- retention -----------------------------------------------------------------------

    def delete_runs_older_than(self, seconds: float) -> int:
        rows = self._fetchall(
            "delete_runs_older_than",
            """
            WITH old AS (
                DELETE FROM spanpoint_runs
                WHERE updated_at < now() - make_interval(secs => %(s)s) RETURNING run_id
            ), checkpoints AS (
                DELETE FROM spanpoint_checkpoints WHERE run_id IN (SELECT run_id FROM old)
            ), stale_leases AS (
                DELETE FROM spanpoint_checkpoints WHERE output IS NULL
                    AND lease_expires_at < now() - make_interval(secs => %(s)s)
            ), journal AS (
                DELETE FROM spanpoint_journal WHERE run_id IN (SELECT run_id FROM old)
            ), waits AS (
                DELETE FROM spanpoint_waits WHERE run_id IN (SELECT run_id FROM old)
            ), once AS (
                DELETE FROM spanpoint_once WHERE COALESCE(spent_at, expires_at)
                    < now() - make_interval(secs => %(s)s)
            ), notes AS (
                DELETE FROM spanpoint_notes WHERE updated_at < now() - make_interval(secs => %(s)s)
            )
            SELECT count(*) FROM old
            """,
            {"s": seconds},
        )
        return int(rows[0][0])

    def close(self) -> None:
        self._heartbeat.stop()
        self._pool.close()


def _describe(dsn: str) -> str:
    """``postgresql://user@host:port/db``: what errors show, never the password."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgresql://<unparsable DSN>"
    user = f"{info['user']}@" if info.get("user") else ""
    port = f":{info['port']}" if info.get("port") else ""
    return f"postgresql://{user}{info.get('host', '')}{port}/{info.get('dbname', '')}"
