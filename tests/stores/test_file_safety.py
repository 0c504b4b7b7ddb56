"""Files spanpoint creates follow no one's symlinks and write no one else's file.

For every path spanpoint creates in ``.spanpoint/`` (the folder, the three telemetry files,
the SQLite store, the demo's LangGraph database and their ``-wal``/``-shm`` files) and every
way to plant something there (a symlink to a file, a dangling symlink, another user's file
or folder, a hard link), the writer of that path refuses it, naming the path, and the
planted target is untouched: same content, same mode, same owner, and a dangling target is
not created. The writers of the other paths still write.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import MetricsData
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanpoint.demo.flow import langgraph_checkpointer
from spanpoint.errors import UnsafePathError
from spanpoint.stores.sqlite import SqliteStore
from spanpoint.telemetry.jsonl import (
    JsonLinesLogExporter,
    JsonLinesMetricExporter,
    JsonLinesSpanExporter,
)

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

#: Each path spanpoint creates under ``.spanpoint`` and the writer that creates it.
WRITERS = {
    "traces.jsonl": "traces",
    "logs.jsonl": "logs",
    "metrics.jsonl": "metrics",
    "checkpoints.db": "store",
    "checkpoints.db-wal": "store",
    "checkpoints.db-shm": "store",
    "demo-langgraph.db": "demo",
    "demo-langgraph.db-wal": "demo",
    "demo-langgraph.db-shm": "demo",
}
PATHS = [".spanpoint", *WRITERS]


def a_finished_span() -> object:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("t").start_span("probe").end()
    return memory.get_finished_spans()[0]


def write_everything(folder: Path) -> dict[str, str]:
    """Write each of spanpoint's files in ``folder`` as spanpoint does: "ok" or the refusal."""
    outcomes: dict[str, str] = {}
    exports: dict[str, Callable[[], object]] = {
        "traces": lambda: JsonLinesSpanExporter(folder / "traces.jsonl").export(
            [a_finished_span()]
        ),
        "logs": lambda: JsonLinesLogExporter(folder / "logs.jsonl").export([]),
        "metrics": lambda: JsonLinesMetricExporter(folder / "metrics.jsonl").export(
            MetricsData(resource_metrics=[])
        ),
    }
    for name, export in exports.items():
        result = export()
        outcomes[name] = "ok" if result.name == "SUCCESS" else "refused"  # type: ignore[attr-defined]
    try:
        store = SqliteStore(folder / "checkpoints.db")
    except UnsafePathError as exc:
        outcomes["store"] = f"refused: {exc}"
    else:
        store.start_run("r", None)
        store.close()
        outcomes["store"] = "ok"
    try:
        saver = langgraph_checkpointer(folder)  # the demo's LangGraph checkpointer
    except UnsafePathError as exc:
        outcomes["demo"] = f"refused: {exc}"
    else:
        saver.setup()
        saver.conn.close()
        outcomes["demo"] = "ok"
    return outcomes


@dataclass
class Target:
    """What a planted path points at, and how it looked before spanpoint ran."""

    path: Path
    before: tuple[object, ...] | None

    @staticmethod
    def look(path: Path) -> tuple[object, ...] | None:
        if not os.path.lexists(path):
            return None
        info = os.lstat(path)
        content = sorted(os.listdir(path)) if path.is_dir() else path.read_bytes()
        return (content, stat.S_IMODE(info.st_mode), info.st_uid, info.st_nlink)

    def untouched(self) -> bool:
        return self.look(self.path) == self.before


def plant(kind: str, path: Path, elsewhere: Path) -> Target:
    """Plant ``kind`` at ``path``; the target lives in ``elsewhere``."""
    is_folder = path.name == ".spanpoint"
    target = elsewhere / ("victim-folder" if is_folder else "victim.txt")
    if kind != "dangling symlink":
        if is_folder:
            target.mkdir()
            (target / "keep.txt").write_text("theirs\n")
            os.chmod(target, 0o755)
        else:
            target.write_text("theirs\n")
            os.chmod(target, 0o644)
    if kind in ("symlink", "dangling symlink"):
        path.symlink_to(target)
    elif kind == "hard link":
        os.link(target, path)
        target = path
    elif kind == "another user's":
        os.rename(target, path)
        os.chown(path, NOBODY, NOBODY)
        if is_folder:
            os.chmod(path, 0o777)  # writable for us too: only the owner makes it unsafe
        target = path
    return Target(target, Target.look(target))


