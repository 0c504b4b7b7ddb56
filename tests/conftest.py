"""Shared fixtures: real OpenTelemetry SDK providers wired to in-memory exporters, and stores.

``configured`` is the usual entry point: it installs spanpoint on a fresh SDK tracer provider
(with an in-memory span exporter) and a fresh store, and resets spanpoint afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

import spanpoint
from spanpoint.config import reset_for_tests
from spanpoint.stores import MemoryStore, SqliteStore


@dataclass
class Telemetry:
    """A configured spanpoint with its provider, exporter and store."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    store: spanpoint.CheckpointStore

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans, optionally only those called ``name`` (or starting with it)."""
        spans = list(self.exporter.get_finished_spans())
        if name is None:
            return spans
        return [s for s in spans if s.name == name or s.name.startswith(name + " ")]

    def clear(self) -> None:
        """Forget the spans exported so far."""
        self.exporter.clear()


def make_telemetry(store: spanpoint.CheckpointStore, sampler: Sampler | None = None) -> Telemetry:
    """A fresh SDK provider with an in-memory exporter, configured as spanpoint's provider."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spanpoint.configure(tracer_provider=provider, store=store)
    return Telemetry(provider, exporter, store)


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "checkpoints.db")
    yield store
    store.close()


@pytest.fixture(params=["memory", "sqlite"])
def any_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[spanpoint.CheckpointStore]:
    """Each embedded store in turn."""
    if request.param == "memory":
        yield MemoryStore()
    else:
        store = SqliteStore(tmp_path / "checkpoints.db")
        yield store
        store.close()


@pytest.fixture
def configured(memory_store: MemoryStore) -> Iterator[Telemetry]:
    """spanpoint on a fresh SDK provider + in-memory exporter + MemoryStore."""
    telemetry = make_telemetry(memory_store)
    yield telemetry
    telemetry.provider.shutdown()
    reset_for_tests()


@pytest.fixture
def configured_sqlite(sqlite_store: SqliteStore) -> Iterator[Telemetry]:
    """spanpoint on a fresh SDK provider + in-memory exporter + SqliteStore."""
    telemetry = make_telemetry(sqlite_store)
    yield telemetry
    telemetry.provider.shutdown()
    reset_for_tests()


@pytest.fixture(autouse=True)
def _isolated_spanpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts unconfigured, with defaults pointing into its own tmp folder."""
    monkeypatch.setenv("SPANPOINT_STORE", str(tmp_path / "default.db"))
    monkeypatch.setenv("SPANPOINT_TRACE_FILE", str(tmp_path / "traces.jsonl"))
    reset_for_tests()
    yield
    reset_for_tests()
