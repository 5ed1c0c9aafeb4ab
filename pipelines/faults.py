"""Fault injection: a real process kill at a named commit point, for the tests that kill every job.

`SEQLAKE_KILL_AT=<point>` kills the process with SIGKILL the first time it passes `point`,
`<point>#<n>` the n-th time (inside the second batch, the third table, ...). Unset, a point costs a
dictionary lookup. Every job names its points after what has just become durable: `after_commit`,
`merge_committed`, `capture_appended`, ...

`run_at(point, action)` runs another job at a point instead (in-process, once): the tests put a
`forget` inside a writer's gap between its read and its commit this way. Across processes,
`SEQLAKE_STOP_AT=<point>` stops the process with SIGSTOP there instead (same `#<n>` form): the test runs
the other job as a command of its own meanwhile, then resumes the first with SIGCONT.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

KILL_AT_ENV = "SEQLAKE_KILL_AT"
STOP_AT_ENV = "SEQLAKE_STOP_AT"
_passages: dict[str, int] = {}  # points passed in this process
_actions: dict[str, Callable[[], object]] = {}  # point -> what runs there the next time it is passed


def kill_point(point: str) -> None:
    """SIGKILL (or SIGSTOP) this process here if the environment names this point (and this passage);
    run the action `run_at` left here, if any."""
    if _actions and point in _actions:
        _actions.pop(point)()
    for variable, sent in ((KILL_AT_ENV, signal.SIGKILL), (STOP_AT_ENV, signal.SIGSTOP)):
        wanted, _, nth = os.environ.get(variable, "").partition("#")
        if wanted == point:
            key = f"{variable}:{point}"
            _passages[key] = _passages.get(key, 0) + 1
            if _passages[key] == int(nth or 1):
                os.kill(os.getpid(), sent)


@contextmanager
def run_at(point: str, action: Callable[[], object]) -> Iterator[None]:
    """Run `action` the next time this process passes `point` (once), within the block."""
    _actions[point] = action
    try:
        yield
    finally:
        _actions.pop(point, None)
