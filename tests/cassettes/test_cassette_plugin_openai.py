"""The pytest plugin as installed (its ``pytest11`` entry point) with a real ``ChatOpenAI``.

Loaded in every session, it changes nothing until a test opts in: an unmarked test calls
the server and writes no cassette, and no instrumentation is applied. A marked test records
with the server up and replays with it stopped (``--spanpoint-record=none``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from openai_server import ChatServer

TESTS_DIR = Path(__file__).resolve().parents[1]
SRC = TESTS_DIR.parent / "src"

TESTS = '''
import os
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage

from cassette_openai_app import REQUEST, dump, make_agent

EFFECTS = Path(os.environ["CASSETTE_EFFECTS"])


def run_agent():
    return make_agent(os.environ["CHAT_BASE_URL"], EFFECTS).invoke(REQUEST)


def test_unmarked():
    """No marker, no fixture: the plugin stays out of the way."""
    assert run_agent()["messages"][-1].content.startswith("Done")
    assert "spanpoint.instrumentation" not in sys.modules


@pytest.mark.spanpoint_cassette("cassettes/agent", match_on=("messages", "tools"))
def test_marked():
    result = run_agent()
    Path(os.environ["CASSETTE_DUMP"]).write_text(repr(dump(result)))
    usage = [m.usage_metadata for m in result["messages"] if isinstance(m, AIMessage)]
    assert all(isinstance(u["input_tokens"], int) for u in usage)
'''


def entry_point_dir(root: Path) -> Path:
    """A distribution that declares the plugin as pyproject.toml does (the shared venv's
    editable install predates the entry point)."""
    dist = root / "ep" / "spanpoint_plugin_ep-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: spanpoint-plugin-ep\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\nspanpoint.pytest_plugin = spanpoint.pytest_plugin\n"
    )
    return dist.parent


def session(root: Path, base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    path = [str(entry_point_dir(root)) if not (root / "ep").exists() else str(root / "ep")]
    env["PYTHONPATH"] = os.pathsep.join([*path, str(SRC), str(root)])
    env["CHAT_BASE_URL"] = base_url
    env["CASSETTE_EFFECTS"] = str(root / "effects.txt")
    env["CASSETTE_DUMP"] = str(root / "dump.txt")
    (root / "effects.txt").unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["--rootdir", str(root), str(root / "test_agent.py"), *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=180)


def test_installed_plugin_records_marked_tests_only_and_replays_them_offline(
    tmp_path: Path,
) -> None:
    for name in ("fakes.py", "openai_server.py"):
        shutil.copy(TESTS_DIR / name, tmp_path / name)
    shutil.copy(Path(__file__).with_name("cassette_openai_app.py"), tmp_path)
    (tmp_path / "test_agent.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text("")
    cassette = tmp_path / "cassettes" / "agent.json"

    with ChatServer({}, {}) as server:
        recorded = session(tmp_path, server.base_url)
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        assert server.hits == 2  # one model call per test: the plan is empty
    assert cassette.exists()
    assert sorted(p.name for p in (tmp_path / "cassettes").iterdir()) == ["agent.json"]
    assert "spanpoint: instrumented" not in recorded.stdout
    first = (tmp_path / "dump.txt").read_text()

    # The server is gone: the marked test replays, the unmarked one cannot reach it.
    replayed = session(tmp_path, server.base_url, "--spanpoint-record=none", "-k", "not unmarked")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 passed, 1 deselected" in replayed.stdout
    assert (tmp_path / "dump.txt").read_text() == first

    # Named on the command line, the module is the one already loaded (no double load), and
    # the instrumented session is what -p asks for. Its calls go to the recorded URL (a call's
    # key holds where it is sent), whose server is gone: nothing may go live.
    named = session(
        tmp_path, server.base_url, "-p", "spanpoint.pytest_plugin", "-k", "not unmarked"
    )
    assert named.returncode == 0, named.stdout + named.stderr
    assert "spanpoint: instrumented" in named.stdout
