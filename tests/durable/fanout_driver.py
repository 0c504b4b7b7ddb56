"""Subprocess driver of the fan-out crash tests: one attempt of one research fan-out.

``python fanout_driver.py SHAPE FOLDER RUN_ID [--saver none|memory|sqlite] [--async]
[--call invoke|stream] [--stream-mode MODE[,MODE]] [--subgraphs]`` runs one attempt inside
``spanpoint.run(RUN_ID)`` and prints one JSON line (the last line of stdout).

The graph: three research branches (topics ``a``, ``b``, ``c``), each a compiled subgraph
that makes two model calls and one tool call (``plan``, ``search``, ``write``). ``send``
reaches the subgraph through ``Send`` (LangGraph runs the branches in parallel); ``gather``
calls it from a supervisor node (``asyncio.gather`` under ``--async``, one after the other
otherwise).

Kill: ``$FANOUT_KILL=LABEL@N`` makes the call ``LABEL`` wait, before it executes, until N model
and tool calls are committed in spanpoint's store, then SIGKILL the process: the other
branches run on meanwhile, so which calls completed is known exactly, without timing.
Every real execution is logged under a lock (``durable_fakes.record``). Models answer from the
conversation; real executions of branches ``a`` and ``b`` are slower than ``c``'s, so the
order in which branches reach each step differs between an attempt and its rerun.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes.py

from durable_fakes import LOG_ENV, record
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_stream_writer
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send
from opentelemetry.sdk.trace import TracerProvider

from fakes import ScriptedModel
from spanpoint.graph.types import StreamReplayError

KILL_ENV = "FANOUT_KILL"
STORE_ENV = "FANOUT_STORE"
TOPICS = ("a", "b", "c")
DELAY = {"a": 0.12, "b": 0.06, "c": 0.0}
THREAD = "fanout-thread"


def _committed_calls() -> int:
    conn = sqlite3.connect(f"file:{os.environ[STORE_ENV]}?mode=ro", uri=True, timeout=30)
    try:
        (count,) = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE kind IN ('model_call', 'tool_call')"
        ).fetchone()
    except sqlite3.OperationalError:  # no table yet
        return 0
    finally:
        conn.close()
    return int(count)


def execute(label: str, topic: str) -> None:
    """One real execution: the kill point, the log, and the branch's own pace."""
    spec = os.environ.get(KILL_ENV, "")
    if spec.partition("@")[0] == label:
        wanted = int(spec.partition("@")[2])
        for _ in range(6000):  # a deadlock guard, not a timing assumption
            if _committed_calls() >= wanted:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.01)
        raise RuntimeError(f"{wanted} commits never came")
    record(os.environ[LOG_ENV], label.split(":")[0], label)
    time.sleep(DELAY[topic])


def topic_of(messages: list[BaseMessage]) -> str:
    first = next(m for m in messages if isinstance(m, HumanMessage))
    return str(first.content).removeprefix("research ")


def research(turn: int, messages: list[BaseMessage]) -> str:
    """Plans when the branch has no AI turn yet, else writes the report from the notes."""
    topic = topic_of(messages)
    notes = [str(m.content) for m in messages if str(m.content).startswith("notes ")]
    label, text = (
        (f"plan:{topic}", f"plan for {topic}")
        if turn == 0
        else (f"write:{topic}", f"report on {topic} from {notes}")
    )
    execute(label, topic)
    return text


@tool
def search(query: str) -> str:
    """Search the web."""
    execute(f"search:{query}", query)
    return f"results for {query}"


MODEL = ScriptedModel(script=research, usage=None)


class Research(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    reports: Annotated[list[str], operator.add]


class Reports(TypedDict):
    reports: Annotated[list[str], operator.add]


class Outer(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    reports: Annotated[list[str], operator.add]


def _notes(state: Research, found: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"notes {found}")]}


def _report(state: Research, reply: BaseMessage) -> dict[str, Any]:
    get_stream_writer()({"report": topic_of(state["messages"])})
    return {"messages": [reply], "reports": [str(reply.content)]}


def research_graph(use_async: bool, checkpointer: Any) -> Any:
    graph = StateGraph(Research, output_schema=Reports)
    if use_async:

        async def plan(state: Research) -> dict[str, Any]:
            return {"messages": [await MODEL.ainvoke(state["messages"])]}

        async def look(state: Research) -> dict[str, Any]:
            return _notes(state, await search.ainvoke({"query": topic_of(state["messages"])}))

        async def write(state: Research) -> dict[str, Any]:
            return _report(state, await MODEL.ainvoke(state["messages"]))
    else:

        def plan(state: Research) -> dict[str, Any]:  # type: ignore[misc]
            return {"messages": [MODEL.invoke(state["messages"])]}

        def look(state: Research) -> dict[str, Any]:  # type: ignore[misc]
            return _notes(state, search.invoke({"query": topic_of(state["messages"])}))

        def write(state: Research) -> dict[str, Any]:  # type: ignore[misc]
            return _report(state, MODEL.invoke(state["messages"]))

    graph.add_node("plan", plan)
    graph.add_node("search", look)
    graph.add_node("write", write)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "search")
    graph.add_edge("search", "write")
    return graph.compile(checkpointer=checkpointer)


