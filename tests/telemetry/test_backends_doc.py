"""docs/backends.md's recipes, run as written against a local OTLP receiver.

Each ``# recipe: NAME`` shell block is executed by bash with its hosts replaced by the
receiver's address, then a run with a step and a graph call exports; the test checks which
signals arrived, at which paths, with which headers and resource attributes.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.otlp_receiver import OtlpReceiver
from tests.telemetry.test_exporters_env import APP

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def recipes() -> dict[str, str]:
    blocks = re.findall(r"```sh\n# recipe: (\w+)\n(.*?)```", DOC.read_text(), flags=re.S)
    return dict(blocks)


def run_recipe(name: str, receiver: OtlpReceiver, tmp_path: Path) -> None:
    script = re.sub(r"https?://[^/\s\"']+", receiver.endpoint, recipes()[name])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    app = tmp_path / "app.py"
    app.write_text(APP)
    done = subprocess.run(
        ["bash", "-c", f'set -e\n{script}\nexec "{sys.executable}" app.py'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def resource(receiver: OtlpReceiver) -> dict[str, str]:
    request = receiver.requests["/v1/traces"][0]
    attrs = request.resource_spans[0].resource.attributes
    return {a.key: a.value.string_value for a in attrs}


def test_every_recipe_is_tested() -> None:
    assert set(recipes()) == {"collector", "phoenix", "langfuse", "vendor"}


def test_collector_recipe_sends_every_signal(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run_recipe("collector", receiver, tmp_path)
    assert set(receiver.hits) == {"/v1/traces", "/v1/logs", "/v1/metrics"}
    assert resource(receiver)["service.name"] == "ticket-agent"


def test_phoenix_recipe_sends_traces_only_with_the_project(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run_recipe("phoenix", receiver, tmp_path)
    assert set(receiver.hits) == {"/v1/traces"}
    assert resource(receiver)["openinference.project.name"] == "ticket-agent"
    assert any(span.name == "step work" for span in receiver.spans())


def test_langfuse_recipe_sends_traces_with_basic_auth(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run_recipe("langfuse", receiver, tmp_path)
    assert set(receiver.paths) == {"/api/public/otel/v1/traces"}
    expected = "Basic " + base64.b64encode(b"pk-lf-1234:sk-lf-5678").decode()
    assert {h.get("authorization") for h in receiver.headers} == {expected}


def test_vendor_recipe_sends_every_signal_with_its_key(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run_recipe("vendor", receiver, tmp_path)
    assert set(receiver.hits) == {"/v1/traces", "/v1/logs", "/v1/metrics"}
    assert {h.get("x-api-key") for h in receiver.headers} == {"YOUR_KEY"}
