"""Upstream suites pass the same with spanpoint's auto-instrumentation as without it.

``scripts/compat/upstream_suite.py`` downloads the sdist of the installed langgraph (and
langchain) version, builds a separate virtualenv from its lock file, and runs its tests twice:
plain, and with ``-p spanpoint.pytest_plugin`` in each of three configurations (zero-code
tracing, calls durable on threads, calls durable inside a run per test). Every test that
passes plain must pass instrumented, and the plugin must have recorded spans (it really
instrumented the suite). The durable configurations also run a second session on the first
one's store, which must pass the same tests and replay nothing of the first.

The first run takes minutes (download, virtualenv, both suites); the environment and the plain
result are cached under ``${SPANPOINT_CACHE:-~/.cache/spanpoint}/compat``, and an instrumented
result is reused while spanpoint's source is unchanged. See docs/compatibility.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compat" / "upstream_suite.py"

# Minutes of upstream tests (a clean machine also downloads and builds their environment):
# the full suite (.ci/run) runs them, `make test` does not.
pytestmark = [pytest.mark.slow, pytest.mark.full]


def run_compat(
    package: str,
    tmp_path: Path,
    *,
    config: str = "trace",
    tests: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
    expect_failure: bool = False,
) -> dict[str, Any]:
    """The script's report; its exit status must be 0 unless ``expect_failure`` (the caller
    then checks the report's differences against the ones the docs name)."""
    report = tmp_path / "report.json"
    workers = str(min(2, os.cpu_count() or 1))
    options = ("--workers", workers, "--json", str(report), "--config", config, *options)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), package, *options, *tests],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(report.read_text())
    assert expect_failure or proc.returncode == 0, json.dumps(data, indent=2) + proc.stderr[-3000:]
    return data


#: Zero-code tracing, calls durable on checkpointed threads, and calls durable with each test
#: inside its own spanpoint.run (docs/compatibility.md, "The commands").
CONFIGS = ("trace", "thread", "run")


# LangGraph's durable configurations are compared with plain by the first session of
# test_second_session_on_the_same_store_replays_nothing_across_tests (the same comparison, with
# a store on disk): a second in-memory run would double minutes of CI for nothing new.
@pytest.mark.parametrize("config", ["trace"])
def test_langgraph_suite_passes_the_same_instrumented(tmp_path: Path, config: str) -> None:
    report = run_compat("langgraph", tmp_path, config=config)
    # docs/compatibility.md names no test that may differ: none does.
    assert report["only_plain"] == []
    assert int(report["plain_passed"]) > 2000  # the real suite, not a handful of tests
    # A test that failed once and passed when run again is flaky, not a difference.
    passed = int(report["instrumented_passed"]) + len(report["flaky"])
    assert passed >= int(report["plain_passed"])
    spans = report["spans_recorded"]
    assert isinstance(spans, dict) and spans.get("invoke_workflow", 0) > 1000


@pytest.mark.parametrize("config", CONFIGS)
def test_langchain_agent_and_middleware_suite_passes_the_same_instrumented(
    tmp_path: Path, config: str
) -> None:
    report = run_compat("langchain", tmp_path, config=config)
    assert report["only_plain"] == []
    assert int(report["plain_passed"]) > 500
    spans = report["spans_recorded"]
    assert isinstance(spans, dict)
    # The seams traced every agent's model and tool calls (nothing was injected).
    assert spans.get("chat", 0) > 100 and spans.get("execute_tool", 0) > 10


#: LangChain tests that call a sync ``agent.invoke`` from inside an ``async def`` test, under
#: LangChain's ``blockbuster`` fixture: with calls durable in a run, the store's SQLite I/O
#: happens on the calling thread, the event loop's, and blockbuster raises. They pass with
#: the in-memory store of the other runs; the second session needs a store on disk
#: (docs/compatibility.md, "A second session on the same store").
SYNC_CALL_ON_THE_LOOP = frozenset(
    {
        "tests/unit_tests/agents/middleware/core/test_framework.py::TestAgentHooksCombined"
        "::test_execution_order[False]",
        *(
            "tests/unit_tests/agents/middleware/core/test_framework.py::"
            f"TestAgentMiddlewareHooks::{name}[{hook}-False]"
            for name in ("test_hook_execution", "test_hook_with_class_inheritance")
            for hook in ("after", "before")
        ),
        *(
            f"tests/unit_tests/agents/middleware/implementations/test_model_refusal.py::{name}"
            for name in (
                "test_fallback_can_handle_refusal[False]",
                "test_refusal_is_opt_in[False]",
                "test_refusal_with_provider_strategy[False]",
                *(f"test_non_refusals_pass_through[message{i}-False]" for i in range(4)),
            )
        ),
    }
)


@pytest.mark.parametrize("package", ["langchain", "langgraph"])
@pytest.mark.parametrize("config", ["thread", "run"])
def test_second_session_on_the_same_store_replays_nothing_across_tests(
    tmp_path: Path, package: str, config: str
) -> None:
    """The durable configurations twice on one SQLite store: the second session passes the
    same tests, and no test replays more than it did in the first (which would be a
    checkpoint another test, or the other session, committed)."""
    report = run_compat(
        package, tmp_path, config=config, options=("--second-session",), expect_failure=True
    )
    allowed = SYNC_CALL_ON_THE_LOOP if (package, config) == ("langchain", "run") else set()
    assert set(report["only_plain"]) <= allowed, report["only_plain"]
    spans = report["spans_recorded"]  # the first session really ran instrumented
    assert spans.get("invoke_workflow" if package == "langgraph" else "chat", 0) > 100, spans
    sessions = report["second_session"]
    assert isinstance(sessions, dict)
    assert sessions["same_pass_set"], sessions
    assert sessions["tests_replaying_more_in_second"] == {}, sessions


#: LangChain's tests of what a middleware changes in an agent: its drawing and graph
#: snapshots, the rejection of unregistered tools, return-direct control flow.
PINNED_LANGCHAIN = (
    "tests/unit_tests/agents/middleware/core/test_diagram.py",
    "tests/unit_tests/agents/middleware/core/test_tools.py",
    "tests/unit_tests/agents/test_return_direct_graph.py",
    "tests/unit_tests/agents/test_injected_runtime_create_agent.py",
)


@pytest.mark.parametrize("config", ["trace", "thread", "run"])
def test_pinned_agent_tests_pass_the_same_in_every_configuration(
    tmp_path: Path, config: str
) -> None:
    """Zero-code tracing, calls durable on checkpointed threads, and calls durable with each
    test inside its own spanpoint.run: the same pass set as plain (docs/compatibility.md)."""
    report = run_compat("langchain", tmp_path, config=config, tests=PINNED_LANGCHAIN)
    assert report["only_plain"] == []
    assert int(report["plain_passed"]) > 20  # 27 with langchain 1.5.2
    spans = report["spans_recorded"]
    assert isinstance(spans, dict) and spans.get("chat", 0) > 10
