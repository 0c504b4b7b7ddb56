"""Fixtures for the guard tests (helpers live in guard_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from guard_support import Tools

from harness import Telemetry, make_otel


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """SDK tracer/meter providers with an in-memory span exporter and metric reader."""
    telemetry = make_otel()
    yield telemetry
    telemetry.shutdown()


@pytest.fixture
def tools() -> Tools:
    """A factory of tools that log their executions."""
    return Tools()
