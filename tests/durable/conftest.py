"""Fixtures for the durable-calls acceptance tests (issue 15, "durable calls everywhere").

These tests use only spanpoint's public face (``import spanpoint``, ``spanpoint.graph``, the
``opentelemetry_instrumentor`` entry point), LangGraph/LangChain public APIs and real upstream
agents, so they survive a re-layout of ``src/spanpoint``. Helpers live in durable_support.py;
the doubles in durable_fakes.py; the agents in durable_agents.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_fakes import LOG_ENV
from durable_support import load_instrumentor

import spanpoint
from harness import Telemetry, make_telemetry


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The execution log of this test's models and tools (``$DURABLE_LOG``)."""
    path = tmp_path / "executions.jsonl"
    monkeypatch.setenv(LOG_ENV, str(path))
    return path


@pytest.fixture
def otel(tmp_path: Path) -> Iterator[Telemetry]:
    """spanpoint configured on an SDK provider with an in-memory exporter and a SQLite store."""
    telemetry = make_telemetry(spanpoint.SqliteStore(tmp_path / "spanpoint.db"))
    yield telemetry
    telemetry.provider.shutdown()
    telemetry.store.close()


@pytest.fixture
def instrumented(otel: Telemetry) -> Iterator[Telemetry]:
    """``otel`` plus the zero-code instrumentor (set env switches before requesting this)."""
    instrumentor = load_instrumentor()
    instrumentor.instrument(tracer_provider=otel.provider, store=otel.store)
    yield otel
    instrumentor.uninstrument()
