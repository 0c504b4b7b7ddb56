"""What only PostgresStore does: migrations, schemas, the lease heartbeat, safe descriptions.

The behaviour it shares with the other stores is in tests/stores/test_conformance.py.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from spanpoint.errors import StoreUnavailableError
from spanpoint.stores import open_store
from spanpoint.stores.base import Checkpoint
from spanpoint.stores.postgres import SCHEMA_VERSION, PostgresStore

pytestmark = pytest.mark.postgres


def checkpoint(key: str) -> Checkpoint:
    return Checkpoint(key, "r", "p", "n", "step", 0, "json", b"1", "ab" * 16, "cd" * 8)


def test_migrations_are_versioned_and_applied_once_even_by_pods_starting_together(
    pg_dsn: str,
) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            stores.append(PostgresStore(pg_dsn))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 6
    for store in stores:
        store.close()
    with psycopg.connect(pg_dsn) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM spanpoint_migrations")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def test_tables_go_to_the_schema_the_dsn_selects(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA agents")
    store = open_store(pg_dsn + "?options=-csearch_path%3Dagents")
    try:
        store.put(checkpoint("k"))
    finally:
        store.close()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT table_schema, count(*) FROM information_schema.tables "
            "WHERE table_name LIKE 'spanpoint_%%' GROUP BY table_schema"
        ).fetchall()
    assert rows == [("agents", 7)]  # runs, checkpoints, journal, waits, once, notes, migrations


def test_the_password_never_reaches_a_description_or_an_error(pg_dsn: str) -> None:
    agent = f"agent_{uuid.uuid4().hex[:8]}"  # roles are per server, databases per test
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {agent} LOGIN PASSWORD 's3cret-pw'")
        conn.execute(f"GRANT ALL ON SCHEMA public TO {agent}")
    host_part = pg_dsn.split("@", 1)[1]
    store = PostgresStore(f"postgresql://{agent}:s3cret-pw@{host_part}")
    try:
        assert "s3cret" not in store.description and f"{agent}@" in store.description
        assert "s3cret" not in repr(store)
    finally:
        store.close()
    with pytest.raises(StoreUnavailableError) as info:
        PostgresStore(f"postgresql://{agent}:s3cret-pw@{host_part.rsplit('/', 1)[0]}/nope")
    assert "s3cret" not in str(info.value) and "/nope" in str(info.value)


def test_a_live_store_renews_its_leases_past_the_ttl(pg_dsn: str) -> None:
    holder, rival = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    try:
        first = holder.claim("long-body", "pod-a:1:aaa", 1.2)
        assert first.state == "acquired" and first.expires_at is not None
        time.sleep(3.0)  # 2.5 TTLs: without the heartbeat the lease would be gone
        held = rival.claim("long-body", "pod-b:2:bbb", 30.0)
        assert held.state == "held" and held.owner == "pod-a:1:aaa"
        assert held.expires_at is not None and held.expires_at > first.expires_at + 1.2
        assert holder.put(checkpoint("long-body"), owner="pod-a:1:aaa")
        assert rival.claim("long-body", "pod-b:2:bbb", 30.0).state == "committed"
    finally:
        holder.close()
        rival.close()


def test_a_released_or_closed_holder_stops_renewing(pg_dsn: str) -> None:
    holder, rival = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    try:
        holder.claim("a", "pod-a:1:aaa", 0.4)
        holder.claim("b", "pod-a:1:aaa", 0.4)
        holder.release("a", "pod-a:1:aaa")
        assert rival.claim("a", "pod-b:2:bbb", 30.0).state == "acquired"
        holder.close()  # as if the pod died: nobody renews "b" any more
        time.sleep(0.6)
        assert rival.claim("b", "pod-b:2:bbb", 30.0).state == "acquired"
    finally:
        rival.close()


def test_a_user_without_create_gets_told_what_it_needs(pg_dsn: str) -> None:
    reader = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {reader} LOGIN")
    host_part = pg_dsn.split("@", 1)[1]
    with pytest.raises(StoreUnavailableError, match="needs CREATE on the schema"):
        PostgresStore(f"postgresql://{reader}@{host_part}")


def test_renew_skips_leases_that_were_taken_over(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    try:
        store.claim("k", "pod-a:1:aaa", 30.0)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE spanpoint_checkpoints SET lease_owner = 'pod-z:9:zzz'")
        assert store.renew_leases({("k", "pod-a:1:aaa"): 30.0}) == 0
        assert store.claim("k", "pod-b:2:bbb", 30.0).owner == "pod-z:9:zzz"
    finally:
        store.close()


def test_once_migrated_a_user_with_dml_grants_alone_can_work(pg_dsn: str) -> None:
    PostgresStore(pg_dsn).close()  # migrated by the owner
    worker = f"worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {worker} LOGIN")
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {worker}"
        )
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {worker}")
    store = PostgresStore(f"postgresql://{worker}@{pg_dsn.split('@', 1)[1]}")
    try:
        store.start_run("r", None)
        assert store.claim("k", "pod-a:1:aaa", 30.0).state == "acquired"
        assert store.put(checkpoint("k"), owner="pod-a:1:aaa")
        store.finish_run("r", "completed")
        assert store.delete_runs_older_than(0.0) == 1
    finally:
        store.close()
