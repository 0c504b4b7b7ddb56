"""Secrets stay home: a planted secret in any channel never leaves the process.

``tests/serde/secrets_app.py`` plants unique secrets in every channel an agent has (config keys,
runtime context, graph state, tool arguments and results, messages, an exception with a
cause, headers and the environment) and runs a successful and a failing run twice. It runs
in its own process, configured only by the environment as in a deployment, for each mode
(zero-code ``SpanpointInstrumentor`` and ``GraphRunner``, each with the ``graph_call`` and the
``calls`` strategy) and each transport (the local JSONL files, and OTLP to a real receiver).

For every channel the suite asserts that none of its secrets appears in the exported bytes
(traces, logs and metrics), in the process's own log output, in ``spanpoint runs`` and
``spanpoint show``, nor — for channels that are not part of a committed output — anywhere in
the store's bytes. A committed output (the messages a graph returns, a tool's result) is the
value a replay must return, so the store keeps it as the application gave it; file
permissions protect it.

Each channel also has a *witness*, a non-secret fragment of the same value that must be
exported, so a channel that is not captured at all cannot pass by accident.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import secrets_app as app
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from spanpoint.capture import REDACTED, exception_text, is_secret_key, record_failure, redact_text
from spanpoint.cli import app as cli
from spawn import run_python
from tests.otlp_receiver import OtlpReceiver

APP = Path(__file__).resolve().parent / "secrets_app.py"


@dataclass(frozen=True)
class Channel:
    name: str
    secrets: tuple[str, ...]
    #: Exported fragments that prove the channel was captured (its redacted form).
    witnesses: tuple[str, ...]
    #: The secrets are part of a committed output, which the store keeps for replay.
    in_outputs: bool = False
    #: Modes that do not capture this channel at all (so there is no witness to find).
    uncaptured_in: tuple[str, ...] = ()


ZERO_CODE = ("zero-code-graph_call", "zero-code-calls")
CHANNELS = [
    Channel("config", app.CONFIG_SECRETS, ("openai_key", "postgresql://app:****@db.internal")),
    Channel("headers", app.HEADER_SECRETS, ("Ocp-Apim-Subscription-Key", "x-functions-key")),
    # The zero-code patches capture the config, not the runtime context or the graph input.
    Channel("context", app.CONTEXT_SECRETS, ("privatekey", "acme"), uncaptured_in=ZERO_CODE),
    Channel(
        "state",
        app.STATE_SECRETS,
        ("mysql://svc:****@db.internal",),
        in_outputs=True,
        uncaptured_in=ZERO_CODE,
    ),
    Channel("messages", app.MESSAGE_SECRETS, ("hi, my key is",), in_outputs=True),
    # GraphRunner's graph_call strategy has no tool spans: the tool runs inside the graph call.
    Channel(
        "tool args",
        app.TOOL_ARG_SECRETS,
        ("cloned with",),
        in_outputs=True,
        uncaptured_in=("runner-graph_call",),
    ),
    Channel(
        "tool results",
        app.TOOL_RESULT_SECRETS,
        ("sunny in Paris",),
        in_outputs=True,
        uncaptured_in=("runner-graph_call",),
    ),
    Channel(
        "exceptions",
        app.EXCEPTION_SECRETS,
        ("provider refused key", "exception.stacktrace", "postgresql://bot:****@db.internal"),
    ),
    Channel("env", app.ENV_SECRETS, ()),
]


@dataclass
class Evidence:
    """Everything that left one application process, by where it went."""

    mode: str
    exported: bytes
    process_output: str
    cli_output: str
    store: bytes


_CACHE: dict[tuple[str, str], Evidence] = {}


def run_app(mode: str, transport: str, folder: Path) -> Evidence:
    folder.mkdir(parents=True, exist_ok=True)
    telemetry = folder / "telemetry"
    store = folder / "checkpoints.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env.update(app.ENV)
    env.update(
        SPANPOINT_STORE=str(store),
        SPANPOINT_TRACE_FILE=str(telemetry / "traces.jsonl"),
        # The worst case: the user opted in to message and state capture.
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="SPAN_AND_EVENT",
        SPANPOINT_CAPTURE_STATE="true",
    )
    receiver = None
    if transport == "otlp":
        receiver = OtlpReceiver().__enter__()
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
    try:
        done = run_python([str(APP), mode], cwd=folder, env=env, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-4000:]
        exported = b"".join(p.read_bytes() for p in sorted(telemetry.glob("*")) if p.is_file())
        if receiver is not None:
            requests = [m for batch in receiver.requests.values() for m in batch]
            assert receiver.requests["/v1/traces"], "nothing was exported over OTLP"
            exported += b"".join(m.SerializeToString() for m in requests)
    finally:
        if receiver is not None:
            receiver.__exit__(None, None, None)
    runner = CliRunner()
    shown = []
    for args in (
        ["runs", "--store", str(store)],
        ["show", app.RUN_OK, "--store", str(store)],
        ["show", app.RUN_FAILED, "--store", str(store)],
    ):
        result = runner.invoke(cli, args, terminal_width=400)
        assert result.exit_code == 0, result.output
        shown.append(result.output)
    store_bytes = b"".join(p.read_bytes() for p in folder.glob("checkpoints.db*"))
    return Evidence(mode, exported, done.stdout + done.stderr, "\n".join(shown), store_bytes)


@pytest.fixture(params=["local", "otlp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=list(app.MODES))
def evidence(
    request: pytest.FixtureRequest, transport: str, tmp_path_factory: pytest.TempPathFactory
) -> Evidence:
    """One application process per mode and transport, shared by its channel cases."""
    key = (str(request.param), transport)
    if key not in _CACHE:
        folder = tmp_path_factory.mktemp(f"secrets-{key[0]}-{key[1]}")
        _CACHE[key] = run_app(key[0], key[1], folder)
    return _CACHE[key]


@pytest.mark.parametrize("channel", CHANNELS, ids=[c.name for c in CHANNELS])
def test_planted_secrets_never_leave_the_process(evidence: Evidence, channel: Channel) -> None:
    leaks = []
    for secret in channel.secrets:
        if secret.encode() in evidence.exported:
            leaks.append(f"{secret} in the exported telemetry")
        if secret in evidence.process_output:
            leaks.append(f"{secret} in the process's log output")
        if secret in evidence.cli_output:
            leaks.append(f"{secret} in `spanpoint runs`/`show`")
        if not channel.in_outputs and secret.encode() in evidence.store:
            leaks.append(f"{secret} in the store")
    assert leaks == []
    if evidence.mode in channel.uncaptured_in:
        return
    for witness in channel.witnesses:  # the channel was captured, redacted
        assert witness.encode() in evidence.exported, f"{channel.name}: {witness!r} not exported"


def test_the_failed_boundary_is_reported_redacted(evidence: Evidence) -> None:
    """``spanpoint show`` still says what failed and why, with the credentials masked."""
    shown = " ".join(evidence.cli_output.split())  # the table wraps long errors
    assert "✗ failed: RuntimeError: provider refused key [REDACTED] and [REDACTED]" in shown
    assert "postgresql://bot:****@db.internal" in shown


# --- the rules, table-driven ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        # the keys issue #13 found leaking
        ("openai_key", True),
        ("accessToken", True),
        ("accesstoken", True),
        ("passWord", True),
        ("jwt", True),
        ("webhook", True),
        ("Ocp-Apim-Subscription-Key", True),
        ("x-functions-key", True),
        ("privatekey", True),
        ("ssn", True),
        # other spellings of the same
        ("OPENAI_API_KEY", True),
        ("openaiKey", True),
        ("db.password", True),
        ("pass_word", True),
        ("slack-webhook-url", True),
        ("refreshToken", True),
        ("connection_string", True),
        ("x-api-key", True),
        # harmless: other words, structural keys, a bare key
        ("keyboard", False),
        ("monkey", False),
        ("turkey_count", False),
        ("key", False),
        ("primary_key", False),
        ("sort_key", False),
        ("cache-key", False),
        ("primary_key_column", False),
        ("max_tokens", False),
        ("tokenizer", False),
        ("author", False),
        ("db_url", False),  # kept, its password masked by the value rule
        ("passenger", False),
    ],
)
def test_key_names_are_matched_by_normalized_tokens(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("postgresql://user:pa55@db:5432/app", "postgresql://user:****@db:5432/app"),
        ("redis://:hunter2@cache/0", "redis://:****@cache/0"),
        (
            "see https://x.io/a?lang=en&token=abc123&page=2",
            "see https://x.io/a?lang=en&token=****&page=2",
        ),
        ("https://maps.example.com/?key=AbC123&z=1", "https://maps.example.com/?key=****&z=1"),
        ("mysql://u@h/db?password=pw1&ssl=1", "mysql://u@h/db?password=****&ssl=1"),
        ("Server=db;User Id=app;Password=pw2;", "Server=db;User Id=app;Password=****;"),
        ("login with password=pw3 refused", "login with password=**** refused"),
        (f"key {'sk-proj-' + 'a' * 24} end", f"key {REDACTED} end"),
        (f"{'ghp_' + 'b' * 36}", REDACTED),
        ("Authorization: Bearer abcdefghijkl", f"Authorization: {REDACTED}"),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: {REDACTED}"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlMDE", REDACTED),
        # kept: no credential in them
        ("https://example.com:8080/path?page=2", "https://example.com:8080/path?page=2"),
        ("exit code=1 after 3 tries", "exit code=1 after 3 tries"),
        ("Basic authentication failed", "Basic authentication failed"),
        ("max_tokens=256", "max_tokens=256"),
    ],
)
def test_credentials_in_values_are_masked(text: str, redacted: str) -> None:
    assert redact_text(text) == redacted


def test_a_recorded_exception_is_redacted_in_message_stack_trace_and_status() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    token = "sk-proj-" + "c" * 24
    try:
        try:
            raise KeyError(f"password={app.EXC_CAUSE_PW}")
        except KeyError as cause:
            dsn = f"postgresql://u:{app.EXC_DSN_PW}@h/d"
            raise RuntimeError(f"rejected {token} at {dsn}") from cause
    except RuntimeError as exc:
        with provider.get_tracer("t").start_as_current_span(
            "s", record_exception=False, set_status_on_exception=False
        ) as span:
            record_failure(span, exc)
        text = exception_text(exc)
    (finished,) = exporter.get_finished_spans()
    (event,) = finished.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "RuntimeError"
    message = event.attributes["exception.message"]
    assert message == f"rejected {REDACTED} at postgresql://u:****@h/d"
    stack = event.attributes["exception.stacktrace"]
    assert "KeyError" in stack and "The above exception was the direct cause" in stack
    assert finished.status.description == f"RuntimeError: {message}"
    assert text == finished.status.description
    for secret in (token, app.EXC_DSN_PW, app.EXC_CAUSE_PW):
        assert secret not in repr(finished.to_json()), secret
