"""A stream inside a run is a durable graph call (docs/concepts.md, "Streams"), in one process.

Generated over every stream mode, single or in a list, with and without ``subgraphs=True``,
sync and async: a rerun of a streamed call that ended (interrupted here, so nothing else
could explain the thread's state) never submits the input again and executes nothing. In
``values`` it streams what the call returned, shaped as LangGraph shapes it; every other
mode raises ``StreamReplayError`` before anything runs. The killed-process rows (continue
a crashed stream) are tests/durable/test_durable_fanout.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_rerun import State, approval_graph

import spanpoint
from fakes import read_effects
from spanpoint import semconv
from spanpoint.graph import GraphRunner
from spanpoint.graph.types import StreamReplayError

MODES = ["values", "updates", "messages", "custom", "debug", ["values"], ["values", "updates"]]


def collect(runner: GraphRunner, form: str, *args: Any, **kwargs: Any) -> list[Any]:
    if form == "sync":
        return list(runner.stream(*args, **kwargs))

    async def gather() -> list[Any]:
        return [c async for c in runner.astream(*args, **kwargs)]

    return asyncio.run(gather())


def saver_for(form: str, path: Path) -> Any:
    if form == "sync":
        from langgraph.checkpoint.sqlite import SqliteSaver

        return SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()  # one process: the saver keeps the thread between the attempts


@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("subgraphs", [False, True])
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_a_rerun_of_an_ended_stream_never_submits_again_and_replays_only_values(
    configured_sqlite: Any, tmp_path: Path, mode: Any, subgraphs: bool, form: str
) -> None:
    effects = tmp_path / "effects"
    graph = approval_graph(effects, saver_for(form, tmp_path / "lg.db"))
    runner = GraphRunner(graph, name="approver", strategy="calls")
    question: State = {"request": "refund"}
    config = {"configurable": {"thread_id": "t"}}
    with spanpoint.run("S-1"):
        first = collect(runner, form, question, config, stream_mode=mode, subgraphs=subgraphs)
    assert read_effects(effects) == {"draft": 1}
    with spanpoint.run("S-1"):
        if mode in ("values", ["values"]):
            again = collect(runner, form, question, config, stream_mode=mode, subgraphs=subgraphs)
            # What the call returned: its last chunk (values and interrupt), as LangGraph shaped it.
            assert _plain(again) == _plain(first[-1:])
        else:
            with pytest.raises(StreamReplayError, match="stream_mode='values'"):
                collect(runner, form, question, config, stream_mode=mode, subgraphs=subgraphs)
    assert read_effects(effects) == {"draft": 1}  # nothing ran again, the input not resubmitted
    assert graph.get_state(config).values == {"request": "refund", "draft": "reply to refund"}
    spans = configured_sqlite.graph_spans("invoke_workflow approver")
    assert spans[-1].attributes.get(semconv.GRAPH_RERUN) == "returned"


def _plain(chunks: list[Any]) -> list[Any]:
    """Chunks with interrupts as (id, value): comparable across attempts."""

    def plain(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(plain(i) for i in x)
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if type(x).__name__ == "Interrupt":
            return ("interrupt", x.id, x.value)
        return x

    return [plain(c) for c in chunks]
