"""A worker process that runs one durable run of N chained steps (single-flight and crash tests).

Usage: boundary_worker.py STORE RUN_ID EFFECTS_FILE [--steps N] [--sleep S] [--ttl S]
       [--wait-timeout S] [--strict] [--barrier FILE] [--hold-in I --ready FILE]
       [--pause-in I --ready FILE --go FILE] [--tagged] [--machine TOKEN [--owner-pid PID]]

Step ``i`` appends ``i pid time`` to EFFECTS_FILE under a lock (its side effect), sleeps ``--sleep``
seconds, and returns the accumulated value, so the final result depends on every step. Prints
``{"result", "attempt", "pid", "started", "ended"}`` as JSON on success.

``--barrier`` warms up, writes ``FILE.PID.ready`` and waits until FILE exists (so many workers
start together);
``--hold-in I`` writes ``--ready`` and then sleeps forever inside step I, after its side effect
(a worker to SIGKILL mid-boundary); ``--pause-in I`` does the same but goes on once ``--go``
exists (a worker that outlives a server outage, or one paused with SIGSTOP past its lease).
``--tagged`` makes each step's output carry the pid of the worker that executed it, so the
result tells whose outputs a worker used. ``--machine TOKEN`` makes the worker's lease owner ids
name another machine of the same host name and pid namespace number (boot id TOKEN): two
"hosts" sharing a host name, as far as the owner ids can tell; ``--owner-pid PID`` names PID
in them instead of its own (a pid live on its machine and dead on this one).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint import serde


def side_effect(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.005)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("run_id")
    parser.add_argument("effects")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument("--wait-timeout", type=float, default=120.0)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--keep-going", action="store_true", help="fail_when_unreachable=False")
    parser.add_argument("--barrier", default="")
    parser.add_argument("--hold-in", type=int, default=-1)
    parser.add_argument("--pause-in", type=int, default=-1)
    parser.add_argument("--ready", default="")
    parser.add_argument("--go", default="")
    parser.add_argument("--tagged", action="store_true")
    parser.add_argument("--machine", default="")
    parser.add_argument("--owner-pid", type=int, default=0)
    return parser.parse_args()


def run_steps(args: argparse.Namespace) -> int:
    """The durable run: step i adds (i + 1) * 7 to its input, after its side effect."""

    @spanpoint.step(name="add")
    def add(i: int, acc: int) -> int:
        side_effect(args.effects, f"{i} {os.getpid()} {time.time():.6f}")
        if i in (args.hold_in, args.pause_in):
            Path(args.ready).write_text(str(os.getpid()))
            if i == args.hold_in:
                time.sleep(3600)
            wait_for(args.go)
        if args.sleep:
            time.sleep(args.sleep)
        value = acc * 3 % 1_000_003 + (i + 1) * 7
        return value * 10_000_000 + os.getpid() if args.tagged else value

    acc = 1
    for i in range(args.steps):
        acc = add(i, acc)
    return acc


def main() -> None:
    args = parse()
    if args.machine:
        from spanpoint.stores import base

        # Owner ids without a machine part (older spanpoints) cannot tell twin hosts apart.
        if base._HOST.count("#") == 2:
            host, namespace, _boot = base._HOST.split("#")
            base._HOST = f"{host}#{namespace}#{args.machine}"
        if args.owner_pid:
            base._PROCESS_OWNER = f"{base._HOST}:{args.owner_pid}:{uuid.uuid4().hex}"
    store: Any = args.store
    if args.keep_going:
        from spanpoint.stores.postgres import PostgresStore

        store = PostgresStore(args.store, fail_when_unreachable=False)
    spanpoint.configure(
        store=store,
        tracer_provider=TracerProvider(),
        lease_ttl_s=args.ttl,
        lease_wait_timeout_s=args.wait_timeout,
    )
    if args.barrier:
        # Pay the lazy imports and the store's opening before the start line, so the workers
        # really start together.
        serde.dumps(serde.fingerprint([1]))
        spanpoint.settings().store.get("warm-up")
        Path(f"{args.barrier}.{os.getpid()}.ready").touch()
        wait_for(args.barrier)
    with spanpoint.run(args.run_id, name="chain", strict=args.strict) as run:
        started = time.time()
        result = run_steps(args)
        ended = time.time()
    report = {
        "result": result,
        "attempt": run.attempt,
        "pid": os.getpid(),
        "warnings": run.warnings,
    }
    print(json.dumps({**report, "started": started, "ended": ended}))


if __name__ == "__main__":
    main()
