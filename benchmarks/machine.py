"""The machine a benchmark ran on: its cores and its load average at the start and the end.

Ratios measured while other work competes for the cores are not the tool's: a run whose load average
passed the core count says so beside its table, so it is read as such (or run again when idle).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _load_average() -> float:
    return round(os.getloadavg()[0], 2)  # the last minute's


@dataclass
class MachineLoad:
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    start: float = field(default_factory=_load_average)
    end: float | None = None

    def close(self) -> MachineLoad:
        """The load average now, as the run's end (once)."""
        if self.end is None:
            self.end = _load_average()
        return self

    @property
    def loaded(self) -> bool:
        """Whether the load average passed the core count at the start or the end."""
        return max(self.start, self.end if self.end is not None else self.start) > self.cores

    def to_dict(self) -> dict[str, float | int | bool | None]:
        return {"cores": self.cores, "load_start": self.start, "load_end": self.end, "loaded": self.loaded}

    def line(self) -> str:
        """`machine: 2 cores, load average 0.4 at the start, 1.2 at the end`, and a warning when loaded."""
        end = f", {self.end:g} at the end" if self.end is not None else ""
        text = f"machine: {self.cores} cores, load average {self.start:g} at the start{end}"
        if self.loaded:
            text += " (above the core count: ratios measured under contention; run again on an idle machine)"
        return text
