"""Progress of long jobs: a rich progress bar on stderr, and one summary line when the job ends.

The bar counts one quantity (`unit`: rows, records, events, keys, windows, ...) against its total when
the job knows it, with the rate measured by rich over the recent past; bytes, when the job counts
them, show as a size and a transfer rate. The bar shows only on a terminal and never with
`--output json`. Off a terminal (a pipe, a log file), text mode prints a plain line instead, at most
one every `PLAIN_EVERY_SECONDS`, with the counts and rates so far, and one at least every
`QUIET_SECONDS` while a long step runs between counts; the summary line (counts, seconds,
rates) is printed to stderr in text mode either way, so a job run from a script still says what it did.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType

from rich.progress import (
    BarColumn,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as _RichProgress
from rich.text import Text

_active: list[Progress] = []

# Off a terminal, a job's plain progress lines come at most this often: a log gets a line per stretch
# of work without one per batch.
PLAIN_EVERY_SECONDS = 10.0
# ... and at least this often: a step that runs long between counts (one Spark job) still shows a line.
QUIET_SECONDS = 30.0


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def _count(n: int, unit: str, of: int | None = None) -> str:
    """`1 window`, `2 windows`, `1 batch`, `3/4 windows` (units are given in the plural)."""
    if n == 1 and of is None and unit.endswith("s"):
        unit = unit[:-2] if unit.endswith(("ches", "shes", "sses", "xes")) else unit[:-1]
    return f"{n:,}" + (f"/{of:,}" if of is not None else "") + f" {unit}"


class _Counts(ProgressColumn):
    """`completed/total unit` (or `completed unit` without a total), the rate, and the bytes."""

    def render(self, task: Task) -> Text:
        unit = task.fields["unit"]
        done = f"{task.completed:,.0f}" + (f"/{task.total:,.0f}" if task.total is not None else "")
        parts = [f"{done} {unit}"]
        if task.speed is not None:
            parts.append(f"{task.speed:,.0f} {unit}/s" if task.speed >= 10 else f"{task.speed:,.2f} {unit}/s")
        extra = task.fields.get("extra")
        if extra:
            parts.append(extra)
        return Text(", ".join(parts))


def _program(job: str) -> str:
    """`seqlake JOB`, or `seqlake COMMAND: JOB` for a step of another command (the demo's)."""
    from seqlake.core.invocation import settings

    command = settings().command
    return f"seqlake {command}: {job}" if command and command != job else f"seqlake {job}"


def _enabled() -> tuple[bool, bool]:
    """(bar, summary): the bar on a terminal in text mode; the summary line in text mode."""
    from seqlake.core.invocation import settings

    text_mode = not settings().json
    return text_mode and sys.stderr.isatty(), text_mode


class Progress:
    """Counts one long job's work and shows it as a bar; `done()` ends it with the summary line.

    `add(rows=..., nbytes=..., steps=...)` counts rows (in `rows_unit`), bytes and steps (in
    `steps_unit`); the bar follows `measure` ("rows" or "steps") against `total` when given. Bytes are
    shown only when counted (`show_bytes`).
    """

    def __init__(
        self,
        job: str,
        *,
        total: int | None = None,
        measure: str = "rows",
        rows_unit: str = "rows",
        steps_unit: str = "steps",
        show_bytes: bool = False,
    ) -> None:
        if measure not in ("rows", "steps"):
            raise ValueError(f"measure must be rows or steps, got {measure!r}")
        self.job, self.measure, self.show_bytes = job, measure, show_bytes
        self.rows_unit, self.steps_unit = rows_unit, steps_unit
        self.rows = self.bytes = self.steps = 0
        self.total = total
        self.started = self._last_line = time.monotonic()
        self._note = ""
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._finished = False
        bar, self._summary = _enabled()
        self._bar: _RichProgress | None = None
        self._task: TaskID | None = None
        if bar:
            from seqlake.core.output import console

            self._bar = _RichProgress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                _Counts(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"),
                console=console(stderr=True),
                redirect_stdout=False,
                transient=True,
            )
            unit = rows_unit if measure == "rows" else steps_unit
            self._task = self._bar.add_task(job, total=total, unit=unit, note="", extra="")
            self._bar.start()
        elif self._summary:  # off a terminal in text mode: plain lines, also during a long step
            threading.Thread(target=self._beat, name=f"progress-{job}", daemon=True).start()
        _active.append(self)

    def set_total(self, total: int | None) -> None:
        """The total of the measured quantity, once the job knows it."""
        self.total = total
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=total)

    def add(self, rows: int = 0, nbytes: int = 0, steps: int = 0, note: str = "") -> None:
        self.rows += rows
        self.bytes += nbytes
        self.steps += steps
        if self._bar is None or self._task is None:
            self._plain_line(note)
            return
        advance = rows if self.measure == "rows" else steps
        self._bar.update(self._task, advance=advance, note=note, extra=self._extra())

    def _extra(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        parts = []
        if self.measure == "steps" and self.rows:
            parts.append(f"{self.rows:,} {self.rows_unit}")
        if self.measure == "rows" and self.steps:
            parts.append(f"{self.steps:,} {self.steps_unit}")
        if self.show_bytes and self.bytes:
            parts.append(f"{_size(self.bytes)} ({_size(self.bytes / elapsed)}/s)")
        return ", ".join(parts)

    def _plain_line(self, note: str, wait: float = PLAIN_EVERY_SECONDS) -> None:
        """Off a terminal in text mode: the counts so far, when the last line is `wait` seconds old."""
        with self._lock:
            self._note = note or self._note
            now = time.monotonic()
            if not self._summary or self._finished or now - self._last_line < wait:
                return
            self._last_line = now
            print(self._line(now, "so far", self._note), file=sys.stderr, flush=True)

    def beat(self) -> None:
        """The line so far if none came for QUIET_SECONDS: the job is alive inside a long step."""
        self._plain_line("", QUIET_SECONDS)

    def _beat(self) -> None:
        # Wakes when the last line turns QUIET_SECONDS old, so no gap runs past it.
        while not self._ended.wait(max(0.5, QUIET_SECONDS - (time.monotonic() - self._last_line))):
            self.beat()

    def summary(self, note: str = "") -> str:
        """`seqlake COMMAND[: job]: counts (rates) in seconds: note`: what the job did."""
        return self._line(time.monotonic(), "", note)

    def _line(self, now: float, after: str, note: str) -> str:
        elapsed = now - self.started
        per_second = 1 / elapsed if elapsed > 0 else 0.0
        counts = []
        # A line so far says how much of a known total is done; the summary says what was done.
        total = self.total if after else None
        if self.rows or self.measure == "rows":
            rows = _count(self.rows, self.rows_unit, total if self.measure == "rows" else None)
            counts.append(f"{rows} ({self.rows * per_second:,.0f}/s)")
        if self.steps or self.measure == "steps":
            counts.append(_count(self.steps, self.steps_unit, total if self.measure == "steps" else None))
        if self.show_bytes and self.bytes:
            counts.append(f"{_size(self.bytes)} ({_size(self.bytes * per_second)}/s)")
        took = f" in {elapsed:,.1f}s" + (f" {after}" if after else "")
        return f"{_program(self.job)}: {', '.join(counts)}{took}" + (f": {note}" if note else "")

    def done(self, note: str = "") -> float:
        """End the bar and print the summary line; the seconds the job took."""
        self._stop()
        if self._summary:
            print(self.summary(note), file=sys.stderr, flush=True)
        return time.monotonic() - self.started

    def _stop(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._ended.set()
        if self._bar is not None:
            self._bar.stop()
        if self in _active:
            _active.remove(self)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.done()
        else:
            self._stop()


def stop_all() -> None:
    """End every bar still shown (a job that failed half way), without summary lines."""
    for progress in list(_active):
        progress._stop()


class Status:
    """A long job's latest step as a one-line status on a terminal (a spinner and the line), or the
    line itself on stderr when not a terminal; nothing with `--output json`."""

    def __init__(self, job: str) -> None:
        self.job = job
        bar, self._lines = _enabled()
        self._progress: Progress | None = None
        if bar:
            self._progress = Progress(job, measure="steps", steps_unit="steps")

    def __call__(self, line: str) -> None:
        if self._progress is not None:
            self._progress.add(steps=1, note=line)
        elif self._lines:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress._stop()

    def __enter__(self) -> Status:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
