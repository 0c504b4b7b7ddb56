"""Subprocess driver for the durable-calls crash tests: one attempt of one scenario.

``python durable_driver.py SCENARIO FOLDER RUN_ID [options]`` runs one attempt and prints one
JSON line (the last line of stdout). The parent test SIGKILLs it by setting
``$DURABLE_KILL_AT`` (see durable_fakes.kill_point; ``graph-end`` kills in a span processor
that runs *before* spanpoint's, when the outermost graph call's span ends: the call finished,
its commit is lost). Executions are logged to ``$DURABLE_LOG``.

Only public spanpoint API: ``spanpoint.configure``, ``spanpoint.run``, ``GraphRunner``,
``CheckpointMiddleware``, ``SqliteStore``, and the zero-code instrumentor through its
``opentelemetry_instrumentor`` entry point.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes.py

import durable_agents as agents
from durable_fakes import KILL_ENV, conversation
from durable_support import load_instrumentor
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

RUNNER_NAMES = {"deep": "support", "supervisor": "team", "swarm": "team", "refund": "refund"}
THREAD = "thread-1"


class KillWhenGraphCallEnds(SpanProcessor):
    """SIGKILL when the outermost graph call's span ends, before spanpoint sees the span."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        if attrs.get("spanpoint.run.root"):
            return
        if span.name.startswith(("invoke_agent", "invoke_workflow")) and self.name in span.name:
            os.kill(os.getpid(), signal.SIGKILL)


def checkpointer(kind: str, folder: Path) -> Any:
    if kind == "none":
        return None
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(folder / "langgraph.db", check_same_thread=False)
    return SqliteSaver(conn)


def async_checkpointer(kind: str, folder: Path) -> Any:
    if kind == "none":
        return None
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async def make() -> Any:
        return AsyncSqliteSaver(await aiosqlite.connect(folder / "langgraph.db"))

    return make


def build(scenario: str, saver: Any, member_middleware: bool) -> tuple[Any, Any]:
    import spanpoint

    mw = [spanpoint.CheckpointMiddleware()]
    if scenario == "deep":
        return agents.deep_agent(checkpointer=saver, middleware=mw), agents.deep_input()
    if scenario == "supervisor":
        members = mw if member_middleware else []
        return agents.supervisor_app(checkpointer=saver, middleware=members), agents.team_input()
    if scenario == "swarm":
        members = mw if member_middleware else []
        return agents.swarm_app(checkpointer=saver, middleware=members), agents.team_input()
    if scenario == "refund":
        return agents.refund_agent(checkpointer=saver, middleware=mw), {
            "messages": [{"role": "user", "content": "Where is my refund for order 42?"}]
        }
    raise SystemExit(f"unknown scenario {scenario}")


SECOND_TURN = {"messages": [{"role": "user", "content": "And when does the money arrive?"}]}


def files_of(values: Any) -> dict[str, Any]:
    files = values.get("files") or {} if isinstance(values, dict) else {}
    return {path: data.get("content") for path, data in sorted(files.items())}


def summary(values: Any) -> dict[str, Any]:
    if not isinstance(values, dict):
        return {"values": repr(values)}
    return {
        "messages": conversation(values.get("messages", [])),
        "files": files_of(values),
        "todos": values.get("todos"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    parser.add_argument("folder", type=Path)
    parser.add_argument("run_id")
    parser.add_argument("--saver", default="none", choices=["none", "sqlite"])
    parser.add_argument("--strategy", default="calls", choices=["calls", "graph_call"])
    parser.add_argument("--mode", default="runner", choices=["runner", "zero-code"])
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--member-middleware", action="store_true")
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--durability", default=None, choices=["sync", "async", "exit"])
    parser.add_argument("--run-off", action="store_true", help="no spanpoint.run around it")
    args = parser.parse_args()

    import spanpoint

    name = RUNNER_NAMES[args.scenario]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    if os.environ.get(KILL_ENV) == "graph-end":
        provider.add_span_processor(KillWhenGraphCallEnds(name))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store_path = args.folder / "spanpoint.db"
    if args.mode == "zero-code":
        os.environ["SPANPOINT_STORE"] = str(store_path)
        os.environ["SPANPOINT_STRATEGY"] = args.strategy
        load_instrumentor().instrument(tracer_provider=provider)
    else:
        spanpoint.configure(tracer_provider=provider, store=spanpoint.SqliteStore(store_path))

    config = {"configurable": {"thread_id": THREAD}, "recursion_limit": 60}
    # LangGraph's own keyword: with "sync" every step's checkpoint has landed before the next
    # step starts, so a kill leaves the thread holding all progress before it.
    extra = {"durability": args.durability} if args.durability and args.saver != "none" else {}

    def graph_call(graph: Any, runner: Any, payload: Any) -> Any:
        if runner is not None:
            result = runner.invoke(payload, thread_id=THREAD, recursion_limit=60, **extra)
            return result.status, result.output
        return "completed", graph.invoke(payload, config, **extra)

    async def agraph_call(graph: Any, runner: Any, payload: Any) -> Any:
        if runner is not None:
            result = await runner.ainvoke(payload, thread_id=THREAD, recursion_limit=60, **extra)
            return result.status, result.output
        return "completed", await graph.ainvoke(payload, config, **extra)

    async def arun() -> dict[str, Any]:
        make = async_checkpointer(args.saver, args.folder)
        saver = await make() if make else None
        graph, first = build(args.scenario, saver, args.member_middleware)
        runner = None
        if args.mode == "runner":
            runner = spanpoint.GraphRunner(graph, name=name, strategy=args.strategy)
        payloads = [first, SECOND_TURN][: args.turns]
        outs = []
        with spanpoint.run(args.run_id) as r:
            for payload in payloads:
                outs.append(await agraph_call(graph, runner, payload))
        if saver is not None:
            await saver.conn.close()
        return {"outs": outs, "run": r}

    def srun() -> dict[str, Any]:
        saver = checkpointer(args.saver, args.folder)
        graph, first = build(args.scenario, saver, args.member_middleware)
        runner = None
        if args.mode == "runner":
            runner = spanpoint.GraphRunner(graph, name=name, strategy=args.strategy)
        payloads = [first, SECOND_TURN][: args.turns]
        outs = []
        if args.run_off:
            for payload in payloads:
                outs.append(graph_call(graph, runner, payload))
            return {"outs": outs, "run": None}
        with spanpoint.run(args.run_id) as r:
            for payload in payloads:
                outs.append(graph_call(graph, runner, payload))
        return {"outs": outs, "run": r}

    done = asyncio.run(arun()) if args.use_async else srun()
    run = done["run"]
    spans = [
        [s.name, bool((s.attributes or {}).get("spanpoint.replayed"))]
        for s in exporter.get_finished_spans()
    ]
    print(
        json.dumps(
            {
                "results": [{"status": st, **summary(out)} for st, out in done["outs"]],
                "run_status": run.status if run else None,
                "attempt": run.attempt if run else None,
                "warnings": run.warnings if run else [],
                "spans": spans,
            },
            default=str,
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
