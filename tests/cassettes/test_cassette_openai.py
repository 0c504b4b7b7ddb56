"""Cassettes with a real ``ChatOpenAI`` client against a local OpenAI-compatible server.

Every setup (nothing but the cassette, ``CheckpointMiddleware``, the zero-code
instrumentation), streamed or not, sync or async: recorded with the server up, replayed with
it stopped. Replaying only never reaches the server or a tool, whatever is wrong with an
entry: the server counts its requests, the tools append to an effects file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassette_openai_app import (
    FINALS,
    MAIN,
    PLANS,
    REQUEST,
    SETUPS,
    chat,
    dump,
    instrumented,
    make_agent,
)
from langchain_core.messages import AIMessage

import spanpoint
import spanpoint.errors
from fakes import read_effects
from openai_server import ChatServer
from spanpoint.cassettes import CassetteError


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer(PLANS, FINALS) as running:
        yield running


def invoke(agent: Any, is_async: bool, request: Any = REQUEST) -> Any:
    if is_async:
        return asyncio.run(agent.ainvoke(request))
    return agent.invoke(request)


def session(
    path: Path, agent: Any, *, mode: str = "once", is_async: bool = False, **options: Any
) -> tuple[Any, spanpoint.cassette]:
    async def go() -> Any:
        async with spanpoint.cassette(path, mode=mode, **options) as active:  # type: ignore[arg-type]
            return await agent.ainvoke(REQUEST), active

    if is_async:
        return asyncio.run(go())
    with spanpoint.cassette(path, mode=mode, **options) as active:  # type: ignore[arg-type]
        return agent.invoke(REQUEST), active


def ai_replies(result: Any) -> list[Any]:
    return [
        (m.usage_metadata, m.response_metadata, m.tool_calls)
        for m in result["messages"]
        if isinstance(m, AIMessage)
    ]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "sse"])
@pytest.mark.parametrize("setup", SETUPS)
def test_recorded_with_the_server_replayed_with_it_stopped(
    configured: Any, tmp_path: Path, setup: str, streaming: bool, is_async: bool
) -> None:
    effects, path = tmp_path / "effects.txt", tmp_path / "agent.json"
    with instrumented(setup), ChatServer(PLANS, FINALS) as server:
        agent = make_agent(server.base_url, effects, setup=setup, streaming=streaming)
        recorded, first = session(path, agent, is_async=is_async)
        assert server.hits == 5  # three calls of the agent, two of its sub-agent
    assert first.recorded == 9 and first.replayed == 0
    assert read_effects(effects) == {"tool:lookup_ticket": 3, "tool:ask_specialist": 1}
    effects.unlink()
    with instrumented(setup):  # the server is gone: a call that reached it would fail
        again = make_agent(server.base_url, effects, setup=setup, streaming=streaming)
        replayed, second = session(path, again, mode="none", is_async=is_async)
    assert dump(replayed) == dump(recorded)  # texts, tool calls and their ids
    assert ai_replies(replayed) == ai_replies(recorded)  # usage and response metadata too
    assert second.replayed == 6 and second.recorded == 0  # the sub-agent is inside its tool
    assert read_effects(effects) == {}


def test_a_replayed_usage_metadata_equals_the_recorded_one(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    """The reply's token counts are counters, not credentials: they replay as numbers, and
    LangChain can add them up (``add_usage``) after a replay."""
    from langchain_core.messages.ai import add_usage

    agent = make_agent(server.base_url, tmp_path / "effects.txt")
    recorded, _ = session(tmp_path / "c.json", agent)
    replayed, _ = session(tmp_path / "c.json", agent, mode="none")
    usage = [m.usage_metadata for m in recorded["messages"] if isinstance(m, AIMessage)]
    assert [m.usage_metadata for m in replayed["messages"] if isinstance(m, AIMessage)] == usage
    assert all(isinstance(u["input_token_details"]["cache_read"], int) for u in usage)
    total = usage[0]
    for other in usage[1:]:
        total = add_usage(total, other)
    assert total["total_tokens"] == sum(u["total_tokens"] for u in usage)
    text = (tmp_path / "c.json").read_text()
    assert '"token_usage": {' in text and "sk-local-test-key" not in text
    # Nothing in a reply was a credential: no entry says its output was redacted.
    assert not any(c["output_redacted"] for c in json.loads(text)["calls"])


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_custom_node_that_calls_a_chat_model_records_and_replays(
    configured: Any, tmp_path: Path, is_async: bool
) -> None:
    """No agent, no middleware: a LangGraph node of one's own calling ChatOpenAI."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    def build(base_url: str) -> Any:
        model = chat(base_url, MAIN, streaming=False)

        def answer(state: MessagesState) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        async def aanswer(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("answer", aanswer if is_async else answer)
        graph.add_edge(START, "answer")
        graph.add_edge("answer", END)
        return graph.compile()

    path = tmp_path / "node.json"
    with ChatServer(PLANS, FINALS) as server:
        recorded, first = session(path, build(server.base_url), is_async=is_async)
        assert server.hits == 1
    assert first.recorded == 1
    replayed, second = session(path, build(server.base_url), mode="none", is_async=is_async)
    assert second.replayed == 1
    assert dump(replayed) == dump(recorded) and ai_replies(replayed) == ai_replies(recorded)


# --- replaying only never goes live ------------------------------------------------------------


def _tamper(output: Any, how: str) -> Any:
    """``output`` (an entry's JSON) spoiled the way ``how`` says."""
    if how == "corrupt":
        return {"$bytes": "bm90IG1zZ3BhY2sgYXQgYWxs"}  # "not msgpack at all"
    text = json.dumps(output)
    if how == "refused":  # a class the allow list never imports
        changed = text.replace('"langchain_core.messages.', '"os.path.', 1)
    else:  # "outdated": a class a LangChain upgrade moved away
        changed = text.replace('"langchain_core.messages.', '"langchain_core.messages_v0.', 1)
    assert changed != text, "no message class in this entry"
    return json.loads(changed)


@pytest.mark.parametrize("how", ["refused", "outdated", "corrupt", "pickle"])
@pytest.mark.parametrize("setup", SETUPS)
def test_a_spoiled_entry_in_mode_none_misses_and_reaches_nothing(
    configured: Any, tmp_path: Path, server: ChatServer, setup: str, how: str
) -> None:
    effects, path = tmp_path / "effects.txt", tmp_path / "agent.json"
    with instrumented(setup):
        session(path, make_agent(server.base_url, effects, setup=setup))
        recorded = json.loads(path.read_text())
        # The calls a replay reaches: the sub-agent's replay inside its tool's.
        tools = [c["path"] + "/" for c in recorded["calls"] if c["kind"] == "tool_call"]
        reached = [
            i
            for i, c in enumerate(recorded["calls"])
            if not any(c["path"].startswith(t) for t in tools)
        ]
        assert len(reached) == 6
        for index in reached:
            spoiled = json.loads(json.dumps(recorded))
            if how == "pickle":  # a format spanpoint never loads
                spoiled["calls"][index]["output_type"] = "pickle"
            else:
                spoiled["calls"][index]["output"] = _tamper(spoiled["calls"][index]["output"], how)
            path.write_text(json.dumps(spoiled))
            effects.unlink(missing_ok=True)
            hits = server.hits
            with pytest.raises(spanpoint.errors.CassetteMissError) as caught:
                session(path, make_agent(server.base_url, effects, setup=setup), mode="none")
            call = spoiled["calls"][index]
            assert repr(call["path"]) in str(caught.value)
            assert "replays only" in str(caught.value)
            assert server.hits == hits, f"entry #{index + 1} ({call['kind']}) went live"
            assert read_effects(effects) == {}


@pytest.mark.parametrize("is_async", [False, True], ids=["stream", "astream"])
def test_a_model_call_with_no_boundary_in_mode_none_misses_and_reaches_nothing(
    configured: Any, tmp_path: Path, server: ChatServer, is_async: bool
) -> None:
    path = tmp_path / "agent.json"
    session(path, make_agent(server.base_url, tmp_path / "effects.txt"))
    hits = server.hits
    model = chat(server.base_url, MAIN, streaming=True)

    async def astream() -> list[Any]:
        return [chunk async for chunk in model.astream("Tickets 7 and 8, please")]

    with pytest.raises(spanpoint.errors.CassetteMissError, match="has no boundary to replay"):
        with spanpoint.cassette(path, mode="none"):
            if is_async:
                asyncio.run(astream())
            else:
                list(model.stream("Tickets 7 and 8, please"))
    assert server.hits == hits


def test_an_uncacheable_tool_call_in_mode_none_misses_and_runs_nothing(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    from langchain_core.tools import tool

    effects = tmp_path / "effects.txt"

    @tool
    def describe(thing: Any) -> str:
        """Describe anything."""
        (tmp_path / "effects.txt").write_text("tool:describe\n")
        return str(thing)

    path = tmp_path / "agent.json"
    session(path, make_agent(server.base_url, effects))
    effects.unlink()
    with pytest.raises(spanpoint.errors.CassetteMissError, match="not cacheable"):
        with spanpoint.cassette(path, mode="none"):
            describe.invoke({"thing": object()})  # an input with no faithful identity
    assert read_effects(effects) == {}


def test_a_step_in_a_replay_only_cassette_executes_as_it_always_does(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    """A step is never recorded (its identity is its input, not its code): replaying only
    concerns model and tool calls, so an uncacheable step still runs, with its warning."""
    path = tmp_path / "agent.json"
    session(path, make_agent(server.base_url, tmp_path / "effects.txt"))

    @spanpoint.step
    def describe(thing: Any) -> str:
        return type(thing).__name__

    with spanpoint.cassette(path, mode="none") as active:
        assert describe(object()) == "object"
    assert active.replayed == 0


# --- stable files -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rewrite", "all"])
@pytest.mark.parametrize("setup", SETUPS)
def test_recording_the_same_calls_again_changes_no_byte(
    configured: Any, tmp_path: Path, setup: str, mode: str
) -> None:
    """Same conversation, same answers (the server's ids are digests of the conversation):
    the file is byte for byte the same, parallel tool calls included."""
    path, effects = tmp_path / "agent.json", tmp_path / "effects.txt"
    with instrumented(setup), ChatServer(PLANS, FINALS, stable_ids=True) as server:
        session(path, make_agent(server.base_url, effects, setup=setup))
        first = path.read_bytes()
        for is_async in (False, True):
            session(path, make_agent(server.base_url, effects, setup=setup), mode=mode,
                    is_async=is_async)  # fmt: skip
            assert path.read_bytes() == first
    calls = json.loads(first)["calls"]
    assert [c["key"] for c in calls] == sorted(c["key"] for c in calls)
    text = first.decode()
    for volatile in ("lc_run-", "trace_id", "span_id", "_at_ns", str(tmp_path)):
        assert volatile not in text


@pytest.mark.parametrize("where", ["path", "temp path"])
def test_a_symlink_at_the_cassette_or_its_temp_path_is_refused(
    configured: Any, tmp_path: Path, server: ChatServer, where: str
) -> None:
    target = tmp_path / "bashrc"
    target.write_text("export PATH=/usr/bin\n")
    path = tmp_path / "cassettes" / "refund.json"
    path.parent.mkdir()
    link = path if where == "path" else path.with_name("refund.json.tmp")
    link.symlink_to(target)
    mode = "rewrite" if where == "path" else "once"
    with pytest.raises(CassetteError, match="symlink"):
        session(path, make_agent(server.base_url, tmp_path / "effects.txt"), mode=mode)
    assert target.read_text() == "export PATH=/usr/bin\n"
    assert link.is_symlink()


def test_a_recording_that_captured_nothing_warns_and_mode_none_refuses_an_empty_cassette(
    configured: Any, tmp_path: Path
) -> None:
    path = tmp_path / "empty.json"
    with pytest.warns(UserWarning, match="recorded no model or tool call"):
        with spanpoint.cassette(path):
            pass
    assert not path.exists()
    path.write_text(json.dumps({"spanpoint_cassette": 1, "calls": []}))
    with pytest.raises(CassetteError, match="holds no calls"):
        with spanpoint.cassette(path, mode="none"):
            pass


# --- what vcrpy users expect ----------------------------------------------------------------------


def test_match_on_ignores_the_system_prompt_when_asked(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    path, effects = tmp_path / "agent.json", tmp_path / "effects.txt"
    recorded, _ = session(path, make_agent(server.base_url, effects))
    hits = server.hits
    billing = make_agent(server.base_url, effects, system_prompt="You are a billing agent.")
    with pytest.raises(spanpoint.errors.CassetteMissError, match="system prompt"):
        session(path, billing, mode="none")
    effects.unlink()
    replayed, active = session(path, billing, mode="none", match_on=("messages", "tools"))
    assert dump(replayed) == dump(recorded) and active.replayed == 6
    assert server.hits == hits and read_effects(effects) == {}
    with pytest.raises(spanpoint.ConfigurationError, match="match_on takes"):
        spanpoint.cassette(path, match_on=("prompt",))


def test_strict_asks_that_every_recorded_call_was_played(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    path, effects = tmp_path / "agent.json", tmp_path / "effects.txt"
    agent = make_agent(server.base_url, effects)
    other = {"messages": [{"role": "user", "content": "Just ticket 9"}]}
    with spanpoint.cassette(path):
        agent.invoke(REQUEST)
        agent.invoke(other)
    with spanpoint.cassette(path, mode="none", strict=True) as whole:
        agent.invoke(REQUEST)
        agent.invoke(other)
    assert whole.all_played
    with pytest.raises(CassetteError, match=r"strict\): \d+ recorded call\(s\) were never played"):
        with spanpoint.cassette(path, mode="none", strict=True) as part:
            agent.invoke(REQUEST)
    assert not part.all_played and part.unplayed


def test_allow_playback_repeats_decides_whether_one_recording_answers_twice(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    """The same request made twice is two calls (position is part of the key); matched on
    its content, the one recording answers both unless repeats are refused."""
    path = tmp_path / "once.json"
    model = chat(server.base_url, MAIN, streaming=False)
    with spanpoint.cassette(path):
        recorded = model.invoke("Tickets 7 and 8, please")
    hits, everything = server.hits, ("model", "system_prompt", "messages", "tools", "settings")
    with pytest.raises(spanpoint.errors.CassetteMissError, match="recorded at another position"):
        with spanpoint.cassette(path, mode="none"):
            model.invoke("Tickets 7 and 8, please")
            model.invoke("Tickets 7 and 8, please")
    with spanpoint.cassette(path, mode="none", match_on=everything) as twice:
        first = model.invoke("Tickets 7 and 8, please")
        second = model.invoke("Tickets 7 and 8, please")
    assert first.content == second.content == recorded.content and twice.replayed == 2
    with pytest.raises(spanpoint.errors.CassetteMissError, match="already played once"):
        with spanpoint.cassette(
            path, mode="none", match_on=everything, allow_playback_repeats=False
        ):
            model.invoke("Tickets 7 and 8, please")
            model.invoke("Tickets 7 and 8, please")
    assert server.hits == hits


def test_before_record_sees_every_new_entry_and_may_leave_it_out(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    seen: list[str] = []

    def keep_models(entry: dict[str, Any]) -> dict[str, Any] | None:
        seen.append(entry["kind"])
        if entry["kind"] != "model_call":
            return None
        return {**entry, "note": "reviewed"}

    path = tmp_path / "agent.json"
    session(path, make_agent(server.base_url, tmp_path / "effects.txt"), before_record=keep_models)
    calls = json.loads(path.read_text())["calls"]
    assert sorted(seen) == ["model_call"] * 5 + ["tool_call"] * 4
    assert {c["kind"] for c in calls} == {"model_call"} and len(calls) == 5
    assert all(c["note"] == "reviewed" for c in calls)


def test_spanpoint_diff_of_two_cassette_files_names_what_changed(
    configured: Any, tmp_path: Path, server: ChatServer
) -> None:
    from typer.testing import CliRunner

    from spanpoint.cli import app

    effects = tmp_path / "effects.txt"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    session(a, make_agent(server.base_url, effects))
    session(b, make_agent(server.base_url, effects, system_prompt="You are a billing agent."))
    runner = CliRunner()
    same = runner.invoke(app, ["diff", str(a), str(a)])
    assert same.exit_code == 0 and "9 call(s) the same, no difference" in same.output
    changed = runner.invoke(app, ["diff", str(a), str(b)])
    assert changed.exit_code == 1, changed.output
    # The sub-agent's calls are the same calls; the main model's input changed.
    assert "input_changed   model_call 'gpt-4o'" in changed.output
    assert "message 0 (system prompt) 'You are a support agent.' -> 'You are a" in changed.output
    as_json = json.loads(runner.invoke(app, ["diff", "--json", str(a), str(b)]).output)
    assert {c["status"] for c in as_json["changes"]} >= {"input_changed"}
    assert as_json["equal"] is False
    (tmp_path / "junk.json").write_text("[1, 2")
    bad = runner.invoke(app, ["diff", str(a), str(tmp_path / "junk.json")])
    assert bad.exit_code == 2 and "is not a spanpoint cassette" in " ".join(bad.output.split())
