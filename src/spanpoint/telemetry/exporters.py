"""The OTel SDK's exporter environment contract, resolved once per signal, and bounded exit.

``resolve(signal)`` reads the standard variables with the SDK's own precedence:

- ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER``: ``otlp``, ``console``, ``none`` (comma-separated).
  Unset, a signal goes over OTLP when an endpoint for it is set, else to spanpoint's local
  JSON-lines file.
- ``OTEL_EXPORTER_OTLP_<SIGNAL>_{ENDPOINT,PROTOCOL,TIMEOUT}`` over
  ``OTEL_EXPORTER_OTLP_{ENDPOINT,PROTOCOL,TIMEOUT}``. For ``http/protobuf`` the generic endpoint
  gets ``/v1/<signal>`` appended and a per-signal one is used as is. Headers, compression and
  certificates are read by the exporters themselves, with the same precedence.

The exporters built here count what they delivered and keep the reason of their last failure
(:func:`tallies`), so a report never names a destination that rejected everything.

Exit is bounded: providers registered with :func:`shutdown_at_exit` are shut down together, in
parallel, and the process waits at most the largest export timeout of the signals
(``OTEL_EXPORTER_OTLP_TIMEOUT``, default 10 s) for them, whether the collector is closed,
hanging or throttling. What is not delivered by then is dropped.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from spanpoint.errors import ConfigurationError

Signal = Literal["traces", "metrics", "logs"]
SIGNALS: tuple[Signal, ...] = ("traces", "metrics", "logs")
PROTOCOLS = ("grpc", "http/protobuf")
#: The OTLP exporters' own default (seconds: the Python SDK reads the variables as seconds).
DEFAULT_TIMEOUT_S = 10.0
_DEFAULT_ENDPOINT = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
_ITEMS = {"traces": "spans", "metrics": "metric points", "logs": "log records"}


@dataclass(frozen=True)
class SignalExport:
    """How one signal is exported, as the environment asks."""

    signal: Signal
    #: ``otlp``, ``console`` and/or ``file`` (spanpoint's local JSON lines); empty: none.
    kinds: tuple[str, ...]
    protocol: str = "grpc"
    endpoint: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: The variable that chose the exporters, when one did.
    chosen_by: str = ""

    def describe(self, file_path: str = "") -> str:
        """``OTLP http://…/v1/traces``, ``file …``, ``none (…)``, joined."""
        if not self.kinds:
            return f"none ({self.chosen_by}=none)"
        parts = []
        for kind in self.kinds:
            if kind == "otlp":
                parts.append(f"OTLP {self.endpoint}")
            elif kind == "console":
                parts.append("console (stdout)")
            else:
                parts.append(f"file {file_path}")
        return ", ".join(parts)


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def resolve(signal: Signal, environ: Mapping[str, str] | None = None) -> SignalExport:
    """The exporters, protocol, endpoint and timeout of ``signal`` from the ``OTEL_*`` variables.

    Raises ``ConfigurationError`` naming the variable for a value the SDK could not use.
    """
    env = os.environ if environ is None else environ
    sig = signal.upper()
    per_endpoint_var = f"OTEL_EXPORTER_OTLP_{sig}_ENDPOINT"
    per_endpoint = _env(env, per_endpoint_var)
    generic_endpoint = _env(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter_var = f"OTEL_{sig}_EXPORTER"
    raw = _env(env, exporter_var)
    if raw:
        names = [n.strip().lower() for n in raw.split(",") if n.strip()]
        for name in names:
            if name not in ("otlp", "console", "none"):
                raise ConfigurationError(
                    f"{exporter_var}={raw!r}: {name!r} is not an exporter spanpoint can build; "
                    f"use otlp, console or none (for example {exporter_var}=otlp)"
                )
        kinds: tuple[str, ...] = () if "none" in names else tuple(dict.fromkeys(names))
    else:
        kinds = ("otlp",) if (per_endpoint or generic_endpoint) else ("file",)
    protocol_var = f"OTEL_EXPORTER_OTLP_{sig}_PROTOCOL"
    if _env(env, protocol_var):
        protocol, source = _env(env, protocol_var), protocol_var
    else:
        source = "OTEL_EXPORTER_OTLP_PROTOCOL"
        protocol = _env(env, source) or "grpc"
    if "otlp" in kinds and protocol not in PROTOCOLS:
        hint = " (the Python OTLP exporters have no http/json)" if protocol == "http/json" else ""
        raise ConfigurationError(
            f"{source}={protocol!r} is not an OTLP protocol spanpoint can use{hint}; use "
            f"grpc or http/protobuf (for example {source}=http/protobuf)"
        )
    endpoint = ""
    if "otlp" in kinds:
        if per_endpoint:
            endpoint = _check_endpoint(per_endpoint_var, per_endpoint, protocol)
        elif generic_endpoint:
            endpoint = _check_endpoint("OTEL_EXPORTER_OTLP_ENDPOINT", generic_endpoint, protocol)
            if protocol != "grpc":
                endpoint = f"{endpoint.removesuffix('/')}/v1/{signal}"
        else:
            endpoint = _DEFAULT_ENDPOINT[protocol]
            if protocol != "grpc":
                endpoint += f"/v1/{signal}"
    timeout_s = _timeout(env, f"OTEL_EXPORTER_OTLP_{sig}_TIMEOUT")
    return SignalExport(signal, kinds, protocol, endpoint, timeout_s, exporter_var if raw else "")


def _check_endpoint(var: str, value: str, protocol: str) -> str:
    example = _DEFAULT_ENDPOINT[protocol if protocol in PROTOCOLS else "grpc"]
    problem = ""
    if protocol == "grpc" and "://" not in value:
        # The gRPC exporter also takes a bare host:port.
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit():
            problem = "it is neither a URL nor host:port"
    else:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError as exc:
            problem = str(exc)
        else:
            if parts.scheme not in ("http", "https"):
                problem = "it needs an http:// or https:// scheme"
            elif not parts.hostname:
                problem = "it has no host"
    if problem:
        raise ConfigurationError(
            f"{var}={value!r} is not a valid OTLP endpoint ({problem}); use a URL, "
            f"for example {var}={example}"
        )
    return value


def _timeout(env: Mapping[str, str], per_signal_var: str) -> float:
    for var in (per_signal_var, "OTEL_EXPORTER_OTLP_TIMEOUT"):
        raw = _env(env, var)
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value > 0:
            raise ConfigurationError(
                f"{var}={raw!r} is not a timeout; use a positive number of seconds (the Python "
                f"OTLP exporters read it in seconds), for example {var}=10"
            )
        return value
    return DEFAULT_TIMEOUT_S


# --- what was delivered ---------------------------------------------------------------------


@dataclass
class ExportTally:
    """What one exporter delivered: counts, and the reason of the last failure."""

    signal: Signal
    destination: str
    protocol: str = ""
    endpoint: str = ""
    exported: int = 0
    failed: int = 0
    reason: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def items(self) -> str:
        """What is counted: spans, log records or metric points."""
        return _ITEMS[self.signal]

    def add(self, count: int, ok: bool, reason: str = "") -> None:
        """Count one export call of ``count`` items."""
        with self._lock:
            if ok:
                self.exported += count
            else:
                self.failed += count
                self.reason = reason or "the exporter reported a failure"

    def summary(self) -> str:
        """One line: where, how many, and why not when something failed."""
        if not self.failed:
            return f"{self.destination} — {self.exported} {self.items} exported"
        total = self.exported + self.failed
        if not self.exported:
            return (
                f"export FAILED — {self.destination} accepted none of {total} {self.items}: "
                f"{self.reason}"
            )
        return (
            f"{self.destination} — {self.exported} of {total} {self.items} exported, "
            f"{self.failed} failed: {self.reason}"
        )

    def hint(self) -> str:
        """A one-line fix for a protocol mismatch, when the failure looks like one."""
        if not self.failed or not self.endpoint:
            return ""
        try:
            port = urlsplit(self.endpoint if "://" in self.endpoint else f"//{self.endpoint}").port
        except ValueError:
            port = None
        reason = self.reason.lower()
        if self.protocol == "grpc" and (port == 4318 or "http/2" in reason or "http2" in reason):
            return (
                "hint: the endpoint speaks OTLP/HTTP, not gRPC; set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
            )
        if self.protocol == "http/protobuf" and (
            port == 4317 or "remotedisconnected" in reason or "badstatusline" in reason
        ):
            return (
                "hint: the endpoint speaks OTLP/gRPC, not HTTP; "
                "set OTEL_EXPORTER_OTLP_PROTOCOL=grpc"
            )
        return ""


_TALLIES: dict[Signal, list[ExportTally]] = {}


def tallies(signal: Signal) -> list[ExportTally]:
    """The tallies of the exporters last built for ``signal`` by spanpoint (empty: none)."""
    return list(_TALLIES.get(signal, ()))


class _ReasonCapture(logging.Handler):
    """Keeps the warnings the OTLP exporters log during one export call on this thread.

    The exporters return only SUCCESS or FAILURE; why is in what they log.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        records = getattr(self.local, "records", None)
        if records is not None:
            with contextlib.suppress(Exception):  # a bad record must not break the export
                records.append(record.getMessage())
        if not self._others_handle(record):
            # Being a handler, this one would hide the record from logging's last resort
            # (stderr): export failures must stay as visible as without spanpoint.
            last = logging.lastResort
            if last is not None and record.levelno >= last.level:
                last.handle(record)

    def _others_handle(self, record: logging.LogRecord) -> bool:
        node: logging.Logger | None = logging.getLogger(record.name)
        while node is not None:
            if any(h is not self for h in node.handlers):
                return True
            node = node.parent if node.propagate else None  # type: ignore[assignment]
        return False


_CAPTURE = _ReasonCapture()
logging.getLogger("opentelemetry.exporter").addHandler(_CAPTURE)


def _call(export: Callable[[], Any], success: Any) -> tuple[Any, bool, str]:
    _CAPTURE.local.records = messages = []
    try:
        result = export()
    except Exception as exc:  # counted as a failure with its reason, then re-raised
        _CAPTURE.local.records = None
        raise _Failed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        _CAPTURE.local.records = None
    ok = result is success
    return result, ok, "" if ok else _reason(messages)


class _Failed(Exception):
    pass


_HTTP_CODE = re.compile(r"code: (\d{3}), reason: (.*)")


def _reason(messages: Sequence[str]) -> str:
    """The most telling of the messages an exporter logged while failing, on one line."""
    telling = [m for m in messages if "due to timeout, max retries or shutdown" not in m]
    gave_up = len(telling) < len(messages)
    text = telling[0] if telling else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    lowered = first.lower()
    if match := _HTTP_CODE.search(first):
        why = f"HTTP {match.group(1)} {match.group(2).strip()}"
    elif "too many requests" in lowered:
        why = "HTTP 429 Too Many Requests (throttled)"
    elif "http/2" in lowered:
        # gRPC's "failed to connect to all addresses" hides this: something answered.
        why = "the endpoint does not speak gRPC (Failed parsing HTTP/2)"
    elif "connection refused" in lowered or "failed to connect" in lowered:
        why = "connection refused (nothing listens there)"
    elif "timed out" in lowered or "deadline_exceeded" in lowered or "deadline exceeded" in lowered:
        why = "no answer within the export timeout"
    elif first:
        why = first if len(first) <= 200 else first[:197] + "..."
    elif gave_up:
        why = "gave up: no success within the export timeout and its retries"
    else:
        why = "the exporter reported a failure"
    return why


#: Per signal: what a successful export returns, and what a failed one does.
_RESULTS: dict[Signal, tuple[Any, Any]] = {
    "traces": (SpanExportResult.SUCCESS, SpanExportResult.FAILURE),
    "logs": (LogRecordExportResult.SUCCESS, LogRecordExportResult.FAILURE),
    "metrics": (MetricExportResult.SUCCESS, MetricExportResult.FAILURE),
}


class CountingExporter(SpanExporter, LogRecordExporter, MetricExporter):
    """Delegates to ``inner`` (a span, log record or metric exporter, as ``tally.signal``
    says) and tallies what it delivered: spans, log records or metric data points. A metric
    exporter's temporality and aggregation are kept."""

    def __init__(self, inner: Any, tally: ExportTally) -> None:
        if tally.signal == "metrics":
            MetricExporter.__init__(
                self,
                preferred_temporality=inner._preferred_temporality,
                preferred_aggregation=inner._preferred_aggregation,
            )
        self.inner, self.tally = inner, tally

    def export(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        """Export through ``inner``, counting."""
        success, failure = _RESULTS[self.tally.signal]
        count = _points(batch) if self.tally.signal == "metrics" else len(batch)
        try:
            result, ok, why = _call(lambda: self.inner.export(batch, *args, **kwargs), success)
        except _Failed as exc:
            self.tally.add(count, False, str(exc))
            return failure
        self.tally.add(count, ok, why)
        return result

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        """Shut ``inner`` down."""
        self.inner.shutdown(*args, **kwargs)

    def force_flush(self, timeout_millis: float = 30_000) -> bool:
        """Flush ``inner``."""
        return bool(self.inner.force_flush(timeout_millis))


def _points(data: MetricsData) -> int:
    return sum(
        len(getattr(metric.data, "data_points", ()))
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    )


# --- building -------------------------------------------------------------------------------


def _otlp(config: SignalExport) -> Any:
    http = config.protocol != "grpc"
    kwargs: dict[str, Any] = {"endpoint": config.endpoint, "timeout": config.timeout_s}
    if config.signal == "traces":
        if http:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
        return OTLPSpanExporter(**kwargs)
    if config.signal == "logs":
        if http:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        else:
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (  # type: ignore[assignment]
                OTLPLogExporter,
            )
        return OTLPLogExporter(**kwargs)
    if http:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (  # type: ignore[assignment]
            OTLPMetricExporter,
        )
    return OTLPMetricExporter(**kwargs)


def _console(signal: Signal) -> Any:
    if signal == "traces":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if signal == "logs":
        from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter

        return ConsoleLogRecordExporter()
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    return ConsoleMetricExporter()


def build(config: SignalExport, file_exporter: Callable[[], Any], file_path: str = "") -> list[Any]:
    """The exporters ``config`` asks for, each counting into a tally (see :func:`tallies`).

    ``file_exporter`` makes spanpoint's local JSON-lines exporter, written to ``file_path``.
    """
    made: list[Any] = []
    counts: list[ExportTally] = []
    for kind in config.kinds:
        if kind == "otlp":
            inner = _otlp(config)
            tally = ExportTally(
                config.signal,
                f"OTLP {config.endpoint}",
                protocol=config.protocol,
                endpoint=config.endpoint,
            )
        elif kind == "console":
            inner, tally = _console(config.signal), ExportTally(config.signal, "console (stdout)")
        else:
            inner, tally = file_exporter(), ExportTally(config.signal, f"file {file_path}")
        made.append(CountingExporter(inner, tally))
        counts.append(tally)
    _TALLIES[config.signal] = counts
    return made


# --- bounded flush and exit -----------------------------------------------------------------


def exit_budget_s(environ: Mapping[str, str] | None = None) -> float:
    """How long exit waits for the exporters: the largest export timeout of the signals."""
    budget = 0.0
    for signal in SIGNALS:
        try:
            budget = max(budget, resolve(signal, environ).timeout_s)
        except ConfigurationError:
            budget = max(budget, DEFAULT_TIMEOUT_S)
    return budget


def _run_bounded(calls: Iterable[Callable[[], Any]], budget_s: float) -> list[bool]:
    """Run ``calls`` in parallel daemon threads; wait at most ``budget_s`` for all of them."""
    done: list[bool] = []
    threads = []
    for call in calls:
        slot = len(done)
        done.append(False)

        def run(call: Callable[[], Any] = call, slot: int = slot) -> None:
            try:
                call()
                done[slot] = True
            except Exception:  # an exporter fault at exit is dropped, never raised
                pass

        thread = threading.Thread(target=run, name="spanpoint-telemetry-exit", daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.monotonic() + budget_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return done


def flush(providers: Iterable[Any], budget_s: float | None = None) -> list[bool]:
    """Force-flush ``providers`` together, waiting at most the export budget."""
    budget = exit_budget_s() if budget_s is None else budget_s
    millis = int(budget * 1000)
    calls = [
        (lambda p=p: p.force_flush(millis))
        for p in providers
        if p is not None and callable(getattr(p, "force_flush", None))
    ]
    return _run_bounded(calls, budget)


_EXIT_PROVIDERS: list[Any] = []
_EXIT_LOCK = threading.Lock()


def shutdown_at_exit(provider: Any) -> None:
    """Shut ``provider`` down at exit, with the others, within :func:`exit_budget_s`.

    Build the provider with ``shutdown_on_exit=False``: the SDK's own exit handlers run one
    after another, each waiting up to its timeout and its retries.
    """
    with _EXIT_LOCK:
        if not _EXIT_PROVIDERS:
            atexit.register(shutdown_all)
        if all(p is not provider for p in _EXIT_PROVIDERS):
            _EXIT_PROVIDERS.append(provider)


def shutdown_all(budget_s: float | None = None) -> None:
    """Shut down every provider given to :func:`shutdown_at_exit`, in parallel, bounded."""
    with _EXIT_LOCK:
        providers = list(_EXIT_PROVIDERS)
        _EXIT_PROVIDERS.clear()
    budget = exit_budget_s() if budget_s is None else budget_s
    # Each provider's own wait (up to 30 s) is cut short by the shared budget. One the
    # application already shut down is skipped (the meter provider warns on a second call).
    live = [p for p in providers if not getattr(p, "_shutdown", False)]
    done = _run_bounded([p.shutdown for p in live], budget)
    if not all(done):
        # The exporter's own "Failed to export" comes only once its request gives up, which
        # can be after exit stopped waiting: say here that telemetry was dropped, and why.
        logging.getLogger("spanpoint").warning(
            "spanpoint: exit stopped waiting for the telemetry exporters after %g s (the "
            "export timeout, OTEL_EXPORTER_OTLP_TIMEOUT); what they had not sent yet is "
            "dropped. Check the collector with `spanpoint doctor`.",
            budget,
        )


# --- the doctor's probe ---------------------------------------------------------------------


@dataclass
class Probe:
    """What sending one probe item of a signal to its configured exporters gave."""

    signal: Signal
    config: SignalExport
    tallies: list[ExportTally]


def probe(budget_s: float | None = None) -> list[Probe]:
    """Send one probe span, log record and metric point through the exporters the environment
    asks for, all together and bounded by the export timeout, and say what each delivered.

    spanpoint's local files are not written to; a malformed variable raises
    ``ConfigurationError``.
    """
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    resource = Resource.create()
    configs = {signal: resolve(signal) for signal in SIGNALS}
    probes: list[Probe] = []
    calls: list[Callable[[], Any]] = []
    for signal, config in configs.items():
        remote = SignalExport(
            signal,
            tuple(k for k in config.kinds if k != "file"),
            config.protocol,
            config.endpoint,
            config.timeout_s,
            config.chosen_by,
        )
        made = build(remote, lambda: None) if remote.kinds else []
        probes.append(Probe(signal, config, tallies(signal) if made else []))
        if not made:
            continue
        if signal == "traces":
            tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            for exporter in made:
                tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))

            def send_span(p: TracerProvider = tracer_provider) -> None:
                p.get_tracer("spanpoint.doctor").start_span("spanpoint.doctor").end()
                p.shutdown()

            calls.append(send_span)
        elif signal == "logs":
            logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            for exporter in made:
                logger_provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))

            def send_log(p: LoggerProvider = logger_provider) -> None:
                p.get_logger("spanpoint.doctor").emit(
                    event_name="spanpoint.doctor", body="spanpoint doctor probe"
                )
                p.shutdown()

            calls.append(send_log)
        else:
            readers = [
                PeriodicExportingMetricReader(e, export_interval_millis=3_600_000) for e in made
            ]
            meter_provider = MeterProvider(
                metric_readers=readers, resource=resource, shutdown_on_exit=False
            )

            def send_metric(p: MeterProvider = meter_provider) -> None:
                p.get_meter("spanpoint.doctor").create_counter("spanpoint.doctor.probes").add(1)
                p.shutdown()  # collects and exports once

            calls.append(send_metric)
    _run_bounded(calls, exit_budget_s() if budget_s is None else budget_s)
    return probes
