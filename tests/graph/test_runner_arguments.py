"""GraphRunner takes what LangGraph takes: ``(input, config=None, *, thread_id=None, **kw)``.

One rule, generated over the four call forms (invoke, ainvoke, stream, astream) and every way
of naming the thread: the thread comes from ``config["configurable"]["thread_id"]`` or from
``thread_id=``; both, when equal, are one thread; both, when different, are a
``ConfigurationError`` that names both values; neither is an error that says how to pass one.
The rest of ``config`` (other configurable keys, ``recursion_limit``) reaches the graph.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import spanpoint
from spanpoint.errors import ConfigurationError
from spanpoint.graph import GraphRunner, RunRequest


class Count(TypedDict):
    n: int
    seen: str


def graph() -> Any:
    def bump(state: Count, config: RunnableConfig) -> dict[str, Any]:
        conf = config["configurable"]
        return {"n": state["n"] + 1, "seen": f"{conf['thread_id']}/{conf.get('user', '-')}"}

    g = StateGraph(Count)
    g.add_node("bump", bump)
    g.add_edge(START, "bump")
    g.add_edge("bump", END)
    return g.compile(checkpointer=InMemorySaver())


def call(runner: GraphRunner, form: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The graph's final values through one call form."""
    if form == "invoke":
        return runner.invoke(*args, **kwargs).output  # type: ignore[no-any-return]
    if form == "ainvoke":
        return asyncio.run(runner.ainvoke(*args, **kwargs)).output  # type: ignore[no-any-return]
    kwargs["stream_mode"] = "values"
    if form == "stream":
        return list(runner.stream(*args, **kwargs))[-1]  # type: ignore[no-any-return]

    async def collect() -> list[Any]:
        return [chunk async for chunk in runner.astream(*args, **kwargs)]

    return asyncio.run(collect())[-1]  # type: ignore[no-any-return]


FORMS = ["invoke", "ainvoke", "stream", "astream"]
#: (thread in config, thread_id=): every way of naming the thread, or not.
SOURCES = list(itertools.product([None, "t-1", "t-2"], [None, "t-1"]))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("in_config", "keyword"), SOURCES)
def test_the_thread_comes_from_config_or_thread_id_and_a_conflict_names_both(
    configured, form: str, in_config: str | None, keyword: str | None
) -> None:
    runner = GraphRunner(graph(), name="counter")
    config: dict[str, Any] = {"configurable": {"user": "ada"}, "recursion_limit": 5}
    if in_config is not None:
        config["configurable"]["thread_id"] = in_config
    kwargs = {} if keyword is None else {"thread_id": keyword}
    with spanpoint.run(f"args-{form}-{in_config}-{keyword}"):
        if in_config is None and keyword is None:
            with pytest.raises(ConfigurationError, match="thread_id"):
                call(runner, form, {"n": 0, "seen": ""}, config, **kwargs)
            return
        if in_config is not None and keyword is not None and in_config != keyword:
            with pytest.raises(ConfigurationError) as raised:
                call(runner, form, {"n": 0, "seen": ""}, config, **kwargs)
            assert repr(in_config) in str(raised.value)
            assert repr(keyword) in str(raised.value)
            return
        out = call(runner, form, {"n": 0, "seen": ""}, config, **kwargs)
    thread = keyword or in_config
    assert out == {"n": 1, "seen": f"{thread}/ada"}
    assert runner.graph.get_state({"configurable": {"thread_id": thread}}).values["n"] == 1


@pytest.mark.parametrize("form", FORMS)
def test_config_may_be_passed_by_keyword_as_langgraph_allows(configured, form: str) -> None:
    runner = GraphRunner(graph(), name="counter")
    config = {"configurable": {"thread_id": "kw"}}
    out = call(runner, form, {"n": 4, "seen": ""}, config=config)
    assert out == {"n": 5, "seen": "kw/-"}


@pytest.mark.parametrize("form", FORMS)
def test_a_config_beside_a_run_request_or_not_a_mapping_is_a_clear_error(
    configured, form: str
) -> None:
    runner = GraphRunner(graph(), name="counter")
    request = RunRequest.start({"n": 0, "seen": ""}, thread_id="t")
    with pytest.raises(ConfigurationError, match="inside the RunRequest"):
        call(runner, form, request, {"configurable": {"thread_id": "t"}})
    with pytest.raises(ConfigurationError, match="config must be a LangGraph config"):
        call(runner, form, {"n": 0, "seen": ""}, "t")
