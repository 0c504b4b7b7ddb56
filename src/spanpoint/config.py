"""``spanpoint.configure()``: the one call that wires spanpoint into OpenTelemetry.

- With an application-provided SDK ``TracerProvider`` it only adds the checkpoint processor
  (and wraps the provider's sampler so boundaries stay durable when sampled out).
- With none, it installs one that honours the standard ``OTEL_*`` variables
  (``spanpoint.telemetry.exporters``): ``OTEL_TRACES_EXPORTER``, and OTLP export when
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces-specific variable) is set, otherwise a local
  JSON-lines trace file under ``.spanpoint/``. Exit waits at most the export timeout.

It is idempotent: calling it again never adds a second processor or exporter.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from spanpoint import committer, semconv, serde
from spanpoint._compat import sampler_from_env
from spanpoint._version import __version__
from spanpoint.capture import CapturePolicy, set_default_policy
from spanpoint.errors import ConfigurationError
from spanpoint.processor import DURABILITIES, CheckpointSpanProcessor, Durability, DurableSampler
from spanpoint.stores import CheckpointStore, open_store
from spanpoint.telemetry import set_logger_source, set_meter_source

DEFAULT_TRACE_FILE = ".spanpoint/traces.jsonl"


@dataclass
class Settings:
    """What ``configure`` decided. Read it with ``spanpoint.settings()``."""

    #: None until the first span needs it (see :attr:`tracer_provider`).
    _tracer_provider: trace.TracerProvider | None = field(default=None, repr=False)
    _trace_destination: str = field(default="", repr=False)
    store_address: str | None = None
    strict: bool = False
    lease_ttl_s: float = 300.0
    lease_wait_timeout_s: float = 600.0
    #: When checkpoints are written: ``"sync"`` before a boundary returns, ``"async"`` by a
    #: background committer (``configure(durability=...)``, ``$SPANPOINT_DURABILITY``).
    durability: Durability = "sync"
    #: Under ``"async"``: how many checkpoints may wait per store (the crash bound).
    commit_queue: int = committer.DEFAULT_CAPACITY
    capture: CapturePolicy = field(default_factory=CapturePolicy.from_env)
    _store: CheckpointStore | None = field(default=None, repr=False)
    _tracer: trace.Tracer | None = field(default=None, repr=False)
    telemetry_dir: str = ".spanpoint"
    log_destination: str = ""
    metric_destination: str = ""
    _logger_provider: Any = field(default=None, repr=False)
    _meter_provider: Any = field(default=None, repr=False)
    #: The user's types checkpoints may name (``configure(allowed_types=...)``).
    allowed_types: tuple[type | str, ...] = ()

    @property
    def store(self) -> CheckpointStore:
        """The default store, opened on first use."""
        if self._store is None:
            with _LOCK:
                if self._store is None:
                    self._store = open_store(self.store_address)
        return self._store

    @property
    def tracer_provider(self) -> trace.TracerProvider:
        """The tracer provider, wired on first use: the application's (the global SDK one),
        else a new SDK provider with the default exporter, set as global.

        Resolved here rather than when the settings are made, so that reading the settings
        (``settings().capture``) installs nothing process-wide: only ``configure()`` with a
        provider, or the first span spanpoint starts, wires one.
        """
        if self._tracer_provider is None:
            with _LOCK:
                if self._tracer_provider is None:
                    provider, destination = _resolve_provider(None, None)
                    self._trace_destination = destination
                    self._tracer_provider = provider
        return self._tracer_provider

    @property
    def trace_destination(self) -> str:
        """Where traces go (resolves :attr:`tracer_provider`)."""
        self.tracer_provider  # noqa: B018 - resolves the provider and its destination
        return self._trace_destination

    @property
    def tracer(self) -> trace.Tracer:
        """spanpoint's tracer on the configured provider."""
        if self._tracer is None:
            self._tracer = self.tracer_provider.get_tracer(
                semconv.INSTRUMENTATION_NAME, __version__
            )
        return self._tracer

    @property
    def logger_provider(self) -> Any:
        """Where run summaries are logged: the given or global SDK provider, else a default
        one (OTLP when an endpoint is set, else ``telemetry_dir/logs.jsonl``), made on use."""
        if self._logger_provider is None:
            from opentelemetry import _logs
            from opentelemetry.sdk._logs import LoggerProvider as SdkLoggerProvider

            with _LOCK:
                current = _logs.get_logger_provider()
                if isinstance(current, SdkLoggerProvider):
                    self._logger_provider, self.log_destination = current, "application"
                elif self._logger_provider is None:
                    # For import time: only an application with no logger provider pays.
                    from spanpoint.telemetry import providers as _providers

                    made = _providers.default_logger_provider(
                        Path(self.telemetry_dir), _providers.resource_of(self.tracer_provider)
                    )
                    self._logger_provider, self.log_destination = made
        return self._logger_provider

    @property
    def meter_provider(self) -> Any:
        """Where metrics go; chosen like :attr:`logger_provider` (``metrics.jsonl`` locally)."""
        if self._meter_provider is None:
            from opentelemetry import metrics
            from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

            with _LOCK:
                current = metrics.get_meter_provider()
                if isinstance(current, SdkMeterProvider):
                    self._meter_provider, self.metric_destination = current, "application"
                elif self._meter_provider is None:
                    # For import time: only an application with no meter provider pays.
                    from spanpoint.telemetry import providers as _providers

                    made = _providers.default_meter_provider(
                        Path(self.telemetry_dir), _providers.resource_of(self.tracer_provider)
                    )
                    self._meter_provider, self.metric_destination = made
        return self._meter_provider


