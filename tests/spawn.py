"""``run_python``: ``subprocess.run([sys.executable, *argv], capture_output=True, text=True)``
for the tests, served by pre-imported worker processes (issue #29).

A new interpreter spends about 1.7 s of CPU importing LangChain, LangGraph and OpenTelemetry
before a crash test's script does its 0.3 s of work. So each pytest process (each xdist worker)
starts, on first use, two fork servers (``tests/forkserver.py``) that import those libraries
once (never spanpoint, never a test module), and each call is a fork of one of them: a real
process with its own pid, its own environment, cwd and argv, that a test can SIGKILL or that
kills itself (the client then sees ``-9`` as with ``subprocess``), and that imports spanpoint
and runs the script from scratch.

Why two servers, used in turn, each under its own random ``PYTHONHASHSEED``: the children of
one server share its hash seed and, being forks, its address layout. A crash test's attempts
(attempt 1 is killed, attempt 2 reruns) must run in processes as different as two real
interpreters are, or a key that depends on set order, on ``hash()`` of a string or on an
object's address would match between the attempts here and differ for every user. With two
servers used alternately, consecutive calls never share a seed nor a layout.

It falls back to a real ``subprocess.run`` when a fork cannot be faithful: the env's PYTHON*
(or locale) variables differ from the server's, another interpreter, interpreter flags
(``-X``, ``-u`` …), no ``fork`` on the platform, or ``SPANPOINT_TEST_FORKSERVER=0``
in the test process's environment. Tests whose subject is "another process" for identity keep
calling ``subprocess.run`` themselves.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

FORKSERVER = Path(__file__).resolve().with_name("forkserver.py")

#: Set to 0 to run every child as a real ``subprocess.run`` (to compare, or to debug).
SWITCH = "SPANPOINT_TEST_FORKSERVER"

#: Variables a fork inherits from the server's start-up rather than from the env it is given:
#: they must be the same in both, or the call falls back.
_STARTUP_PREFIXES = ("PYTHON", "LC_")
_STARTUP_NAMES = ("LANG", "LANGUAGE")


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES) and k != "PYTHONHASHSEED"
    }


class _Server:
    """One fork server, a child of this test process."""

    def __init__(self, folder: str, seed: int) -> None:
        self.path = os.path.join(folder, f"fork-{seed}.sock")
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        self.startup = _startup(env)
        self.proc = subprocess.Popen(
            [sys.executable, str(FORKSERVER), self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=folder,
        )
        self.ready = False

    def wait_ready(self) -> None:
        if self.ready:
            return
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line != b"ready\n":
            raise RuntimeError(f"the fork server did not start (exit {self.proc.wait()})")
        self.ready = True

    def stop(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()  # end of file: the server exits
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = os.getpid()
        # A short path: a Unix socket's path has at most 107 bytes.
        self.folder = tempfile.mkdtemp(prefix="spanpoint-fork-")
        seeds = random.SystemRandom().sample(range(1, 2**32), 2)
        self.servers = [_Server(self.folder, seed) for seed in seeds]
        self.turn = 0

    def next(self) -> _Server:
        with self.lock:
            server = self.servers[self.turn % len(self.servers)]
            self.turn += 1
        server.wait_ready()
        return server

    def stop(self) -> None:
        if os.getpid() != self.owner:
            return  # a fork of the test process: the servers are not its own
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _get_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.owner != os.getpid():
            _pool = _Pool()
            atexit.register(_pool.stop)
        return _pool


def stop() -> None:
    """Stop this process's fork servers (the session's end; ``atexit`` does it otherwise)."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool.owner == os.getpid():
            _pool.stop()
            atexit.unregister(_pool.stop)
        _pool = None


def forkable(argv: Sequence[str], env: dict[str, str], executable: str | None = None) -> bool:
    """Whether a fork server can run ``python *argv`` under ``env`` as a new interpreter would."""
    if os.environ.get(SWITCH) == "0" or not hasattr(os, "fork") or not hasattr(socket, "AF_UNIX"):
        return False
    if executable not in (None, sys.executable):
        return False
    if (
        not argv
        or (argv[0].startswith("-") and argv[0] not in ("-c", "-m"))
        or (len(argv) < 2 and argv[0] in ("-c", "-m"))
    ):
        return False  # interpreter flags (-X, -u, …), or a -c or -m without its argument
    return "PYTHONHASHSEED" not in env and _startup(env) == _startup(dict(os.environ))


def run_python(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None = None,
    timeout: float,
    input: str | None = None,
    executable: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, *argv], capture_output=True, text=True, env=env, cwd=cwd,
    timeout=timeout, input=input)``: returncode (``-N`` when killed by signal N), stdout and
    stderr; :class:`subprocess.TimeoutExpired` after the child is SIGKILLed on timeout.
    ``argv`` is ``[script, *args]``, ``["-c", code, *args]`` or ``["-m", module, *args]``."""
    argv = [os.fspath(a) for a in argv]
    python = executable or sys.executable
    if not forkable(argv, env, executable):
        return subprocess.run(
            [python, *argv], capture_output=True, text=True, env=env, cwd=cwd,
            timeout=timeout, input=input,
        )  # fmt: skip
    pool = _get_pool()
    server = pool.next()
    with tempfile.TemporaryDirectory(dir=pool.folder) as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        stdin = os.devnull
        if input is not None:
            stdin = os.path.join(folder, "stdin")
            with open(stdin, "w") as fh:
                fh.write(input)
        for path in (out, err):
            open(path, "wb").close()
        request = {
            "argv": argv, "env": dict(env), "cwd": os.fspath(cwd) if cwd else os.getcwd(),
            "stdin": stdin, "stdout": out, "stderr": err,
        }  # fmt: skip
        status, timed_out = _serve(server, request, timeout)

        def read(path: str) -> str:
            with open(path) as fh:  # the locale's encoding, universal newlines: as text=True
                return fh.read()

        stdout, stderr = read(out), read(err)
    if timed_out:
        raise subprocess.TimeoutExpired([python, *argv], timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(
        [python, *argv], os.waitstatus_to_exitcode(status), stdout, stderr
    )


def _serve(server: _Server, request: dict[str, object], timeout: float) -> tuple[int, bool]:
    """Send ``request``; return the runner's raw wait status and whether it was killed for
    running past ``timeout``."""
    import json

    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(server.path)
        conn.sendall(json.dumps(request).encode() + b"\n")
        lines = _Lines(conn)
        pid = int(lines.next())
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        timed_out = False
        try:
            line = lines.next()
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
            conn.settimeout(60)
            line = lines.next()
        if not line:
            raise RuntimeError("the fork server's supervisor ended without a status")
        return int(line), timed_out


class _Lines:
    """Lines from a socket, a timeout in the middle of one losing nothing."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.data = conn, b""

    def next(self) -> bytes:
        while b"\n" not in self.data:
            chunk = self.conn.recv(4096)
            if not chunk:
                return b""
            self.data += chunk
        line, _, self.data = self.data.partition(b"\n")
        return line