def _branch(topic: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"research {topic}")], "reports": []}


def _topics(state: Outer) -> list[str]:
    asked = str(state["messages"][0].content)
    return [t for t in asked.split() if t in TOPICS]


def app(shape: str, use_async: bool, saver: Any) -> Any:
    graph = StateGraph(Outer)
    if shape == "send":
        graph.add_node("researcher", research_graph(use_async, None))
        graph.add_conditional_edges(
            START, lambda state: [Send("researcher", _branch(t)) for t in _topics(state)]
        )
        return graph.compile(checkpointer=saver)
    # Called from a node, the subgraph runs under the node's checkpointer; LangGraph's
    # subgraph counter gives each of the three calls its own namespace.
    research = research_graph(use_async, None)
    if use_async:

        async def supervise(state: Outer) -> dict[str, Any]:
            done = await asyncio.gather(*(research.ainvoke(_branch(t)) for t in _topics(state)))
            return {"reports": [r for out in done for r in out["reports"]]}
    else:

        def supervise(state: Outer) -> dict[str, Any]:  # type: ignore[misc]
            done = [research.invoke(_branch(t)) for t in _topics(state)]
            return {"reports": [r for out in done for r in out["reports"]]}

    graph.add_node("supervise", supervise)
    graph.add_edge(START, "supervise")
    return graph.compile(checkpointer=saver)


def sync_saver(kind: str, folder: Path) -> Any:
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        return SqliteSaver(sqlite3.connect(folder / "langgraph.db", check_same_thread=False))
    return None


async def async_saver(kind: str, folder: Path) -> Any:
    if kind == "sqlite":
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        return AsyncSqliteSaver(await aiosqlite.connect(folder / "langgraph.db"))
    return sync_saver(kind, folder)


QUESTION = {"messages": [HumanMessage("research a b c")], "reports": []}


def describe(values: Any) -> dict[str, Any]:
    messages = values.get("messages", []) if isinstance(values, dict) else []
    return {
        "reports": sorted(values.get("reports", [])) if isinstance(values, dict) else None,
        "questions": [str(m.content) for m in messages if isinstance(m, HumanMessage)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=["send", "gather"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("run_id")
    parser.add_argument("--saver", default="none", choices=["none", "memory", "sqlite"])
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--call", default="invoke", choices=["invoke", "stream"])
    parser.add_argument("--stream-mode", default="updates")
    parser.add_argument("--subgraphs", action="store_true", help="stream with subgraphs=True")
    parser.add_argument(
        "--rerun-log",
        type=Path,
        default=None,
        help="then rerun the completed run (new graph, new saver), logging to this file",
    )
    args = parser.parse_args()

    import spanpoint

    store = args.folder / "spanpoint.db"
    os.environ[STORE_ENV] = str(store)
    spanpoint.configure(tracer_provider=TracerProvider(), store=spanpoint.SqliteStore(store))
    config = {"configurable": {"thread_id": THREAD}}
    modes = args.stream_mode.split(",")
    mode: Any = modes[0] if len(modes) == 1 else modes
    streaming = {"stream_mode": mode, "subgraphs": args.subgraphs}

    async def arun() -> dict[str, Any]:
        saver = await async_saver(args.saver, args.folder)
        try:
            return await arun_with(saver)
        finally:
            if hasattr(saver, "conn"):
                await saver.conn.close()  # aiosqlite's thread would keep the process alive

    async def arun_with(saver: Any) -> dict[str, Any]:
        graph = app(args.shape, True, saver)
        runner = spanpoint.GraphRunner(graph, name="research", strategy="calls")
        chunks = 0
        result = None
        with spanpoint.run(args.run_id) as run:
            if args.call == "invoke":
                result = await runner.ainvoke(QUESTION, config)
            else:
                async for _ in runner.astream(QUESTION, config, **streaming):
                    chunks += 1
        if result is not None:
            values = result.output
        else:
            values = (await graph.aget_state(config)).values if saver is not None else {}
        return {"values": values, "chunks": chunks, "attempt": run.attempt}

    def srun() -> dict[str, Any]:
        saver = sync_saver(args.saver, args.folder)
        graph = app(args.shape, False, saver)
        runner = spanpoint.GraphRunner(graph, name="research", strategy="calls")
        chunks = 0
        result = None
        with spanpoint.run(args.run_id) as run:
            if args.call == "invoke":
                result = runner.invoke(QUESTION, config)
            else:
                for _ in runner.stream(QUESTION, config, **streaming):
                    chunks += 1
        if result is not None:
            values = result.output
        else:
            values = graph.get_state(config).values if saver is not None else {}
        return {"values": values, "chunks": chunks, "attempt": run.attempt}

    def attempt() -> None:
        """One attempt, reported as one JSON line (a stream that cannot replay: its error)."""
        try:
            done = asyncio.run(arun()) if args.use_async else srun()
        except StreamReplayError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        else:
            out = {**describe(done["values"]), "chunks": done["chunks"]}
            print(json.dumps({**out, "attempt": done["attempt"]}))
        sys.stdout.flush()

    attempt()
    if args.rerun_log is not None:  # the next attempt, in this process: saves a start-up
        os.environ[LOG_ENV] = str(args.rerun_log)
        attempt()


if __name__ == "__main__":
    main()
