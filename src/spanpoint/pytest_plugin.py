"""spanpoint's pytest plugin: cassettes for any test, and an instrumented session on request.

Installed with spanpoint (the ``pytest11`` entry point), it changes nothing until a test or a
command line asks for it:

- **Cassettes.** ``@pytest.mark.spanpoint_cassette(path, mode=..., match_on=...,
  strict=..., allow_playback_repeats=...)`` or the ``spanpoint_cassette`` fixture runs the
  test inside :class:`spanpoint.cassette`; ``--spanpoint-record=MODE`` sets the mode of every
  cassette of the session (``none`` in CI). docs/cassettes.md has the details.
- **An instrumented session** (``--spanpoint-instrument``, or the module named with
  ``-p spanpoint.pytest_plugin``): this is how spanpoint proves it changes nothing.
  LangGraph's own test suite passes the same with it as without it
  (``scripts/compat/upstream_suite.py``, docs/compatibility.md). At configure time the
  plugin builds a private SDK tracer provider (never the global one, so the suite under test
  sees the OpenTelemetry state it expects), wires spanpoint to it with an in-memory
  checkpoint store, and applies :class:`~spanpoint.instrumentation.SpanpointInstrumentor`.
  Every span is really created, attributed and ended; a counting processor keeps only the
  number of spans per operation (not the spans, so memory stays flat over thousands of
  tests). The counts are printed in the terminal summary and, when
  ``SPANPOINT_PLUGIN_REPORT`` names a file, appended to it as one JSON line per process
  (pytest-xdist workers included), so a caller can check that the instrumentation was live.
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
#: A SQLite file the instrumented session keeps its checkpoints in (default: in memory), so
#: that a second session can run on the first one's store.
STORE_ENV = "SPANPOINT_PLUGIN_STORE"
# spanpoint.semconv.REPLAYED, spelled here: the plugin loads in every session and imports
# spanpoint only when asked to instrument.
REPLAYED_ATTRIBUTE = "spanpoint.replayed"


class SpanCounter(SpanProcessor):
    """Counts ended spans by GenAI operation (or span name for spanpoint's own spans), and
    replayed boundaries by the test that was running when they ended."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.replays: Counter[str] = Counter()
        self.test = ""  # the node id of the test running now (set by the plugin)
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Count ``span`` under its operation name."""
        attrs = span.attributes or {}
        key = str(attrs.get("gen_ai.operation.name") or span.name)
        with self._lock:
            self.counts[key] += 1
            if attrs.get(REPLAYED_ATTRIBUTE):
                self.replays[self.test] += 1

    def shutdown(self) -> None:
        """Nothing held."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing buffered."""
        return True


class _State:
    counter: SpanCounter | None = None
    provider: TracerProvider | None = None


PLUGIN_NAME = "spanpoint.pytest_plugin"


def _instrumenting(config: pytest.Config) -> bool:
    """Whether this session asked for the instrumented session (see the module docstring)."""
    if config.getoption("--spanpoint-instrument", default=False):
        return True
    named = getattr(config.known_args_namespace, "plugins", None) or []
    return PLUGIN_NAME in named


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker; configure spanpoint and instrument only when asked to."""
    config.addinivalue_line(
        "markers",
        f"{CASSETTE_MARKER}(path=None, *, mode='once', match_on=None, strict=False, "
        "allow_playback_repeats=True): run the test inside spanpoint.cassette(path)",
    )
    if not _instrumenting(config):
        return
    # For import time: pytest loads the plugin in every session; spanpoint loads when enabled.
    import spanpoint
    from spanpoint.instrumentation import SpanpointInstrumentor
    from spanpoint.stores import MemoryStore

    counter = SpanCounter()
    provider = TracerProvider()
    provider.add_span_processor(counter)
    spanpoint.configure(tracer_provider=provider, store=os.environ.get(STORE_ENV) or MemoryStore())
    SpanpointInstrumentor().instrument(tracer_provider=provider)
    _State.counter, _State.provider = counter, provider


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the patches and report the span counts of this process (instrumented only)."""
    counter = _State.counter
    if counter is None:
        return
    from spanpoint.instrumentation import SpanpointInstrumentor  # for import time (see above)

    SpanpointInstrumentor().uninstrument()
    path = os.environ.get(REPORT_ENV)
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = json.dumps(
            {"worker": worker, "spans": dict(counter.counts), "replays": dict(counter.replays)}
        )
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    if _State.provider is not None:
        _State.provider.shutdown()
    _State.counter = _State.provider = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    """Note which test is running, so its replayed boundaries are counted under its id."""
    counter = _State.counter
    if counter is not None:
        counter.test = item.nodeid
    yield
    if counter is not None:
        counter.test = ""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line: how many spans spanpoint recorded in this process, by operation, and how
    many boundaries replayed."""
    counter = _State.counter
    if counter is None:
        return
    total = sum(counter.counts.values())
    detail = ", ".join(f"{k}={v}" for k, v in counter.counts.most_common(6))
    replayed = sum(counter.replays.values())
    terminalreporter.write_line(
        f"spanpoint: instrumented, {total} spans ({detail}), {replayed} replayed"
    )


# --- cassettes: record a test's model and tool calls once, replay them in CI -----------------

CASSETTE_MARKER = "spanpoint_cassette"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--spanpoint-record=MODE`` and ``--spanpoint-instrument``."""
    group = parser.getgroup("spanpoint")
    group.addoption(
        "--spanpoint-record",
        action="store",
        default=None,
        choices=("once", "none", "new_episodes", "all", "rewrite"),
        help="record mode of spanpoint cassettes: once (default), none, new_episodes, all, rewrite",
    )
    group.addoption(
        "--spanpoint-instrument",
        action="store_true",
        default=False,
        help="run the session with spanpoint's zero-code instrumentation on a private tracer "
        "provider (span counts in the summary)",
    )


#: The marker's keyword arguments that go to spanpoint.cassette as they are.
_CASSETTE_OPTIONS = ("match_on", "strict", "allow_playback_repeats", "before_record")


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
    kwargs = dict(marker.kwargs) if marker is not None else {}
    named = marker.args[0] if marker is not None and marker.args else kwargs.pop("path", None)
    kwargs.pop("path", None)
    if named is not None:
        path = Path(str(named))
        if not path.is_absolute():
            path = Path(str(request.config.rootpath)) / path
    else:
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)
        path = node_path.parent / "cassettes" / node_path.stem / name
    if not path.suffix:
        path = path.with_suffix(".json")
    unknown = sorted(set(kwargs) - {"mode", *_CASSETTE_OPTIONS})
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.{CASSETTE_MARKER} takes mode and {', '.join(_CASSETTE_OPTIONS)}, "
            f"not {', '.join(unknown)}"
        )
    mode = request.config.getoption("--spanpoint-record") or kwargs.pop("mode", None) or "once"
    kwargs.pop("mode", None)
    with cassette(path, mode=mode, **kwargs) as active:
        yield active
