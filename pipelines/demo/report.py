"""The job report: named sections of key/value facts, printed for people and saved as JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import TracebackType
from typing import Any


class Stopwatch:
    """The wall seconds of a `with` block: `with Stopwatch() as clock: ...`, then `clock.seconds`."""

    seconds = 0.0

    def __enter__(self) -> Stopwatch:
        self._started = time.monotonic()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.seconds = time.monotonic() - self._started


class Report:
    def __init__(self, title: str) -> None:
        self.title = title
        self.sections: dict[str, dict[str, Any]] = {}

    def section(self, name: str) -> dict[str, Any]:
        return self.sections.setdefault(name, {})

    def lead(self, name: str, facts: dict[str, Any]) -> None:
        """A section placed before every other (the verdict a reader looks for first)."""
        self.sections = {name: facts, **{key: value for key, value in self.sections.items() if key != name}}

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, **self.sections}

    def write_json(self, path: Path | str) -> None:
        """Write the report to a local path or a URI (an s3:// warehouse keeps it there too)."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str) + "\n"
        if isinstance(path, Path) or "://" not in path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
            return
        from seqlake.tableformat.io import resolve_uri

        fs, name = resolve_uri(path)
        with fs.open_output_stream(name) as out:
            out.write(text.encode())

    @staticmethod
    def throughput(facts: dict[str, Any], seconds: float, count: int, unit: str) -> None:
        """A step's wall seconds and `unit`s per second, as every step of the report states them."""
        facts["seconds"] = round(seconds, 2)
        facts[f"{unit}_per_second"] = round(count / seconds) if seconds > 0 else None

    def print(self) -> None:
        """The report for people: its title, then each section's facts as a table (rich)."""
        from seqlake.core.output import console, facts_table

        out = console()
        out.print(self.title, style="bold")
        for name, facts in self.sections.items():
            out.print()
            out.print(facts_table(facts, title=f"[{name}]"))