_LOCK = threading.RLock()
_SETTINGS: Settings | None = None
_WIRED: weakref.WeakSet[TracerProvider] = weakref.WeakSet()


def configure(
    *,
    store: CheckpointStore | str | os.PathLike[str] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    strict: bool | None = None,
    capture: CapturePolicy | None = None,
    lease_ttl_s: float | None = None,
    lease_wait_timeout_s: float | None = None,
    trace_file: str | os.PathLike[str] | None = None,
    logger_provider: Any = None,
    meter_provider: Any = None,
    allowed_types: Iterable[type | str] | None = None,
    durability: Durability | None = None,
    commit_queue: int | None = None,
) -> Settings:
    """Wire spanpoint into OpenTelemetry and select the default checkpoint store.

    Args:
        store: a store instance or address (``memory``, a SQLite path, ``postgresql://…``).
            Default: ``$SPANPOINT_STORE``, else ``.spanpoint/checkpoints.db``.
        tracer_provider: the provider to use; default the global one, or a new SDK provider
            (set as global) when the application has none, chosen when the first span
            starts.
        strict: raise instead of warning when an output cannot be serialized or committed.
        capture: the capture policy for graph, model and tool data. Default: the previous
            one, else ``CapturePolicy.from_env()`` (metadata first, message text off).
        lease_ttl_s: how long a worker's claim on a boundary lasts before another may take it.
        lease_wait_timeout_s: how long a worker waits for another's live boundary to commit.
        trace_file: where traces go when no OTLP endpoint is configured (run summaries and
            metrics go to ``logs.jsonl`` / ``metrics.jsonl`` in the same folder).
        logger_provider / meter_provider: where run summaries and metrics go; default the
            global SDK ones, else OTLP when an endpoint is set, else the local files.
        allowed_types: your own types that stored checkpoints may name, beyond JSON-like
            values, std types, LangChain messages and LangGraph types (classes, or
            ``"package.module:Name"`` strings). A checkpoint naming any other type is refused
            before anything is imported, and the boundary executes again. Default: the
            previous list, else none.
        durability: when a boundary's checkpoint is written, in LangGraph's words.
            ``"sync"`` (the default): before the boundary returns, so a crash never loses a
            boundary that returned. ``"async"``: a background committer per store writes it
            while the run goes on; a crash may execute again the boundaries that had
            returned but whose commit had not landed, at most ``commit_queue`` of them
            (docs/concepts.md, "Durability: sync and async commits"). Every run flushes its
            commits at its end. Default: the previous choice, else ``$SPANPOINT_DURABILITY``,
            else ``"sync"``. ``spanpoint.run(..., durability=)`` overrides it for one run.
        commit_queue: under ``"async"``, how many checkpoints may wait per store; a boundary
            whose commit finds the queue full waits for a free slot. Default: the previous
            value, else ``$SPANPOINT_COMMIT_QUEUE``, else 32.
    """
    global _SETTINGS
    _check_arguments(lease_ttl_s, lease_wait_timeout_s, durability, commit_queue)
    with _LOCK:
        previous = _SETTINGS
        settings = _new_settings(previous, tracer_provider, trace_file, strict, capture)
        # Each setting not given keeps the previous choice, else its default.
        given = {
            "lease_ttl_s": (lease_ttl_s, None),
            "lease_wait_timeout_s": (lease_wait_timeout_s, None),
            "durability": (durability, _durability_from_env),
            "commit_queue": (commit_queue, _commit_queue_from_env),
        }
        for name, (value, default) in given.items():
            if value is None:
                kept = previous or settings
                value = getattr(kept, name) if previous or default is None else default()
            setattr(settings, name, value)
        committer.set_capacity(settings.commit_queue)
        _choose_store(settings, previous, store)
        _choose_log_and_metric_providers(settings, previous, logger_provider, meter_provider)
        settings.telemetry_dir = os.fspath(
            Path(trace_file or os.environ.get("SPANPOINT_TRACE_FILE") or DEFAULT_TRACE_FILE).parent
        )
        _set_allowed_types(settings, previous, allowed_types)
        set_default_policy(settings.capture)
        _SETTINGS = settings
        return settings


