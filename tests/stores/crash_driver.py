"""Crash fuzz driver: many trials of "kill a worker mid-run, then rerun it" against one store.

Usage: crash_driver.py STORE WORKDIR TRIALS SEED [--steps N] [--rerunners R]

One long-lived process pays Python's start-up once and forks the workers. Each trial forks a
worker that runs a fresh durable run of N chained steps and is killed at a random point: by
itself at a chosen step and phase (before its side effect, after it but before the commit,
or just after the commit), or by this driver with SIGKILL after a random delay. Then R
workers rerun the same run at once. The driver prints one JSON line per trial with what was
committed before the rerun, the side effects per step, the rerunners' results and whether the
checkpoints committed before the rerun were left untouched; the test judges them.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint import serde
from spanpoint.stores import open_store

PHASES = ("before_effect", "after_effect", "after_commit")


def step_value(i: int, acc: int) -> int:
    return acc * 3 % 1_000_003 + (i + 1) * 7


def expected_outputs(steps: int) -> list[int]:
    outputs, acc = [], 1
    for i in range(steps):
        acc = step_value(i, acc)
        outputs.append(acc)
    return outputs


def worker(store: str, run_id: str, effects: str, steps: int, crash: tuple[int, str] | None) -> int:
    """The body of a forked worker: run the chain, dying where ``crash`` says."""
    spanpoint.configure(store=store, tracer_provider=TracerProvider(), lease_wait_timeout_s=60)

    def die_if(i: int, phase: str) -> None:
        if crash == (i, phase):
            os.kill(os.getpid(), signal.SIGKILL)

    @spanpoint.step(name="add")
    def add(i: int, acc: int) -> int:
        die_if(i, "before_effect")
        with open(effects, "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(f"{i}\n")
            fh.flush()
        die_if(i, "after_effect")
        return step_value(i, acc)

    with spanpoint.run(run_id, name="fuzz"):
        acc = 1
        for i in range(steps):
            acc = add(i, acc)
            die_if(i, "after_commit")
    return acc


def fork_worker(*args: Any, run: Callable[..., Any] | None = None) -> tuple[int, int]:
    """Fork a process running ``run(*args)`` (this driver's :func:`worker` by default); return
    (pid, read end of a pipe that carries its result)."""
    run = worker if run is None else run
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into the driver
        os.close(read)
        code = 0
        try:
            os.write(write, json.dumps({"result": run(*args)}).encode())
        except BaseException as exc:
            os.write(write, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            code = 1
        os._exit(code)
    os.close(write)
    return pid, read


def reap(pid: int, read: int) -> dict[str, Any]:
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    report: dict[str, Any] = json.loads(data) if data else {}
    report["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return report


def committed(address: str, run_id: str, outputs: list[int]) -> dict[int, bytes]:
    """Step index → raw committed output, read by a short-lived store of the driver's own."""
    store = open_store(address)
    try:
        found = {}
        for cp in store.list_checkpoints(run_id):
            found[outputs.index(serde.loads(cp.output_type, cp.output))] = cp.output
        return found
    finally:
        store.close()


def trial(args: argparse.Namespace, n: int, rng: random.Random, clean_s: float) -> dict[str, Any]:
    run_id, effects = f"fuzz-{n}", os.path.join(args.workdir, f"effects-{n}.txt")
    outputs = expected_outputs(args.steps)
    crash: tuple[int, str] | None = None
    delay: float | None = None
    if rng.random() < 0.6:
        crash = (rng.randrange(args.steps), rng.choice(PHASES))
    else:
        delay = rng.uniform(0, clean_s * 1.2)
    pid, read = fork_worker(args.store, run_id, effects, args.steps, crash)
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    first = reap(pid, read)
    before = committed(args.store, run_id, outputs)
    reruns = [
        fork_worker(args.store, run_id, effects, args.steps, None) for _ in range(args.rerunners)
    ]
    results = [reap(pid, read) for pid, read in reruns]
    after = committed(args.store, run_id, outputs)
    with open(effects, encoding="utf-8") as fh:
        counts = Counter(int(line) for line in fh.read().split())
    return {
        "trial": n,
        "crash": crash,
        "delay": delay,
        "first": first,
        "committed_before": sorted(before),
        "effects": [counts.get(i, 0) for i in range(args.steps)],
        "results": results,
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
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rerunners", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    clean_s = 0.0
    for run_id in ("calibration-1", "calibration-2"):  # the second, with the schema in place
        started = time.monotonic()
        effects = os.path.join(args.workdir, f"{run_id}.txt")
        pid, read = fork_worker(args.store, run_id, effects, args.steps, None)
        assert "result" in reap(pid, read), "a crash-free run failed"
        clean_s = time.monotonic() - started
    for n in range(args.trials):
        print(json.dumps(trial(args, n, rng, clean_s)), flush=True)


if __name__ == "__main__":
    main()
