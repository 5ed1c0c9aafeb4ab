"""Fault injection: a real process kill at a named commit point, for the tests that kill every job.

`SEQLAKE_KILL_AT=<point>` kills the process with SIGKILL the first time it passes `point`,
`<point>#<n>` the n-th time (inside the second batch, the third table, ...). Unset, a point costs a
dictionary lookup. Every job names its points after what has just become durable: `after_commit`,
`merge_committed`, `capture_appended`, ...
"""

from __future__ import annotations

import os
import signal

KILL_AT_ENV = "SEQLAKE_KILL_AT"
_passages: dict[str, int] = {}  # points passed in this process


def kill_point(point: str) -> None:
    """SIGKILL this process here if the environment names this point (and this passage)."""
    wanted, _, nth = os.environ.get(KILL_AT_ENV, "").partition("#")
    if wanted == point:
        _passages[point] = _passages.get(point, 0) + 1
        if _passages[point] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
