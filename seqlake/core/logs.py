"""Logging for seqlake's packages: one logger per module (`logging.getLogger(__name__)`), one handler.

`seqlake --log-level LEVEL` (default warning) sets the level of seqlake's own loggers; other
libraries stay at warning. Spark's log level follows the same setting (`spark_log_level`).
"""

from __future__ import annotations

import logging
import sys

PACKAGES = ("seqlake", "benchmarks")
LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LEVEL = "warning"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time: a live progress display redirects it to print
    log lines above the bar."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure(level: str = DEFAULT_LEVEL) -> None:
    """Send seqlake's log records at `level` and above to stderr, one line each."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    for package in PACKAGES:
        logging.getLogger(package).setLevel(level.upper())


def spark_log_level() -> str:
    """The log4j level for Spark (setLogLevel): INFO or DEBUG when seqlake logs at that level, else ERROR."""
    level = logging.getLogger("seqlake").getEffectiveLevel()
    if level <= logging.DEBUG:
        return "DEBUG"
    if level <= logging.INFO:
        return "INFO"
    return "ERROR"  # Spark's warnings are not a seqlake user's to act on: they show from --log-level info
