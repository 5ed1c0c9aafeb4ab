"""Progress of long jobs: a bar with the right total and counts on a terminal, one summary line with
correct sizes, units and rates in text mode, and nothing at all with --output json."""

from __future__ import annotations

import io
import re

import click
import pytest
from rich.console import Console

import seqlake.core.output
import seqlake.core.progress
from seqlake.cli.options import Settings
from seqlake.core.progress import Progress


def test_the_summary_says_what_was_counted_in_its_units(capsys):
    progress = Progress("compact", measure="steps", rows_unit="events", steps_unit="windows")
    progress.add(rows=1500, steps=1)
    progress.done("1 batch")
    line = capsys.readouterr().err.strip()
    assert re.fullmatch(r"seqlake compact: 1,500 events \([\d,]+/s\), 1 window in [\d.]+s: 1 batch", line), line
    assert "MiB" not in line and "B (" not in line  # no bytes were counted: no size is shown

    progress = Progress("generate", rows_unit="records", show_bytes=True)
    progress.add(rows=4000, nbytes=3 * 2**20)
    progress.add(rows=1000, nbytes=2**20, steps=2)
    line = progress.summary()
    assert line.startswith("seqlake generate: 5,000 records (") and ", 2 steps, 4.0 MiB (" in line
    assert re.search(r"4\.0 MiB \([\d.,]+ [KMG]?i?B/s\)", line), line
    progress.done()  # a progress left open keeps its heartbeat printing for the life of the process


def test_nothing_is_printed_with_output_json(capsys):
    with click.Context(click.Command("samples"), obj=Settings(output="json")):
        progress = Progress("samples", total=2, measure="steps", steps_unit="tenants")
        progress.add(rows=10, steps=1)
        progress.add(rows=10, steps=1)
        progress.done()
    assert capsys.readouterr() == ("", "")


class _Clock:
    """time.monotonic for the progress module, moved by the test: no test waits on the wall clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_plain_lines_come_at_most_every_few_seconds(monkeypatch, capsys):
    clock = _Clock()
    monkeypatch.setattr(seqlake.core.progress.time, "monotonic", clock)
    monkeypatch.setattr(seqlake.core.progress, "_enabled", lambda: (False, True))  # text mode, a pipe
    every = 10.0
    monkeypatch.setattr(seqlake.core.progress, "PLAIN_EVERY_SECONDS", every)
    progress = Progress("ingest", total=4, measure="steps", rows_unit="records", steps_unit="source commits")
    progress.add(rows=100, steps=1, note="first")
    clock.now += every / 2
    progress.add(rows=100, steps=1)
    assert capsys.readouterr().err == ""  # no line before the interval has passed
    clock.now += every / 2
    progress.add(rows=300, steps=1, note="snapshot 7")
    line = capsys.readouterr().err.strip()
    assert line == f"seqlake ingest: 500 records (50/s), 3/4 source commits in {every:,.1f}s so far: snapshot 7"
    clock.now += every - 1
    progress.add(rows=1, steps=1)
    assert capsys.readouterr().err == ""  # the next line waits a whole interval after the last
    clock.now += 1
    progress.done()
    summary = capsys.readouterr().err.strip()  # the summary line ends the job as on a terminal
    assert summary == f"seqlake ingest: 501 records (25/s), 4 source commits in {2 * every:,.1f}s"


def test_off_a_terminal_a_long_step_still_shows_a_line(monkeypatch, capsys):
    clock = _Clock()
    monkeypatch.setattr(seqlake.core.progress.time, "monotonic", clock)
    monkeypatch.setattr(seqlake.core.progress, "_enabled", lambda: (False, True))
    quiet = seqlake.core.progress.QUIET_SECONDS
    progress = Progress("samples", total=6, measure="steps", rows_unit="samples", steps_unit="rebuilds")
    progress.add(rows=10, steps=1, note="ranking: spark")
    clock.now += quiet - 1
    progress.beat()  # the job's own thread calls it every few seconds
    assert capsys.readouterr().err == ""  # a line came recently enough
    clock.now += 1
    progress.beat()
    line = capsys.readouterr().err.strip()
    assert line == f"seqlake samples: 10 samples (0/s), 1/6 rebuilds in {quiet:,.1f}s so far: ranking: spark"
    progress.done()
    clock.now += quiet
    progress.beat()  # nothing once the job has ended: its summary was its last line
    assert capsys.readouterr().err.strip().splitlines() == [
        f"seqlake samples: 10 samples (0/s), 1 rebuild in {quiet:,.1f}s"
    ]


@pytest.fixture
def terminal(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(seqlake.core.progress, "_enabled", lambda: (True, True))
    monkeypatch.setattr(seqlake.core.output, "console", lambda stderr=False: Console(file=screen, force_terminal=True))
    return screen


def test_on_a_terminal_the_bar_counts_against_the_total(terminal, capsys):
    progress = Progress("ingest", measure="steps", rows_unit="records", steps_unit="source commits")
    progress.set_total(4)  # known once the job has read what is left to do
    for _ in range(3):
        progress.add(rows=250, steps=1, note="snapshot")
    bar = progress._bar
    assert bar is not None  # on a terminal the job shows a bar
    (task,) = bar.tasks
    assert (task.total, task.completed) == (4, 3)
    assert task.fields["extra"] == "750 records"
    progress.done()
    assert "seqlake ingest: 750 records" in capsys.readouterr().err
    assert not bar.live.is_started  # the bar is gone once the job ends
