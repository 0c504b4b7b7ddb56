"""Redaction as one table, tested both ways: every credential masked, no count masked.

:data:`SHAPES` holds the credential shapes spanpoint masks whatever their key (provider
token prefixes, JWTs, bearer tokens, private key blocks, webhook URLs); :data:`SECRET_NAMES`
the key names whose value is masked whatever it looks like (plural and compound names
included); :data:`ORDINARY_NAMES` and :data:`ORDINARY_TEXTS` what must come through unchanged:
token *counts* (``usage_metadata``, ``token_usage``, ``input_token_details`` ...) and ordinary
words. Hypothesis (fixed seed) generates each credential and embeds it in free text, JSON, a
Python repr, a URL query, a ``name=value`` or ``name: value`` pair and nested mappings, and
spells each key name in snake, camel, kebab and upper case.

Every output channel masks through the same functions (:func:`~spanpoint.capture.redact_text`,
:meth:`CapturePolicy.redact`, :func:`~spanpoint.capture.exception_text` and
:func:`~spanpoint.capture.record_failure`); the channel tests at the end follow a credential
into spans, the run journal, ``spanpoint show`` and a cassette file.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages.ai import add_usage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

import spanpoint
from fakes import ConversationModel
from spanpoint.capture import (
    CapturePolicy,
    exception_text,
    is_secret_key,
    record_failure,
    redact_text,
)
from spawn import run_python

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"


def chars(alphabet: str, low: int, high: int | None = None) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=low, max_size=high if high is not None else low)


def shaped(prefix: str, body: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, str]]:
    """(the credential, its secret part): the part that must never come out."""
    return body.map(lambda b: (prefix + b, b))


def _jwt(parts: tuple[str, str, str]) -> tuple[str, str]:
    token = f"eyJ{parts[0]}.eyJ{parts[1]}.{parts[2]}"
    return token, token


#: Credential shapes: each draws (credential, secret part). Lengths follow the providers'
#: documented formats.
SHAPES: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "OpenAI": shaped("sk-", chars(ALNUM, 48)),
    "OpenAI project": shaped("sk-proj-", chars(URLSAFE, 40, 120)),
    "Anthropic": shaped("sk-ant-api03-", chars(URLSAFE, 40, 95)),
    "GitHub classic": st.sampled_from(["ghp_", "gho_", "ghs_", "ghu_", "ghr_"]).flatmap(
        lambda p: shaped(p, chars(ALNUM, 36))
    ),
    "GitHub fine-grained": shaped("github_pat_", chars(ALNUM + "_", 82)),
    "GitLab": shaped("glpat-", chars(URLSAFE, 20, 40)),
    "Hugging Face": shaped("hf_", chars(ALNUM, 34)),
    "npm": shaped("npm_", chars(ALNUM, 36)),
    "PyPI": shaped("pypi-AgEIcHlwaS5vcmc", chars(URLSAFE, 50, 150)),
    "Slack": st.sampled_from("bpaers").flatmap(
        lambda c: shaped(f"xox{c}-", chars(string.digits, 11).map(lambda d: d + "-abcDEF12"))
    ),
    "Slack webhook": shaped(
        "https://hooks.slack.com/services/T",
        st.tuples(chars(UPPER_DIGITS, 10), chars(ALNUM, 24)).map(
            lambda t: f"{t[0]}/B{t[0]}/{t[1]}"
        ),
    ),
    "Discord webhook": shaped(
        "https://discord.com/api/webhooks/",
        st.tuples(chars(string.digits, 18), chars(URLSAFE, 68)).map(lambda t: f"{t[0]}/{t[1]}"),
    ),
    "SendGrid": shaped(
        "SG.", st.tuples(chars(URLSAFE, 22), chars(URLSAFE, 43)).map(lambda t: f"{t[0]}.{t[1]}")
    ),
    "Shopify": st.sampled_from(["shpat_", "shpss_", "shpca_", "shppa_"]).flatmap(
        lambda p: shaped(p, chars(HEX, 32))
    ),
    "Stripe": st.sampled_from(["sk_live_", "rk_live_", "sk_test_", "whsec_"]).flatmap(
        lambda p: shaped(p, chars(ALNUM, 24, 99))
    ),
    "AWS access key id": st.sampled_from(["AKIA", "ASIA"]).flatmap(
        lambda p: shaped(p, chars(UPPER_DIGITS, 16))
    ),
    "Google API key": shaped("AIza", chars(URLSAFE, 35)),
    "Google OAuth": shaped("ya29.", chars(URLSAFE, 40, 120)),
    "JWT": st.tuples(chars(URLSAFE, 10, 40), chars(URLSAFE, 10, 60), chars(URLSAFE, 20, 43)).map(
        _jwt
    ),
    "Bearer": shaped("Bearer ", chars(ALNUM + "._~+/-", 20, 60)),
    "private key": st.sampled_from(["RSA ", "EC ", "OPENSSH ", ""]).flatmap(
        lambda k: chars(ALNUM + "+/", 64).map(
            lambda b: (
                f"-----BEGIN {k}PRIVATE KEY-----\n{b}\n{b}\n-----END {k}PRIVATE KEY-----",
                b,
            )
        )
    ),
}

#: Key names whose value is a credential, as words (spelled in every style by the tests).
SECRET_NAMES: list[tuple[str, ...]] = [
    ("password",),
    ("passwords",),
    ("db", "password"),
    ("api", "key"),
    ("api", "keys"),
    ("x", "api", "key"),
    ("openai", "api", "key"),
    ("client", "secret"),
    ("client", "secrets"),
    ("secret",),
    ("secrets",),
    ("credentials",),
    ("auth", "token"),
    ("access", "token"),
    ("access", "tokens"),
    ("refresh", "token"),
    ("id", "token"),
    ("hf", "token"),
    ("github", "token"),
    ("github", "tokens"),
    ("token",),
    ("session", "id"),
    ("session", "ids"),
    ("private", "key"),
    ("aws", "secret", "access", "key"),
    ("authorization",),
    ("cookie",),
    ("cookies",),
    ("set", "cookie"),
    ("webhook", "url"),
    ("slack", "webhook"),
    ("connection", "string"),
    ("signature",),
    ("passphrase",),
    ("subscription", "key"),
]

#: Key names that must never be masked: token counts first (LangChain's usage_metadata,
#: OpenAI's, Anthropic's, Gemini's and Bedrock's usage), then ordinary words.
ORDINARY_NAMES: list[tuple[str, ...]] = [
    ("token", "usage"),
    ("usage", "metadata"),
    ("input", "tokens"),
    ("output", "tokens"),
    ("total", "tokens"),
    ("input", "token", "details"),
    ("output", "token", "details"),
    ("max", "tokens"),
    ("max", "completion", "tokens"),
    ("prompt", "tokens"),
    ("completion", "tokens"),
    ("prompt", "tokens", "details"),
    ("completion", "tokens", "details"),
    ("cached", "tokens"),
    ("reasoning", "tokens"),
    ("audio", "tokens"),
    ("accepted", "prediction", "tokens"),
    ("cache", "read"),
    ("cache", "creation"),
    ("cache", "read", "input", "tokens"),
    ("cache", "creation", "input", "tokens"),
    ("prompt", "token", "count"),
    ("candidates", "token", "count"),
    ("total", "token", "count"),
    ("cached", "content", "token", "count"),
    ("thoughts", "token", "count"),
    ("tokens",),
    ("tokens", "used"),
    ("token", "count"),
    ("tokenizer",),
    ("model", "name"),
    ("finish", "reason"),
    ("primary", "key"),
    ("sort", "keys"),
    ("required", "keys"),
    ("keyboard",),
    ("monkey",),
    ("author",),
    ("passenger",),
    ("description",),
    ("city",),
    ("ticket", "id"),
    ("thread", "id"),
]

#: Free text that holds no credential and must come through unchanged.
ORDINARY_TEXTS = [
    "the token limit was reached after 4096 tokens",
    "usage_metadata={'input_tokens': 12, 'output_tokens': 3, 'total_tokens': 15, "
    "'input_token_details': {'cache_read': 0}, 'output_token_details': {'reasoning': 2}}",
    'response_metadata: {"token_usage": {"prompt_tokens": 9, "completion_tokens": 2}}',
    "max_tokens=256 temperature=0.2",
    "reset your password from the settings page",
    "to reset your password: open the settings page",
    "risk-based task-force skills: sk-learn",
    "ghost_town and hf_ prefix alone",
    "https://example.com:8080/path?page=2&lang=en",
    "exit code=1 after 3 tries at 12:30:05",
    "Basic authentication failed",
    "SGML and AKIA are just words",
    "see the keyboard shortcut ctrl+k",
    "{'city': 'Paris', 'ticket_id': 7}",
]

SEPARATORS = st.sampled_from([" ", "\n", " (", ": ", "=", " '", ' "', "\t", ", "])
WORDS = st.lists(st.sampled_from(["hello", "refused", "for", "user", "at", "the"]), max_size=4)


def spell(words: tuple[str, ...], style: str) -> str:
    if style == "snake":
        return "_".join(words)
    if style == "kebab":
        return "-".join(words)
    if style == "upper":
        return "_".join(words).upper()
    if style == "title":
        return "-".join(w.capitalize() for w in words)
    return words[0] + "".join(w.capitalize() for w in words[1:])  # camel


STYLES = st.sampled_from(["snake", "kebab", "upper", "title", "camel"])
OPAQUE = chars(ALNUM, 12, 24).map(lambda s: "PLANT" + s)


def nested(key: str, value: Any, path: list[str]) -> Any:
    tree: Any = {key: value}
    for name in reversed(path):
        tree = {name: [tree] if name.endswith("s") else tree}
    return tree


def embeddings(name: str, value: str, draw: Any) -> list[tuple[str, str]]:
    """``value`` under ``name`` in each form free text holds it: (form, text)."""
    before = " ".join(draw(WORDS))
    return [
        ("name=value", f"{before} {name}={value} end"),
        ("name: value", f"{before}\n{name}: {value}"),
        ("inline name: value", f"{before}, {name}: {value}"),
        ("JSON", json.dumps({"model": "m", name: value, "n": 1})),
        ("repr", repr({"model": "m", name: value, "n": 1})),
        ("URL query", f"url=https://api.example.com/v1/x?lang=en&{name}={value}&n=1"),
        ("header", f"{name}: {value}\r\nAccept: */*"),
    ]


def settings_for(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


# --- credential shapes: masked wherever they stand ---------------------------------------------


@pytest.mark.parametrize("shape", sorted(SHAPES))
@seed(20261205)
@settings_for(40)
@given(data=st.data())
def test_every_credential_shape_is_masked_wherever_it_stands(shape: str, data: Any) -> None:
    credential, secret = data.draw(SHAPES[shape])
    before, after = data.draw(WORDS), data.draw(WORDS)
    sep = data.draw(SEPARATORS)
    path = data.draw(st.lists(st.sampled_from(["config", "items", "headers", "extra"]), max_size=4))
    texts = {
        "free text": f"{' '.join(before)}{sep}{credential} {' '.join(after)}",
        "JSON": json.dumps({"note": f"with {credential}", "n": 3}),
        "repr": repr({"note": credential, "n": 3}),
        "URL": f"https://api.example.com/v1?q={credential}&page=2",
        "exception": exception_text(RuntimeError(f"refused {credential}")),
    }
    for form, text in texts.items():
        out = redact_text(text) if form != "exception" else text
        assert secret not in out, (shape, form, out)
    tree = CapturePolicy(max_bytes=1 << 16).redact(nested("note", credential, path))
    assert secret not in json.dumps(tree), (shape, "nested", tree)


# --- key names: every secret name masks its value, in every spelling ----------------------------


@pytest.mark.parametrize("words", SECRET_NAMES, ids="_".join)
@seed(20261205)
@settings_for(12)
@given(data=st.data())
def test_every_secret_key_name_masks_its_value(words: tuple[str, ...], data: Any) -> None:
    name = spell(words, data.draw(STYLES))
    value = data.draw(OPAQUE)
    assert is_secret_key(name), name
    for form, text in embeddings(name, value, data.draw):
        assert value not in redact_text(text), (name, form, redact_text(text))
    path = data.draw(st.lists(st.sampled_from(["config", "items", "headers", "extra"]), max_size=4))
    tree = CapturePolicy().redact(nested(name, [value] if words[-1].endswith("s") else value, path))
    assert value not in json.dumps(tree), (name, tree)


# --- counts and ordinary words: never masked ----------------------------------------------------


@pytest.mark.parametrize("words", ORDINARY_NAMES, ids="_".join)
@seed(20261205)
@settings_for(12)
@given(data=st.data())
def test_token_counts_and_ordinary_names_are_kept(words: tuple[str, ...], data: Any) -> None:
    name = spell(words, data.draw(STYLES))
    value = data.draw(st.one_of(st.integers(0, 10**6).map(str), chars(string.ascii_lowercase, 3)))
    assert not is_secret_key(name), name
    for form, text in embeddings(name, value, data.draw):
        assert redact_text(text) == text, (name, form)
    tree = nested(
        name, value, data.draw(st.lists(st.sampled_from(["config", "extra"]), max_size=3))
    )
    assert CapturePolicy().redact(tree) == tree


@pytest.mark.parametrize("text", ORDINARY_TEXTS)
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_a_redacted_usage_metadata_still_adds_up() -> None:
    """A replayed reply's usage goes through LangChain's own arithmetic, as recorded."""
    usage = {
        "input_tokens": 12,
        "output_tokens": 3,
        "total_tokens": 15,
        "input_token_details": {"cache_read": 4, "cache_creation": 1, "audio": 0},
        "output_token_details": {"reasoning": 2, "audio": 0},
    }
    metadata = {"token_usage": {"prompt_tokens": 12, "completion_tokens": 3}, "model_name": "m"}
    policy = CapturePolicy()
    assert policy.redact(usage) == usage
    assert policy.redact(metadata) == metadata
    assert add_usage(policy.redact(usage), usage)["input_token_details"]["cache_read"] == 8


# --- the channels: spans, the journal, `spanpoint show`, a cassette -----------------------------

LEAKS = {
    "hf": "hf_" + "Q7" * 17,
    "url": "PLANTurlApiKey0a1b",
    "repr": "PLANTreprApiKey2c3d",
    "pw": "PLANTpasswordsArg4e5f",
}


def test_a_failure_is_masked_in_spans_journal_and_show(configured_sqlite: Any) -> None:
    @spanpoint.step(name="fetch")
    def fetch(passwords: list[str], note: str) -> str:
        raise RuntimeError(
            f"url=https://h.example/v1?api_key={LEAKS['url']}&n=1 "
            f"request={ {'api_key': LEAKS['repr'], 'model': 'm'} } with {note}"
        )

    with pytest.raises(RuntimeError), spanpoint.run("leaky"):
        fetch([LEAKS["pw"]], f"token {LEAKS['hf']}")
    spans = [s.to_json() for s in configured_sqlite.spans()]
    journal = repr(configured_sqlite.store.list_journal("leaky"))
    shown = CliRunner().invoke(
        spanpoint_cli(), ["show", "leaky", "--store", str(configured_sqlite.store.path)]
    )
    assert shown.exit_code == 0, shown.output
    for channel, text in (("spans", "".join(spans)), ("journal", journal), ("show", shown.output)):
        for leak in LEAKS.values():
            assert leak not in text, (channel, leak)
    assert "api_key=****" in "".join(spans)  # the message is still there, masked


def spanpoint_cli() -> Any:
    from spanpoint.cli import app

    return app


def test_a_recorded_exception_event_is_masked() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    exc = RuntimeError(f"{ {'api_key': LEAKS['repr']} } and {LEAKS['hf']}")
    with provider.get_tracer("t").start_as_current_span("s", record_exception=False) as span:
        record_failure(span, exc)
    text = exporter.get_finished_spans()[0].to_json()
    assert LEAKS["repr"] not in text and LEAKS["hf"] not in text


@tool
def login(passwords: list[str], note: str) -> str:
    """Log in to the mirror."""
    return "logged in"


def test_a_cassette_keeps_usage_and_masks_credentials(configured: Any, tmp_path: Path) -> None:
    args = {"passwords": [LEAKS["pw"]], "note": f"with {LEAKS['hf']}"}
    model = ConversationModel(plan=[[{"name": "login", "args": args}]], final="Done.")
    agent = create_agent(model, [login], middleware=[spanpoint.CheckpointMiddleware()])
    path = tmp_path / "c.json"
    with spanpoint.cassette(path):
        agent.invoke({"messages": [{"role": "user", "content": "log in"}]})
    text = path.read_text()
    assert LEAKS["pw"] not in text and LEAKS["hf"] not in text
    counts = list(values_under(json.loads(text), {"input_tokens", "output_tokens", "total_tokens"}))
    assert counts and all(isinstance(c, int) for c in counts), counts  # kept, as numbers


def values_under(tree: Any, names: set[str]) -> Any:
    """Every value stored under one of ``names`` anywhere in a JSON tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key in names:
                yield value
            yield from values_under(value, names)
    elif isinstance(tree, list):
        for item in tree:
            yield from values_under(item, names)


