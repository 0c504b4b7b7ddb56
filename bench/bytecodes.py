"""Bytecodes executed per boundary, per function: a profile that machine load cannot move.

``sys.settrace`` with opcode events counts every bytecode the interpreter runs, attributed
to its function (self) and to every function on the stack (inclusive). C code (SQLite,
sha256, the JSON encoder) is not counted, and tracing makes the run ~50× slower, so this
says *where* Python work goes, not how long it takes; bench/README.md ("@step and
graph_call against their floors") reads it beside CPU time and callgrind instructions.

    .venv/bin/python bench/bytecodes.py step replayed_steps      # any bench_step contender
    .venv/bin/python bench/bytecodes.py linear spanpoint_graph_call [--top 60]

``linear`` contenders: ``none``, ``none_thread`` (the runner's config, a thread id),
``floor_graph_call`` and ``spanpoint_graph_call``, each inside one open ``spanpoint.run``.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Counts:
    """Bytecodes per function while :meth:`trace` is installed."""

    def __init__(self) -> None:
        self.own: collections.Counter[str] = collections.Counter()
        self.inclusive: collections.Counter[str] = collections.Counter()

    @staticmethod
    def name(code: CodeType) -> str:
        path = code.co_filename.split("site-packages/")[-1].split("/src/")[-1]
        return f"{path}:{code.co_qualname}"

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.own[self.name(frame.f_code)] += 1
            seen: set[str] = set()
            caller: FrameType | None = frame
            while caller is not None:
                name = self.name(caller.f_code)
                if name not in seen:  # a recursive function counts once per bytecode
                    self.inclusive[name] += 1
                    seen.add(name)
                caller = caller.f_back
        return self.trace

    def measure(self, fn: Callable[[], Any]) -> None:
        sys.settrace(self.trace)
        try:
            fn()
        finally:
            sys.settrace(None)


def step_contender(name: str, directory: Path) -> tuple[Callable[[], Any], int]:
    """One round of a bench_step contender (warmed up), and the boundaries it makes."""
    import bench_step

    bench = bench_step.Bench(directory)
    fn = getattr(bench, name)
    for _ in range(2):
        fn()
        bench.clear()
    return fn, bench_step.STEPS


def linear_contender(name: str, directory: Path) -> tuple[Callable[[], Any], int]:
    """Five invokes of ``linear`` under ``name`` inside one run (warmed up)."""
    import setups
    import workloads

    import spanpoint
    from spanpoint.graph import GraphRunner

    logging.disable(logging.WARNING)  # "the graph has no checkpointer", once
    telemetry = setups.Telemetry()
    setups._configure(directory, telemetry)
    graph = workloads.build_linear()
    runner = GraphRunner(graph, name="linear", strategy="graph_call")
    protocol = setups._Protocol(directory, telemetry, True)
    ids = itertools.count(1)

    def floor(i: int) -> Any:
        span, key = protocol.begin("invoke_agent linear")
        output = graph.invoke({"n": i})
        protocol.commit(span, key, output)
        return output

    calls: dict[str, Callable[[int], Any]] = {
        "none": lambda i: graph.invoke({"n": i}),
        "none_thread": lambda i: graph.invoke({"n": i}, {"configurable": {"thread_id": f"t{i}"}}),
        "floor_graph_call": floor,
        "spanpoint_graph_call": lambda i: runner.invoke({"n": i}, thread_id=f"t{i}"),
    }
    call, invokes = calls[name], 5
    scope = spanpoint.run("bytecodes-run")
    scope.__enter__()  # left open: the process ends after the count

    def batch() -> None:
        for _ in range(invokes):
            call(next(ids))

    batch()
    return batch, invokes


def main() -> None:
    """Count one contender and print its totals per boundary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=("step", "linear"))
    parser.add_argument("contender")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    os.environ.setdefault("SPANPOINT_TRACE_FILE", os.devnull)
    with tempfile.TemporaryDirectory(prefix="spanpoint-bytecodes-") as tmp:
        build = step_contender if args.workload == "step" else linear_contender
        fn, per = build(args.contender, Path(tmp))
        counts = Counts()
        counts.measure(fn)
    total = sum(counts.own.values())
    print(f"{total / per:.0f} bytecodes per boundary ({args.workload} {args.contender})")
    for title, counter in (("inclusive", counts.inclusive), ("self", counts.own)):
        print(f"--- {title}")
        for name, n in counter.most_common(args.top):
            print(f"{n / per:9.0f} {name}")


if __name__ == "__main__":
    main()
