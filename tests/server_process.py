"""The test servers' processes: each in a process group of its own, which the fixture kills when it
ends and, should the fixture not get there, the interpreter at exit. Where util-linux's `setpriv` is
on the path, the kernel kills the server too when the test process dies without either."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from seqlake.engines.spark_session import QUICK_JVM_OPTIONS, jars_dir

# Every JVM the tests start (Spark drivers, executors and daemons, the test servers) runs short jobs on
# small data: the JIT's quick tier and one collector thread spend about a third less CPU on them.
# The servers' command lines take QUICK_JVM_OPTIONS; Spark's launchers take this string from the environment.
TEST_JVM_OPTIONS = " ".join(QUICK_JVM_OPTIONS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def java() -> str:
    """The `java` of JAVA_HOME, else the one on the path (as pyspark finds it)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        raise RuntimeError("no java found: install a JDK 17 (Debian's openjdk-17-jre-headless) or set JAVA_HOME")
    return found


def classpath(folder: str) -> str:
    """The jars `make jars` resolved into .jars/FOLDER/, as one classpath."""
    jars = sorted((jars_dir() / folder).glob("*.jar"))
    if not jars:
        raise RuntimeError(f"no jars in {jars_dir() / folder}: run `make jars` (jvm/{folder}/pom.xml)")
    return os.pathsep.join(str(jar) for jar in jars)


_running: set[subprocess.Popen[bytes]] = set()


def start(command: list[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start `command` in a new process group, its output appended to `log`."""
    if shutil.which("setpriv"):
        command = ["setpriv", "--pdeathsig", "KILL", *command]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=dict(env), start_new_session=True
        )
    _running.add(process)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the process's group (its data is thrown away with the test's folder). Once reaped, its
    group id may be another's, so a stopped process is never signalled again."""
    if process not in _running:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    _running.discard(process)


@atexit.register
def _stop_all() -> None:
    for process in list(_running):
        stop(process)