# --- the whole table over every channel at once -------------------------------------------------

TABLE_APP = """
import json, sys
from typing import TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import spanpoint
from spanpoint.graph import GraphRunner

data = json.loads(open(sys.argv[1], encoding="utf-8").read())
names, note = data["names"], " ".join(data["credentials"])


def failure():
    query = "&".join(f"{k}={v}" for k, v in names.items())
    return RuntimeError(
        f"url=https://h.example/v1?{query} request={names!r} json={json.dumps(names)} {note}"
    )


@spanpoint.step(name="fetch")
def fetch(config, note):
    raise failure()


class State(TypedDict):
    answer: str


def ask(state):
    raise failure()


g = StateGraph(State)
g.add_node("ask", ask)
g.add_edge(START, "ask")
g.add_edge("ask", END)
runner = GraphRunner(g.compile(checkpointer=InMemorySaver()), name="leaky-graph")
bodies = {
    "leaky-step": lambda: fetch(dict(names), note),
    "leaky-graph": lambda: runner.invoke({"answer": note}, thread_id="th"),
}
for run_id, body in bodies.items():
    try:
        with spanpoint.run(run_id):
            body()
    except RuntimeError:
        pass
"""


@tool
def configure_mirror(options: dict[str, Any], note: str) -> str:
    """Configure the mirror."""
    return "configured"


