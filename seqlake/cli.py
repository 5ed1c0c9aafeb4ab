"""The `seqlake` command line: one subcommand per job, each with its own --help."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from seqlake.cli_args import ArgumentParser
from seqlake.errors import SeqlakeError

DEBUG_ENV = "SEQLAKE_DEBUG"


def _job(module: str) -> Callable[[list[str]], int]:
    # Jobs import their engines lazily: `seqlake --help` stays fast.
    def run(argv: list[str]) -> int:
        return importlib.import_module(module).main(argv)

    return run


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "demo": (
        _job("jobs.demo"),
        "run the main job end to end on the configured warehouse and print its report",
    ),
    "generate": (_job("jobs.generate"), "write a deterministic synthetic event stream (raw source records)"),
    "import": (_job("jobs.import_events"), "import your own event files (Parquet, CSV, JSON Lines) via a mapping"),
    "ingest": (_job("jobs.ingest"), "ingest the raw source into the landing tier (Delta), quarantining bad records"),
    "compact": (_job("jobs.compact"), "publish closed windows as sorted runs of the history table; merge runs"),
    "history": (_job("jobs.history"), "print one user's history (feature groups, columns, time range, Top-K, LSN)"),
    "sql": (_job("jobs.sql"), "DuckDB SQL over the warehouse with seqlake's views and macros loaded (sql/)"),
    "fsck": (_job("jobs.fsck"), "check every invariant of the history table's files and runs"),
    "drop-run": (_job("jobs.drop_run"), "remove a damaged run from a history table so its windows can be rebuilt"),
    "bench-layout": (_job("jobs.bench_layout"), "measure candidate file layouts side by side (ratios to the default)"),
    "bench-ingest": (_job("jobs.bench_ingest"), "measure ingest cost for users with 0 and 10^5 prior events (ratio)"),
    "bench-reads": (_job("jobs.bench_reads"), "measure multi-user reads and the read cache side by side (ratios)"),
    "bench-compact": (_job("jobs.bench_compact"), "measure catch-up compaction cost against the number of windows"),
    "bench-peers": (_job("jobs.bench_peers"), "measure point lookups against RocksDB, DuckDB and Arrow IPC (ratios)"),
    "bench-samples": (_job("jobs.bench_samples"), "measure training samples from pointers against fat-row reads"),
    "samples": (
        _job("jobs.samples"),
        "rebuild training samples from pointers, verified (versioned late materialization)",
    ),
    "export-sst": (_job("jobs.export_sst"), "export a sorted run as RocksDB SST files for bulk loading"),
}


def build_parser() -> argparse.ArgumentParser:
    width = max(len(name) for name in COMMANDS)
    lines = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    return ArgumentParser(
        prog="seqlake",
        description="seqlake: sorted, compacted, versioned storage for long user-interaction histories.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands:\n{lines}\n\nRun `seqlake COMMAND --help` for a command's options.",
        usage="seqlake [-h] [--version] COMMAND [ARGS...]",
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    if argv[0] == "--version":
        from seqlake import __version__

        print(f"seqlake {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        parser.error(f"unknown command {command!r} (choose from {', '.join(COMMANDS)})")
    try:
        return COMMANDS[command][0](rest)
    except SeqlakeError as error:
        print(f"seqlake {command}: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"seqlake {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 1
    except Exception as error:  # not a deliberate error: one line still, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        what = _one_line(str(error)) or "no message"
        print(
            f"seqlake {command}: unexpected {type(error).__name__}: {what} (set {DEBUG_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def _one_line(text: str) -> str:
    """A multi-line message (DuckDB's, pyiceberg's) as one line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


if __name__ == "__main__":
    sys.exit(main())
