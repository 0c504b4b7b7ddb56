"""Invariant 1, exactly: commit only on status OK, set by spanpoint when the body returned.

Each case runs one run id twice on a SQLite store with the real OTel SDK and counts the body's
executions in a file: a committed boundary executes once over both attempts, one that must
not be committed executes on each attempt. Whatever happens to the span (the body ends it, a
processor raises, an exporter fails), the caller gets the body's own result.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import spanpoint
from spanpoint import semconv
from spanpoint.config import reset_for_tests
from spanpoint.stores import SqliteStore
from tests.fakes import count_effect, read_effects


class RaisingProcessor(SimpleSpanProcessor):
    """A real SDK processor whose ``on_end`` raises for boundary spans, or for every span
    (a buggy application processor)."""

    def __init__(self, every_span: bool = False) -> None:
        super().__init__(InMemorySpanExporter())
        self.every_span = every_span
        self.raised = 0

    def on_end(self, span: ReadableSpan) -> None:
        if self.every_span or (span.attributes and semconv.BOUNDARY_KIND in span.attributes):
            self.raised += 1
            raise RuntimeError("processor bug: cannot handle this span")
        super().on_end(span)


class RaisingExporter(SpanExporter):
    """An exporter whose backend is gone: every export raises."""

    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionError("collector unreachable")

    def shutdown(self) -> None:
        pass


class FailingExporter(SpanExporter):
    """An exporter whose backend rejects everything: every export returns FAILURE."""

    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    st = SqliteStore(tmp_path / "checkpoints.db")
    yield st
    st.close()


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.txt"


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    reset_for_tests()


def configure(store: SqliteStore, *before: object, after: Sequence[object] = ()) -> TracerProvider:
    """An SDK provider with ``before`` processors ahead of spanpoint's and ``after`` behind."""
    provider = TracerProvider()
    for p in before:
        provider.add_span_processor(p)  # type: ignore[arg-type]
    spanpoint.configure(tracer_provider=provider, store=store)  # adds CheckpointSpanProcessor
    for p in after:
        provider.add_span_processor(p)  # type: ignore[arg-type]
    return provider


def two_attempts(effects: Path, body_extra=None) -> list[spanpoint.run]:  # type: ignore[no-untyped-def]
    """Run the run id ``R`` twice over one step; return both runs."""

    @spanpoint.step(name="charge")
    def charge(amount: int) -> dict[str, int]:
        count_effect(effects, "charge")
        if body_extra is not None:
            body_extra()
        return {"charged": amount}

    runs = []
    for _ in range(2):
        with spanpoint.run("R", name="commit-rule") as r:
            assert charge(125) == {"charged": 125}  # the result is the body's, always
        runs.append(r)
    return runs


# --- a body that ends its own span ---------------------------------------------------------


def _end_own_span() -> None:
    trace.get_current_span().end()


def _set_ok_and_end_own_span() -> None:
    span = trace.get_current_span()
    span.set_status(Status(StatusCode.OK))
    span.end()


