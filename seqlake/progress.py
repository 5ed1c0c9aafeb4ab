"""Progress lines for long jobs: rows, bytes and steps done, printed at most every few seconds."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts rows and bytes for one job and prints a line to stderr every `every` seconds."""

    def __init__(self, job: str, every: float = 5.0, stream: TextIO | None = None) -> None:
        self.job = job
        self.every = every
        self.stream = stream or sys.stderr
        self.rows = 0
        self.bytes = 0
        self.steps = 0
        self.started = time.monotonic()
        self._last = self.started

    def add(self, rows: int = 0, nbytes: int = 0, steps: int = 0, note: str = "") -> None:
        self.rows += rows
        self.bytes += nbytes
        self.steps += steps
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._print(note)

    def done(self, note: str = "done") -> float:
        self._print(note)
        return time.monotonic() - self.started

    def _print(self, note: str) -> None:
        elapsed = time.monotonic() - self.started
        rate = self.rows / elapsed if elapsed > 0 else 0.0
        print(
            f"[{self.job}] {self.rows:,} rows, {self.bytes / 2**20:,.1f} MiB, "
            f"{self.steps} steps, {elapsed:,.1f}s ({rate:,.0f} rows/s) {note}".rstrip(),
            file=self.stream,
            flush=True,
        )