def _check_arguments(
    lease_ttl_s: float | None,
    lease_wait_timeout_s: float | None,
    durability: object,
    commit_queue: object,
) -> None:
    _check_positive("lease_ttl_s", lease_ttl_s)
    _check_positive("lease_wait_timeout_s", lease_wait_timeout_s)
    if durability is not None:
        check_durability(durability, "durability")
    if commit_queue is not None and (
        isinstance(commit_queue, bool) or not isinstance(commit_queue, int) or commit_queue < 1
    ):
        raise ConfigurationError(
            f"commit_queue must be a positive whole number of checkpoints, not {commit_queue!r}"
        )


def _new_settings(
    previous: Settings | None,
    tracer_provider: trace.TracerProvider | None,
    trace_file: str | os.PathLike[str] | None,
    strict: bool | None,
    capture: CapturePolicy | None,
) -> Settings:
    """Settings with the tracer provider, strictness and capture policy of this call."""
    provider: trace.TracerProvider | None
    if tracer_provider is None and trace_file is None:
        # configure(strict=True) and the like keep the provider chosen before; with none
        # chosen yet, the first span resolves it (Settings.tracer_provider).
        provider = previous._tracer_provider if previous else None
        destination = previous._trace_destination if previous else ""
    else:
        provider, destination = _resolve_provider(tracer_provider, trace_file)
    settings = Settings(
        _tracer_provider=provider,
        _trace_destination=destination,
        strict=bool(strict) if strict is not None else bool(previous and previous.strict),
        capture=capture or (previous.capture if previous else CapturePolicy.from_env()),
    )
    if previous is not None and provider is not None and previous._tracer_provider is provider:
        settings._tracer = previous._tracer
    return settings


def _choose_store(
    settings: Settings,
    previous: Settings | None,
    store: CheckpointStore | str | os.PathLike[str] | None,
) -> None:
    if store is None and previous is not None:
        settings.store_address, settings._store = previous.store_address, previous._store
    elif isinstance(store, str | os.PathLike):
        settings.store_address = os.fspath(store)
    elif store is not None:
        if not isinstance(store, CheckpointStore):
            raise ConfigurationError(
                f"store must be a CheckpointStore or an address, not {type(store).__name__}"
            )
        settings._store = store


def check_durability(value: object, where: str) -> Durability:
    """``value`` when it names a durability mode; :class:`ConfigurationError` otherwise."""
    if value not in DURABILITIES:
        raise ConfigurationError(
            f'{where} must be "sync" (commit before a boundary returns) or "async" '
            f"(commit in the background, see docs/concepts.md), not {value!r}"
        )
    return value  # type: ignore[return-value]


def _durability_from_env() -> Durability:
    value = os.environ.get("SPANPOINT_DURABILITY", "").strip()
    return check_durability(value, "SPANPOINT_DURABILITY") if value else "sync"


def _commit_queue_from_env() -> int:
    value = os.environ.get("SPANPOINT_COMMIT_QUEUE", "").strip()
    if not value:
        return committer.DEFAULT_CAPACITY
    if not value.isdigit() or int(value) < 1:
        raise ConfigurationError(
            f"SPANPOINT_COMMIT_QUEUE must be a positive whole number of checkpoints, not {value!r}"
        )
    return int(value)


def _set_allowed_types(
    settings: Settings, previous: Settings | None, allowed_types: Iterable[type | str] | None
) -> None:
    chosen = previous.allowed_types if allowed_types is None and previous else allowed_types
    try:
        settings.allowed_types = serde.set_allowed_types(chosen or ())
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc


def _choose_log_and_metric_providers(
    settings: Settings, previous: Settings | None, logger_provider: Any, meter_provider: Any
) -> None:
    if logger_provider is not None:
        settings._logger_provider, settings.log_destination = logger_provider, "application"
    elif previous is not None:
        settings._logger_provider = previous._logger_provider
        settings.log_destination = previous.log_destination
    if meter_provider is not None:
        settings._meter_provider, settings.metric_destination = meter_provider, "application"
    elif previous is not None:
        settings._meter_provider = previous._meter_provider
        settings.metric_destination = previous.metric_destination


