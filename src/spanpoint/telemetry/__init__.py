"""OpenTelemetry plumbing that knows nothing of runs: exporters, providers, local files.

:func:`meter_provider` is the one place instruments (``telemetry.metrics``) find spanpoint's
meter provider, and :func:`logger_provider` the one place log records find its logger
provider. ``spanpoint.config`` installs their source (the settings) when it is imported, so
the plumbing follows ``configure()`` without importing ``config``; it lives here, in the
package itself, so installing it loads no module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import metrics


def _global_meter_provider() -> Any:
    return metrics.get_meter_provider()


def _global_logger_provider() -> Any:
    from opentelemetry import _logs  # for import time: the logs API loads with the first record

    return _logs.get_logger_provider()


#: Where :func:`meter_provider` and :func:`logger_provider` find their provider: the global
#: ones until ``spanpoint.config`` installs the settings' (see the module doc).
_sources: dict[str, Callable[[], Any]] = {
    "meter": _global_meter_provider,
    "logger": _global_logger_provider,
}


def set_meter_source(source: Callable[[], Any]) -> None:
    """Where :func:`meter_provider` finds the provider (``spanpoint.config`` sets it)."""
    _sources["meter"] = source


def set_logger_source(source: Callable[[], Any]) -> None:
    """Where :func:`logger_provider` finds the provider (``spanpoint.config`` sets it)."""
    _sources["logger"] = source


def meter_provider() -> Any:
    """spanpoint's meter provider now: the configured one (the global one until then)."""
    return _sources["meter"]()


def logger_provider() -> Any:
    """spanpoint's logger provider now: the configured one (the global one until then)."""
    return _sources["logger"]()
