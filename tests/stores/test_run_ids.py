"""Any ``str`` is a run id that works, or one that gives a clear InvalidRunIdError: the same
on every store (memory, SQLite, PostgreSQL).

Hypothesis draws run ids from all of Unicode (lone surrogates and NUL included), from SQL and
LIKE metacharacters (``%``, ``_``, ``\\``, ``'``), and at every length up to past the limit.
Each id runs a step twice on every store: the first run executes it, the second replays it,
and the store names the run by exactly that id, with no other run's checkpoints. An id that
is refused is refused on every store alike, before anything is written, with
:class:`InvalidRunIdError` saying why.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

import spanpoint
from spanpoint.errors import InvalidRunIdError
from spanpoint.stores import MemoryStore, SqliteStore, open_store
from spanpoint.stores.base import CheckpointStore

METACHARACTERS = "%_\\'\"a;- "


@pytest.fixture(params=["memory+sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, CheckpointStore]]:
    found: dict[str, CheckpointStore] = {
        "memory": MemoryStore(),
        "sqlite": SqliteStore(tmp_path / "ids.db"),
    }
    if request.param == "postgres":
        found["postgres"] = open_store(request.getfixturevalue("pg_dsn"))
    yield found
    for store in found.values():
        store.close()


def attempt(store: CheckpointStore, run_id: str, nonce: str) -> str:
    """Run one step twice under ``run_id``: what happened, in words."""
    executed: list[str] = []

    @spanpoint.step(name="work")
    def work(nonce: str) -> str:
        executed.append(nonce)
        return f"done {nonce}"

    try:
        for _ in range(2):
            with spanpoint.run(run_id, store=store):
                assert work(nonce) == f"done {nonce}"
    except InvalidRunIdError as exc:
        assert str(exc), "an InvalidRunIdError says why"
        assert executed == []  # refused before anything ran
        return "refused"
    assert executed == [nonce], "the second run replays the step"
    record = store.get_run(run_id)
    assert record is not None and record.run_id == run_id
    checkpoints = store.list_checkpoints(run_id)
    assert checkpoints and {c.run_id for c in checkpoints} == {run_id}
    return "ran"


RUN_IDS = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),  # all of Unicode, Cs included
    st.text(METACHARACTERS, min_size=1, max_size=6),
    st.integers(500, 10_000).map(lambda n: "r" * n),
)


@seed(20261205)
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(run_id=RUN_IDS)
@example(run_id="ticket-\ud800")  # a lone surrogate (a raw UnicodeEncodeError before)
@example(run_id="ticket\x00-1")  # NUL (failed on PostgreSQL only before)
@example(run_id="t" * 10_000)
@example(run_id="50%_off\\'; DROP TABLE runs; --")
def test_a_run_id_works_or_is_refused_alike_on_every_store(
    configured: Any, stores: dict[str, CheckpointStore], run_id: str
) -> None:
    nonce = uuid.uuid4().hex
    outcomes = {kind: attempt(store, run_id, nonce) for kind, store in stores.items()}
    assert len(set(outcomes.values())) == 1, outcomes


@pytest.mark.parametrize(
    ("run_id", "says"),
    [
        ("ticket-\udc80", "lone surrogate"),
        ("ticket\x00", "NUL"),
        ("t" * 10_000, "10000 characters"),
        ("", "non-empty"),
        ("   ", "non-empty"),
    ],
)
def test_a_refused_run_id_says_why(configured: Any, run_id: str, says: str) -> None:
    with pytest.raises(InvalidRunIdError, match=says):
        with spanpoint.run(run_id):
            pass


def echo(text: str) -> str:
    return text


@seed(20261205)
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(run_ids=st.lists(st.text(METACHARACTERS, min_size=1, max_size=4), min_size=2, max_size=6))
def test_ids_that_differ_only_in_metacharacters_name_only_their_own_run(
    configured: Any, stores: dict[str, CheckpointStore], run_ids: list[str]
) -> None:
    """``a%`` is not a pattern for ``ab``, nor ``a_`` for ``ax``: every lookup is exact."""
    ids = sorted({r for r in run_ids if r.strip()})
    nonce = uuid.uuid4().hex
    for store in stores.values():
        for run_id in ids:
            with spanpoint.run(run_id, store=store):
                spanpoint.step(name=f"w{nonce}")(echo)(run_id)
        for run_id in ids:
            mine = [c for c in store.list_checkpoints(run_id) if c.path.endswith(nonce)]
            assert [c.run_id for c in mine] == [run_id], (run_id, ids)
            record = store.get_run(run_id)
            assert record is not None and record.run_id == run_id
