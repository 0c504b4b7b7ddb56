"""Run a test suite with spanpoint auto-instrumentation: ``pytest -p spanpoint.pytest_plugin``.

This is how spanpoint proves it changes nothing: LangGraph's own test suite passes the same
with the plugin as without it (``scripts/compat/langgraph_suite.py``, docs/compatibility.md).

At configure time the plugin builds a private SDK tracer provider (never the global one, so
the suite under test sees the OpenTelemetry state it expects), wires spanpoint to it with an
in-memory checkpoint store, and applies :class:`~spanpoint.instrumentation.SpanpointInstrumentor`.
Every span is really created, attributed and ended; a counting processor keeps only the
number of spans per operation (not the spans, so memory stays flat over thousands of tests).

The counts are printed in the terminal summary and, when ``SPANPOINT_PLUGIN_REPORT`` names a
file, appended to it as one JSON line per process (pytest-xdist workers included), so a
caller can check that the instrumentation was live.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

REPORT_ENV = "SPANPOINT_PLUGIN_REPORT"


class SpanCounter(SpanProcessor):
    """Counts ended spans by GenAI operation (or span name for spanpoint's own spans)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Count ``span`` under its operation name."""
        attrs = span.attributes or {}
        key = str(attrs.get("gen_ai.operation.name") or span.name)
        with self._lock:
            self.counts[key] += 1

    def shutdown(self) -> None:
        """Nothing held."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing buffered."""
        return True


class _State:
    counter: SpanCounter | None = None
    provider: TracerProvider | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Configure spanpoint on a private provider and instrument LangGraph/LangChain."""
    config.addinivalue_line(
        "markers",
        f"{CASSETTE_MARKER}(path, *, mode='once'): run the test inside spanpoint.cassette(path)",
    )
    # For import time: pytest loads the plugin in every session; spanpoint loads when enabled.
    import spanpoint
    from spanpoint.instrumentation import SpanpointInstrumentor
    from spanpoint.stores import MemoryStore

    counter = SpanCounter()
    provider = TracerProvider()
    provider.add_span_processor(counter)
    spanpoint.configure(tracer_provider=provider, store=MemoryStore())
    SpanpointInstrumentor().instrument(tracer_provider=provider)
    _State.counter, _State.provider = counter, provider


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the patches and report the span counts of this process."""
    from spanpoint.instrumentation import SpanpointInstrumentor  # for import time (see above)

    SpanpointInstrumentor().uninstrument()
    counter = _State.counter
    path = os.environ.get(REPORT_ENV)
    if counter is not None and path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = json.dumps({"worker": worker, "spans": dict(counter.counts)})
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    if _State.provider is not None:
        _State.provider.shutdown()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line: how many spans spanpoint recorded in this process, by operation."""
    counter = _State.counter
    if counter is None:
        return
    total = sum(counter.counts.values())
    detail = ", ".join(f"{k}={v}" for k, v in counter.counts.most_common(6))
    terminalreporter.write_line(f"spanpoint: instrumented, {total} spans ({detail})")


# --- cassettes (issue 16): record a test's model and tool calls once, replay them in CI -----

CASSETTE_MARKER = "spanpoint_cassette"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--spanpoint-record=MODE``: the mode of every cassette in this session."""
    group = parser.getgroup("spanpoint")
    group.addoption(
        "--spanpoint-record",
        action="store",
        default=None,
        choices=("once", "none", "new_episodes", "all"),
        help="record mode of spanpoint cassettes: once (default), none, new_episodes, all",
    )


@pytest.fixture(autouse=True)
def _spanpoint_cassette_marker(request: pytest.FixtureRequest) -> None:
    """A test with the marker gets the ``spanpoint_cassette`` fixture without asking for it."""
    if request.node.get_closest_marker(CASSETTE_MARKER) is not None:
        request.getfixturevalue("spanpoint_cassette")


@pytest.fixture
def spanpoint_cassette(request: pytest.FixtureRequest) -> Any:
    """The test inside ``spanpoint.cassette(...)``: its model and tool calls come from a file.

    The file is the marker's path (``@pytest.mark.spanpoint_cassette("tests/cassettes/NAME")``,
    relative to the rootdir; ``.json`` added when it has no suffix), else
    ``cassettes/<test module>/<test name>.json`` beside the test file. The mode is
    ``--spanpoint-record``, else the marker's ``mode=``, else ``once``.
    """
    from spanpoint.cassettes import cassette  # for import time: only tests that use it pay

    marker = request.node.get_closest_marker(CASSETTE_MARKER)
    node_path = Path(str(request.node.path))
    if marker is not None and marker.args:
        path = Path(str(marker.args[0]))
        if not path.is_absolute():
            path = Path(str(request.config.rootpath)) / path
    else:
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)
        path = node_path.parent / "cassettes" / node_path.stem / name
    if not path.suffix:
        path = path.with_suffix(".json")
    marker_mode = marker.kwargs.get("mode") if marker is not None else None
    mode = request.config.getoption("--spanpoint-record") or marker_mode or "once"
    with cassette(path, mode=mode) as active:
        yield active