KINDS = [
    "symlink",
    "dangling symlink",
    "hard link",
    pytest.param("another user's", marks=ROOT_ONLY),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", PATHS)
def test_a_planted_path_is_refused_and_its_target_untouched(
    tmp_path: Path, name: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    if kind == "hard link" and name == ".spanpoint":
        pytest.skip("a folder cannot be hard-linked")
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    folder = project / ".spanpoint"
    project.mkdir()
    elsewhere.mkdir()
    if name != ".spanpoint":
        folder.mkdir(mode=0o700)
    planted = folder if name == ".spanpoint" else folder / name
    target = plant(kind, planted, elsewhere)

    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        outcomes = write_everything(folder)

    assert target.untouched(), f"{kind} at {name}: its target changed"
    refused = set(WRITERS.values()) if name == ".spanpoint" else {WRITERS[name]}
    for writer, outcome in outcomes.items():
        if writer in refused:
            assert outcome.startswith("refused"), (writer, outcome)
        else:
            assert outcome == "ok", (writer, outcome)
    said = caplog.text + outcomes["store"] + outcomes["demo"]
    assert str(planted) in said  # the refusal names the path ...
    assert "rm " in said or "point spanpoint at" in said  # ... and the fix


@pytest.mark.parametrize("kind", ["symlink", "hard link", pytest.param("owner", marks=ROOT_ONLY)])
def test_the_store_refuses_a_planted_file_at_a_path_of_the_applications(
    tmp_path: Path, kind: str
) -> None:
    """Outside ``.spanpoint`` the folder is the application's, but the file is still checked."""
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"theirs")
    os.chmod(victim, 0o644)
    path = tmp_path / "app" / "store.db"
    path.parent.mkdir()
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "hard link":
        os.link(victim, path)
    else:
        os.rename(victim, path)
        os.chown(path, NOBODY, NOBODY)
        victim = path
    before = Target.look(victim)
    with pytest.raises(UnsafePathError, match=str(path)):
        SqliteStore(path)
    assert Target.look(victim) == before


def test_own_files_are_written_as_before(tmp_path: Path) -> None:
    folder = tmp_path / ".spanpoint"
    assert set(write_everything(folder).values()) == {"ok"}
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert set(write_everything(folder).values()) == {"ok"}  # and again, into its own files
    for name in ("traces.jsonl", "logs.jsonl", "metrics.jsonl", "checkpoints.db"):
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600, name


APP = textwrap.dedent(
    """
    import spanpoint

    @spanpoint.step(name="work")
    def work(x):
        return x + 1

    with spanpoint.run("r1", name="app"):
        work(1)
    """
)


def test_an_app_with_a_planted_trace_file_writes_no_target(tmp_path: Path) -> None:
    """The attack as found: a ``traces.jsonl`` symlink planted in a shared project folder."""
    folder = tmp_path / ".spanpoint"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    os.chmod(victim, 0o644)
    (folder / "traces.jsonl").symlink_to(victim)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    done = subprocess.run(
        [sys.executable, "-c", APP],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "theirs\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert ".spanpoint/traces.jsonl is a symlink" in done.stderr
    assert (folder / "checkpoints.db").is_file()  # the store is unaffected


# --- the shared atomic write (cassettes) -------------------------------------------------------


@pytest.mark.parametrize("at", ["path", "temp path"])
@pytest.mark.parametrize("kind", ["symlink", "hard link", pytest.param("owner", marks=ROOT_ONLY)])
def test_an_atomic_write_refuses_a_planted_path_or_temp_path(
    tmp_path: Path, at: str, kind: str
) -> None:
    from spanpoint._files import replace_private

    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    os.chmod(victim, 0o644)
    path = tmp_path / "refund.json"
    planted = path if at == "path" else tmp_path / "refund.json.tmp"
    if kind == "symlink":
        planted.symlink_to(victim)
    elif kind == "hard link":
        os.link(victim, planted)
    else:
        os.rename(victim, planted)
        os.chown(planted, NOBODY, NOBODY)
        victim = planted
    before = Target.look(victim)
    with pytest.raises(UnsafePathError, match=str(planted)):
        replace_private(path, b"{}")
    assert Target.look(victim) == before
    assert os.path.lexists(planted)  # left as it was found


def test_an_atomic_write_replaces_its_own_file_and_a_stale_temp(tmp_path: Path) -> None:
    from spanpoint._files import replace_private

    path = tmp_path / "c.json"
    replace_private(path, b"one")
    (tmp_path / "c.json.tmp").write_bytes(b"left by a killed write")
    os.chmod(tmp_path / "c.json.tmp", 0o600)
    replace_private(path, b"two")
    assert path.read_bytes() == b"two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (tmp_path / "c.json.tmp").exists()


COMPANION_KINDS = [
    "symlink",
    "dangling symlink",
    "hard link",
    pytest.param("owner", marks=ROOT_ONLY),
]


@pytest.mark.parametrize("kind", COMPANION_KINDS)
@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
@pytest.mark.parametrize("where", [".spanpoint", "the application's folder"])
def test_a_companion_planted_beside_an_existing_store_is_refused_at_its_next_open(
    tmp_path: Path, where: str, suffix: str, kind: str
) -> None:
    """SQLite removes ``-wal`` and ``-shm`` when the last connection closes: a store that was
    opened before and is opened again finds its companions gone, and a planted one in their
    place is refused (the store's own database left working and its target untouched)."""
    folder = tmp_path / (".spanpoint" if where == ".spanpoint" else "app")
    path = folder / "checkpoints.db"
    store = SqliteStore(path)  # the store's own first life: it creates the folder and file
    store.start_run("before", None)
    store.close()
    planted = Path(f"{path}{suffix}")
    if os.path.lexists(planted):
        os.unlink(planted)  # as SQLite leaves it after its last close (-shm may remain)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim.txt"
    if kind != "dangling symlink":
        victim.write_text("theirs\n")
        os.chmod(victim, 0o644)
    if kind in ("symlink", "dangling symlink"):
        planted.symlink_to(victim)
    elif kind == "hard link":
        os.link(victim, planted)
    else:
        os.rename(victim, planted)
        os.chown(planted, NOBODY, NOBODY)
        victim = planted
    before = Target.look(victim)
    with pytest.raises(UnsafePathError, match=str(planted)) as refused:
        SqliteStore(path)
    assert "rm " in str(refused.value) or "point spanpoint at" in str(refused.value)
    assert Target.look(victim) == before, "the planted target changed"
    assert os.path.lexists(planted)  # left as it was found, for its owner to look at
