"""The fork server of ``tests/spawn.py``: one long-lived interpreter with the heavy libraries
imported, which forks a fresh-looking Python process per request.

Usage: forkserver.py SOCKET_PATH   (started by spanpoint's tests, never by hand)

It imports LangChain, LangGraph, the OpenTelemetry SDK and pydantic once, never spanpoint and
never a test module (so what spanpoint does at import and at configure time runs in every
child), listens on a Unix socket, says ``ready`` on stdout and serves one request per
connection: a JSON line ``{"argv", "env", "cwd", "stdin", "stdout", "stderr"}``. For each it
forks a single-threaded supervisor, which forks the runner, sends its pid (a line), waits for
it and sends its raw wait status (a line). The server itself has no threads and reaps its
supervisors with ``waitpid(WNOHANG)``. It exits when its stdin reaches end of file: the test
process that started it has gone (however it ended), so a server never outlives it.

The runner is the script's process: fds 0, 1 and 2 on the files the client named, its cwd,
exactly the given environment, ``sys.argv``, ``sys.path[0]`` as ``python script`` sets them,
then the script as ``__main__`` and an interpreter's exit (SystemExit codes, a traceback and 1
for an uncaught exception, non-daemon threads joined, atexit handlers, stdio flushed).
``-m MODULE`` runs the module as ``python -m`` does.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.machinery
import io
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
import types
from typing import Any

#: What the server imports before it forks. Third-party only: spanpoint and the test modules
#: must import fresh in every child.
PRELOAD = (
    "pydantic",
    "langchain_core.messages",
    "langchain_core.language_models",
    "langchain_core.tools",
    "langchain_core.runnables",
    "langchain_core.callbacks",
    "langchain_core.outputs",
    "langchain.agents",
    "langchain.agents.middleware",
    "langgraph.graph",
    "langgraph.types",
    "langgraph.func",
    "langgraph.prebuilt",
    "langgraph.checkpoint.memory",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.sqlite.aio",
    "langgraph.checkpoint.serde.jsonplus",
    "opentelemetry.trace",
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.trace.export.in_memory_span_exporter",
    "opentelemetry.sdk.metrics",
    "opentelemetry.sdk.metrics.export",
    "opentelemetry.sdk.resources",
    "sqlite3",
    "asyncio",
    "deepagents",
    "pytest",  # the plugin tests run ``python -m pytest`` sessions
)

#: The signal dispositions of a freshly started interpreter (this one's, taken before anything
#: could change them); every runner starts with them.
FRESH_SIGNALS = {s: signal.getsignal(s) for s in signal.valid_signals()}

#: The encoding a new interpreter gives its stdio on a file or a pipe (the locale's, or what
#: the PYTHON* variables say, which the client keeps equal to this server's).
STDIO_ENCODING, STDIO_ERRORS = sys.stdout.encoding, sys.stdout.errors
STDIO_BUFFERED = not sys.stdout.write_through  # -u or PYTHONUNBUFFERED: write-through


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # an optional extra (deepagents, the SQLite saver) not installed
    leaked = sorted(m for m in sys.modules if m == "spanpoint" or m.startswith("spanpoint."))
    if leaked:  # a child must import spanpoint itself
        raise SystemExit(f"forkserver: the preload imported {leaked}")


def _fresh_stdio() -> None:
    """New ``sys.stdin/stdout/stderr`` on fds 0-2, built as CPython's start-up builds them
    (``create_stdio``): buffering per ``-u``/PYTHONUNBUFFERED, line-buffered stderr, "\\n"."""
    buffered = STDIO_BUFFERED
    streams = []
    for fd, mode, errors in ((0, "r", STDIO_ERRORS), (1, "w", STDIO_ERRORS),
                             (2, "w", "backslashreplace")):  # fmt: skip
        raw = io.FileIO(fd, mode, closefd=False)
        binary: Any = raw
        if buffered or mode == "r":
            binary = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        streams.append(
            io.TextIOWrapper(
                binary,
                encoding=STDIO_ENCODING,
                errors=errors,
                newline="\n",
                line_buffering=buffered and (raw.isatty() or fd == 2),
                write_through=not buffered and mode == "w",
            )
        )
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def run(request: dict[str, Any]) -> int:
    """The runner: become the script's process and run it; returns its exit code."""
    for sig, handler in FRESH_SIGNALS.items():
        if signal.getsignal(sig) != handler and handler is not None:
            signal.signal(sig, handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd, key, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY),
                           (2, "stderr", os.O_WRONLY)):  # fmt: skip
        new = os.open(request[key], flags)
        os.dup2(new, fd)
        os.close(new)
    _fresh_stdio()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv: list[str] = request["argv"]
    sys.orig_argv = [sys.executable, *argv]
    importlib.invalidate_caches()
    if argv[0] == "-m":  # as ``python -m``: the cwd first on the path, the module as __main__
        sys.argv = ["-m", *argv[2:]]
        sys.path[0] = os.getcwd()
        return _finish(lambda: runpy._run_module_as_main(argv[1], alter_argv=True))  # type: ignore[attr-defined]
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=__builtins__, __annotations__={})
    if argv[0] == "-c":
        source: str | bytes = argv[1]
        filename = "<string>"
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main.__loader__ = importlib.machinery.BuiltinImporter  # type: ignore[assignment]
    else:
        filename = argv[0]
        with open(filename, "rb") as fh:
            source = fh.read()
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.realpath(filename))
        main.__file__ = filename
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", filename)
        main.__dict__["__cached__"] = None
    sys.modules["__main__"] = main
    return _finish(
        lambda: exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)
    )


def _finish(body: Any) -> int:
    """Run ``body`` (the script) and end as the interpreter does; returns the exit code."""
    code = 0
    try:
        body()
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # as the interpreter prints it: from the script's frame on
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own join
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def supervise(conn: socket.socket, listener: socket.socket, request: dict[str, Any]) -> None:
    """The supervisor (a fork of the server, one thread): fork the runner, report its pid and
    its raw wait status to the client. Never returns."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                conn.close()
                listener.close()
                code = run(request)
            except BaseException:  # the runner's own failure, not the script's
                os.write(2, traceback.format_exc().encode())
            finally:
                os._exit(code)
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{status}\n".encode())
    finally:
        os._exit(0)


def _read_request(conn: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data)  # type: ignore[no-any-return]


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        while True:  # reap the supervisors that have finished
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return  # the test process has gone
        if listener in readable:
            conn, _ = listener.accept()
            with conn:
                request = _read_request(conn)
                if os.fork() == 0:
                    supervise(conn, listener, request)


if __name__ == "__main__":
    preload()
    serve(sys.argv[1])
