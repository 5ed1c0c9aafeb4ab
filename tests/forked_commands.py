"""`subprocess.run([sys.executable, "-m", "seqlake...", ...])` for the tests, at a fraction of the CPU.

A command still runs in a process of its own: its arguments, environment, working folder, stdin, stdout,
stderr and exit status are its own, and it ends as `python -m` ends (threads joined, atexit handlers,
flushed streams, an uncaught exception's traceback). What it skips is the start of a new interpreter,
the imports of pyarrow, pandas, pyiceberg, SQLAlchemy, DuckDB and seqlake's entry points, and the
interpreter's teardown (`seqlake --help` takes 0.02 CPU-s instead of 1.2): each test worker keeps one
Python that has imported them and forks a child per command.

Anything else (another program, `-c`, options to Python itself, an environment that changes how Python
starts, arguments `subprocess.run` takes that this does not) goes to `subprocess.run` unchanged.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The modules a command imports on most paths: the libraries, then seqlake's own entry points.
PRELOADED = (
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pandas",
    "sqlalchemy",
    "pyiceberg.catalog.rest",
    "pyiceberg.catalog.sql",
    "pyiceberg.io.pyarrow",
    "pyiceberg.table",
    "click",
    "rich.console",
    "rich.progress",
    "yaml",
    "duckdb",
    "seqlake.cli",
    "seqlake.engines.catalog",
    "seqlake.pipelines.tables",
    "seqlake.tableformat.reader",
    "seqlake.sql_session",
)

# The forking Python: imports PRELOADED, then for each request on its socket forks a child that takes the
# request's stdio, folder, environment and arguments and runs the module as `python -m` would.
_FORK_SERVER = r"""
import gc, importlib, json, os, runpy, socket, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
if "duckdb" in sys.modules:  # its default connection has a worker thread; a child opens it anew if used
    sys.modules["duckdb"].default_connection().close()
if "seqlake.engines.duckdb_session" in sys.modules:  # DuckDB checks the extensions' signatures here, once
    sys.modules["seqlake.engines.duckdb_session"].connect().close()
server = socket.socket(fileno=int(sys.argv[1]))
if len(os.listdir("/proc/self/task")) != 1:  # forking a process with threads is not safe
    server.send(b'{"ready": false}')
    sys.exit(0)
# Moved out of the collector's reach: a child's collections would otherwise visit (and so copy) every
# object imported here; a command's own objects are collected as usual.
gc.freeze()
server.send(b'{"ready": true}')

def serve():
    while True:
        message, fds, _, _ = socket.recv_fds(server, 1 << 22, 3)
        if not message:
            os._exit(0)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            server.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        server.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        server.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())

request, fds = serve()
for target, fd in enumerate(fds):
    os.dup2(fd, target)
    os.close(fd)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
sys.path[0] = os.getcwd()  # what `python -m` puts first
sys.argv = request["args"]  # [module, arguments...]: runpy puts the module's file first
del serve, request, fds, server
# The command ends as Python's own exit ends it, save what Python does not promise (finalizers of objects
# still alive): the exit status Python would give, then its non-daemon threads joined, atexit handlers
# run and the standard streams flushed. The interpreter's teardown is skipped: it would touch, and so
# copy, every object this process shares with the forking one (0.08 CPU-s a command).
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    status = 0
except SystemExit as stop:
    if stop.code is None or isinstance(stop.code, int):
        status = stop.code or 0
    else:  # sys.exit("message")
        print(stop.code, file=sys.stderr)
        status = 1
except BaseException:
    sys.excepthook(*sys.exc_info())
    status = 1
import atexit, threading
threading._shutdown()
atexit._run_exitfuncs()
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except Exception:
        status = status or 120  # Python's status when it cannot flush at exit