@pytest.mark.parametrize(
    "body_extra", [_end_own_span, _set_ok_and_end_own_span], ids=["unset", "ok_by_body"]
)
def test_a_body_that_ends_its_own_span_is_not_committed(
    store: SqliteStore,
    effects: Path,
    body_extra,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    exporter = InMemorySpanExporter()
    configure(store, SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        first, second = two_attempts(effects, body_extra)
    assert read_effects(effects)["charge"] == 2  # never committed, so executed on each attempt
    assert store.list_checkpoints("R") == []
    for r in (first, second):
        assert any("ended its own span" in w and "not committed" in w for w in r.warnings)
    # The lease was freed: another worker can claim the boundary at once.
    step_span = next(s for s in exporter.get_finished_spans() if s.name.startswith("step"))
    key = step_span.attributes[semconv.CHECKPOINT_KEY]  # type: ignore[index]
    assert store.claim(str(key), "another-worker", 30.0).state == "acquired"


# --- a span processor that raises ----------------------------------------------------------


@pytest.mark.parametrize("every_span", [False, True], ids=["boundary_spans", "every_span"])
def test_a_processor_that_raises_before_spanpoints_changes_nothing(
    store: SqliteStore, effects: Path, every_span: bool, caplog: pytest.LogCaptureFixture
) -> None:
    raising = RaisingProcessor(every_span)
    exporter = InMemorySpanExporter()
    configure(store, raising, SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        first, second = two_attempts(effects)
    assert read_effects(effects)["charge"] == 1  # committed on attempt 1, replayed on attempt 2
    assert [cp.name for cp in store.list_checkpoints("R")] == ["charge"]
    assert raising.raised == (4 if every_span else 2)  # executed and replayed (+ run spans)
    assert any("span processor raised" in w and "processor bug" in w for w in first.warnings)
    assert any("span processor raised" in w for w in second.warnings)
    assert first.status == second.status == "completed"
    assert [r.status for r in store.list_runs(limit=5)] == ["completed"]  # the run's end kept


def test_a_processor_that_raises_after_spanpoints_changes_nothing(
    store: SqliteStore, effects: Path
) -> None:
    raising = RaisingProcessor()
    configure(store, after=[raising])
    first, _ = two_attempts(effects)
    assert read_effects(effects)["charge"] == 1
    assert [cp.name for cp in store.list_checkpoints("R")] == ["charge"]
    assert any("span processor raised" in w for w in first.warnings)


def test_a_processor_that_raises_keeps_the_bodys_own_exception(
    store: SqliteStore, effects: Path
) -> None:
    configure(store, RaisingProcessor())

    @spanpoint.step(name="charge")
    def charge(amount: int) -> int:
        count_effect(effects, "charge")
        raise ValueError(f"card declined for {amount}")

    for _ in range(2):
        with pytest.raises(ValueError, match="card declined for 125"), spanpoint.run("R"):
            charge(125)
    assert read_effects(effects)["charge"] == 2  # a failure commits nothing
    assert store.list_checkpoints("R") == []


# --- a failed export -----------------------------------------------------------------------


@pytest.mark.parametrize("make_exporter", [RaisingExporter, FailingExporter])
@pytest.mark.parametrize("make_processor", [SimpleSpanProcessor, BatchSpanProcessor])
def test_a_failed_export_changes_nothing(
    store: SqliteStore,
    effects: Path,
    make_exporter,
    make_processor,  # type: ignore[no-untyped-def]
) -> None:
    exporter = make_exporter()
    provider = configure(store, make_processor(exporter))
    first, second = two_attempts(effects)
    provider.force_flush()
    assert exporter.calls >= 1  # the exporter really was asked, and failed
    assert read_effects(effects)["charge"] == 1
    assert [cp.name for cp in store.list_checkpoints("R")] == ["charge"]
    assert first.status == second.status == "completed"
    provider.shutdown()


# --- a malformed stored trace id or span id ------------------------------------------------

BAD_IDS = [
    ("trace_id", "not-hex-at-all-not-hex-at-all-xx"),
    ("trace_id", "abc"),
    ("trace_id", "f" * 40),
    ("trace_id", ""),
    ("trace_id", " 0x" + "1" * 29),
    ("trace_id", "0" * 32),
    ("span_id", "zzzzzzzzzzzzzzzz"),
    ("span_id", "1_2_3_4_5_6_7_8_"),
    ("span_id", "0" * 16),
]


@pytest.mark.parametrize(("column", "value"), BAD_IDS)
def test_a_malformed_stored_id_means_no_link_never_a_crash(
    store: SqliteStore, effects: Path, column: str, value: str, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    configure(store, SimpleSpanProcessor(exporter))

    @spanpoint.step(name="charge")
    def charge(amount: int) -> dict[str, int]:
        count_effect(effects, "charge")
        return {"charged": amount}

    with spanpoint.run("R"):
        assert charge(125) == {"charged": 125}
    with sqlite3.connect(tmp_path / "checkpoints.db") as db:
        db.execute(f"UPDATE checkpoints SET {column} = ?", (value,))  # column from BAD_IDS
    exporter.clear()
    with spanpoint.run("R") as second:
        assert charge(125) == {"charged": 125}
    assert read_effects(effects)["charge"] == 1  # the output itself is intact: replayed
    replayed = next(s for s in exporter.get_finished_spans() if s.name.startswith("step"))
    assert replayed.attributes[semconv.REPLAYED] is True  # type: ignore[index]
    assert list(replayed.links) == []
    assert any("no link" in w for w in second.warnings)
