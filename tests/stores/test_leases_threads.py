"""Leases per execution: threads, tasks and pool workers of one process are single-flight too.

A lease's owner is one execution of one boundary, not the process: two threads of a process on
one run id and one boundary (one checkpoint key) execute it once; the second waits for the
commit and replays it. Side effects are counted in a file under a lock. Each store is real:
memory, SQLite on a file, PostgreSQL on a throwaway server.
"""

from __future__ import annotations

import asyncio
import contextvars
import fcntl
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from operator import add
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

import spanpoint
from tests.conftest import Telemetry

TRIALS = 20


class Effects:
    """Side effects appended to a file under an exclusive lock, one line each."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def hit(self, what: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(what + "\n")
            fcntl.flock(fh, fcntl.LOCK_UN)

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


def test_two_threads_on_one_run_execute_a_boundary_once(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    effects = Effects(tmp_path / "effects.txt")

    @spanpoint.step(name="charge")
    def charge(order: str) -> str:
        effects.hit(order)
        time.sleep(0.02)  # keep the body running while the other thread claims
        return f"charged {order}"

    def worker(run_id: str, barrier: threading.Barrier) -> str:
        barrier.wait()
        with spanpoint.run(run_id):
            return charge("order-7")

    with ThreadPoolExecutor(max_workers=2) as pool:
        for trial in range(TRIALS):
            run_id = f"threads-{trial}-{uuid.uuid4().hex[:6]}"
            barrier = threading.Barrier(2)
            results = list(pool.map(worker, [run_id] * 2, [barrier] * 2))
            assert results == ["charged order-7"] * 2
            assert effects.lines() == ["order-7"] * (trial + 1), f"trial {trial}"
    spans = telemetry.spans("step charge")
    replayed = [s for s in spans if s.attributes and s.attributes["spanpoint.replayed"]]
    assert len(spans) == 2 * TRIALS and len(replayed) == TRIALS


def test_two_asyncio_tasks_on_one_run_execute_a_boundary_once(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    effects = Effects(tmp_path / "effects.txt")

    @spanpoint.step(name="charge")
    async def charge(order: str) -> str:
        effects.hit(order)
        await asyncio.sleep(0.02)
        return f"charged {order}"

    async def worker(run_id: str) -> str:
        async with spanpoint.run(run_id):
            return await charge("order-7")

    async def main() -> None:
        for trial in range(5):
            run_id = f"tasks-{trial}-{uuid.uuid4().hex[:6]}"
            results = await asyncio.gather(worker(run_id), worker(run_id))
            assert results == ["charged order-7"] * 2
            assert effects.lines() == ["order-7"] * (trial + 1)

    asyncio.run(main())


def test_gather_inside_one_run_follows_the_run(telemetry: Telemetry, tmp_path: Path) -> None:
    """Tasks copy the context: both calls are boundaries of the run, each executed once and
    replayed by the next attempt. Two calls with the same input are two boundaries (ordinals
    0 and 1), as two sequential calls are."""
    effects = Effects(tmp_path / "effects.txt")

    @spanpoint.step(name="fetch")
    async def fetch(url: str) -> str:
        effects.hit(url)
        await asyncio.sleep(0)
        return url.upper()

    async def attempt() -> list[str]:
        async with spanpoint.run("gather"):
            return list(await asyncio.gather(fetch("a"), fetch("a"), fetch("b")))

    assert asyncio.run(attempt()) == ["A", "A", "B"]
    assert asyncio.run(attempt()) == ["A", "A", "B"]
    assert sorted(effects.lines()) == ["a", "a", "b"]


def test_a_pool_with_the_context_copied_follows_the_run(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    effects = Effects(tmp_path / "effects.txt")

    @spanpoint.step(name="fetch")
    def fetch(url: str) -> str:
        effects.hit(url)
        return url.upper()

    def attempt() -> list[str]:
        with spanpoint.run("pool"), ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(contextvars.copy_context().run, fetch, u) for u in "ab"]
            return [f.result() for f in futures]

    assert attempt() == ["A", "B"]
    assert attempt() == ["A", "B"]
    assert sorted(effects.lines()) == ["a", "b"]  # replayed: part of the run


def test_a_plain_pool_inside_a_run_warns_that_the_step_is_outside_it(
    telemetry: Telemetry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    effects = Effects(tmp_path / "effects.txt")
    name = f"plain-{uuid.uuid4().hex[:6]}"

    @spanpoint.step(name=name)
    def fetch(url: str) -> str:
        effects.hit(url)
        return url.upper()

    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        for _ in range(2):
            with spanpoint.run("plain-pool"), ThreadPoolExecutor(max_workers=1) as pool:
                assert pool.submit(fetch, "a").result() == "A"
    warnings = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(warnings) == 1  # once per boundary name
    assert "outside any spanpoint.run" in warnings[0]
    assert "contextvars.copy_context().run" in warnings[0]
    assert effects.lines() == ["a", "a"]  # what the warning says: not durable
    # No run open anywhere: a plain step is no one's business.
    caplog.clear()

    @spanpoint.step(name=name + "-alone")
    def alone() -> int:
        return 1

    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        alone()
    assert not [r for r in caplog.records if "outside any spanpoint.run" in r.getMessage()]


class FanState(TypedDict):
    results: Annotated[list[str], add]


def test_langgraph_parallel_branches_follow_the_run(telemetry: Telemetry, tmp_path: Path) -> None:
    """Two nodes fan out from START and call one step with the same input inside one run.

    They are two boundaries of the run (ordinals 0 and 1 under the same parent), each executed
    once; the next attempt replays both. Two threads running the same graph on one run id
    execute each of those boundaries once between them.
    """
    from langgraph.graph import END, START, StateGraph

    effects = Effects(tmp_path / "effects.txt")

    @spanpoint.step(name="classify")
    def classify(text: str) -> str:
        effects.hit(text)
        time.sleep(0.01)
        return f"label:{text}"

    def left(state: FanState) -> dict[str, Any]:
        return {"results": [classify("same")]}

    def right(state: FanState) -> dict[str, Any]:
        return {"results": [classify("same")]}

    builder = StateGraph(FanState)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge("left", END)
    builder.add_edge("right", END)
    graph = builder.compile()

    with spanpoint.run("fan-out"):
        first = graph.invoke({"results": []})
    assert first["results"] == ["label:same", "label:same"]
    assert len(effects.lines()) == 2  # two boundaries, each once
    with spanpoint.run("fan-out"):
        assert graph.invoke({"results": []}) == first
    assert len(effects.lines()) == 2  # both replayed: the branches carried the run

    def worker(barrier: threading.Barrier) -> dict[str, Any]:
        barrier.wait()
        with spanpoint.run("fan-out-threads"):
            return graph.invoke({"results": []})

    barrier = threading.Barrier(2)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(worker, [barrier] * 2))
    assert results == [first, first]
    assert len(effects.lines()) == 4  # the new run's two boundaries, once each
