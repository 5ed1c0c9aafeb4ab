"""Progress lines for long jobs: rows, bytes and steps done, printed at most every few seconds."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts rows and bytes for one job and prints a line to stderr every `every` seconds."""

    def __init__(
        self,
        job: str,
        every: float = 5.0,
        stream: TextIO | None = None,
        *,
        rows_unit: str = "rows",
        steps_unit: str = "steps",
        show_bytes: bool = True,
    ) -> None:
        self.job = job
        self.rows_unit, self.steps_unit, self.show_bytes = rows_unit, steps_unit, show_bytes
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
        step_rate = self.steps / elapsed if elapsed > 0 else 0.0
        size = f"{self.bytes / 2**20:,.1f} MiB, " if self.show_bytes else ""
        print(
            f"[{self.job}] {self.rows:,} {self.rows_unit}, {size}{self.steps:,} {self.steps_unit}, {elapsed:,.1f}s "
            f"({rate:,.0f} {self.rows_unit}/s, {step_rate:,.2f} {self.steps_unit}/s) {note}".rstrip(),
            file=self.stream,
            flush=True,
        )
