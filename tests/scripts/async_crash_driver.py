"""Crash driver for ``durability="async"``: SIGKILL a worker at seeded random points of a run
of many ``@step`` boundaries, rerun it, and report what the store kept and what ran again.

Usage: async_crash_driver.py STORE WORKDIR TRIALS SEED [--steps N] [--queue C] [--put-ms MS]

Built on the crash fuzz harness (``tests/stores/crash_driver.py``: one long-lived process forks
the workers; the chain of steps and its expected outputs are the same). Each worker runs with
``configure(durability="async", commit_queue=C)`` on a store whose commits take ``MS``
milliseconds more (a far PostgreSQL, a slow disk: the committer then lags the run, so a kill
finds commits queued). Each trial kills its worker with SIGKILL: half at a random delay chosen
by the driver (counted from its first step's side effect, within the time a crash-free run
spends in its steps), half by itself right after a random step returned. Then one worker reruns the
run to the end. One JSON line per trial; ``tests/durable/test_durability_async.py`` judges them.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stores"))

from crash_driver import committed, expected_outputs, fork_worker, reap, step_value
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint import serde
from spanpoint.stores import open_store
from spanpoint.stores.base import Checkpoint


class SlowStore:
    """The real store, each commit ``put_ms`` slower (every other call unchanged)."""

    def __init__(self, inner: Any, put_ms: float) -> None:
        self._inner = inner
        self._put_s = put_ms / 1000
        self.description = inner.description

    def put(
        self, checkpoint: Checkpoint, *, owner: str | None = None, epoch: int | None = None
    ) -> bool:
        time.sleep(self._put_s)
        return bool(self._inner.put(checkpoint, owner=owner, epoch=epoch))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def worker(args: argparse.Namespace, run_id: str, effects: str, die_after: int | None) -> int:
    """The body of a forked worker: run the chain, SIGKILLing itself after step ``die_after``."""
    store = SlowStore(open_store(args.store), args.put_ms)
    spanpoint.configure(
        store=store,  # type: ignore[arg-type]
        tracer_provider=TracerProvider(),
        lease_wait_timeout_s=60,
        durability="async",
        commit_queue=args.queue,
    )

    @spanpoint.step(name="add")
    def add(i: int, acc: int) -> int:
        with open(effects, "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(f"{i}\n")
            fh.flush()
        return step_value(i, acc)

    with spanpoint.run(run_id, name="async-fuzz"):
        acc = 1
        for i in range(args.steps):
            acc = add(i, acc)
            if die_after == i:  # returned; its commit may still be queued
                os.kill(os.getpid(), signal.SIGKILL)
    return acc


def effect_counts(path: str, steps: int) -> list[int]:
    if not os.path.exists(path):
        return [0] * steps
    with open(path, encoding="utf-8") as fh:
        counts = Counter(int(line) for line in fh.read().split())
    return [counts.get(i, 0) for i in range(steps)]


def wait_for_first_effect(effects: str, pid: int) -> None:
    """Return once the worker's first step has written its side effect (or it is gone)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(effects) and time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):  # pragma: no cover - died before a step
            raise RuntimeError("the worker exited before its first step")
        time.sleep(0.001)


def trial(args: argparse.Namespace, n: int, rng: random.Random, clean_s: float) -> dict[str, Any]:
    run_id, effects = f"async-{n}", os.path.join(args.workdir, f"effects-{n}.txt")
    outputs = expected_outputs(args.steps)
    die_after: int | None = None
    delay: float | None = None
    if n % 2:
        die_after = rng.randrange(args.steps)
    else:
        delay = rng.uniform(0, clean_s * 0.8)
    pid, read = fork_worker(args, run_id, effects, die_after, run=worker)
    if delay is not None:
        wait_for_first_effect(effects, pid)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    first = reap(pid, read)
    before = committed(args.store, run_id, outputs)
    executed_first = effect_counts(effects, args.steps)
    pid, read = fork_worker(args, run_id, effects, None, run=worker)
    rerun = reap(pid, read)
    after = committed(args.store, run_id, outputs)
    return {
        "trial": n,
        "die_after": die_after,
        "delay": delay,
        "first": first,
        "committed_before": sorted(before),
        "effects_first": executed_first,
        "effects": effect_counts(effects, args.steps),
        "rerun": rerun,
        "expected": outputs[-1],
        "committed_after": sorted(after),
        "kept": all(after.get(i) == raw for i, raw in before.items()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("workdir")
    parser.add_argument("trials", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--queue", type=int, default=4)
    parser.add_argument("--put-ms", type=float, default=2.0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    # Load the serializer once here, so that no forked worker spends its first step importing it
    # (the kills are meant to land among the steps, not in an import).
    serde.loads(*serde.dumps({"warm": 1}))
    clean_s = 0.0
    for run_id in ("calibration-1", "calibration-2"):  # the second, with the schema in place
        effects = os.path.join(args.workdir, f"{run_id}.txt")
        pid, read = fork_worker(args, run_id, effects, None, run=worker)
        wait_for_first_effect(effects, pid)
        started = time.monotonic()
        assert "result" in reap(pid, read), "a crash-free run failed"
        clean_s = time.monotonic() - started  # from the first step to the worker's exit
    # The store's own view, for the judge: a crash-free run committed every step.
    store = open_store(args.store)
    try:
        assert len(store.list_checkpoints("calibration-2")) == args.steps
    finally:
        store.close()
    for n in range(args.trials):
        print(json.dumps(trial(args, n, rng, clean_s)), flush=True)


if __name__ == "__main__":
    main()
