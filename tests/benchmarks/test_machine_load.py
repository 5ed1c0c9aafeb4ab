"""A benchmark's machine line: cores and load at the start and the end, and a warning when loaded."""

from __future__ import annotations

from benchmarks.machine import MachineLoad


def test_a_load_above_the_core_count_says_the_ratios_were_measured_under_contention():
    idle = MachineLoad(cores=2, start=0.4, end=1.2)
    assert not idle.loaded
    assert idle.line() == "machine: 2 cores, load average 0.4 at the start, 1.2 at the end"
    loaded = MachineLoad(cores=2, start=0.4, end=3.5)
    assert loaded.loaded and loaded.to_dict() == {"cores": 2, "load_start": 0.4, "load_end": 3.5, "loaded": True}
    assert loaded.line().endswith(
        "(above the core count: ratios measured under contention; run again on an idle machine)"
    )
    assert MachineLoad(cores=2, start=2.5).loaded  # already loaded when it started
    ended = MachineLoad(cores=2, start=0.1).close()
    assert ended.end is not None and ended.close().end == ended.end  # the end is taken once