def table_draw(data: Any) -> tuple[dict[str, str], list[str], list[str]]:
    """One credential of every shape and one value under every secret key name (spelled in a
    drawn style): (names to values, credentials, the secret parts that must never come out)."""
    drawn = data.draw(st.fixed_dictionaries(SHAPES))
    names = {spell(words, data.draw(STYLES)): data.draw(OPAQUE) for words in SECRET_NAMES}
    secrets = [secret for _, secret in drawn.values()] + list(names.values())
    return names, [credential for credential, _ in drawn.values()], secrets


@seed(20261205)
@settings_for(2)
@given(data=st.data())
def test_the_whole_table_reaches_no_channel(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    """Every credential shape and every secret key name of the tables, in one application
    run with the embedded defaults: none reaches the trace file, the log file, the console,
    the store's journal or ``spanpoint show``; the files hold what they should (a run
    summary, the masked failure)."""

    from spanpoint.stores import SqliteStore

    names, credentials, secrets = table_draw(data)
    cwd = tmp_path_factory.mktemp("table")
    (cwd / "table.json").write_text(json.dumps({"names": names, "credentials": credentials}))
    (cwd / "app.py").write_text(TABLE_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    done = run_python(["app.py", "table.json"], cwd=cwd, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = cwd / ".spanpoint"
    traces, logs = (folder / "traces.jsonl").read_text(), (folder / "logs.jsonl").read_text()
    assert "spanpoint.run_summary" in logs and '"failed"' in logs
    assert "****" in traces
    store = SqliteStore(folder / "checkpoints.db")
    try:
        journal = repr([store.list_journal(r) for r in ("leaky-step", "leaky-graph")])
    finally:
        store.close()
    assert "RuntimeError" in journal
    shown = [
        CliRunner().invoke(spanpoint_cli(), ["show", r, "--store", str(folder / "checkpoints.db")])
        for r in ("leaky-step", "leaky-graph")
    ]
    assert all(s.exit_code == 0 for s in shown), [s.output for s in shown]
    channels = {
        "traces.jsonl": traces,
        "logs.jsonl": logs,
        "console": done.stdout + done.stderr,
        "journal": journal,
        "spanpoint show": "".join(s.output for s in shown),
        "store file": (folder / "checkpoints.db").read_bytes().decode("utf-8", "replace"),
    }
    for channel, text in channels.items():
        leaked = [s for s in secrets if s in text]
        assert not leaked, (channel, leaked)


@seed(20261205)
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_the_whole_table_reaches_no_cassette(
    configured: Any, tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    names, credentials, secrets = table_draw(data)
    args = {"options": names, "note": " ".join(credentials)}
    model = ConversationModel(plan=[[{"name": "configure_mirror", "args": args}]], final="Done.")
    agent = create_agent(model, [configure_mirror], middleware=[spanpoint.CheckpointMiddleware()])
    path = tmp_path_factory.mktemp("cassette") / "c.json"
    with spanpoint.cassette(path):
        agent.invoke({"messages": [{"role": "user", "content": "configure the mirror"}]})
    text = path.read_text()
    assert "configure_mirror" in text and "[REDACTED]" in text  # the call is there, masked
    leaked = [s for s in secrets if s in text]
    assert not leaked, leaked
