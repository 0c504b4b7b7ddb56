"""The SQL of :mod:`spanpoint.stores.postgres`: versioned migrations and its statements.

Kept apart so the store's logic reads on its own and the schema can be reviewed in one place.
"""

from __future__ import annotations

#: Schema migrations, applied in order; version N is ``MIGRATIONS[N - 1]``. Append, never edit.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE spanpoint_runs (
        run_id text PRIMARY KEY,
        name text,
        attempts integer NOT NULL,
        status text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX spanpoint_runs_updated ON spanpoint_runs (updated_at);
    CREATE SEQUENCE spanpoint_commit_seq;
    CREATE TABLE spanpoint_checkpoints (
        key text PRIMARY KEY,
        run_id text,
        path text,
        name text,
        kind text,
        ordinal integer,
        output_type text,
        output bytea,
        trace_id text,
        span_id text,
        parent_span_id text,
        attempt integer,
        started_at_ns bigint,
        ended_at_ns bigint,
        view text,
        seq bigint,
        committed_at timestamptz,
        lease_owner text,
        lease_expires_at timestamptz
    );
    CREATE INDEX spanpoint_checkpoints_run ON spanpoint_checkpoints (run_id, seq);
    CREATE INDEX spanpoint_checkpoints_pending ON spanpoint_checkpoints (lease_expires_at)
        WHERE output IS NULL;
    CREATE TABLE spanpoint_journal (
        seq bigserial PRIMARY KEY,
        run_id text NOT NULL,
        attempt integer NOT NULL,
        key text NOT NULL,
        path text NOT NULL,
        name text NOT NULL,
        kind text NOT NULL,
        status text NOT NULL,
        span_id text NOT NULL,
        parent_span_id text,
        started_at_ns bigint NOT NULL,
        ended_at_ns bigint NOT NULL,
        error text
    );
    CREATE INDEX spanpoint_journal_run ON spanpoint_journal (run_id, seq);
    CREATE TABLE spanpoint_waits (
        run_id text NOT NULL,
        name text NOT NULL,
        question text,
        schema text,
        value_json text,
        created_at timestamptz NOT NULL DEFAULT now(),
        provided_at timestamptz,
        PRIMARY KEY (run_id, name)
    );
    """,
    # Each committed row carries the sha256 of its output, type tag and identity, checked on
    # every read that can replay it; rows committed before keep NULL and read as before.
    """
    ALTER TABLE spanpoint_checkpoints ADD COLUMN digest text;
    """,
    # Once-tokens (spanpoint.stores.once): their own table, no run owns them; gc sweeps a
    # token by when it was spent, or when its lease expired.
    """
    CREATE TABLE spanpoint_once (
        kind text NOT NULL,
        key text NOT NULL,
        owner text NOT NULL,
        expires_at timestamptz NOT NULL,
        spent_at timestamptz,
        PRIMARY KEY (kind, key)
    );
    """,
    # What entered each key, for forks and diffs: the input fingerprint, the
    # parent-identity path and a redacted view of the input. Rows committed before read NULL.
    """
    ALTER TABLE spanpoint_checkpoints ADD COLUMN fingerprint text,
        ADD COLUMN identity text, ADD COLUMN input_view text;
    """,
    # Fenced leases: each lease carries an epoch that grows when it passes to another owner,
    # and a commit names the owner and epoch it holds. Leases taken before read epoch NULL.
    """
    ALTER TABLE spanpoint_checkpoints ADD COLUMN lease_epoch bigint;
    """,
    # Notes (put_note/get_note): opaque text under an opaque key; gc sweeps them by age.
    """
    CREATE TABLE spanpoint_notes (
        key text PRIMARY KEY,
        value text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX spanpoint_notes_updated ON spanpoint_notes (updated_at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

COLS = (
    "key, run_id, path, name, kind, ordinal, output_type, output, trace_id, span_id, "
    "parent_span_id, attempt, started_at_ns, ended_at_ns, view, fingerprint, identity, "
    "input_view"
)
#: What a read that may replay selects: the checkpoint's columns, then its digest.
READ_COLS = COLS + ", digest"
NULL_COLS = ", ".join(["NULL"] * len(READ_COLS.split(",")))
EPOCH = "extract(epoch FROM {})::float8"
LEASE_FREE = (
    "c.output IS NULL AND (c.lease_owner IS NULL OR c.lease_owner = excluded.lease_owner "
    "OR c.lease_expires_at <= now())"
)

# One statement, one round trip. `done` reads the committed row from the statement's snapshot;
# `taken` upserts the lease, and ON CONFLICT judges the *latest* row version, so a commit that
# lands after the snapshot can never be mistaken for a free lease. A row neither sees (it
# appeared after the snapshot) yields no result: the caller reports "held" and asks again.
# A lease need not survive a crash of the server, so the statement's own transaction does not
# wait for its WAL flush: `async_commit` sets synchronous_commit for this transaction only
# (read when it commits), and `taken` scans it, so every path that writes (insert, take-over,
# the row lock of a refused take-over) runs it; a replay's read-only claim writes nothing to
# flush. In the statement rather than a `SET LOCAL` before it: a transaction of two statements
# costs the worker three round trips more per boundary (BEGIN, SET, COMMIT each wait).
# `found` is the key's row as the snapshot sees it, read once through the primary key: `done`
# and the "held" answer both read it. (A "held" branch reading the table again by `key` and
# `output IS NULL` was planned on the pending-leases partial index, which it then scanned
# whole with a filter on the key: every lease that was ever taken since the last vacuum, so a
# lease wait grew with the traffic.)
CLAIM = f"""
WITH found AS MATERIALIZED (
    SELECT {READ_COLS}, lease_owner, lease_expires_at FROM spanpoint_checkpoints
    WHERE key = %(key)s
), done AS (
    SELECT {READ_COLS} FROM found WHERE output IS NOT NULL
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), taken AS (
    INSERT INTO spanpoint_checkpoints AS c (key, lease_owner, lease_expires_at, lease_epoch)
    SELECT %(key)s, %(owner)s, now() + make_interval(secs => %(ttl)s), 1 FROM async_commit
    WHERE NOT EXISTS (SELECT 1 FROM done)
    ON CONFLICT (key) DO UPDATE
        SET lease_owner = excluded.lease_owner, lease_expires_at = excluded.lease_expires_at,
            lease_epoch = CASE WHEN c.lease_owner = excluded.lease_owner THEN c.lease_epoch
                ELSE COALESCE(c.lease_epoch, 0) + 1 END
        WHERE {LEASE_FREE}
    RETURNING c.lease_owner, c.lease_expires_at, c.lease_epoch
)
SELECT 'committed', NULL, NULL::float8, NULL::bigint, {READ_COLS} FROM done
UNION ALL
SELECT 'acquired', lease_owner, {EPOCH.format("lease_expires_at")}, lease_epoch, {NULL_COLS}
    FROM taken
UNION ALL
SELECT 'held', f.lease_owner, {EPOCH.format("f.lease_expires_at")}, NULL::bigint, {NULL_COLS}
    FROM found f
    WHERE f.output IS NULL AND NOT EXISTS (SELECT 1 FROM done) AND NOT EXISTS (SELECT 1 FROM taken)
"""

# The first commit of a key wins: for an execution that holds no lease (its claim failed).
PUT = f"""
INSERT INTO spanpoint_checkpoints AS c ({READ_COLS}, seq, committed_at)
VALUES ({", ".join(["%s"] * len(READ_COLS.split(",")))},
        nextval('spanpoint_commit_seq'), now())
ON CONFLICT (key) DO UPDATE SET
    {", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in READ_COLS.split(",")[1:])},
    seq = excluded.seq, committed_at = excluded.committed_at,
    lease_owner = NULL, lease_expires_at = NULL
    WHERE c.output IS NULL
RETURNING 1
"""

# A fenced commit: the row of the lease the owner holds at the epoch (any epoch when NULL) is
# filled in and its lease ended in one statement, so the check and the write are one atomic
# step (the UPDATE locks the row it checks). No row back: the lease was taken over, released
# or committed, and nothing was written. Parameters by position (psycopg maps a dict of named
# ones to positions on every call): the checkpoint's columns after `key` in READ_COLS order,
# then key, owner, epoch, epoch.
FENCED_PUT = f"""
UPDATE spanpoint_checkpoints SET
    {", ".join(f"{c.strip()} = %s" for c in READ_COLS.split(",")[1:])},
    seq = nextval('spanpoint_commit_seq'), committed_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
WHERE key = %s AND output IS NULL AND lease_owner = %s
    AND (%s::bigint IS NULL OR lease_epoch = %s::bigint)
RETURNING 1
"""

# A run's end in one statement, so one round trip and one transaction: its status, and its
# attempt's journal from one array per column (BoundaryRecord field order), inserted in the
# journal's order (`seq` follows WITH ORDINALITY).
JOURNAL_COLUMNS = (
    ("run_id", "text"), ("attempt", "integer"), ("key", "text"), ("path", "text"),
    ("name", "text"), ("kind", "text"), ("status", "text"), ("span_id", "text"),
    ("parent_span_id", "text"), ("started_at_ns", "bigint"), ("ended_at_ns", "bigint"),
    ("error", "text"),
)  # fmt: skip
FINISH_RUN = f"""
WITH finished AS (
    UPDATE spanpoint_runs SET status = %s, updated_at = now() WHERE run_id = %s
)
INSERT INTO spanpoint_journal ({", ".join(name for name, _ in JOURNAL_COLUMNS)})
SELECT {", ".join(name for name, _ in JOURNAL_COLUMNS)}
FROM unnest({", ".join(f"%s::{kind}[]" for _, kind in JOURNAL_COLUMNS)})
    WITH ORDINALITY AS j({", ".join(name for name, _ in JOURNAL_COLUMNS)}, n)
ORDER BY n
"""

# A committed row that failed its integrity check becomes the claimer's lease: the boundary
# executes again and its commit replaces the row. Matching the corrupted bytes makes a second
# worker that saw the same row a no-op once the first has taken it over.
TAKE_CORRUPT = f"""
UPDATE spanpoint_checkpoints SET output = NULL, output_type = NULL, digest = NULL, seq = NULL,
    committed_at = NULL, lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(ttl)s),
    lease_epoch = COALESCE(lease_epoch, 0) + 1
WHERE key = %(key)s AND output IS NOT DISTINCT FROM %(output)s
    AND output_type IS NOT DISTINCT FROM %(output_type)s
    AND digest IS NOT DISTINCT FROM %(digest)s
RETURNING {EPOCH.format("lease_expires_at")}, lease_epoch
"""

RUN_SELECT = f"""
SELECT r.run_id, r.name, r.attempts, r.status, {EPOCH.format("r.created_at")},
    {EPOCH.format("r.updated_at")},
    (SELECT count(*) FROM spanpoint_checkpoints c
        WHERE c.run_id = r.run_id AND c.output IS NOT NULL)
FROM spanpoint_runs r
"""

WAIT_COLS = (
    f"run_id, name, question, schema, value_json, {EPOCH.format('created_at')}, "
    f"{EPOCH.format('provided_at')}"
)

# Taking a once-token is one statement: insert it, or take it over when it is unspent and its
# lease is ours or expired. No row back means it is spent or held: ONCE_STATE says which.
TAKE_ONCE = f"""
INSERT INTO spanpoint_once AS o (kind, key, owner, expires_at)
    VALUES (%(kind)s, %(key)s, %(owner)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (kind, key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
    WHERE o.spent_at IS NULL AND (o.owner = excluded.owner OR o.expires_at <= now())
RETURNING {EPOCH.format("o.expires_at")}
"""
ONCE_STATE = f"""
SELECT owner, {EPOCH.format("expires_at")}, spent_at IS NOT NULL FROM spanpoint_once
    WHERE kind = %(kind)s AND key = %(key)s
"""