os._exit(status)
"""

# Variables read when Python starts: a command given different ones needs a Python of its own.
_STARTUP_VARIABLES = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSAFEPATH",
    "PYTHONWARNINGS",
    "PYTHONHASHSEED",
    "PYTHONUTF8",
    "PYTHONIOENCODING",
    "PYTHONDEVMODE",
    "PYTHONFAULTHANDLER",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONNOUSERSITE",
    "PYTHONOPTIMIZE",
    "PYTHONMALLOC",
    "PYTHONTRACEMALLOC",
    "PYTHONINSPECT",
    "PYTHONUNBUFFERED",
    "PYTHONVERBOSE",
)
# The forking Python loads numpy's BLAS with no thread pool and pyarrow's jemalloc (not its default
# allocator) with no background thread: loaded libraries keep no threads that a fork would lose.
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
_SUPPORTED = {"capture_output", "text", "env", "cwd", "input", "timeout", "check", "stdin"}


class _ForkServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.environment = dict(os.environ)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.socket = ours
        self.process = subprocess.Popen(
            [sys.executable, "-c", _FORK_SERVER, str(theirs.fileno()), *PRELOADED],
            env={**self.environment, **_ONE_THREAD},
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.ready = json.loads(self.socket.recv(1 << 16) or b'{"ready": false}')["ready"]
        atexit.register(self.close)

    def close(self) -> None:
        self.socket.close()
        self.process.wait()

    def usable_for(self, env: dict[str, str]) -> bool:
        return self.ready and all(env.get(name) == self.environment.get(name) for name in _STARTUP_VARIABLES)

    def run(
        self, args: list[str], env: dict[str, str], cwd: str, stdin_fd: int, timeout: float | None
    ) -> tuple[int, bytes, bytes]:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        request = json.dumps({"args": args, "env": env, "cwd": cwd}).encode()
        try:
            socket.send_fds(self.socket, [request], [stdin_fd, out_write, err_write])
        finally:
            os.close(out_write)
            os.close(err_write)
        pid = json.loads(self.socket.recv(1 << 16))["pid"]
        try:
            out, err = _read_both(out_read, err_read, timeout)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            json.loads(self.socket.recv(1 << 16))
            raise
        returncode = json.loads(self.socket.recv(1 << 16))["returncode"]
        return returncode, out, err


def _read_both(out_fd: int, err_fd: int, timeout: float | None) -> tuple[bytes, bytes]:
    """Both pipes to their ends (a command may fill one while we wait on the other), within `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while selector.get_map():
                events = selector.select(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if not events:
                    raise subprocess.TimeoutExpired("a forked seqlake command", timeout or 0)
                for key, _ in events:
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            os.close(out_fd)
            os.close(err_fd)
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


_server: _ForkServer | None = None


def _fork_server() -> _ForkServer:
    global _server
    if _server is None or (_server.ready and _server.process.poll() is not None):
        _server = _ForkServer()
    return _server


def _runs_a_seqlake_module(args: list[str]) -> bool:
    return len(args) >= 3 and args[:2] == [sys.executable, "-m"] and args[2].split(".")[0] == "seqlake"


def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run(args, **kwargs), forked from a Python that has the libraries imported when it can be."""
    given = kwargs.get("env")
    env: dict[str, str] = dict(os.environ if given is None else given)
    if (
        not _runs_a_seqlake_module(list(args))
        or not set(kwargs) <= _SUPPORTED
        or not kwargs.get("capture_output")
        or (kwargs.get("stdin") not in (None, subprocess.DEVNULL))
    ):
        return subprocess.run(args, **kwargs)
    server = _fork_server()
    if not server.usable_for(env) or not server.lock.acquire(blocking=False):
        return subprocess.run(args, **kwargs)
    try:
        with tempfile.TemporaryFile() as stdin:  # empty without input: EOF, as /dev/null gives
            data = kwargs.get("input")
            if data is not None:
                stdin.write(data.encode() if isinstance(data, str) else data)
                stdin.seek(0)
            returncode, out, err = server.run(
                list(args[2:]), env, str(kwargs.get("cwd") or os.getcwd()), stdin.fileno(), kwargs.get("timeout")
            )
    finally:
        server.lock.release()
    stdout: str | bytes = out
    stderr: str | bytes = err
    if kwargs.get("text"):
        stdout, stderr = _text(out), _text(err)
    completed = subprocess.CompletedProcess(list(args), returncode, stdout, stderr)
    if kwargs.get("check"):
        completed.check_returncode()
    return completed


def _text(data: bytes) -> str:
    # What subprocess.run(text=True) gives: the locale's decoding with universal newlines.
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")
