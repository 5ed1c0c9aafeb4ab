"""What every `seqlake bench-*` command shares: its --seed, --namespace and --json FILE options, the
log of its steps (a status line on a terminal), and how it ends (the report, the JSON file, exit 1 when
a deterministic check failed; times are reported, never checked)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from seqlake.cli.types import NAMESPACE_NAME, IntegerAtLeast
from seqlake.core.output import emit, jsonable

F = TypeVar("F", bound=Callable[..., Any])


class Bench(Protocol):
    @property
    def ok(self) -> bool: ...

    def to_dict(self) -> dict: ...


def seed_option(default: int) -> Callable[[F], F]:
    return click.option("--seed", type=IntegerAtLeast(0), default=default, show_default=True, help="Data seed.")


def namespace_option(default: str) -> Callable[[F], F]:
    return click.option(
        "--namespace",
        type=NAMESPACE_NAME,
        default=default,
        show_default=True,
        help="Catalog namespace prefix of the bench's tables (recreated on every run; nothing else is touched).",
    )


def data_option(command: F) -> F:
    """--data realistic|small-ids, passed as `shape`: the shape of the bench's history rows."""
    from benchmarks.shapes import DATA_SHAPES

    return click.option(
        "--data",
        "shape",
        type=click.Choice(DATA_SHAPES),
        default=DATA_SHAPES[0],
        show_default=True,
        help="The data's shape: wide hashed ids, Zipf items, bursty sessions (realistic); or small uniform ids.",
    )(command)


def json_file_option(command: F) -> F:
    return click.option(
        "--json", "json_file", metavar="FILE", type=click.Path(dir_okay=False), help="Also write the results to FILE."
    )(command)


class BenchLog:
    """A `log(line)` for the bench's steps (a status line on a terminal, lines on stderr otherwise),
    and the machine's load from the bench's start (`finish` adds its end to the report)."""

    def __init__(self, name: str) -> None:
        from benchmarks.machine import MachineLoad
        from seqlake.core.progress import Status

        self.load = MachineLoad()
        self._status = Status(name)

    def __call__(self, line: str) -> None:
        self._status(line)

    def __enter__(self) -> BenchLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self._status.close()


def step_log(name: str) -> BenchLog:
    return BenchLog(name)


def finish(
    bench: Bench,
    report: str,
    json_file: str | None = None,
    *,
    report_file: str | None = None,
    files: dict[str, list[str]] | None = None,
    log: BenchLog | None = None,
) -> int:
    """Print the bench's report (or its JSON document), keep the files asked for; 0, or 1 if a check
    failed. `files` names other files the bench wrote (e.g. {"plot": [...]}), listed after the report.
    With the bench's `log`, the report ends with the machine's load at the start and the end."""
    document = {"ok": bench.ok, **bench.to_dict()}
    if log is not None:
        load = log.load.close()
        document["machine"] = load.to_dict()
        report = f"{report}\n{load.line()}"
    if json_file:
        Path(json_file).write_text(json.dumps(jsonable(document), indent=2) + "\n")
    if report_file:
        Path(report_file).write_text(report + "\n")
    written = [f"{kind}: {path}" for kind, paths in (files or {}).items() for path in paths]
    emit({**document, **(files or {})}, "\n".join([report, *written]))
    return 0 if bench.ok else 1
