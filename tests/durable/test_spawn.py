"""tests/spawn.py's ``run_python``: what a crash test sees is what ``subprocess.run`` gives.

Its children are forks of pre-imported servers; these tests hold it to the contract of a new
interpreter (exit codes, signals, output, environment, cwd, timeout, exit handlers, hash seed,
nothing of spanpoint imported ahead) and check the fallback to a real subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import spawn
from spawn import run_python

ENV = dict(os.environ)


def py(code: str, *args: str, **options: object) -> subprocess.CompletedProcess[str]:
    options.setdefault("env", ENV)
    options.setdefault("timeout", 60)
    return run_python(["-c", textwrap.dedent(code), *args], **options)  # type: ignore[arg-type]


def test_calls_are_served_by_forks_here() -> None:
    # The rest of this module would pass against subprocess.run too: make sure it is the forks.
    assert spawn.forkable(["-c", "pass"], ENV)
    done = py("import os; print(os.getppid())")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) != os.getpid()  # its parent is a supervisor, not this process


@pytest.mark.parametrize(
    ("code", "expected"),
    [("pass", 0), ("raise SystemExit(17)", 17), ("import sys; sys.exit(None)", 0),
     ("import sys; sys.exit('bad input')", 1), ("raise ValueError('boom')", 1)],
)  # fmt: skip
def test_exit_codes_are_an_interpreters(code: str, expected: int) -> None:
    done = py(code)
    assert done.returncode == expected
    real = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        real.returncode, real.stdout, real.stderr
    )  # fmt: skip


def test_a_child_that_sigkills_itself_gives_minus_nine() -> None:
    done = py("import os, signal; print('before', flush=True); os.kill(os.getpid(), 9)")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "before\n"


def test_stdout_stderr_argv_and_input() -> None:
    done = py(
        """
        import sys
        print("out", sys.argv[1:], sys.stdin.read())
        print("err", file=sys.stderr)
        """,
        "a",
        "b",
        input="typed",
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "out ['a', 'b'] typed\n", "err\n")


def test_the_environment_is_replaced_not_merged(tmp_path: Path) -> None:
    # HOME is in the servers' environment (they start with this process's); not in the env.
    assert "HOME" in os.environ
    env = {k: v for k, v in ENV.items() if k != "HOME"}
    env["ONLY_HERE"] = "1"
    done = py("import os, json; print(json.dumps(dict(os.environ)))", env=env)
    assert json.loads(done.stdout) == env


def test_cwd_and_a_scripts_folder_first_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("VALUE = 41\n")
    script = tmp_path / "app.py"
    script.write_text(
        "import os, sys, helper_mod\nprint(os.getcwd(), sys.path[0], helper_mod.VALUE)"
    )
    work = tmp_path / "work"
    work.mkdir()
    done = run_python([str(script)], env=ENV, cwd=work, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(work), str(tmp_path), "41"]


def test_a_timeout_kills_the_child_and_raises(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        py(
            f"""
            import os, time
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(600)
            """,
            timeout=3,
        )
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped by its supervisor
        for _ in range(200):
            os.kill(pid, 0)
            time.sleep(0.05)


def test_consecutive_calls_run_under_different_hash_seeds() -> None:
    # Attempt 1 and its rerun must not share a seed: set order or hash() in a key would match.
    seeds = [py("print(hash('x'))").stdout for _ in range(4)]
    assert seeds[0] != seeds[1] and seeds[1] != seeds[2] and seeds[2] != seeds[3]


def test_atexit_handlers_and_non_daemon_threads_run_on_a_normal_exit() -> None:
    done = py(
        """
        import atexit, threading, time
        atexit.register(print, "atexit ran")
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread ran"))).start()
        """
    )
    assert (done.returncode, done.stdout) == (0, "thread ran\natexit ran\n")


def test_spanpoint_and_test_modules_are_imported_fresh_in_every_child() -> None:
    done = py(
        """
        import sys
        before = sorted(m for m in sys.modules if m.split(".")[0] in
                        ("spanpoint", "fakes", "harness", "durable_support", "spawn"))
        import spanpoint
        print(before, "spanpoint" in sys.modules, "langgraph.graph" in sys.modules)
        """
    )
    assert done.stdout == "[] True True\n", done.stderr


def test_falls_back_to_a_real_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import os; print(os.getppid())"
    # A PYTHON* variable of its own: a fork would keep the server's, so a real interpreter.
    env = {**ENV, "PYTHONHASHSEED": "7"}
    assert not spawn.forkable(["-c", code], env)
    done = py(code, env=env)
    assert int(done.stdout) == os.getpid()
    assert not spawn.forkable(["-X", "dev", "-c", code], ENV)
    monkeypatch.setenv(spawn.SWITCH, "0")
    assert not spawn.forkable(["-c", code], ENV)
    done = py(code)
    assert (done.returncode, int(done.stdout)) == (0, os.getpid())


def test_a_module_runs_as_python_dash_m_runs_it(tmp_path: Path) -> None:
    # ``-m``: the cwd first on the path, the module as __main__ with its file as argv[0].
    (tmp_path / "probe_main.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps([__name__, os.path.basename(sys.argv[0]), sys.argv[1:],"
        " sys.path[0] == os.getcwd()]))\n"
        "sys.exit(3)\n"
    )
    argv = ["-m", "probe_main", "a", "b"]
    assert spawn.forkable(argv, ENV)
    done = run_python(argv, env=ENV, cwd=tmp_path, timeout=60)
    real = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=ENV, cwd=tmp_path,
        timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (
        real.returncode, real.stdout, real.stderr
    )  # fmt: skip
    assert json.loads(done.stdout) == ["__main__", "probe_main.py", ["a", "b"], True]