def settings() -> Settings:
    """The current settings, with defaults on first use.

    Reading them has no process-wide effect: the tracer provider is resolved (and, when the
    application has none, installed) by ``configure(tracer_provider=...)`` or by the first
    span spanpoint starts, not by this call.
    """
    current = _SETTINGS
    if current is None:
        return configure()
    return current


def flush(timeout_s: float | None = None) -> bool:
    """Wait until every checkpoint queued under ``durability="async"`` is written.

    A run flushes its own commits when it ends, and a normal exit flushes what is left (at
    most 30 s); call this to make the boundaries that have returned so far durable now (before
    a side effect outside spanpoint that depends on them, say). Under ``"sync"`` nothing is
    ever queued and it returns at once. Returns False when ``timeout_s`` passed first.
    """
    return committer.flush_all(timeout_s)


def reset_for_tests() -> None:
    """Forget the current settings (tests only; the global OTel provider stays set)."""
    global _SETTINGS
    with _LOCK:
        _SETTINGS = None
        set_default_policy(None)
        serde.set_allowed_types(())


def _check_positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, not {value!r}")


def _resolve_provider(
    explicit: trace.TracerProvider | None, trace_file: str | os.PathLike[str] | None
) -> tuple[trace.TracerProvider, str]:
    provider = explicit if explicit is not None else trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        wire_provider(provider)
        return provider, "application tracer provider"
    if explicit is not None:
        # A non-SDK provider (a no-op one): boundaries commit directly, nothing is exported.
        return provider, "none (non-SDK tracer provider)"
    # For import time: the SDK's resources, logs and metrics, only when spanpoint builds its own
    # providers (not for `spanpoint --help`, nor under an application's provider).
    from opentelemetry.sdk.resources import Resource  # for import time (above)

    from spanpoint.telemetry import exporters as _exporters  # for import time (above)

    sdk_provider = TracerProvider(
        sampler=DurableSampler(sampler_from_env()),
        resource=Resource.create({"service.name": _service_name()}),
        # Shut down with the log and metric providers, together and bounded (telemetry/).
        shutdown_on_exit=False,
    )
    wire_provider(sdk_provider)
    destination = _add_default_exporter(sdk_provider, trace_file)
    trace.set_tracer_provider(sdk_provider)
    actual = trace.get_tracer_provider()
    if actual is not sdk_provider:  # someone set a provider first: use theirs
        return _resolve_provider(actual, trace_file)
    _exporters.shutdown_at_exit(sdk_provider)
    return sdk_provider, destination


def wire_provider(provider: TracerProvider) -> None:
    """Add the checkpoint processor to ``provider`` and make its sampler durable, once."""
    with _LOCK:
        if provider in _WIRED:
            return
        provider.add_span_processor(CheckpointSpanProcessor())
        from spanpoint.telemetry.metrics import GenAIMetricsProcessor  # for import time

        # gen_ai.client.* metrics are recorded from spanpoint's spans as they end, in one place.
        provider.add_span_processor(GenAIMetricsProcessor())
        if not isinstance(provider.sampler, DurableSampler):
            # Tracers capture the sampler when created; spanpoint's tracer is created after
            # this, so its boundary spans get the durable sampler.
            provider.sampler = DurableSampler(provider.sampler)
        _WIRED.add(provider)


def _service_name() -> str:
    name = os.environ.get("OTEL_SERVICE_NAME")
    if name:
        return name
    for pair in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == "service.name" and value.strip():
            return value.strip()
    return "spanpoint-app"


def _add_default_exporter(
    provider: TracerProvider, trace_file: str | os.PathLike[str] | None
) -> str:
    # One resolution of OTEL_TRACES_EXPORTER and the endpoint/protocol/timeout variables; a
    # malformed value is a ConfigurationError naming the variable.
    from spanpoint.telemetry import exporters as _exporters  # for import time (see above)

    resolved = _exporters.resolve("traces")
    path = Path(trace_file or os.environ.get("SPANPOINT_TRACE_FILE") or DEFAULT_TRACE_FILE)
    from spanpoint.telemetry.jsonl import JsonLinesSpanExporter  # for import time

    for exporter in _exporters.build(resolved, lambda: JsonLinesSpanExporter(path), str(path)):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return resolved.describe(str(path))


# Instruments (spanpoint.telemetry.metrics) find the meter provider through this source, and
# the guard's log records the logger provider, so the telemetry plumbing follows configure()
# without importing config.
set_meter_source(lambda: settings().meter_provider)
set_logger_source(lambda: settings().logger_provider)
